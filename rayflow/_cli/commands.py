"""The commands themselves: ``validate``, ``graph``, ``schema`` and ``run``.

Each is a thin layer over the rest: ``arguments`` loads the topology file, ``ray_connection``
connects to Ray, ``monitor`` watches the run and ``exit_codes`` says what its exit code means.
``rayflow._cli`` registers them on the typer app.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._chaining import chained_components
from .._errors import RayflowError
from .._windows.validation import pending_advice
from ..topology_file import LoadedTopology, SpecError, TopologySpec, load_topology
from . import console
from .arguments import FileArg, HostOpt, InactiveOpt, PortOpt, PropertiesOpt, SetOpt, UiOpt, load, placeholders, report
from .exit_codes import MEANING, ExitCode
from .monitor import Monitor
from .progress import progress
from .ray_connection import ray_connection

if TYPE_CHECKING:
    from .._ui import UiServer

__all__ = ["RUN_HELP", "graph", "run", "schema", "validate"]


def validate(
    files: Annotated[list[Path], typer.Argument(metavar="FILE", help="Topology files to check.", show_default=False)],
    set_: SetOpt = None,
    properties: PropertiesOpt = None,
) -> None:
    """Check topology files without starting anything.

    Exits 0 when every file is fine; otherwise lists every problem as file:line path: message
    and exits 1.
    """
    props = placeholders(set_, properties)
    failed = False
    for file in files:
        try:
            loaded = load_topology(file, props)
        except SpecError as exc:
            report(exc)
            failed = True
            continue
        topology = loaded.topology
        tasks = sum(c.parallelism for c in topology.components.values())
        console.out.print(
            f"{file}: ok (topology {loaded.name!r}: {len(topology.spouts)} spout(s), "
            f"{len(topology.bolts)} bolt(s), {tasks} task(s))",
            markup=False,
            soft_wrap=True,
        )
        for advice in loaded.config.storm_settings_without_effect():
            console.out.print(f"{file}: note: config: {advice}", markup=False, soft_wrap=True)
        for advice in pending_advice(loaded.topology, loaded.config):
            console.out.print(f"{file}: note: {advice}", markup=False, soft_wrap=True)
    raise typer.Exit(1 if failed else 0)


def graph(
    file: FileArg,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o", "--output", metavar="OUT", help="Write .dot, .gv, .mmd, .svg, .png or .pdf; default: DOT to stdout."
        ),
    ] = None,
    set_: SetOpt = None,
    properties: PropertiesOpt = None,
) -> None:
    """Draw the topology: components, parallelism, and the groupings on the edges.

    A chained link (a bolt run in its upstream's process) is drawn bold and labelled
    "chained"; a dashed box frames each chain.

    .dot, .gv and .mmd (Mermaid) are written directly; .svg, .png and .pdf need Graphviz's
    `dot` program on PATH.
    """
    import graphviz

    from ..topology_file._drawing import to_dot, write_graph

    loaded = load(file, set_, properties)
    if output is None:
        sys.stdout.write(to_dot(loaded.topology, loaded.name, loaded.config).source)
        return
    try:
        write_graph(loaded.topology, loaded.name, output, loaded.config)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--output") from None
    except graphviz.ExecutableNotFound:
        console.err.print(
            f"cannot write {output}: rendering {output.suffix} needs Graphviz's `dot` program, which is not on "
            "PATH. Install Graphviz (e.g. `apt-get install graphviz`), or write .dot or .mmd instead.",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    console.out.print(f"wrote {output}", markup=False, soft_wrap=True)


def schema() -> None:
    """Print the JSON Schema of the topology file format (for editors)."""
    sys.stdout.write(json.dumps(TopologySpec.model_json_schema(by_alias=True), indent=2) + "\n")


RUN_HELP = """Submit a topology and watch it live.

Shows, per component, emitted, acked, failed, pending, rate and latency, refreshed every
second, and under the table the last error of each component that raised. Ctrl-C or
--duration stops it cleanly (deactivate, let pending trees complete, kill) and prints a
summary; it also ends once every spout is exhausted and nothing is pending.

With --ui it also serves the topology's web page (printed first): the graph, the component and
task tables live, throughput and latency plots, recent errors, Activate/Deactivate/Kill buttons,
and /metrics for Prometheus. A Kill from the page ends the run with its summary.

Without --address it starts a local Ray of its own, even when RAY_ADDRESS is set or a
`ray start` cluster runs on this machine, and stops it at the end.

Exit codes:

""" + "\n".join(f"* {int(code)}: {meaning}" for code, meaning in MEANING.items())


def run(
    file: FileArg,
    set_: SetOpt = None,
    properties: PropertiesOpt = None,
    duration: Annotated[
        float | None, typer.Option(min=0, metavar="SECONDS", help="Stop after this long; default: until Ctrl-C.")
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            metavar="auto|HOST:PORT",
            help="Join this Ray cluster (its GCS address) instead of starting a local one. A cluster with token "
            "authentication needs its token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token.",
        ),
    ] = None,
    inactive: InactiveOpt = False,
    ui: UiOpt = False,
    port: PortOpt = None,
    host: HostOpt = None,
    placeholders_from: Annotated[
        str | None,
        typer.Option(
            "--placeholders-from",
            hidden=True,
            help="rayflow submit's: the module its job ships the --set/--properties values in.",
        ),
    ] = None,
) -> None:
    """Submit a topology and watch it live (see ``RUN_HELP``)."""
    if not ui and (port is not None or host is not None):
        raise typer.BadParameter("--port and --host are the web page's: add --ui", param_hint="--port/--host")
    if placeholders_from is not None:  # a submitted job's: its values came beside the command line
        from .jobs import read_placeholders

        set_ = read_placeholders(placeholders_from) + list(set_ or [])
    loaded = load(file, set_, properties)
    if loaded.config.debug:
        show_debug_log()
    page = _open_page(host or "127.0.0.1", port or 0) if ui else None  # its URL first: Ray takes a while
    try:
        outcome = _run(loaded, address, duration, inactive, page)
    finally:
        if page is not None:
            page.close()
    raise typer.Exit(outcome)


def _run(
    loaded: LoadedTopology, address: str | None, duration: float | None, inactive: bool, page: UiServer | None
) -> ExitCode:
    from .._runtime import submit_topology  # Ray is imported by the one command that needs it

    with ray_connection(address):
        try:
            with progress(f"starting topology {loaded.name!r}", _actors(loaded), "topology started"):
                handle = submit_topology(loaded.name, loaded.config, loaded.topology, active=not inactive)
        except Exception as exc:  # a RayflowError, or Ray failing to place or start the actors
            console.err.print(f"cannot start topology {loaded.name!r}: {_describe(exc)}", markup=False, soft_wrap=True)
            return ExitCode.NOT_STARTED
        if page is not None:
            try:
                page.serve(handle, loaded.topology)
            except BaseException:  # nobody would watch it: it goes with the run
                handle.kill()
                raise
        return Monitor(handle, loaded, duration).run()


def _actors(loaded: LoadedTopology) -> str:
    """What starting waits for: "N task actors", or "N tasks in M actors" when chained tasks
    run in their hosts' actors (``rayflow/_chaining.py``)."""
    components = loaded.topology.components
    tasks = sum(c.parallelism for c in components.values()) + loaded.config.ackers
    guests = sum(components[bolt].parallelism for bolt in chained_components(loaded.topology, loaded.config))
    return f"{tasks} tasks in {tasks - guests} actors" if guests else f"{tasks} task actors"


def _open_page(host: str, port: int) -> UiServer:
    """The web page, listening already (a browser opened now waits until the topology runs),
    its URL printed; if it cannot listen there, exit 1 before anything starts."""
    from .._ui import UiServer

    # Another address than loopback needs RAYFLOW_UI_TOKEN (UiServer refuses without): a token
    # made up here would have to be printed, and it is kept out of every URL and log line.
    token = os.environ.get("RAYFLOW_UI_TOKEN") or None
    try:
        page = UiServer(host=host, port=port, token=token)
    except RayflowError as exc:
        console.err.print(f"cannot serve the web page: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(ExitCode.NOT_STARTED) from None
    base = page.url.split("?", 1)[0]
    console.out.print(f"web page: {page.url}  (Prometheus: {base}metrics)", markup=False, soft_wrap=True)
    return page


class _Stderr(logging.Handler):
    """Writes to ``sys.stderr`` as it is at each record (the live view redirects it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def show_debug_log() -> None:
    """``topology.debug``'s emits are INFO records of the ``rayflow`` logger (each task's are
    carried to this process, see ``rayflow._runtime.task_logs``), which Python does not show
    unless told: show them on stderr, with the warnings and errors."""
    logger = logging.getLogger("rayflow")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr(logging.INFO))
    logger.setLevel(logging.INFO)


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, RayflowError) else f"{type(exc).__name__}: {exc}"
