"""``StatefulBoltAdapter``: the bolt kind (``_executors/bolt_kind.py``) that runs a
``StatefulBolt`` in a ``BoltExecutor``, as Storm's ``StatefulBoltExecutor``.

It owns what the checkpoint protocol asks of one stateful task (``checkpoint.py``):

- the state, loaded from the provider at INITSTATE; until then inputs are held, not executed
  (a restarted task must not count into an empty state);
- the user's acks, held per tree root (XORed, as the acker would sum them) until the commit that
  makes the state holding their updates durable: ``held`` since the last PREPARE, ``prepared``
  before it. A COMMIT acks ``prepared``; a ROLLBACK fails both, so their spouts replay them;
- the checkpoint actions: stage the changes (PREPARE), commit (COMMIT), drop and reload
  (ROLLBACK). An action that cannot be done raises, and the executor fails the checkpoint;
- where the state lives (``key_groups.py``): a fields-grouped bolt's task keeps its keys
  in the key groups it owns, one namespace each, and does every step over all of them in one
  provider call; any other stateful bolt keeps its state per task (its place among the bolt's
  tasks).

Exactly-once (``rayflow/_exactly_once``) needs no held acks: a PREPARE is aligned with every
input held back, so the staged state is a consistent cut whatever the acker says, and a
rollback restores the state without failing anything (the spouts seek). So acks go to the acker
at once, and a task that is not initialized (restarted) initializes at the ROLLBACK its restart
causes, dropping what it held: those inputs came before the rollback's cut.

The executor calls ``execute`` of this object for every data tuple; once initialized that is
the user's own ``execute`` (an instance attribute set at INITSTATE: no call in between).

``_executors/kinds.py`` names this kind for ``StatefulBolt``; the executor imports it through
that table only when it builds a task (``make_executor``), because importing this module runs
``rayflow._executors``'s ``__init__`` first (for ``BoltKind``), and a table imported there at the
top would import this module back before it is done. ``BoltExecutor`` is imported under
``TYPE_CHECKING``: the executor builds its kind, the kind only calls back into it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .._acking.anchoring import tree_acks
from .._collectors import AnchorRuleCollector, OutputCollector
from .._components import OutputFieldsDeclarer, StatefulBolt
from .._context import TopologyContext
from .._errors import EmitError
from .._executors.bolt_kind import BoltKind, CheckpointDeferred
from .._tuple import Tuple
from .checkpoint import COMMIT, INITSTATE, PREPARE, ROLLBACK, task_namespace
from .key_groups import (
    Layout,
    check_layout,
    group_namespace,
    key_group,
    layout_changes,
    layout_namespace,
    layout_of,
    legacy_namespaces,
    owned_groups,
    read_layout,
    split_changes,
)
from .key_value import KeyValueState
from .provider import StateError, StateProvider, task_provider, topology_name

if TYPE_CHECKING:  # the executor builds its kind; the kind only calls back into it
    from .._executors.bolt import BoltExecutor

__all__ = ["NotInitialized", "StatefulBoltAdapter", "StatefulCollector"]

logger = logging.getLogger("rayflow")


class NotInitialized(CheckpointDeferred, StateError):
    """A PREPARE reached a task whose state is not loaded yet: failing it forces a recovery."""


class StatefulCollector(AnchorRuleCollector):
    """The collector a ``StatefulBolt`` gets: emits must be anchored, acks are held."""

    def __init__(self, task: BoltExecutor, adapter: StatefulBoltAdapter) -> None:
        super().__init__(task)
        self._adapter = adapter
        self._component = task.component_id

    def anchored(self, anchors: Tuple | list[Tuple] | None, stream: str) -> Tuple | list[Tuple] | None:
        if not anchors:
            raise self._unanchored(stream)
        return anchors

    def _unanchored(self, stream: str) -> EmitError:
        return EmitError(
            f"stateful bolt {self._component!r}: emit on stream {stream!r} without anchors; a stateful "
            "bolt's emits must be anchored to its input (anchors=tup), or a rollback that replays the "
            "input would not take them back"
        )

    def ack(self, tup: Tuple) -> None:
        self._adapter.hold(tup)


class StatefulBoltAdapter(BoltKind):
    def __init__(self, user_component: StatefulBolt, task: BoltExecutor) -> None:
        self.user_component = user_component
        self._task = task
        self.collector = StatefulCollector(task, self)
        self.initialized = False
        self.waiting: list[Tuple] = []
        """Inputs that arrived before INITSTATE, executed once the state is loaded."""
        self.held: dict[int, int] = {}
        self.prepared: dict[int, int] = {}
        self.state = KeyValueState()
        self.provider: StateProvider | None = None
        self.layout = Layout(0, 1, 1)
        self.groups = range(0)
        """The key groups this task owns (keyed state), in the order of ``namespaces``."""
        self.index = 0
        """This task's place among the bolt's tasks (in task id order)."""
        self.namespaces: list[str] = []
        """Where this task's state lives: one namespace per owned key group, or its task's."""
        self.recorded: dict[str, int] | None = None
        """The component's layout record as last read or committed (``None``: none yet)."""
        self._layout_ns = ""
        self.checkpoints = 0
        self.rollbacks = 0
        self.exactly_once = False

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        component, name = context.this_component_id, topology_name(conf)
        self.layout = layout_of(self._task.topology, component)
        self._layout_ns = layout_namespace(name, component)
        self.index = context.this_task_index
        if self.layout.keyed:
            self.groups = owned_groups(self.index, self.layout.parallelism, self.layout.max_parallelism)
            self.namespaces = [group_namespace(name, component, g) for g in self.groups]
        else:
            self.namespaces = [task_namespace(name, component, self.index)]
        self.exactly_once = conf.get("processing_guarantee") == "exactly_once"
        self.provider = task_provider(conf)
        self.user_component.prepare(conf, context, self.collector)

    def cleanup(self) -> None:
        try:
            self.user_component.cleanup()
        finally:
            if self.provider is not None:
                self.provider.close()

    def execute(self, tup: Tuple) -> None:
        self.waiting.append(tup)

    # -- acks ---------------------------------------------------------------------------------
    def hold(self, tup: Tuple) -> None:
        """The user acked ``tup``: count it, and keep its acker value until the commit."""
        tree = tup._tree
        if tree is None:  # acked or failed already
            return
        if self.exactly_once:  # no holding: straight into the acker's mail, as the acker sums them
            task = self._task
            if tree.__class__ is int:
                if tree:
                    mails = task.outbox.acker_mails
                    acks = mails[tree % len(mails)].acks
                    acks[tree] = acks.get(tree, 0) ^ tup._val
                tup._tree = None
                task.acked_elsewhere(tup)
            else:
                task.ack(tup)
            return
        held = self.held
        if tree.__class__ is int:
            if tree:
                held[tree] = held.get(tree, 0) ^ tup._val
        else:
            for root, val in tree_acks(tup):
                held[root] = held.get(root, 0) ^ val
        tup._tree = None
        self._task.acked_elsewhere(tup)

    def snapshot(self) -> dict[str, Any]:
        return {"checkpoints": self.checkpoints, "rollbacks": self.rollbacks}

    def holding(self) -> int:
        """Trees whose acks wait for a commit."""
        return len(self.held) + len(self.prepared)

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint(self, action: str, txid: int) -> None:
        """Do what checkpoint ``action`` asks of this task; raises if it cannot be done."""
        provider = self.provider
        if provider is None:
            raise StateError("the state provider did not open (see the prepare error)")
        if action == INITSTATE:
            if not self.initialized:
                self._initialize(provider)
        elif action == PREPARE:
            if not self.initialized:
                raise NotInitialized(f"task {self._task.task_id} has not loaded its state yet")
            self._hook("pre_prepare", txid)
            changes = self.state.take_changes()
            try:
                provider.stage_many(txid, self._by_namespace(changes))
            except BaseException:
                self.state.changes = {**changes, **self.state.changes}  # staged at the next try
                raise
            _merge(self.prepared, self.held)
            self.held = {}
        elif action == COMMIT:
            if self.initialized:
                self._hook("pre_commit", txid)
            provider.commit_many([*self.namespaces, self._layout_ns], txid)
            self.recorded = self.layout.record()
            if self.initialized:
                ack = self._task.outbox.ack
                for root, val in self.prepared.items():
                    ack(root, val)
                self.prepared = {}
                self.checkpoints += 1
        elif action == ROLLBACK:
            if self.initialized:
                self._hook("pre_rollback")
            provider.rollback_many([*self.namespaces, self._layout_ns])
            if not self.initialized and self.exactly_once:
                self.waiting = []  # sent before the cut the spouts go back to: replayed after it
                self._initialize(provider)
            elif self.initialized:
                data, committed, carried = self._load(provider)
                self.state.reset(data)
                self.state.changes = carried
                fail = self._task.outbox.fail_tree
                replayed = self.holding()
                for tree in (*self.prepared, *self.held):
                    fail(tree)
                self.prepared, self.held = {}, {}
                self.rollbacks += 1
                logger.warning(
                    "stateful bolt %r task %d: rolled back to transaction %d (%d keys); %d input tree(s) "
                    "acked since are failed for replay",
                    self._task.component_id,
                    self._task.task_id,
                    committed,
                    len(data),
                    replayed,
                )

    def _by_namespace(self, changes: dict[Any, Any]) -> dict[str, dict[Any, Any]]:
        """``changes`` split by the namespace each key lives in, with the layout record while
        the component has none (or an older one). Raises ``StateError`` for a key this task
        does not own (the module doc of ``key_groups.py``)."""
        layout = self.layout
        if layout.keyed:
            staged, foreign = split_changes(
                changes, layout.fields, layout.max_parallelism, self.groups, self.namespaces
            )
            if foreign:
                raise self._foreign(foreign)
        else:
            staged = {self.namespaces[0]: changes}
        if self.recorded != self.layout.record():
            staged[self._layout_ns] = layout_changes(self.layout)
        return staged

    def _foreign(self, keys: list[Any]) -> StateError:
        grouped = (
            "the value it is fields-grouped on"
            if self.layout.fields == 1
            else (f"the tuple of the {self.layout.fields} values it is fields-grouped on")
        )
        return StateError(
            f"stateful bolt {self._task.component_id!r} task {self._task.task_id}: {len(keys)} state key(s) such as "
            f"{keys[0]!r} belong to key groups other tasks own: a fields-grouped stateful bolt's state key must be "
            f"{grouped} (the input's key), so that a rescale can move it; keep other state under that key, "
            "or group the bolt's inputs another way (its state is then kept per task)"
        )

    def _load(self, provider: StateProvider) -> tuple[dict[Any, Any], int, dict[Any, Any]]:
        """The committed state of this task's namespaces, the latest txid among them, and the
        keys carried over from per-task state of the layout before key groups (to be staged)."""
        name, component = provider.topology_name, self._task.component_id
        self.recorded = read_layout(provider, name, component)
        check_layout(self.recorded, self.layout, component, provider.describe())
        data: dict[Any, Any] = {}
        committed = 0
        for part, txid in provider.load_many(self.namespaces).values():
            data.update(part)
            committed = max(committed, txid)
        carried: dict[Any, Any] = {}
        if self.recorded is None:
            carried, txid = self._carry_over(provider, legacy_namespaces(provider, name, component))
            committed = max(committed, txid)
            data.update(carried)
        return data, committed, carried

    def _carry_over(self, provider: StateProvider, legacy: list[str]) -> tuple[dict[Any, Any], int]:
        """The keys of this task in state kept under task ids (before key groups), and its txid."""
        if not legacy:
            return {}, 0
        layout, committed = self.layout, 0
        carried: dict[Any, Any] = {}
        if layout.keyed:
            fields, groups = layout.fields, layout.max_parallelism
            for part, txid in provider.load_many(legacy).values():
                carried.update((k, v) for k, v in part.items() if key_group(k, fields, groups) in self.groups)
                committed = max(committed, txid)
        elif len(legacy) != layout.parallelism:
            raise StateError(
                f"stateful bolt {self._task.component_id!r}: its state in {provider.describe()} was kept by "
                f"{len(legacy)} task(s) under their task ids (rayflow before key groups), not by {layout.parallelism}; "
                f"its inputs are not fields-grouped, so it has no keys to move: run it with parallelism {len(legacy)}"
            )
        else:
            carried, committed = provider.load(legacy[self.index])
        logger.warning(
            "stateful bolt %r task %d: carried %d keys over from state kept under task ids (before key groups); "
            "the next commit writes them where they are kept now",
            self._task.component_id,
            self._task.task_id,
            len(carried),
        )
        return carried, committed

    def _initialize(self, provider: StateProvider) -> None:
        provider.rollback_many([*self.namespaces, self._layout_ns])  # what an unfinished transaction staged is void
        data, committed, carried = self._load(provider)
        self.state = KeyValueState(data)
        self.state.changes = carried
        self.initialized = True
        self.execute = self.user_component.execute  # type: ignore[method-assign]
        logger.info(
            "stateful bolt %r task %d: state loaded from %s: %d keys, committed at transaction %d",
            self._task.component_id,
            self._task.task_id,
            provider.describe(),
            len(data),
            committed,
        )
        try:
            self.user_component.init_state(self.state)
        except Exception as exc:
            self._task.report_error(exc, "init_state raised")
        waiting, self.waiting = self.waiting, []
        self._task.execute_each(waiting)

    def _hook(self, name: str, *args: Any) -> None:
        """A user hook: an error in it is reported, and the checkpoint goes on."""
        try:
            getattr(self.user_component, name)(*args)
        except Exception as exc:
            self._task.report_error(exc, f"{name} raised")


def _merge(into: dict[int, int], acks: dict[int, int]) -> None:
    for root, val in acks.items():
        into[root] = into.get(root, 0) ^ val
