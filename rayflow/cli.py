"""The ``rayflow`` command: run, check, draw and describe topology files.

    rayflow run configs/wordcount.yaml --duration 20     # live table, then a summary
    rayflow validate configs/*.yaml                      # every problem, with file:line
    rayflow graph configs/wordcount.yaml -o wc.svg       # .svg/.png need Graphviz's dot
    rayflow schema > topology.schema.json                # for editors

Built on typer (arguments and help) and rich (tables, live refresh). The current directory is
put on ``sys.path`` so that classes like ``examples.wordcount.SentenceSpout`` import when the
command runs from the project root.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from enum import IntEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .errors import RayflowError
from .spec import LoadedTopology, SpecError, TopologySpec, load_topology, read_properties
from .topology import Topology

if TYPE_CHECKING:
    from .runtime import TopologyHandle

__all__ = ["MEANING", "Outcome", "app", "flow_order", "main"]

REFRESH_SECS = 1.0
DRAIN_SECS = 5.0
"""After the spouts are deactivated, how long pending trees get to complete before the kill."""
PROGRESS_EVERY_SECS = 5.0
"""Without a terminal, how often a line says that Ray is still starting."""
JOIN_PROBE_SECS = 5.0
"""How long the cluster at --address gets to answer whether it lets this process in."""
_HOST_PORT = re.compile(r"[^:/\s]+:\d+\Z")

app = typer.Typer(
    name="rayflow",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # paragraphs of the help reflow to the terminal's width
)
# Piped output has no terminal width to fit: give the tables room rather than rich's 80 columns.
_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 132
out = Console(highlight=False, width=_WIDTH)
err = Console(stderr=True, highlight=False, width=_WIDTH)

FileArg = Annotated[Path, typer.Argument(metavar="FILE", help="Topology file (YAML or JSON).", show_default=False)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Fill ${KEY} in the file; repeatable, wins over --properties."),
]
PropertiesOpt = Annotated[
    Path | None, typer.Option("--properties", metavar="FILE", help="A key=value file that fills ${key} placeholders.")
]


def _version() -> str:
    try:
        return version("rayflow")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        out.print(f"rayflow {_version()}", markup=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print rayflow's version and exit."),
    ] = False,
) -> None:
    """Run Storm-style topologies described in YAML files on Ray."""


def main() -> None:
    """Console-script entry point."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app()


def _properties(sets: list[str] | None, properties: Path | None) -> dict[str, str]:
    props: dict[str, str] = {}
    if properties is not None:
        try:
            props.update(read_properties(properties))
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--properties") from None
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        props[key.strip()] = value
    return props


def _report(exc: SpecError) -> None:
    for problem in exc.problems:
        err.print(str(problem), markup=False, soft_wrap=True)
    err.print(f"{len(exc.problems)} problem(s)", style="bold red")


def _load(file: Path, sets: list[str] | None, properties: Path | None) -> LoadedTopology:
    try:
        return load_topology(file, _properties(sets, properties))
    except SpecError as exc:
        _report(exc)
        raise typer.Exit(1) from None


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(metavar="FILE", help="Topology files to check.", show_default=False)],
    set_: SetOpt = None,
    properties: PropertiesOpt = None,
) -> None:
    """Check topology files without starting anything.

    Exits 0 when every file is fine; otherwise lists every problem as file:line path: message
    and exits 1.
    """
    props = _properties(set_, properties)
    failed = False
    for file in files:
        try:
            loaded = load_topology(file, props)
        except SpecError as exc:
            _report(exc)
            failed = True
            continue
        topology = loaded.topology
        tasks = sum(c.parallelism for c in topology.components.values())
        out.print(
            f"{file}: ok (topology {loaded.name!r}: {len(topology.spouts)} spout(s), "
            f"{len(topology.bolts)} bolt(s), {tasks} task(s))",
            markup=False,
            soft_wrap=True,
        )
    raise typer.Exit(1 if failed else 0)


@app.command()
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

    .dot, .gv and .mmd (Mermaid) are written directly; .svg, .png and .pdf need Graphviz's
    `dot` program on PATH.
    """
    import graphviz

    from .spec.drawing import to_dot, write_graph

    loaded = _load(file, set_, properties)
    if output is None:
        sys.stdout.write(to_dot(loaded.topology, loaded.name).source)
        return
    try:
        write_graph(loaded.topology, loaded.name, output)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--output") from None
    except graphviz.ExecutableNotFound:
        err.print(
            f"cannot write {output}: rendering {output.suffix} needs Graphviz's `dot` program, which is not on "
            "PATH. Install Graphviz (e.g. `apt-get install graphviz`), or write .dot or .mmd instead.",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    out.print(f"wrote {output}", markup=False, soft_wrap=True)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the topology file format (for editors)."""
    sys.stdout.write(json.dumps(TopologySpec.model_json_schema(by_alias=True), indent=2) + "\n")


class Outcome(IntEnum):
    """``rayflow run``'s exit codes; ``MEANING`` words them for its help and its last line."""

    ACKED = 0
    NOT_STARTED = 1
    TREES_FAILED = 2
    COMPONENTS_RAISED = 3


MEANING = {
    Outcome.ACKED: "every tuple tree was acked and no component raised",
    Outcome.NOT_STARTED: "the file is invalid, or Ray or the topology could not start",
    Outcome.TREES_FAILED: "some tuple trees failed, or were still pending at the end",
    Outcome.COMPONENTS_RAISED: "a component raised an exception (this wins over 2)",
}

RUN_HELP = """Submit a topology and watch it live.

Shows, per component, emitted, acked, failed, pending, rate and latency, refreshed every
second, and under the table the last error of each component that raised. Ctrl-C or
--duration stops it cleanly (deactivate, let pending trees complete, kill) and prints a
summary; it also ends once every spout is exhausted and nothing is pending.

Without --address it starts a local Ray of its own, even when RAY_ADDRESS is set or a
`ray start` cluster runs on this machine, and stops it at the end.

Exit codes:

""" + "\n".join(f"* {int(code)}: {meaning}" for code, meaning in MEANING.items())


@app.command(help=RUN_HELP)
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
    inactive: Annotated[bool, typer.Option("--inactive", help="Submit with the spouts deactivated.")] = False,
) -> None:
    """Submit a topology and watch it live (see ``RUN_HELP``)."""
    loaded = _load(file, set_, properties)
    from .runtime import submit_topology  # Ray is imported by the one command that needs it

    with _ray(address):
        tasks = sum(c.parallelism for c in loaded.topology.components.values()) + loaded.config.ackers
        try:
            with _progress(f"starting topology {loaded.name!r}", f"{tasks} task actors", "topology started"):
                handle = submit_topology(loaded.name, loaded.config, loaded.topology, active=not inactive)
        except Exception as exc:  # a RayflowError, or Ray failing to place or start the actors
            err.print(f"cannot start topology {loaded.name!r}: {_describe(exc)}", markup=False, soft_wrap=True)
            raise typer.Exit(Outcome.NOT_STARTED) from None
        outcome = _Monitor(handle, loaded, duration).run()
    raise typer.Exit(outcome)


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, RayflowError) else f"{type(exc).__name__}: {exc}"


@contextmanager
def _progress(doing: str, waiting_for: str, done: str) -> Iterator[None]:
    """Something slow is under way (Ray starting, task actors being placed): on a terminal a
    spinner with the seconds elapsed, otherwise a line now and every few seconds, so that a
    start of 10-30 s never looks like a hang. Says how long it took once it is done."""
    started = time.monotonic()
    finished = threading.Event()
    status = err.status(f"{doing} ({waiting_for}) ...") if err.is_terminal else None

    def tick() -> None:
        while not finished.wait(0.2 if status else PROGRESS_EVERY_SECS):
            elapsed = f"{doing}: {time.monotonic() - started:.0f}s ({waiting_for}) ..."
            if status is not None:
                status.update(elapsed)
            else:
                err.print(elapsed, markup=False, soft_wrap=True)

    if status is None:
        err.print(f"{doing} ({waiting_for}) ...", markup=False, soft_wrap=True)
    ticker = threading.Thread(target=tick, name="rayflow-progress", daemon=True)
    with status or nullcontext():
        ticker.start()
        try:
            yield
        finally:
            finished.set()
            ticker.join()
    err.print(f"{done} in {time.monotonic() - started:.1f}s", style="dim", markup=False, soft_wrap=True)


@contextmanager
def _ray(address: str | None) -> Iterator[None]:
    """Connected to Ray for the block: the cluster at ``address``, or a new local one sized for
    this machine (as ``rayflow.LocalCluster`` starts it), shut down afterwards. Ray's own log
    lines stay quiet either way."""
    import ray

    from .runtime.cluster import local_ray_options

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None or address == "local":
        kwargs = local_ray_options()
        steps = (
            "starting a local Ray",
            f"{kwargs['num_cpus']} CPUs; waiting for its GCS, raylet and worker processes, usually 5-30 s",
            "Ray started",
        )
    else:
        problem = _join_problem(address)
        if problem is not None:
            err.print(f"cannot join the Ray cluster at {address}: {problem}", markup=False, soft_wrap=True)
            raise typer.Exit(Outcome.NOT_STARTED)
        kwargs = {"address": address, "log_to_driver": False, "logging_level": logging.ERROR}
        steps = (f"joining the Ray cluster at {address}", "waiting for its GCS to accept this driver", "joined")
    try:
        with _progress(*steps):
            ray.init(**kwargs)
    except Exception as exc:
        where = "a local Ray" if kwargs.get("address") == "local" else f"the Ray cluster at {address}"
        err.print(f"cannot start {where}: {type(exc).__name__}: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(Outcome.NOT_STARTED) from None
    try:
        yield
    finally:
        ray.shutdown()


def _join_problem(address: str) -> str | None:
    """Why joining the cluster at ``address`` cannot work, asked of its GCS in well under a
    second; ``None`` when it can (or when only ``ray.init`` can tell).

    Ray 2.60 clusters use token authentication, and ``ray.init`` joins an explicit address
    without a token unless ``RAY_AUTH_MODE=token``: it then retries for ~20 s and fails with a
    ``ConnectionError`` that does not say why. So: when the cluster wants a token and this
    machine has one (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``) that
    the cluster accepts, token mode is switched on here; otherwise the answer says what to set."""
    if not _HOST_PORT.match(address):
        return None  # "auto", ray:// and the like: ray.init resolves them itself
    try:
        grpc: Any = importlib.import_module("grpc")  # ships with Ray; untyped
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
        from ray._raylet import Config as RayConfig  # type: ignore[attr-defined]
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # not the Ray this was written against: let ray.init speak
        return None

    def refused(metadata: tuple[tuple[str, str], ...]) -> Any:
        """The gRPC status code the GCS refuses us with, or ``None`` when it answers."""
        with grpc.insecure_channel(address) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)  # type: ignore[no-untyped-call]
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]
            try:
                stub.GetClusterId(request, timeout=JOIN_PROBE_SECS, metadata=metadata)
            except grpc.RpcError as exc:
                return exc.code()
        return None

    code = refused(())
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return (
            f"nothing answers there ({code.name}): is the cluster running, and is {address} its GCS address "
            "(`ray start --head` prints it)?"
        )
    if code != grpc.StatusCode.UNAUTHENTICATED:
        return None
    mode = os.environ.get("RAY_AUTH_MODE", "token")
    if mode != "token":
        return f"the cluster requires token authentication, but RAY_AUTH_MODE={mode}: set RAY_AUTH_MODE=token"
    tokens = AuthenticationTokenLoader.instance()
    if not tokens.has_token(ignore_auth_mode=True):
        return (
            "the cluster requires token authentication and this machine has no token. Set RAY_AUTH_TOKEN to the "
            "cluster's token (`ray get-auth-token` on its head node prints it), or RAY_AUTH_TOKEN_PATH to a file "
            "holding it, or copy it to ~/.ray/auth_token."
        )
    if refused(tuple(tokens.get_token_for_http_header(ignore_auth_mode=True).items())) is not None:
        return (
            f"the cluster rejects the token from {_token_source()}: set RAY_AUTH_TOKEN to the cluster's token "
            "(`ray get-auth-token` on its head node prints it)."
        )
    os.environ["RAY_AUTH_MODE"] = "token"
    RayConfig.initialize("")  # Ray caches its settings: let it see token mode, as ray.init does for itself
    return None


def _token_source() -> str:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})"
    return "~/.ray/auth_token"


class _Stop(Exception):
    """SIGTERM asks for the same clean stop as Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


Metrics = dict[str, dict[str, Any]]


class _Monitor:
    """Polls ``handle.metrics()`` once a second and shows it, until the duration is up, Ctrl-C,
    or every spout is done; then stops the topology cleanly, prints the summary and tells
    the ``Outcome``."""

    def __init__(self, handle: TopologyHandle, loaded: LoadedTopology, duration: float | None) -> None:
        self.handle = handle
        self.name = loaded.name
        self.spouts = [c.id for c in loaded.topology.spouts]
        self.bolts = flow_order(loaded.topology)
        self.duration = duration
        self.live = out.is_terminal
        self.shown_errors: dict[str, tuple[int, str]] = {}

    def run(self) -> Outcome:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        started = time.monotonic()
        try:
            try:
                reason = self._watch(started)
            except (KeyboardInterrupt, _Stop):
                reason = "interrupted"
            final = self._stop()
        finally:
            self.handle.kill()
            signal.signal(signal.SIGTERM, previous)
        return self._summary(final, time.monotonic() - started, reason)

    def _watch(self, started: float) -> str:
        last = (started, self.handle.metrics())
        live = Live(console=out, auto_refresh=False, transient=True) if self.live else None
        with live or nullcontext():
            while True:
                elapsed = time.monotonic() - started
                left = None if self.duration is None else self.duration - elapsed
                if left is not None and left <= 0:
                    return f"ran for {self.duration:g}s"
                time.sleep(REFRESH_SECS if left is None else min(REFRESH_SECS, left))
                now, metrics = time.monotonic(), self.handle.metrics()
                rates = _rates(last, (now, metrics), self.spouts)
                last = (now, metrics)
                if live is not None:
                    view = self._table(metrics, rates, self._title(now - started))
                    live.update(Group(view, *self._errors(metrics)), refresh=True)
                else:
                    out.print(self._line(metrics, now - started), markup=False, soft_wrap=True)
                    for line in self._new_errors(metrics):
                        out.print(line, style="red", markup=False, soft_wrap=True)
                if self._finished(metrics):
                    return "every spout is exhausted and nothing is pending"

    def _title(self, elapsed: float) -> str:
        limit = f" of {self.duration:g}s" if self.duration is not None else ""
        return f"{self.name}: {elapsed:.0f}s{limit} (Ctrl-C to stop)"

    def _finished(self, metrics: Metrics) -> bool:
        done = all(metrics[s].get("exhausted") and not metrics[s].get("pending") for s in self.spouts)
        return done and self.handle.wait(timeout=0)

    def _stop(self) -> Metrics:
        """Deactivate, let pending trees complete for up to ``DRAIN_SECS``, and return the last
        metrics. A second Ctrl-C skips the wait."""
        try:
            self.handle.deactivate()
            deadline = time.monotonic() + DRAIN_SECS
            while True:
                metrics = self.handle.metrics()
                drained = sum(metrics[s].get("pending", 0) for s in self.spouts) == 0
                if drained or time.monotonic() >= deadline:
                    return metrics
                time.sleep(0.1)
        except (KeyboardInterrupt, _Stop):
            return self.handle.metrics()

    def _error_lines(self, metrics: Metrics) -> dict[str, tuple[int, str]]:
        """Per component that raised: how often, and the line that says it."""
        lines = {}
        for cid in self.spouts + self.bolts:
            m = metrics[cid]
            if m.get("errors"):
                lines[cid] = (m["errors"], f"{cid}: {m['errors']:,} error(s), the last: {m.get('last_error') or '?'}")
        return lines

    def _errors(self, metrics: Metrics) -> list[Text]:
        return [Text(line, style="red") for _, line in self._error_lines(metrics).values()]

    def _new_errors(self, metrics: Metrics) -> list[str]:
        """The error lines that changed since the last progress line (one-line mode)."""
        lines = self._error_lines(metrics)
        changed = [f"  {line}" for cid, (count, line) in lines.items() if self.shown_errors.get(cid) != (count, line)]
        self.shown_errors = lines
        return changed

    def _line(self, metrics: Metrics, elapsed: float) -> str:
        parts = [
            f"{s} emitted={m['emitted']:,} acked={m['acked']:,} failed={m['failed']:,} pending={m.get('pending', 0):,}"
            for s, m in ((s, metrics[s]) for s in self.spouts)
        ]
        parts += [f"{b} executed={metrics[b]['executed']:,}" for b in self.bolts]
        return f"[{elapsed:5.1f}s] " + " | ".join(parts)

    def _table(self, metrics: Metrics, rates: dict[str, float], title: str) -> Table:
        errors = any(metrics[cid].get("errors") for cid in self.spouts + self.bolts)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        table.add_column("component")
        for header in ("tasks", "emitted", "acked", "failed", "pending", "rate/s", "p50 ms", "p99 ms"):
            table.add_column(header, justify="right")
        if errors:
            table.add_column("errors", justify="right")
        for cid in self.spouts + self.bolts:
            m = metrics[cid]
            spout = cid in self.spouts
            latency = m.get("complete_latency_ms" if spout else "process_latency_ms") or {}
            row = [
                f"{cid} [dim]{'spout' if spout else 'bolt'}[/dim]",
                str(m.get("tasks", "")),
                f"{m['emitted']:,}",
                f"{m['acked']:,}",
                f"[red]{m['failed']:,}[/red]" if m["failed"] else "0",
                f"{m.get('pending', 0):,}" if spout else "",
                f"{rates.get(cid, 0.0):,.0f}",
                _ms(latency.get("p50", 0.0)),
                _ms(latency.get("p99", 0.0)),
            ]
            if errors:
                row.append(f"[red]{m['errors']:,}[/red]" if m.get("errors") else "0")
            table.add_row(*row)
        table.caption = "latency: complete (spouts), process (bolts) · rate: emitted/s (spouts), executed/s (bolts)"
        table.caption_justify = "left"
        return table

    def _summary(self, metrics: Metrics, elapsed: float, reason: str) -> Outcome:
        averages = {cid: _count(metrics[cid], cid in self.spouts) / max(elapsed, 1e-9) for cid in metrics}
        out.print(self._table(metrics, averages, f"{self.name}: summary after {elapsed:.1f}s ({reason})"))
        for s in self.spouts:
            out.print(_spout_verdict(s, metrics[s]), markup=False, soft_wrap=True)
        for _, line in self._error_lines(metrics).values():
            err.print(line, markup=False, soft_wrap=True)
        outcome = _outcome(metrics, self.spouts, self.spouts + self.bolts)
        if outcome != Outcome.ACKED:
            err.print(f"exit {int(outcome)}: {MEANING[outcome]}", markup=False, soft_wrap=True)
        return outcome


def flow_order(topology: Topology) -> list[str]:
    """The bolts in the order tuples reach them: in waves from the spouts (a bolt comes after
    every component it reads from), each wave as declared. A cycle is broken at its first bolt
    as declared."""
    placed = {c.id for c in topology.spouts}
    waiting = list(topology.bolts)
    order: list[str] = []
    while waiting:
        wave = [b for b in waiting if all(sub.component in placed for sub in b.inputs)] or waiting[:1]
        order += [b.id for b in wave]
        placed.update(b.id for b in wave)
        waiting = [b for b in waiting if b.id not in placed]
    return order


def _outcome(metrics: Metrics, spouts: list[str], components: list[str]) -> Outcome:
    if any(metrics[cid].get("errors") for cid in components):
        return Outcome.COMPONENTS_RAISED
    if any(metrics[s]["failed"] or metrics[s].get("pending") for s in spouts):
        return Outcome.TREES_FAILED
    return Outcome.ACKED


def _spout_verdict(spout: str, m: dict[str, Any]) -> str:
    """What became of the spout's tuple trees. Its ``emitted`` also counts untracked tuples
    (no ``msg_id``), which are never acked: the trees are what was acked, failed or is pending."""
    acked, failed, pending = m["acked"], m["failed"], m.get("pending", 0)
    trees = acked + failed + pending
    untracked = max(m["emitted"] - trees, 0)
    also = f"; {untracked:,} untracked tuple(s) emitted (no msg_id: never acked)" if untracked else ""
    if not trees and untracked:
        return f"{spout}: {untracked:,} untracked tuple(s) emitted (no msg_id: nothing to ack)"
    if not failed and not pending:
        return f"{spout}: every tuple tree was acked ({acked:,}){also}"
    return f"{spout}: {acked:,} of {trees:,} tuple tree(s) acked, {failed:,} failed, {pending:,} still pending{also}"


def _ms(value: float) -> str:
    return f"{value:,.2f}" if value else "-"


def _count(m: dict[str, Any], spout: bool) -> int:
    return int(m["emitted"] if spout else m["executed"])


def _rates(before: tuple[float, Metrics], after: tuple[float, Metrics], spouts: list[str]) -> dict[str, float]:
    span = max(after[0] - before[0], 1e-9)
    return {
        cid: (_count(m, cid in spouts) - _count(before[1].get(cid, m), cid in spouts)) / span
        for cid, m in after[1].items()
    }
