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
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path
from typing import Any

from .._errors import RayflowError

__all__ = ["SHIPPED_EXCLUDES", "JobsUnavailable", "dashboard_address", "entrypoint", "jobs_client", "runtime_env"]

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


def jobs_client(url: str) -> Any:
    """A ``JobSubmissionClient`` for ``url``, with this machine's Ray token when the dashboard
    asks for one (Ray 2.60's token authentication covers the dashboard too)."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    logging.getLogger("ray.dashboard").setLevel(logging.WARNING)  # not "Uploading package ..." at INFO
    try:
        try:
            return JobSubmissionClient(url)
        except AuthenticationError:
            tokens = AuthenticationTokenLoader.instance()
            if not tokens.has_token(ignore_auth_mode=True):
                raise JobsUnavailable(
                    f"the Jobs API at {url} requires the cluster's token and this machine has none: set "
                    "RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)"
                ) from None
            return JobSubmissionClient(url, headers=dict(tokens.get_token_for_http_header(ignore_auth_mode=True)))
    except (ConnectionError, RuntimeError, AuthenticationError) as exc:
        raise JobsUnavailable(
            f"the cluster's Jobs API at {url} (its dashboard, as the cluster registered it) does not answer: "
            f"{type(exc).__name__}: {_first_line(exc)}. A dashboard bound to 127.0.0.1 is only reachable on its "
            "own node: run this there, or start the head with `--dashboard-host 0.0.0.0`"
        ) from None


def runtime_env(working_dir: Path) -> dict[str, Any]:
    return {"working_dir": str(working_dir), "excludes": SHIPPED_EXCLUDES}


def entrypoint(file: Path, placeholders: dict[str, str], inactive: bool) -> str:
    """The job's shell command: ``rayflow run`` of ``file`` (relative to the working directory),
    its placeholders filled as they were here."""
    words = ["python", "-m", "rayflow", "run", file.as_posix(), "--address", "auto"]
    for key, value in placeholders.items():
        words += ["--set", f"{key}={value}"]
    if inactive:
        words.append("--inactive")
    return shlex.join(words)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
