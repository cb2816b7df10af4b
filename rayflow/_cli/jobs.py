"""Ray Jobs for ``rayflow submit``: where the cluster's Jobs API is, and what a job is made of.

The Jobs API is served by the cluster's dashboard (``http://HOST:8265`` by default), not by its
GCS (``HOST:PORT``, where ``ray.init`` and ``--address`` join). The dashboard writes its address
into the GCS when it starts, so a process that has joined the cluster finds the Jobs API there
-- the mapping ``ray job submit`` makes too -- and one ``--address`` serves every command. A
cluster started without a dashboard (``--include-dashboard=false``, or Ray installed without
``ray[default]``) has no Jobs API: ``rayflow submit`` says so.

A job's entrypoint is ``python -m rayflow run FILE --address auto``: the driver runs on the
head node, joins the cluster (Ray sets ``RAY_ADDRESS`` for a job), watches the topology and
stops it cleanly on SIGTERM (``ray job stop``, ``rayflow kill``), with ``rayflow run``'s exit
codes becoming the job's status. The topology file travels in the job's working directory
(``runtime_env["working_dir"]``, uploaded as ``storm jar`` uploads the jar), so that the
classes it names import on the cluster as they do here.

The values of ``--set`` and ``--properties`` are not on that command line: Ray keeps a job's
entrypoint and shows it to anyone who lists jobs (``ray job list``, the dashboard's Jobs page),
and a placeholder may hold a password. They travel as a package of their own
(``runtime_env["py_modules"]``, stored in the cluster as the working directory is), which the
job's ``rayflow run --placeholders-from MODULE`` reads (``placeholder_package``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import RayflowError

__all__ = [
    "SHIPPED_EXCLUDES",
    "JobsApi",
    "JobsUnavailable",
    "dashboard_address",
    "entrypoint",
    "jobs_client",
    "refusal",
    "placeholder_package",
    "read_placeholders",
    "runtime_env",
]

SHIPPED_EXCLUDES = [".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", ".venv"]
"""Left out of the uploaded working directory (besides what its ``.gitignore`` leaves out)."""


class JobsUnavailable(RayflowError):
    """The cluster has no Jobs API this process can use; the message says why and what to do."""


def dashboard_address() -> str:
    """``http://HOST:PORT`` of the Jobs API of the cluster this process has joined."""
    import ray.experimental.internal_kv as kv
    from ray._private import ray_constants

    found = kv._internal_kv_get(ray_constants.DASHBOARD_ADDRESS, namespace=ray_constants.KV_NAMESPACE_DASHBOARD)
    if not found:
        raise JobsUnavailable(
            "this Ray cluster runs no dashboard, which serves the Ray Jobs API that `rayflow submit` hands the "
            "topology to: start its head with `ray start --head --include-dashboard=true` (Ray installed as "
            "ray[default]); or run the topology from a terminal that stays open, with `rayflow run --address`"
        )
    host_port = found.decode() if isinstance(found, bytes) else str(found)
    return f"http://{host_port}"


@dataclass(frozen=True)
class JobsApi:
    """The cluster's Jobs API as this process reaches it: a ``JobSubmissionClient``, its URL,
    and whether the dashboard asked for the cluster's token."""

    client: Any
    url: str
    token: bool

    def logs_command(self, submission: str) -> str:
        """A ``ray job logs`` that works from this shell: the dashboard named (without it, Ray
        looks for a cluster on this machine and gives up when it finds several), and token mode
        switched on when the cluster wants the token (the CLI does not send it otherwise)."""
        mode = "RAY_AUTH_MODE=token " if self.token else ""
        return f"{mode}ray job logs {submission} --address {self.url} --follow"


def jobs_client(url: str) -> JobsApi:
    """The Jobs API at ``url``, with this machine's Ray token when the dashboard asks for one
    (Ray 2.60's token authentication covers the dashboard too)."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    logging.getLogger("ray.dashboard").setLevel(logging.WARNING)  # not "Uploading package ..." at INFO
    token_mode = os.environ.get("RAY_AUTH_MODE") == "token"  # the client sends the token itself then
    try:
        try:
            return JobsApi(JobSubmissionClient(url), url, token_mode)
        except AuthenticationError:
            tokens = AuthenticationTokenLoader.instance()
            if not tokens.has_token(ignore_auth_mode=True):
                raise JobsUnavailable(
                    f"the Jobs API at {url} requires the cluster's token and this machine has none: set "
                    "RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)"
                ) from None
            headers = dict(tokens.get_token_for_http_header(ignore_auth_mode=True))
            return JobsApi(JobSubmissionClient(url, headers=headers), url, True)
    except (ConnectionError, RuntimeError, AuthenticationError) as exc:
        raise JobsUnavailable(
            f"the cluster's Jobs API at {url} (its dashboard, as the cluster registered it) does not answer: "
            f"{type(exc).__name__}: {_first_line(exc)}. A dashboard bound to 127.0.0.1 is only reachable on its "
            "own node: run this there, or start the head with `--dashboard-host 0.0.0.0`"
        ) from None


NO_AGENT = "No available agent to submit job"
"""What the dashboard answers (HTTP 500) when no dashboard agent serves jobs: on a head node,
one whose HTTP port was taken, most often."""

AGENT_PORT_FLAG = "--dashboard-agent-listen-port"


def refusal(exc: BaseException) -> str:
    """Why the cluster refused a job, and what to do when Ray's answer does not say it."""
    if NO_AGENT not in str(exc):
        return f"the cluster refused the job: {type(exc).__name__}: {_first_line(exc)}"
    from ray._private import ray_constants

    default = ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT
    seen = _agent_trouble()
    if seen is not None:
        path, line = seen
        cause = f"This node's dashboard agent log ({path}) says: {line.strip()}. "
    else:
        cause = (
            "Its dashboard agent's log on the head node (logs/dashboard_agent.log of the session, under "
            "/tmp/ray/session_latest unless `ray start --temp-dir` moved it) says why. "
        )
    return (
        f"the cluster has no job agent to run the job (Ray answered: {NO_AGENT}). Jobs run in the dashboard "
        f"agent of the head node, and that agent could not serve HTTP. {cause}Most often another Ray or "
        f"program on that machine holds the agent's port ({default} by default): start the head again with "
        f"`{AGENT_PORT_FLAG}` set to a free port (the ports a head needs and their flags: docs/detached.md)"
    )


_AGENT_TROUBLE = re.compile(r"address already in use|failed to bind|Failed to start HTTP server", re.IGNORECASE)


def _agent_trouble() -> tuple[Path, str] | None:
    """The last line of this node's dashboard agent log that says why it serves no HTTP (the
    head's, when this runs on the head node), with the log's path; ``None`` when there is none."""
    try:
        node: Any = importlib.import_module("ray._private.worker")._global_node  # untyped, None until joined
        logs = Path(node.get_logs_dir_path())
        lines = (logs / "dashboard_agent.log").read_text(errors="replace").splitlines()
    except Exception:  # not joined, or no such log on this node: the message says where to look
        return None
    found = [line for line in lines if _AGENT_TROUBLE.search(line)]
    return (logs / "dashboard_agent.log", found[-1]) if found else None


def runtime_env(working_dir: Path, placeholders: Path | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {"working_dir": str(working_dir), "excludes": SHIPPED_EXCLUDES}
    if placeholders is not None:
        env["py_modules"] = [str(placeholders)]
    return env


def entrypoint(file: Path, placeholders_module: str | None, inactive: bool) -> str:
    """The job's shell command: ``rayflow run`` of ``file`` (relative to the working directory),
    its placeholders read from ``placeholders_module`` (``placeholder_package``), if any."""
    words = ["python", "-m", "rayflow", "run", file.as_posix(), "--address", "auto"]
    if placeholders_module is not None:
        words += ["--placeholders-from", placeholders_module]
    if inactive:
        words.append("--inactive")
    return shlex.join(words)


_PLACEHOLDERS_FILE = "placeholders.json"


def placeholder_package(placeholders: dict[str, str], directory: Path, submission: str) -> Path:
    """Write ``placeholders`` into a package of their own under ``directory`` (a temporary
    one): a module named after the submission, holding ``placeholders.json``. Shipped with
    the job as a ``py_modules`` entry, it is importable by the job's driver and by nobody who
    only lists jobs."""
    name = "rayflow_placeholders_" + re.sub(r"[^A-Za-z0-9_]", "_", submission)
    package = directory / name
    package.mkdir()
    (package / "__init__.py").write_text('"""The --set/--properties values of one rayflow submit."""\n')
    (package / _PLACEHOLDERS_FILE).write_text(json.dumps(placeholders))
    return package


def read_placeholders(module: str) -> list[str]:
    """The ``KEY=VALUE`` placeholders ``placeholder_package`` shipped in ``module``."""
    from importlib import resources

    try:
        text = resources.files(module).joinpath(_PLACEHOLDERS_FILE).read_text()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RayflowError(
            f"the placeholders of this job ({module}) did not come with it ({exc}): submit it again"
        ) from None
    return [f"{key}={value}" for key, value in json.loads(text).items()]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
