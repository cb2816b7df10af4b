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

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .errors import RayflowError
from .spec import LoadedTopology, SpecError, TopologySpec, load_topology, read_properties

if TYPE_CHECKING:
    from .runtime import TopologyHandle

__all__ = ["app", "main"]

REFRESH_SECS = 1.0
DRAIN_SECS = 5.0
"""After the spouts are deactivated, how long pending trees get to complete before the kill."""

app = typer.Typer(
    name="rayflow",
    help="Run Storm-style topologies described in YAML files on Ray.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
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


@app.command()
def run(
    file: FileArg,
    set_: SetOpt = None,
    properties: PropertiesOpt = None,
    duration: Annotated[
        float | None, typer.Option(min=0, metavar="SECONDS", help="Stop after this long; default: until Ctrl-C.")
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(metavar="auto|HOST:PORT", help="Join this Ray cluster instead of starting a local one."),
    ] = None,
    inactive: Annotated[bool, typer.Option("--inactive", help="Submit with the spouts deactivated.")] = False,
) -> None:
    """Submit a topology and watch it live.

    Shows, per component, emitted, acked, failed, rate and latency, refreshed every second.
    Ctrl-C or --duration stops it cleanly (deactivate, drain, kill) and prints a summary; it
    also ends once every spout is exhausted and nothing is pending. Exits 1 if the topology
    could not start.
    """
    loaded = _load(file, set_, properties)
    from .runtime import submit_topology  # Ray is imported by the one command that needs it

    with _ray(address):
        try:
            handle = submit_topology(loaded.name, loaded.config, loaded.topology, active=not inactive)
        except RayflowError as exc:
            err.print(f"cannot start topology {loaded.name!r}: {exc}", markup=False, soft_wrap=True)
            raise typer.Exit(1) from None
        _Monitor(handle, loaded, duration).run()


@contextmanager
def _ray(address: str | None) -> Iterator[None]:
    """Connected to Ray for the block: the cluster at ``address``, or a local one sized for
    this machine (as ``rayflow.LocalCluster`` does), shut down afterwards."""
    import ray

    from .runtime.cluster import local_ray_options

    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address is None:
        err.print("starting Ray ...", style="dim")
        kwargs.update(local_ray_options())
    else:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except Exception as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        err.print(f"cannot start {where}: {type(exc).__name__}: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    try:
        yield
    finally:
        ray.shutdown()


class _Stop(Exception):
    """SIGTERM asks for the same clean stop as Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


class _Monitor:
    """Polls ``handle.metrics()`` once a second and shows it, until the duration is up, Ctrl-C,
    or every spout is done; then stops the topology cleanly and prints the summary."""

    def __init__(self, handle: TopologyHandle, loaded: LoadedTopology, duration: float | None) -> None:
        self.handle = handle
        self.name = loaded.name
        self.spouts = sorted(c.id for c in loaded.topology.spouts)
        self.bolts = sorted(c.id for c in loaded.topology.bolts)
        self.duration = duration
        self.live = out.is_terminal

    def run(self) -> None:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        started = time.monotonic()
        try:
            try:
                reason = self._watch(started)
            except (KeyboardInterrupt, _Stop):
                reason = "interrupted"
            final, drained = self._stop()
        finally:
            self.handle.kill()
            signal.signal(signal.SIGTERM, previous)
        self._summary(final, time.monotonic() - started, reason, drained)

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
                    live.update(self._table(metrics, rates, self._title(now - started)), refresh=True)
                else:
                    out.print(self._line(metrics, now - started), markup=False, soft_wrap=True)
                if self._finished(metrics):
                    return "every spout is exhausted and nothing is pending"

    def _title(self, elapsed: float) -> str:
        limit = f" of {self.duration:g}s" if self.duration is not None else ""
        return f"{self.name}: {elapsed:.0f}s{limit} (Ctrl-C to stop)"

    def _finished(self, metrics: dict[str, dict[str, Any]]) -> bool:
        done = all(metrics[s].get("exhausted") and not metrics[s].get("pending") for s in self.spouts)
        return done and self.handle.wait(timeout=0)

    def _stop(self) -> tuple[dict[str, dict[str, Any]], bool]:
        """Deactivate, let pending trees complete for up to ``DRAIN_SECS``, and return the last
        metrics and whether everything drained. A second Ctrl-C skips the wait."""
        try:
            self.handle.deactivate()
            deadline = time.monotonic() + DRAIN_SECS
            while True:
                metrics = self.handle.metrics()
                drained = sum(metrics[s].get("pending", 0) for s in self.spouts) == 0
                if drained or time.monotonic() >= deadline:
                    return metrics, drained
                time.sleep(0.1)
        except (KeyboardInterrupt, _Stop):
            return self.handle.metrics(), False

    def _line(self, metrics: dict[str, dict[str, Any]], elapsed: float) -> str:
        parts = [
            f"{s} emitted={m['emitted']:,} acked={m['acked']:,} failed={m['failed']:,} pending={m.get('pending', 0):,}"
            for s, m in ((s, metrics[s]) for s in self.spouts)
        ]
        parts += [f"{b} executed={metrics[b]['executed']:,}" for b in self.bolts]
        return f"[{elapsed:5.1f}s] " + " | ".join(parts)

    def _table(self, metrics: dict[str, dict[str, Any]], rates: dict[str, float], title: str) -> Table:
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

    def _summary(self, metrics: dict[str, dict[str, Any]], elapsed: float, reason: str, drained: bool) -> None:
        averages = {cid: _count(metrics[cid], cid in self.spouts) / max(elapsed, 1e-9) for cid in metrics}
        out.print(self._table(metrics, averages, f"{self.name}: summary after {elapsed:.1f}s ({reason})"))
        for s in self.spouts:
            m = metrics[s]
            if drained and not m["failed"] and m["acked"] == m["emitted"]:
                out.print(f"{s}: every emitted tuple was acked ({m['acked']:,})", markup=False, soft_wrap=True)
            else:
                out.print(
                    f"{s}: emitted {m['emitted']:,}, acked {m['acked']:,}, failed {m['failed']:,}, "
                    f"still pending at the kill {m.get('pending', 0):,}",
                    markup=False,
                    soft_wrap=True,
                )
        for cid, m in metrics.items():
            if m.get("errors") and m.get("last_error"):
                err.print(f"{cid}: {m['errors']} error(s), the last: {m['last_error']}", markup=False, soft_wrap=True)


def _ms(value: float) -> str:
    return f"{value:.3g}" if value else "-"


def _count(m: dict[str, Any], spout: bool) -> int:
    return int(m["emitted"] if spout else m["executed"])


def _rates(
    before: tuple[float, dict[str, dict[str, Any]]], after: tuple[float, dict[str, dict[str, Any]]], spouts: list[str]
) -> dict[str, float]:
    span = max(after[0] - before[0], 1e-9)
    return {
        cid: (_count(m, cid in spouts) - _count(before[1].get(cid, m), cid in spouts)) / span
        for cid, m in after[1].items()
    }
