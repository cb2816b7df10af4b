"""Building a topology: ``TopologyBuilder`` records components and their subscriptions,
``create_topology`` checks the whole graph and returns an immutable ``Topology``."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ._components import (
    BasicBolt,
    BatchBolt,
    Bolt,
    OutputFieldsDeclarer,
    Spout,
    StreamDeclaration,
    batch_problems,
)
from ._config import Config
from ._errors import ConfigError, TopologyError
from ._graph import ACKER_COMPONENT, ComponentSpec, Subscription, Topology
from ._groupings import (
    AllGrouping,
    CustomGrouping,
    CustomStreamGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    PartialKeyGrouping,
    ShuffleGrouping,
)
from ._resources import Resources, beside_problems
from ._state.checkpoint import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, CheckpointSpout
from ._state.key_groups import assign_key_groups
from ._tuple import DEFAULT_STREAM
from ._windows.bolt import LATE_TUPLE_FIELD, WindowedBolt
from ._windows.validation import check_windowed_bolt

__all__ = ["ACKER_COMPONENT", "BoltDeclarer", "ComponentSpec", "Subscription", "Topology", "TopologyBuilder"]


class BoltDeclarer:
    """Returned by ``set_bolt``: subscribe the bolt to streams. Every method returns ``self``."""

    def __init__(self, spec: ComponentSpec) -> None:
        self._spec = spec

    def grouping(self, component_id: str, grouping: Grouping, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Subscribe to ``stream`` of ``component_id`` with a grouping object (the methods below
        make the built-in ones)."""
        self._spec.inputs.append(Subscription(component_id, stream, grouping))
        return self

    def shuffle_grouping(self, component_id: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Spread the stream evenly over this bolt's tasks."""
        return self.grouping(component_id, ShuffleGrouping(), stream)

    def fields_grouping(self, component_id: str, fields: Sequence[str], stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Send tuples with equal values in ``fields`` to the same task; the source must declare
        the fields (checked by ``create_topology``)."""
        return self.grouping(component_id, FieldsGrouping(_field_list(fields)), stream)

    def all_grouping(self, component_id: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Send every tuple to every task of this bolt."""
        return self.grouping(component_id, AllGrouping(), stream)

    def global_grouping(self, component_id: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Send the whole stream to this bolt's lowest task id."""
        return self.grouping(component_id, GlobalGrouping(), stream)

    def none_grouping(self, component_id: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Don't care: the same as ``shuffle_grouping``, as in Storm."""
        return self.grouping(component_id, NoneGrouping(), stream)

    def direct_grouping(self, component_id: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Let the emitter pick the task with ``emit_direct``; the stream must be declared
        ``direct=True``."""
        return self.grouping(component_id, DirectGrouping(), stream)

    def local_or_shuffle_grouping(self, component_id: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Shuffle among this bolt's tasks on the emitting task's node; among all of them if none
        is there."""
        return self.grouping(component_id, LocalOrShuffleGrouping(), stream)

    def partial_key_grouping(
        self, component_id: str, fields: Sequence[str], stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        """Key grouping over two candidate tasks per key, the less loaded one: a hot key is split
        over two tasks."""
        return self.grouping(component_id, PartialKeyGrouping(_field_list(fields)), stream)

    def custom_grouping(
        self, component_id: str, grouping: CustomStreamGrouping, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        """Group with ``grouping``, an object with ``prepare`` and ``choose_tasks``
        (``rayflow.CustomStreamGrouping``); every source task gets its own copy."""
        return self.grouping(component_id, CustomGrouping(grouping), stream)


def _not_a(kind: str, id: str, obj: object, expected: str) -> str:
    if isinstance(obj, type):
        return f"{kind} {id!r}: got the class {obj.__name__}, not an instance: pass {obj.__name__}(...)"
    return f"{kind} {id!r}: {type(obj).__name__} is not a {expected}"


def _field_list(fields: Sequence[str]) -> list[str]:
    return [fields] if isinstance(fields, str) else list(fields)


class TopologyBuilder:
    """Assemble spouts and bolts; ``create_topology`` validates everything at once."""

    def __init__(self) -> None:
        self._specs: dict[str, ComponentSpec] = {}
        self._problems: list[str] = []

    def set_spout(
        self,
        id: str,
        spout: Spout,
        parallelism: int = 1,
        *,
        config: dict[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
    ) -> None:
        """Add a spout run by ``parallelism`` tasks, each on its own (pickled) copy of ``spout``;
        ``config`` is this component's config (e.g. ``tick_tuple_freq_secs``). ``resources``
        are Ray's actor options for each task, spelled as Ray spells them (``num_cpus``,
        ``num_gpus``, ``memory`` in bytes, ``resources``, ``accelerator_type``, ``runtime_env``,
        ``scheduling_strategy``) plus rayflow's ``beside`` (docs/cluster.md); a task keeps them
        when it is restarted. Problems are reported by ``create_topology``."""
        if not isinstance(spout, Spout):
            self._problems.append(_not_a("spout", id, spout, "rayflow.Spout"))
        self._add(ComponentSpec(id, spout, parallelism, dict(config or {}), resources=self._resources(id, resources)))

    def set_bolt(
        self,
        id: str,
        bolt: Bolt | BasicBolt | BatchBolt | WindowedBolt,
        parallelism: int = 1,
        *,
        config: dict[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
    ) -> BoltDeclarer:
        """Add a bolt run by ``parallelism`` tasks, each on its own (pickled) copy of ``bolt``;
        subscribe it to streams through the ``BoltDeclarer`` returned. ``config`` and
        ``resources`` as for ``set_spout``."""
        if not isinstance(bolt, (Bolt, BasicBolt, BatchBolt, WindowedBolt)):
            self._problems.append(_not_a("bolt", id, bolt, "rayflow.Bolt or rayflow.BasicBolt"))
        spec = ComponentSpec(id, bolt, parallelism, dict(config or {}), resources=self._resources(id, resources))
        self._add(spec)
        return BoltDeclarer(spec)

    def _resources(self, id: str, resources: Mapping[str, Any] | None) -> dict[str, Any]:
        if resources is not None and not isinstance(resources, Mapping):
            self._problems.append(f"component {id!r}: resources must be a dict of Ray actor options, got {resources!r}")
            return {}
        return dict(resources or {})

    def _add(self, spec: ComponentSpec) -> None:
        if not isinstance(spec.id, str) or not spec.id:
            self._problems.append(f"component id must be a non-empty string, got {spec.id!r}")
        elif spec.id.startswith("__"):
            self._problems.append(f"component id {spec.id!r}: ids starting with '__' are reserved")
        elif spec.id in self._specs:
            self._problems.append(f"duplicate component id {spec.id!r}")
        else:
            self._specs[spec.id] = spec

    def create_topology(self) -> Topology:
        """Return the topology, or raise one ``TopologyError`` listing every problem found."""
        problems = list(self._problems)
        specs = {cid: copy.copy(spec) for cid, spec in self._specs.items()}
        # A class given instead of an instance is reported once; calling its methods unbound
        # would only add confusing problems, so it is checked no further.
        classes = {cid for cid, spec in specs.items() if isinstance(spec.component, type)}
        checked = {cid: spec for cid, spec in specs.items() if cid not in classes}
        for spec in checked.values():
            spec.inputs = [sub for sub in spec.inputs if sub.component not in classes]
            problems += _check_component(spec)

        def is_spout(cid: str, spec: ComponentSpec) -> bool:
            component: object = spec.component
            return isinstance(component, type) and issubclass(component, Spout) if cid in classes else spec.is_spout

        if not any(is_spout(cid, spec) for cid, spec in specs.items()):
            problems.append("the topology has no spout")
        for spec in checked.values():
            problems += _check_inputs(spec, checked)
            if isinstance(spec.component, WindowedBolt):
                problems += check_windowed_bolt(spec, checked)
            if isinstance(spec.component, BatchBolt):
                problems += [f"bolt {spec.id!r}: {p}" for p in batch_problems(spec.component)]
        problems += beside_problems({cid: (_kind(spec), _beside(spec)) for cid, spec in checked.items()})
        if problems:
            raise TopologyError(problems)
        topology = Topology(specs)
        if topology.stateful:
            _add_checkpointing(topology)
            assign_key_groups(topology)
        return topology


def _add_checkpointing(topology: Topology) -> None:
    """Give a topology with a stateful bolt the checkpoint spout, and every bolt the checkpoint
    stream: out, and in from each component it reads (from the checkpoint spout where it reads
    a spout), all-grouped (the protocol: ``_state/checkpoint.py``)."""
    components = topology.components
    spout = CheckpointSpout()
    declarer = OutputFieldsDeclarer()
    spout.declare_output_fields(declarer)
    components[CHECKPOINT_COMPONENT] = ComponentSpec(CHECKPOINT_COMPONENT, spout, 1, {}, [], declarer.streams)
    stream = declarer.streams[CHECKPOINT_STREAM]
    for bolt in topology.bolts:
        bolt.streams = {**bolt.streams, CHECKPOINT_STREAM: stream}
        sources: list[str] = []
        for sub in bolt.inputs:
            source = CHECKPOINT_COMPONENT if components[sub.component].is_spout else sub.component
            if source not in sources:
                sources.append(source)
        bolt.inputs = bolt.inputs + [Subscription(s, CHECKPOINT_STREAM, AllGrouping()) for s in sources]


def _kind(spec: ComponentSpec) -> str:
    return "spout" if spec.is_spout else "bolt"


def _beside(spec: ComponentSpec) -> str | None:
    """The component ``spec`` asks to start beside, if it names one (a bad value is reported
    by ``_check_component``)."""
    other = spec.resources.get("beside")
    return other if isinstance(other, str) and other else None


def _check_component(spec: ComponentSpec) -> list[str]:
    kind = _kind(spec)
    problems = [f"{kind} {spec.id!r}: resources.{p}" for p in Resources.problems(spec.resources)]
    if isinstance(spec.parallelism, bool) or not isinstance(spec.parallelism, int) or spec.parallelism < 1:
        problems.append(f"{kind} {spec.id!r}: parallelism must be an integer >= 1, got {spec.parallelism!r}")
    try:
        own = spec.component.get_component_configuration()
    except Exception as exc:  # user code: report, never crash validation
        problems.append(f"{kind} {spec.id!r}: get_component_configuration raised {type(exc).__name__}: {exc}")
        own = None
    if own is not None and not isinstance(own, dict):
        problems.append(f"{kind} {spec.id!r}: get_component_configuration must return a dict, got {own!r}")
    elif own:
        # What the builder was given wins, as in Storm, whichever spelling either side used.
        given = {Config.setting(k) for k in spec.config}
        spec.config = {**{k: v for k, v in own.items() if Config.setting(k) not in given}, **spec.config}
    try:
        Config().merged(spec.config)
    except ConfigError as exc:
        problems.append(f"{kind} {spec.id!r}: {exc}")
    declarer = OutputFieldsDeclarer()
    try:
        spec.component.declare_output_fields(declarer)
    except TopologyError as exc:
        problems += [f"{kind} {spec.id!r}: {p}" for p in exc.problems]
    except Exception as exc:  # user code: report, never crash validation
        problems.append(f"{kind} {spec.id!r}: declare_output_fields raised {type(exc).__name__}: {exc}")
    settings = spec.component.window_settings if isinstance(spec.component, WindowedBolt) else None
    late = settings.late_stream if settings is not None else None
    if late is not None and late not in declarer.streams:
        declarer.streams[late] = StreamDeclaration((LATE_TUPLE_FIELD,))
    spec.streams = declarer.streams
    return problems


def _check_inputs(spec: ComponentSpec, specs: dict[str, ComponentSpec]) -> list[str]:
    problems = []
    for sub in spec.inputs:
        where = f"bolt {spec.id!r} input from {sub.component!r} stream {sub.stream!r}"
        source = specs.get(sub.component)
        if source is None:
            known = ", ".join(sorted(specs)) or "none"
            problems.append(f"{where}: unknown source component {sub.component!r} (components: {known})")
            continue
        declared = source.streams.get(sub.stream)
        if declared is None:
            streams = ", ".join(sorted(source.streams)) or "none"
            problems.append(
                f"{where}: {sub.component!r} does not declare stream {sub.stream!r} (it declares: {streams})"
            )
            continue
        grouping = sub.grouping
        missing = [f for f in grouping.fields if f not in declared.fields]
        if missing:
            problems.append(
                f"{where}: {grouping.kind} grouping on field(s) {missing} not declared by the stream "
                f"(its fields: {list(declared.fields)})"
            )
        if isinstance(grouping, (FieldsGrouping,)) and not grouping.fields:
            problems.append(f"{where}: {grouping.kind} grouping needs at least one field")
        if isinstance(grouping, DirectGrouping) and not declared.direct:
            problems.append(f"{where}: direct grouping on a stream not declared direct")
        if declared.direct and not isinstance(grouping, DirectGrouping):
            problems.append(f"{where}: the stream is direct, so it needs a direct grouping, not {grouping.kind}")
        if isinstance(grouping, CustomGrouping) and not isinstance(grouping.grouping, CustomStreamGrouping):
            problems.append(
                f"{where}: custom grouping {type(grouping.grouping).__name__} must have "
                f"prepare(context, stream, target_tasks) and choose_tasks(task_id, values)"
            )
    return problems
