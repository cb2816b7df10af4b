"""``BasicBoltAdapter``: a ``BasicBolt`` run as Storm's ``BasicBoltExecutor`` runs it.

Every emit is anchored to the input, the input is acked when ``execute`` returns and failed when
it raises. The adapter runs whole stream segments itself (``run_inline``), because a call per
tuple through an adapter would cost more than the bookkeeping, and it has the executor bind its
collector's ``emit`` to one emit per stream (``input_emit.py``): one Python call per emitted
tuple, with the stream's route bound in it. Where the C kernel runs (``kernel.py``), both loops
are its C copies: ``run_inline`` below and those emits are what the C must do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._collectors import BasicOutputCollector, OutputCollector
from .._components import BasicBolt, OutputFieldsDeclarer
from .._context import TopologyContext
from .._errors import FailedException
from .._tuple import Tuple, TupleSource
from . import kernel
from .bolt_kind import BoltKind

if TYPE_CHECKING:  # the executor builds its kind; the kind only calls back into it
    from .bolt import BoltExecutor

__all__ = ["BasicBoltAdapter"]


class BasicBoltAdapter(BoltKind):
    inline = True

    def __init__(self, user_component: BasicBolt, task: BoltExecutor) -> None:
        self.user_component = user_component
        self._task = task
        self.basic_collector = BasicOutputCollector(task)
        task.input_collector = self.basic_collector
        task.wire_input_emits()
        if kernel.KERNEL is not None:
            self.run_inline = self._run_inline_in_c  # type: ignore[method-assign]

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.user_component.prepare(conf, context)

    def cleanup(self) -> None:
        self.user_component.cleanup()

    def tick(self, tup: Tuple) -> None:
        collector = self.basic_collector
        collector.input = tup
        try:
            self.user_component.execute(tup, collector)
        finally:
            collector.input = None

    def _run_inline_in_c(
        self, column: list[Any], trees: Iterator[int], source: TupleSource, joined: list[Any]
    ) -> int:
        """``run_inline`` by the C kernel (``kernel.py``), which does what the Python loop below
        does, calling back ``_execute_raised`` when ``execute`` raises an ``Exception``."""
        assert kernel.KERNEL is not None, "bound only where the kernel runs"
        task = self._task
        failed: int = kernel.KERNEL.run_inline(
            task,
            self.user_component.execute,
            self.basic_collector,
            task.outbox.acker_mails,
            column,
            trees,
            source,
            joined,
            self._execute_raised,
        )
        return failed

    def _execute_raised(self, tup: Tuple, exc: Exception) -> None:
        """What both loops do when ``execute`` raises: report it, unless it is a
        ``FailedException`` (the bolt failing the input on purpose), and fail the input."""
        if not isinstance(exc, FailedException):
            self._task.report_error(exc, f"execute raised on {tup!r}")
        self._task.fail(tup)

    def run_inline(self, column: list[Any], trees: Iterator[int], source: TupleSource, joined: list[Any]) -> int:
        """Execute one stream segment, acking each input that returns and failing each that
        raises; returns how many failed. ``trees`` yields each tuple's root and value
        (``DataPayload``).

        Flat on purpose: this loop runs once per input tuple. The inputs of one tree mostly come
        in a row (the words of a sentence), so their acks are XORed in ``last_root`` and
        ``last_val`` and handed to the acker mail when the root changes (XOR is associative:
        the acker sees the same sum). A one-field input's list is made here, not in a pass
        before the loop: one loop over the words instead of two."""
        single = len(source.fields) == 1
        task = self._task
        execute = self.user_component.execute
        collector = self.basic_collector
        mails = task.outbox.acker_mails
        n_ackers = len(mails)
        new_tuple = object.__new__
        failed = 0
        last_root = last_val = 0
        for values, root, val in zip(column, trees, trees, strict=False):
            if single:
                values = [values]
            if root or not val:
                # Tuple(values, source, root, val) without a class call (which packs an
                # argument tuple and runs an __init__ frame).
                tup = new_tuple(Tuple)
                tup.values = values
                tup._source = source
                tup._tree = root
                tup._val = val
            else:
                tup = Tuple(values, source, joined[val - 1])
            collector.input = tup
            try:
                execute(tup, collector)
            except Exception as exc:
                self._execute_raised(tup, exc)
                failed += 1
                continue
            # It returned: ack it. (Its tree is still ``root``, or ``joined[val - 1]``: a
            # BasicBolt has no way to ack or fail it itself.)
            if root:
                if root == last_root:
                    last_val ^= tup._val
                else:
                    if last_root:
                        acks = mails[last_root % n_ackers].acks
                        acks[last_root] = acks.get(last_root, 0) ^ last_val
                    last_root = root
                    last_val = tup._val
                tup._tree = None
            elif val:
                task.ack_trees(tup)
            else:
                tup._tree = None
        if last_root:
            acks = mails[last_root % n_ackers].acks
            acks[last_root] = acks.get(last_root, 0) ^ last_val
        collector.input = None
        return failed
