"""Detached runs, as Storm's CLI has them: ``submit`` (``storm jar``), ``list``, ``activate``,
``deactivate`` and ``kill`` (``storm kill``: deactivate, wait, kill).

``submit`` hands a topology file to the cluster as a Ray job (``jobs.py``), so that it outlives
the terminal and ``ray job list/logs/stop`` see it. The other commands act on every topology
running on the cluster, whoever submitted it -- ``rayflow submit``, ``rayflow run`` in another
terminal, a script -- through the control actor its driver created (``_runtime/control.py``).
All of them join the cluster at ``--address`` as ``rayflow run`` does (``ray_connection``), and
import Ray only then, as ``run`` does: ``rayflow --help`` stays quick.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import secrets
import tempfile
import time
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.table import Table

from . import console
from .arguments import FileArg, InactiveOpt, PropertiesOpt, SetOpt, load, placeholders
from .jobs import (
    JobsApi,
    JobsUnavailable,
    dashboard_address,
    entrypoint,
    jobs_client,
    placeholder_package,
    refusal,
    runtime_env,
)
from .progress import progress
from .ray_connection import ray_connection

__all__ = [
    "ACTIVATE_HELP",
    "CONTROL_MEANING",
    "DEACTIVATE_HELP",
    "KILL_HELP",
    "LIST_HELP",
    "SUBMIT_HELP",
    "ControlExit",
    "activate",
    "deactivate",
    "kill",
    "list_topologies",
    "submit",
]

ANSWER_SECS = 20.0
"""How long a topology's driver gets to answer a request (it reads every task's counters)."""
GONE_SECS = 60.0
"""After the kill is asked, how long until the topology must be gone (its driver drains first)."""
POLL_SECS = 0.5
USAGE_ERROR = 2
"""What click exits with for a wrong or missing option; ``--address auto`` for a kill is one."""


class ControlExit(IntEnum):
    """The exit codes of ``submit``, ``list``, ``activate``, ``deactivate`` and ``kill``; 0 and 1
    mean what they mean for ``rayflow run``."""

    DONE = 0
    NOT_DONE = 1
    NO_SUCH_TOPOLOGY = 4


CONTROL_MEANING = {
    ControlExit.DONE: "done",
    ControlExit.NOT_DONE: "not done: the file is invalid, Ray or its Jobs API cannot be reached, the name is "
    "taken, the job did not start, or the topology's driver did not answer",
    ControlExit.NO_SUCH_TOPOLOGY: "no topology of that name runs on the cluster",
}


def _codes(*codes: ControlExit) -> str:
    """The help's list of the exit codes a command can end with."""
    return "\n\nExit codes:\n\n" + "\n".join(f"* {int(code)}: {CONTROL_MEANING[code]}" for code in codes)


_ACTING = _codes(ControlExit.DONE, ControlExit.NOT_DONE, ControlExit.NO_SUCH_TOPOLOGY)
_READING = _codes(ControlExit.DONE, ControlExit.NOT_DONE)

ClusterOpt = Annotated[
    str,
    typer.Option(
        "--address",
        metavar="auto|HOST:PORT",
        help="The Ray cluster, at its GCS address as `ray start --head` printed it; auto: RAY_ADDRESS, or the "
        "cluster started on this machine. Its Jobs API (the dashboard, http://HOST:8265) is found from there. A "
        "cluster with token authentication needs its token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
        "~/.ray/auth_token.",
    ),
]
NamedClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        metavar="HOST:PORT",
        help="The Ray cluster to act on, at its GCS address as `ray start --head` printed it; RAY_ADDRESS serves "
        "too. Needed: auto would act on whichever cluster it finds on this machine, maybe someone else's. A "
        "cluster with token authentication needs its token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
        "~/.ray/auth_token.",
        show_default=False,
    ),
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The topology's name (`rayflow list` shows them).")]


SUBMIT_HELP = (
    """Run a topology file on a Ray cluster as a Ray job, detached from this terminal.

Checks the file here, uploads the working directory with it (as `storm jar` uploads the jar),
and runs `rayflow run FILE --address auto` on the cluster as a Ray job: the topology outlives
this terminal, `ray job list/logs/stop` see it, and `rayflow list` and `rayflow kill NAME` act
on it. Returns once the topology runs. The job ends when the topology is killed, or when every
spout is exhausted and nothing is pending; its status is `rayflow run`'s exit code (0:
SUCCEEDED).

A topology of the same name already running on the cluster is refused (exit 1)."""
    + _READING
)


def submit(
    file: FileArg,
    set_: SetOpt = None,
    properties: PropertiesOpt = None,
    address: ClusterOpt = "auto",
    working_dir: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Uploaded with the job, FILE inside it; the classes the file names must import from it (or be "
            "installed on the cluster). Default: the current directory.",
        ),
    ] = None,
    inactive: InactiveOpt = False,
    start_timeout: Annotated[
        float, typer.Option(min=1, metavar="SECONDS", help="Give up (and stop the job) if it has not started by then.")
    ] = 180.0,
) -> None:
    """Run a topology file on a Ray cluster as a Ray job (see ``SUBMIT_HELP``)."""
    loaded = load(file, set_, properties)
    given = placeholders(set_, properties)
    shipped = (working_dir or Path.cwd()).resolve()
    try:
        relative = file.resolve().relative_to(shipped)
    except ValueError:
        raise typer.BadParameter(
            f"{file} is not inside the working directory uploaded with the job ({shipped}): run from the "
            "project's root, or give --working-dir",
            param_hint="FILE",
        ) from None
    name = loaded.name
    import ray

    from .._runtime.control import find, name_taken

    with _joined(address):
        if find(name) is not None:
            _fail(str(name_taken(name)))
        jobs = _jobs()
        # The commands printed below name the cluster: as given, or as auto found it.
        cluster = address if address != "auto" else ray.get_runtime_context().gcs_address
        submission = f"rayflow-{re.sub(r'[^A-Za-z0-9_-]', '-', name)}-{secrets.token_hex(3)}"
        try:
            with tempfile.TemporaryDirectory(prefix="rayflow-submit-") as scratch:
                # The placeholders' values travel as a package of their own, not on the job's
                # command line, which Ray shows to anyone who lists jobs (``jobs.py``).
                package = placeholder_package(given, Path(scratch), submission) if given else None
                command = entrypoint(relative, package.name if package else None, inactive)
                with progress(f"uploading {shipped}", "the job's working directory", "uploaded"):
                    jobs.client.submit_job(
                        entrypoint=command,
                        submission_id=submission,
                        runtime_env=runtime_env(shipped, package),
                        metadata={"rayflow.topology": name},
                    )
        except Exception as exc:
            _fail(refusal(exc))
        waiting_for = "its driver joins the cluster and places the task actors"
        with progress(f"starting topology {name!r} as Ray job {submission}", waiting_for, "started"):
            problem = _started(jobs, submission, name, start_timeout)
        if problem is not None:
            _fail(problem)
    console.out.print(
        f"topology {name!r} runs as Ray job {submission} on the Ray cluster at {cluster}\n"
        f"  see it:      rayflow list --address {cluster}\n"
        f"  its log:     {jobs.logs_command(submission)}\n"
        f"  stop it:     rayflow kill {name} --address {cluster}",
        markup=False,
        soft_wrap=True,
    )


def _started(jobs: JobsApi, submission: str, name: str, timeout: float) -> str | None:
    """Wait until the job's driver has the topology running (``None``), or say why it has not:
    the job ended (its log's last lines tell why), or it did not start in time (it is stopped)."""
    from .._runtime.control import find

    client = jobs.client
    deadline = time.monotonic() + timeout
    while True:
        control = find(name)
        if control is not None and _info(control).get("job") == submission:
            return None
        try:
            status = client.get_job_status(submission)
        except RuntimeError:  # the Jobs API did not answer this once (it raises RuntimeError for HTTP errors)
            status = None
        if status is not None and status.is_terminal():
            tail = "\n".join(client.get_job_logs(submission).strip().splitlines()[-12:])
            return f"Ray job {submission} ended ({status.value}) before the topology ran; its log ends:\n{tail}"
        if time.monotonic() >= deadline:
            client.stop_job(submission)
            state = "unknown" if status is None else status.value
            return (
                f"Ray job {submission} did not start the topology within {timeout:g}s (it was {state}), so it was "
                f"stopped; `{jobs.logs_command(submission).removesuffix(' --follow')}` says what it did"
            )
        time.sleep(POLL_SECS)


LIST_HELP = (
    """List the topologies running on the cluster: status, tasks, uptime, Ray job, trees so far.

Every running topology is listed, whoever submitted it: `rayflow submit`, `rayflow run` in a
terminal, or a script. emitted, acked and failed count the spouts' tuple trees; a topology
whose driver does not answer in time shows ? for them."""
    + _READING
)


def list_topologies(
    address: ClusterOpt = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, for scripts.")] = False,
) -> None:
    """List the topologies running on the cluster (see ``LIST_HELP``)."""
    from .._runtime.control import running_topologies

    with _joined(address):
        controls = running_topologies()
        rows = [_row(name, control) for name, control in controls.items()]
    if as_json:
        console.out.print_json(json.dumps(rows))
        return
    if not rows:
        console.out.print("no topology runs on this cluster", markup=False)
        return
    table = Table(box=box.SIMPLE_HEAD)
    for header in ("name", "status", "tasks", "uptime", "job", "emitted", "acked", "failed"):
        table.add_column(header, justify="right" if header in ("tasks", "emitted", "acked", "failed") else "left")
    for row in rows:
        counts = [f"{row[k]:,}" if isinstance(row.get(k), int) else "?" for k in ("emitted", "acked", "failed")]
        table.add_row(row["name"], row["status"], str(row["tasks"]), _uptime(row["uptime_secs"]), row["job"], *counts)
    console.out.print(table)


def _row(name: str, control: Any) -> dict[str, Any]:
    from .._runtime.control import ask

    info = _info(control)
    status = ask(control, "status", ANSWER_SECS)
    state = "?" if "error" in status else ("active" if status["active"] else "inactive")
    return {
        "name": name,
        "status": state,
        "tasks": info.get("tasks"),
        "uptime_secs": round(time.time() - info.get("started", time.time()), 1),
        "job": info.get("job", "?"),
        "driver": info.get("driver", "?"),
        **{k: status.get(k) for k in ("emitted", "acked", "failed", "pending")},
        **({"error": status["error"]} if "error" in status else {}),
    }


_NAMED = """

It acts only on a cluster you name (--address HOST:PORT, or RAY_ADDRESS), as `storm kill` acts
on the Nimbus its configuration names: --address auto takes whichever Ray it finds on this
machine, maybe someone else's, so it is refused, saying which cluster it would have taken."""

ACTIVATE_HELP = "Let a running topology's spouts emit again (Storm's `activate`)." + _ACTING
DEACTIVATE_HELP = (
    "Stop a running topology's spouts (Storm's `deactivate`); pending trees still complete." + _NAMED + _ACTING
)


def activate(name: NameArg, address: ClusterOpt = "auto") -> None:
    """Let a running topology's spouts emit again (see ``ACTIVATE_HELP``)."""
    _switch(name, address, "activate")


def deactivate(name: NameArg, address: NamedClusterOpt = None) -> None:
    """Stop a running topology's spouts (see ``DEACTIVATE_HELP``)."""
    _switch(name, _named_cluster(address, "deactivate", name), "deactivate")


def _switch(name: str, address: str, action: str) -> None:
    from .._runtime.control import ask

    with _joined(address):
        answer = ask(_control(name), action, ANSWER_SECS)
    if "error" in answer:
        _fail(f"topology {name!r} did not {action}: {answer['error']}")
    state = "active" if answer["active"] else "inactive"
    console.out.print(f"topology {name!r} is {state} (acked so far: {answer['acked']:,})", markup=False)


KILL_HELP = (
    """Kill a running topology, as `storm kill` does: deactivate its spouts, wait, then kill it.

The wait (default: the topology's message timeout) lets pending tuple trees complete; it ends
sooner once none is pending. Then the topology's driver stops it: `rayflow run` (in a
terminal, or as the Ray job of `rayflow submit`) stops as after Ctrl-C, prints its summary
and exits with its usual code, which ends the job; a script that submitted it keeps running
with its handle killed."""
    + _NAMED
    + _ACTING
)


def kill(
    name: NameArg,
    address: NamedClusterOpt = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait", min=0, metavar="SECONDS", help="Between deactivate and kill; default: its message timeout."
        ),
    ] = None,
) -> None:
    """Kill a running topology (see ``KILL_HELP``)."""
    from .._runtime.control import ask

    with _joined(_named_cluster(address, "kill", name)):
        control = _control(name)
        secs = float(_info(control).get("message_timeout_secs", 30.0)) if wait is None else wait
        answer = ask(control, "deactivate", ANSWER_SECS)
        if "error" in answer:
            _fail(f"topology {name!r} did not deactivate: {answer['error']}")
        if secs > 0 and answer.get("pending"):
            with progress(f"deactivated {name!r}", f"up to {secs:g}s for its pending trees", "drained"):
                _drain(control, secs)
        answer = ask(control, "kill", ANSWER_SECS)
        if "error" in answer:
            _fail(f"topology {name!r} was not killed: {answer['error']}")
        with progress(f"killing {name!r}", answer["killing"], "killed"):
            gone = _gone(name, GONE_SECS)
    if not gone:
        _fail(f"topology {name!r} was asked to stop but still runs after {GONE_SECS:g}s: is its driver stuck?")
    console.out.print(f"killed topology {name!r}", markup=False)


def _drain(control: Any, secs: float) -> None:
    from .._runtime.control import ask

    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if not ask(control, "status", ANSWER_SECS).get("pending", 1):
            return
        time.sleep(POLL_SECS)


def _gone(name: str, secs: float) -> bool:
    from .._runtime.control import find

    deadline = time.monotonic() + secs
    while find(name) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECS)
    return True


def _named_cluster(address: str | None, command: str, name: str) -> str:
    """The cluster a command that stops something acts on: the one ``--address HOST:PORT`` or
    ``RAY_ADDRESS`` names. ``auto`` takes whichever Ray it finds on this machine -- the last
    ``ray start``, or any other -- which on a shared machine may be someone else's; so it is
    refused (exit 2, a usage error) with the cluster it would have taken and the command that
    names it."""
    if address not in (None, "auto"):
        return address
    if os.environ.get("RAY_ADDRESS"):
        return "auto"  # Ray's own way of naming the cluster: ray.init takes RAY_ADDRESS first
    latest, running = _clusters_on_this_machine()
    if latest is None:
        found = "and it finds none here: give the cluster's GCS address, which `ray start --head` printed"
        example = f"rayflow {command} {name} --address HOST:PORT"
    else:
        others = [a for a in running if a != latest]
        besides = f", one of {len(running)} running here ({', '.join(sorted(running))})" if others else ""
        found = f"here it would take the Ray cluster at {latest}{besides}, which may not be yours"
        example = f"rayflow {command} {name} --address {latest}"
    console.err.print(
        f"`rayflow {command}` acts only on a cluster you name: --address auto takes whichever Ray it finds on "
        f"this machine, {found}. Name it: `{example}` (or set RAY_ADDRESS); `rayflow list --address HOST:PORT` "
        "shows what runs there.",
        markup=False,
        soft_wrap=True,
    )
    raise typer.Exit(USAGE_ERROR)


def _clusters_on_this_machine() -> tuple[str | None, list[str]]:
    """The cluster ``--address auto`` would join (``None``: none) and every Ray GCS running on
    this machine, as Ray itself finds them (the last ``ray start``'s address file, then the
    processes); nothing when this Ray's private helpers are not there to ask."""
    try:
        services: Any = importlib.import_module("ray._private.services")  # untyped
    except ImportError:
        return None, []
    try:
        running = sorted(services.find_gcs_addresses())
    except Exception:  # ps cannot be read here: the address file may still say
        running = []
    try:
        latest = services.find_bootstrap_address(None) or (running[0] if running else None)
    except Exception:
        latest = running[0] if running else None
    return latest, running


def _joined(address: str) -> Any:
    """Joined to the cluster at ``address`` for the block; a dashboard URL is explained away."""
    if re.match(r"https?://", address):
        host = re.sub(r"^https?://", "", address).split("/")[0].rpartition(":")[0] or "HOST"
        _fail(
            f"{address} is a web address: Ray's dashboard, where its Jobs API is. rayflow joins the cluster at its "
            f"GCS address first (HOST:PORT, as `ray start --head --port` printed it, e.g. {host}:6380) and finds "
            "the Jobs API from there: give --address HOST:PORT, or --address auto on a node of the cluster"
        )
    return ray_connection(address)


def _jobs() -> JobsApi:
    try:
        return jobs_client(dashboard_address())
    except JobsUnavailable as exc:
        _fail(str(exc))


def _control(name: str) -> Any:
    from .._runtime.control import find, running_topologies

    control = find(name)
    if control is None:
        running = ", ".join(running_topologies()) or "none"
        console.err.print(
            f"no topology named {name!r} runs on this cluster (running: {running})", markup=False, soft_wrap=True
        )
        raise typer.Exit(ControlExit.NO_SUCH_TOPOLOGY)
    return control


def _info(control: Any) -> dict[str, Any]:
    import ray

    try:
        info: dict[str, Any] = ray.get(control.describe.remote(), timeout=ANSWER_SECS)
        return info
    except Exception:  # ended meanwhile
        return {}


def _uptime(secs: float) -> str:
    minutes, seconds = divmod(int(secs), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s")


def _fail(message: str) -> NoReturn:
    console.err.print(message, markup=False, soft_wrap=True)
    raise typer.Exit(ControlExit.NOT_DONE)
