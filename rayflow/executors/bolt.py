"""The bolt task: rebuilds tuples from incoming batches, runs the user's ``execute`` and turns
acks and fails into acker traffic. User exceptions fail the input; the task keeps running."""

from __future__ import annotations

import time
from typing import Any

from ..anchoring import _getrandbits, anchored_edges, new_id
from ..collectors import OutputCollector
from ..components import BasicBolt, Bolt
from ..errors import FailedException
from ..router import Router
from ..tuple import SYSTEM_COMPONENT, TICK_STREAM, Tuple
from .base import Executor, Timer, logger
from .basic_bolt import BasicBoltAdapter

__all__ = ["BoltExecutor"]

SAMPLE_EVERY = 16
"""One tuple in this many is timed for the latency percentiles (timing costs ~0.4 us a tuple)."""
_TICK_SOURCE = -1
_TICK_SHAPES = {TICK_STREAM: (["rate_secs"], {"rate_secs": 0})}


class BoltExecutor(Executor):
    kind = "bolt"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        component = self.topology.components[self.component_id].component
        self.bolt: Bolt = BasicBoltAdapter(component) if isinstance(component, BasicBolt) else component  # type: ignore[assignment]
        self.router = Router(self.topology, self.context)
        self.collector = OutputCollector(self)
        # source task -> (component id, {stream: (fields, field index)}), to rebuild tuples.
        self._sources: dict[int, tuple[str, dict[str, tuple[list[str], dict[str, int]]]]] = {}
        stream_fields = self.topology.stream_fields()
        for component_id, streams in stream_fields.items():
            shapes = {s: (list(f), {name: i for i, name in enumerate(f)}) for s, f in streams.items()}
            for task in self.context.get_component_tasks(component_id):
                self._sources[task] = (component_id, shapes)
        self._sources[_TICK_SOURCE] = (SYSTEM_COMPONENT, _TICK_SHAPES)
        self._process = self.metrics.latency("process_latency_ms")
        self._execute_latency = self.metrics.latency("execute_latency_ms")
        self._countdown = 0

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.bolt.prepare(self.conf.to_conf(), self.context, self.collector)
        except Exception as exc:
            self.report_error(exc, "prepare raised")

    def close(self) -> None:
        try:
            self.bolt.cleanup()
        except Exception as exc:
            self.report_error(exc, "cleanup raised")
        self.outbox.flush()

    def timers(self) -> list[Timer]:
        freq = self.conf.tick_tuple_freq_secs
        return [(freq, lambda: self.tick(freq))] if freq else []

    # -- input --------------------------------------------------------------------------------
    def receive(self, payload: tuple[int, list[Any]]) -> None:
        """Execute a batch of tuples from one source task, then send what they produced.

        This loop is the hot path of every bolt: it is written flat on purpose (locals, no
        per-tuple helper calls beyond the user's ``execute``). Latencies are sampled on one
        tuple in ``SAMPLE_EVERY``; busy time is measured per batch."""
        source_task, items = payload
        component, shapes = self._sources[source_task]
        execute = self.bolt.execute
        perf = time.perf_counter
        record_execute = self._execute_latency.add
        countdown = self._countdown
        batch_started = perf()
        for stream, values, edges in items:
            fields, index = shapes[stream]
            tup = Tuple(values, fields, index, component, stream, source_task, edges)
            sampled = not countdown
            if sampled:
                countdown = SAMPLE_EVERY
                started = tup.started = perf()
            countdown -= 1
            try:
                execute(tup)
            except FailedException:
                self.fail(tup)
            except Exception as exc:
                self.report_error(exc, f"execute raised on {tup!r}")
                self.fail(tup)
            if sampled:
                record_execute(perf() - started)
        self._countdown = countdown
        self.metrics.executed += len(items)
        self.metrics.busy_secs += perf() - batch_started
        # Data goes on at once; acker traffic is sent by the runtime after a linger, so that
        # one control call carries the acks of many batches (a Ray call costs ~1 ms of CPU).
        self.outbox.flush_data()

    def tick(self, freq_secs: float) -> None:
        """Deliver a tick tuple (untracked; acking or failing it is harmless)."""
        self.receive((_TICK_SOURCE, [(TICK_STREAM, [freq_secs], None)]))

    # -- output -------------------------------------------------------------------------------
    def emit(self, stream: str, values: list[Any], anchors: list[Tuple], direct_task: int | None) -> list[int]:
        if direct_task is None:
            targets = self.router.targets(stream, values)
        else:
            targets = self.router.direct_target(direct_task, stream, values)
        metrics = self.metrics
        metrics.emitted += 1
        if self.observer is not None:
            self.observer.emitted(self.component_id, stream, values)
        if not targets:
            return []
        metrics.transferred += len(targets)
        if self.debug:
            logger.info("%s:%d emit %s %r -> %s", self.component_id, self.task_id, stream, values, targets)
        send = self.outbox.tuple
        if len(anchors) == 1:
            anchor = anchors[0]
            roots = anchor.edges
            if roots:
                for task in targets:
                    edge = _getrandbits(64) or new_id()
                    anchor.ack_val ^= edge
                    send(task, stream, values, dict.fromkeys(roots, edge))
                return list(targets)
            anchors = []
        anchors = [a for a in anchors if a.edges]
        if not anchors:
            for task in targets:
                send(task, stream, values, None)
        else:
            for task in targets:
                edges, per_anchor = anchored_edges([a.edges for a in anchors])  # type: ignore[misc]
                for anchor, edge in zip(anchors, per_anchor, strict=True):
                    anchor.ack_val ^= edge
                send(task, stream, values, edges)
        return list(targets)

    def ack(self, tup: Tuple) -> None:
        if tup.done:
            return
        tup.done = True
        edges = tup.edges
        if edges:
            val = tup.ack_val
            ack = self.outbox.ack
            ackers = self.acker_tasks
            for root, edge in edges.items():
                ack(ackers[root % len(ackers)], root, edge ^ val)
        self.metrics.acked += 1
        if tup.started:
            self._process.add(time.perf_counter() - tup.started)

    def fail(self, tup: Tuple) -> None:
        if tup.done:
            return
        tup.done = True
        if tup.edges:
            for root in tup.edges:
                self.outbox.acker(self.acker_for(root)).fails.append(root)
        self.metrics.failed += 1
        if tup.started:
            self._process.add(time.perf_counter() - tup.started)

    def reset_timeout(self, tup: Tuple) -> None:
        if tup.edges:
            for root in tup.edges:
                self.outbox.acker(self.acker_for(root)).resets.append(root)
