"""``rayflow run``'s live monitor: the table (or, without a terminal, a progress line) refreshed
every second, the errors of the components that raised, the clean stop, and the summary with
its verdict (an ``ExitCode``, the exit code).

Under the live table, where each task is: its state (running, waiting for resources,
restarting, ...), node, resources and GPU ids, from ``task_metrics()``. Tasks of a component
alike in all of these share a row, and a column whose value is the same on every row is said
once above the rows instead (one node, every task running), so that a run on one machine shows a
single line and a cluster shows only what differs. Without a terminal, a progress line names
the tasks not running whenever that changes.
"""

from __future__ import annotations

import signal
import time
from contextlib import nullcontext
from types import FrameType
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from .._topology import ACKER_COMPONENT, Topology
from ..topology_file import LoadedTopology
from . import console
from .exit_codes import MEANING, ExitCode, Metrics, exit_code_of

if TYPE_CHECKING:
    from .._runtime import TopologyHandle

__all__ = ["DRAIN_SECS", "REFRESH_SECS", "Monitor", "flow_order", "not_running", "task_view"]

REFRESH_SECS = 1.0
DRAIN_SECS = 5.0
"""After the spouts are deactivated, how long pending trees get to complete before the kill."""
OPEN_SECS = 10.0
"""A spout whose ``open`` raised, and that has emitted nothing this long after the start, ends
the run: it will not open by itself (exit 3, a component raised)."""


HEADER_WIDTH = 16
"""A column of the summary is at most this wide for its header's sake (a component's name, when
there is a column per component); a longer header folds."""


class _Stop(Exception):
    """SIGTERM asks for the same clean stop as Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


class Monitor:
    """Polls ``handle.metrics()`` once a second and shows it, until the duration is up, Ctrl-C,
    or every spout is done; then stops the topology cleanly, prints the summary and tells
    the ``ExitCode``."""

    def __init__(self, handle: TopologyHandle, loaded: LoadedTopology, duration: float | None) -> None:
        self.handle = handle
        self.name = loaded.name
        self.spouts = [c.id for c in loaded.topology.spouts]
        self.bolts = flow_order(loaded.topology)
        self.duration = duration
        self.live = console.out.is_terminal
        self.shown_errors: dict[str, tuple[int, str]] = {}
        self.shown_tasks = ""

    def run(self) -> ExitCode:
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
        out = console.out
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
                    tasks = task_view(self.handle.task_metrics(), self.spouts + self.bolts)
                    live.update(Group(view, tasks, *self._errors(metrics)), refresh=True)
                else:
                    out.print(self._line(metrics, now - started), markup=False, soft_wrap=True)
                    for line in self._new_errors(metrics):
                        out.print(line, style="red", markup=False, soft_wrap=True)
                    unplaced = not_running(self.handle.task_metrics(), self.spouts + self.bolts)
                    if unplaced != self.shown_tasks:
                        out.print(f"  tasks: {unplaced or 'all running'}", markup=False, soft_wrap=True)
                        self.shown_tasks = unplaced
                if self._finished(metrics):
                    return "every spout is exhausted and nothing is pending"
                if self.handle.killed:
                    return "killed from outside this terminal (its web page, or another process)"
                unopened = [s for s in self.spouts if _did_not_open(metrics[s])]
                if unopened and now - started >= OPEN_SECS:
                    return f"{', '.join(unopened)} did not open within {OPEN_SECS:g}s"

    def _title(self, elapsed: float) -> str:
        limit = f" of {self.duration:g}s" if self.duration is not None else ""
        return f"{self.name}: {elapsed:.0f}s{limit} (Ctrl-C to stop)"

    def _finished(self, metrics: Metrics) -> bool:
        done = all(metrics[s].get("exhausted") and not metrics[s].get("pending") for s in self.spouts)
        return done and self.handle.wait(timeout=0)

    def _stop(self) -> Metrics:
        """Deactivate, let pending trees complete for up to ``DRAIN_SECS``, and return the last
        metrics. A second Ctrl-C skips the wait; a topology killed already has nothing to drain."""
        if self.handle.killed:
            return self.handle.metrics()
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

    def _table(self, metrics: Metrics, rates: dict[str, float], title: str) -> RenderableType:
        """A row per component; on a console too narrow for that, a column per component (as
        many side by side as fit). Numbers are never cut."""
        errors = any(metrics[cid].get("errors") for cid in self.spouts + self.bolts)
        headers = ["tasks", "emitted", "acked", "failed", "pending", "rate/s", "p50 ms", "p99 ms"]
        if errors:
            headers.append("errors")
        rows: dict[str, list[str]] = {}
        for cid in self.spouts + self.bolts:
            m = metrics[cid]
            spout = cid in self.spouts
            latency = m.get("complete_latency_ms" if spout else "process_latency_ms") or {}
            rows[f"{escape(cid)} [dim]{'spout' if spout else 'bolt'}[/dim]"] = [
                str(m.get("tasks", "")),
                f"{m['emitted']:,}",
                f"{m['acked']:,}",
                f"[red]{m['failed']:,}[/red]" if m["failed"] else "0",
                f"{m.get('pending', 0):,}" if spout else "",
                f"{rates.get(cid, 0.0):,.0f}",
                _ms(latency.get("p50", 0.0)),
                _ms(latency.get("p99", 0.0)),
            ] + ([f"[red]{m['errors']:,}[/red]" if m.get("errors") else "0"] if errors else [])
        caption = "latency: complete (spouts), process (bolts) · rate: emitted/s (spouts), executed/s (bolts)"
        width = console.out.width
        labels, cells = list(rows), list(rows.values())
        table = _grid(Text(title), "component", labels, headers, cells, caption)
        if _min_width(table) <= width:
            return table
        # Transposed: a column per component, as many side by side as fit, a table per group.
        by_header = [[row[i] for row in cells] for i in range(len(headers))]

        def columns(start: int, stop: int) -> Table:
            return _grid(None, "", headers, labels[start:stop], [row[start:stop] for row in by_header])

        tables: list[Table] = []
        first = 0
        while first < len(labels):
            end = first + 1
            while end < len(labels) and _min_width(columns(first, end + 1)) <= width:
                end += 1
            tables.append(columns(first, end))
            first = end
        return Group(Text(title), *tables, Text(caption))

    def _summary(self, metrics: Metrics, elapsed: float, reason: str) -> ExitCode:
        out, err = console.out, console.err
        averages = {cid: _count(metrics[cid], cid in self.spouts) / max(elapsed, 1e-9) for cid in metrics}
        out.print(self._table(metrics, averages, f"{self.name}: summary after {elapsed:.1f}s ({reason})"))
        for s in self.spouts:
            out.print(_spout_verdict(s, metrics[s]), markup=False, soft_wrap=True)
        for _, line in self._error_lines(metrics).values():
            err.print(line, markup=False, soft_wrap=True)
        outcome = exit_code_of(metrics, self.spouts, self.spouts + self.bolts)
        if outcome != ExitCode.ACKED:
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


TASK_COLUMNS = ("state", "node", "resources", "GPUs")
"""The columns of the task view after the component and its task ids, each collapsible."""
SAID = {"state": "all {}", "node": "on {}", "resources": "each taking {}", "GPUs": "GPU ids {}"}
"""How a column alike on every row is said in the line above the rows."""


def task_view(tasks: dict[int, dict[str, Any]], components: list[str]) -> RenderableType:
    """Where each task of ``tasks`` (``task_metrics()``) is and what it holds: a row per component
    and (state, node, resources), with its task ids and their GPU ids; ``components`` gives the
    row order (ackers last). A column alike on every row is said once in the line above the rows
    (``6 task(s) · all running · on 10.0.0.5``); when every column is, that line is all there is."""
    rank = {cid: i for i, cid in enumerate(components)}
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for task, m in sorted(tasks.items()):
        key = (str(m.get("component", "?")), str(m.get("state", "?")), _node(m), _resources(m.get("resources") or {}))
        groups.setdefault(key, []).append(task)
    ordered = sorted(groups.items(), key=lambda group: (rank.get(group[0][0], len(rank)), group[1][0]))
    rows: list[tuple[str, str, dict[str, str]]] = []
    for (component, state, node, resources), ids in ordered:
        gpus = ", ".join(str(gpu) for task in ids for gpu in tasks[task].get("gpu_ids") or [])
        label = "acker" if component == ACKER_COMPONENT else component
        rows.append((label, _ids(ids), {"state": state, "node": node, "resources": resources, "GPUs": gpus}))
    said = [f"{len(tasks)} task(s)"]
    varying = []
    for column in TASK_COLUMNS:
        values = {cells[column] for _, _, cells in rows}
        if len(values) > 1:
            varying.append(column)
        elif values and values != {""}:
            said.append(SAID[column].format(*values))
    line = Text(" · ".join(said), style="dim")
    if not varying:
        return line
    table = Table(box=box.SIMPLE_HEAD)
    for header in ("component", "tasks", *varying):
        table.add_column(header, overflow="fold")
    for label, ids_text, cells in rows:
        shown = [
            Text(cells[c] or "-", style="yellow" if c == "state" and cells[c] != "running" else "") for c in varying
        ]
        table.add_row(Text(label), Text(ids_text), *shown)
    return Group(line, table)


def not_running(tasks: dict[int, dict[str, Any]], components: list[str]) -> str:
    """The tasks of ``tasks`` (``task_metrics()``) that are not running, by component and state
    (``upper 2-3 waiting for resources · sink 7 restarting``), or ``""``: what the progress
    lines say of the tasks, without a terminal for the task view."""
    rank = {cid: i for i, cid in enumerate(components)}
    groups: dict[tuple[str, str], list[int]] = {}
    for task, m in sorted(tasks.items()):
        if m.get("state", "running") != "running":
            groups.setdefault((str(m.get("component", "?")), str(m["state"])), []).append(task)
    ordered = sorted(groups.items(), key=lambda group: (rank.get(group[0][0], len(rank)), group[1][0]))
    return " · ".join(
        f"{'acker' if cid == ACKER_COMPONENT else cid} {_ids(ids)} {state}" for (cid, state), ids in ordered
    )


def _node(m: dict[str, Any]) -> str:
    """The node's address, or the start of its Ray node id, or ``-`` (not placed yet)."""
    if m.get("node_ip"):
        return str(m["node_ip"])
    node_id = m.get("node_id")
    return str(node_id)[:8] if node_id else "-"


def _resources(request: dict[str, float]) -> str:
    """``{"CPU": 1.0, "GPU": 1.0, "memory": 8 GiB}`` as ``CPU 1, GPU 1, memory 8 GiB``."""
    parts = []
    for name, amount in sorted(request.items(), key=lambda kv: (kv[0] not in ("CPU", "GPU"), kv[0])):
        if name == "memory":
            parts.append(f"memory {_bytes(amount)}")
        else:
            parts.append(f"{name} {amount:g}")
    return ", ".join(parts) or "nothing"


def _bytes(amount: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if amount >= size:
            return f"{amount / size:g} {unit}"
    return f"{amount:g} B"


def _ids(ids: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1-3, 7``."""
    spans: list[list[int]] = []
    for i in ids:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def _did_not_open(m: dict[str, Any]) -> bool:
    """Did the spout's ``open`` raise, leaving it with nothing emitted? (The spout task reports
    the error as ``open raised: ...``.)"""
    return not m["emitted"] and bool(m.get("errors")) and str(m.get("last_error")).startswith("open raised")


def _spout_verdict(spout: str, m: dict[str, Any]) -> str:
    """What became of the spout's tuple trees. Its ``emitted`` also counts untracked tuples
    (no ``msg_id``), which are never acked: the trees are what was acked, failed or is pending."""
    if _did_not_open(m):
        return f"{spout}: did not open, so it emitted nothing ({m['last_error']})"
    acked, failed, pending = m["acked"], m["failed"], m.get("pending", 0)
    trees = acked + failed + pending
    untracked = max(m["emitted"] - trees, 0)
    also = f"; {untracked:,} untracked tuple(s) emitted (no msg_id: never acked)" if untracked else ""
    if not trees and untracked:
        return f"{spout}: {untracked:,} untracked tuple(s) emitted (no msg_id: nothing to ack)"
    if not failed and not pending:
        return f"{spout}: every tuple tree was acked ({acked:,}){also}"
    why = ""
    if failed:
        timed_out = m.get("timed_out", 0)
        why = f" (of the failed: {timed_out:,} timed out, {failed - timed_out:,} failed by a bolt)"
    return (
        f"{spout}: {acked:,} of {trees:,} tuple tree(s) acked, {failed:,} failed, {pending:,} still pending{why}{also}"
    )


def _grid(
    title: Text | None, corner: str, labels: list[str], headers: list[str], rows: list[list[str]], caption: str = ""
) -> Table:
    """A table: ``labels`` down the first column (under ``corner``), then a right-aligned column
    per header, as wide as its widest cell -- so that no number is ever cut -- or its header, up
    to ``HEADER_WIDTH`` (a longer header folds)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=caption or None)
    table.caption_justify = "left"
    table.add_column(corner, overflow="fold")
    for i, header in enumerate(headers):
        widest = max((Text.from_markup(row[i]).cell_len for row in rows), default=0)
        heading = min(Text.from_markup(header).cell_len, HEADER_WIDTH)
        table.add_column(header, justify="right", overflow="fold", width=max(widest, heading))
    for label, row in zip(labels, rows, strict=True):
        table.add_row(label, *row)
    return table


def _min_width(table: Table) -> int:
    """The narrowest ``table`` can be with every cell whole (its title and caption wrap)."""
    title, caption = table.title, table.caption
    table.title = table.caption = None
    try:
        return Measurement.get(console.out, console.out.options.update_width(10_000), table).minimum
    finally:
        table.title, table.caption = title, caption


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
