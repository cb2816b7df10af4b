"""TopologyBuilder: declaring components and subscriptions, and checking the whole graph."""

from __future__ import annotations

from typing import Any

import pytest

from rayflow._components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout, StreamDeclaration
from rayflow._config import Config
from rayflow._context import TopologyContext
from rayflow._errors import TopologyError
from rayflow._groupings import StreamId
from rayflow._topology import ACKER_COMPONENT, Topology, TopologyBuilder


class Sentences(Spout):
    outputs = ["sentence"]


class Split(Bolt):
    outputs = ["word"]


class Count(BasicBolt):
    outputs = ["word", "count"]


class Sink(Bolt):
    pass


class Dispatch(Bolt):
    """Two streams, one of them direct."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream("even", ["n"])
        declarer.declare_stream("picked", ["n"], direct=True)


class Broken(Bolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        raise RuntimeError("boom")


class TwiceDeclared(Bolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["a"])
        declarer.declare(["b"])


class Modulo:
    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        self.targets = target_tasks

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return [self.targets[0]]


def wordcount() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), parallelism=3).fields_grouping("split", ["word"])
    return builder


def problems_of(builder: TopologyBuilder) -> list[str]:
    with pytest.raises(TopologyError) as info:
        builder.create_topology()
    return info.value.problems


def only_problem(builder: TopologyBuilder) -> str:
    problems = problems_of(builder)
    assert len(problems) == 1, problems
    return problems[0]


class TestEveryProblemAtOnce:
    def test_one_error_lists_everything(self):
        """Nine mistakes in one topology give one TopologyError with nine problems, each named."""
        builder = TopologyBuilder()
        builder.set_spout("sentences", Split())  # not a Spout: and so no spout at all
        builder.set_bolt("ghost", Count()).shuffle_grouping("nowhere")
        builder.set_bolt("lost", Count()).shuffle_grouping("sentences", stream="tweets")
        builder.set_bolt("count", Count()).fields_grouping("sentences", ["sentence"])
        builder.set_bolt("idle", Count(), parallelism=0).shuffle_grouping("sentences")
        builder.set_bolt("count", Count()).shuffle_grouping("sentences")
        builder.set_bolt("pick", Count()).direct_grouping("sentences")
        builder.set_bolt("broken", Broken()).shuffle_grouping("sentences")
        with pytest.raises(TopologyError) as info:
            builder.create_topology()
        expected = [
            "spout 'sentences': Split is not a rayflow.Spout",
            "the topology has no spout",
            "unknown source component 'nowhere'",
            "'sentences' does not declare stream 'tweets'",
            "fields grouping on field(s) ['sentence'] not declared",
            "bolt 'idle': parallelism must be an integer >= 1, got 0",
            "duplicate component id 'count'",
            "bolt 'pick' input from 'sentences' stream 'default': direct grouping on a stream not declared direct",
            "bolt 'broken': declare_output_fields raised RuntimeError: boom",
        ]
        problems = info.value.problems
        assert len(problems) == len(expected), problems
        for fragment in expected:
            assert sum(fragment in p for p in problems) == 1, (fragment, problems)
            assert fragment in str(info.value)
        assert str(info.value).startswith("invalid topology (9 problem(s)):")


class TestProblems:
    def test_unknown_source(self):
        """Subscribing to a component that does not exist names it and lists the known ones."""
        builder = wordcount()
        builder.set_bolt("sink", Sink()).shuffle_grouping("cuont")
        assert "unknown source component 'cuont' (components: count, sentences, sink, split)" in only_problem(builder)

    def test_undeclared_stream(self):
        """Subscribing to a stream the source does not declare lists the streams it does."""
        builder = wordcount()
        builder.set_bolt("sink", Sink()).shuffle_grouping("split", stream="errors")
        assert "'split' does not declare stream 'errors' (it declares: default)" in only_problem(builder)

    @pytest.mark.parametrize("method", ["fields_grouping", "partial_key_grouping"])
    def test_grouping_on_undeclared_field(self, method: str):
        """A key grouping on a field the stream lacks names the field and the stream's fields."""
        builder = wordcount()
        getattr(builder.set_bolt("sink", Sink()), method)("count", ["wrod"])
        assert "grouping on field(s) ['wrod'] not declared by the stream (its fields: ['word', 'count'])" in (
            only_problem(builder)
        )

    def test_fields_grouping_needs_a_field(self):
        """A fields grouping on no field at all is refused."""
        builder = wordcount()
        builder.set_bolt("sink", Sink()).fields_grouping("count", [])
        assert "fields grouping needs at least one field" in only_problem(builder)

    @pytest.mark.parametrize("parallelism", [0, -1, 1.5, True])
    def test_parallelism(self, parallelism: Any):
        """Parallelism must be an integer of at least 1."""
        builder = wordcount()
        builder.set_bolt("sink", Sink(), parallelism=parallelism).shuffle_grouping("split")
        assert f"bolt 'sink': parallelism must be an integer >= 1, got {parallelism!r}" == only_problem(builder)

    def test_duplicate_id(self):
        """Two components with one id are refused, spout or bolt."""
        builder = wordcount()
        builder.set_spout("split", Sentences())
        assert only_problem(builder) == "duplicate component id 'split'"

    @pytest.mark.parametrize("bad_id", ["", 7, None, ["x"]])
    def test_id_must_be_a_string(self, bad_id: Any):
        """A component id that is not a non-empty string is reported, however odd it is."""
        builder = wordcount()
        builder.set_bolt(bad_id, Sink()).shuffle_grouping("split")
        assert only_problem(builder) == f"component id must be a non-empty string, got {bad_id!r}"

    def test_odd_id_does_not_hide_other_problems(self):
        """A non-string id next to an unknown source still gives the full list, not a crash."""
        builder = wordcount()
        builder.set_bolt(7, Sink()).shuffle_grouping("split")
        builder.set_bolt("sink", Sink()).shuffle_grouping("nowhere")
        problems = problems_of(builder)
        assert problems[0] == "component id must be a non-empty string, got 7"
        assert "unknown source component 'nowhere'" in problems[1]

    def test_reserved_id(self):
        """Ids starting with '__' belong to rayflow (the ackers are '__acker')."""
        builder = wordcount()
        builder.set_bolt(ACKER_COMPONENT, Sink()).shuffle_grouping("split")
        assert "ids starting with '__' are reserved" in only_problem(builder)

    def test_direct_grouping_on_regular_stream(self):
        """A direct grouping needs a stream declared direct."""
        builder = wordcount()
        builder.set_bolt("sink", Sink()).direct_grouping("split")
        assert "direct grouping on a stream not declared direct" in only_problem(builder)

    def test_direct_stream_needs_direct_grouping(self):
        """A direct stream can only be subscribed to with a direct grouping."""
        builder = wordcount()
        builder.set_bolt("dispatch", Dispatch()).shuffle_grouping("split")
        builder.set_bolt("sink", Sink()).shuffle_grouping("dispatch", stream="picked")
        assert "the stream is direct, so it needs a direct grouping, not shuffle" in only_problem(builder)

    def test_no_spout(self):
        """A topology without a spout would never do anything."""
        builder = TopologyBuilder()
        builder.set_bolt("split", Split())
        assert only_problem(builder) == "the topology has no spout"

    def test_spout_must_be_a_spout(self):
        """set_spout takes a Spout instance; a class or a bolt is named in the problem."""
        builder = wordcount()
        builder.set_spout("more", Sentences)  # the class, not an instance
        assert "spout 'more': got the class Sentences, not an instance: pass Sentences(...)" in problems_of(builder)

    def test_bolt_must_be_a_bolt(self):
        """set_bolt takes a Bolt or BasicBolt instance."""
        builder = wordcount()
        builder.set_bolt("more", Sentences())
        assert "bolt 'more': Sentences is not a rayflow.Bolt or rayflow.BasicBolt" in problems_of(builder)

    def test_declare_output_fields_raising(self):
        """An exception in declare_output_fields is reported, not raised."""
        builder = wordcount()
        builder.set_bolt("broken", Broken()).shuffle_grouping("split")
        assert only_problem(builder) == "bolt 'broken': declare_output_fields raised RuntimeError: boom"

    def test_stream_declared_twice(self):
        """Declaring one stream twice is a problem of that component."""
        builder = wordcount()
        builder.set_bolt("twice", TwiceDeclared()).shuffle_grouping("split")
        assert only_problem(builder) == "bolt 'twice': stream 'default' is declared twice"

    def test_custom_grouping_needs_both_methods(self):
        """A custom grouping without prepare and choose_tasks is refused."""
        builder = wordcount()
        builder.set_bolt("sink", Sink()).custom_grouping("split", object())  # type: ignore[arg-type]
        assert "custom grouping object must have prepare(" in only_problem(builder)

    @pytest.mark.parametrize("key", ["tick_tuple_freq_secs", "topology.tick.tuple.freq.secs"])
    @pytest.mark.parametrize("freq", [0, -1.0, "abc"])
    def test_tick_frequency(self, freq: Any, key: str):
        """The tick frequency must be a positive number, under either spelling, at create_topology."""
        builder = wordcount()
        builder.set_bolt("sink", Sink(), config={key: freq}).shuffle_grouping("split")
        problem = only_problem(builder)
        assert problem.startswith(f"bolt 'sink': invalid config: {key}")


class TestValidTopology:
    def test_task_layout(self):
        """Tasks are numbered from 1 in sorted component order, each component's consecutively,
        with the ackers last."""
        topology = wordcount().create_topology()
        assert topology.task_layout(ackers=2) == {
            1: "count",
            2: "count",
            3: "count",
            4: "sentences",
            5: "split",
            6: "split",
            7: ACKER_COMPONENT,
            8: ACKER_COMPONENT,
        }

    def test_no_ackers(self):
        """With ackers=0 the layout has no acker task."""
        assert ACKER_COMPONENT not in wordcount().create_topology().task_layout(ackers=0).values()

    def test_context_over_the_layout(self):
        """A task's context sees the tasks of every component, sorted, and the user components only."""
        topology = wordcount().create_topology()
        layout = topology.task_layout(ackers=1)
        context = TopologyContext(5, layout, topology.stream_fields())
        assert context.this_component_id == "split"
        assert context.get_component_tasks("count") == [1, 2, 3]
        assert context.get_component_tasks(ACKER_COMPONENT) == [7]
        assert context.component_ids == ["count", "sentences", "split"]
        assert context.get_output_fields("count", "default") == ("word", "count")

    def test_spouts_bolts_and_subscribers(self):
        """The topology knows its spouts, its bolts and who subscribes to each stream."""
        topology = wordcount().create_topology()
        assert isinstance(topology, Topology)
        assert [s.id for s in topology.spouts] == ["sentences"]
        assert sorted(b.id for b in topology.bolts) == ["count", "split"]
        ((bolt, grouping),) = topology.subscribers("split")["default"]
        assert (bolt, grouping.describe()) == ("count", "fields(word)")

    def test_every_grouping_method_chains(self):
        """Each grouping method records a subscription and returns the declarer."""
        builder = wordcount()
        builder.set_bolt("dispatch", Dispatch()).shuffle_grouping("split")
        declarer = builder.set_bolt("sink", Sink(), parallelism=2)
        chained = (
            declarer.shuffle_grouping("sentences")
            .fields_grouping("split", "word")
            .all_grouping("count")
            .global_grouping("sentences")
            .none_grouping("split")
            .direct_grouping("dispatch", stream="picked")
            .local_or_shuffle_grouping("dispatch", stream="even")
            .partial_key_grouping("count", ["word"])
            .custom_grouping("count", Modulo())
        )
        assert chained is declarer
        sink = builder.create_topology().components["sink"]
        assert [(s.component, s.stream, s.grouping.describe()) for s in sink.inputs] == [
            ("sentences", "default", "shuffle"),
            ("split", "default", "fields(word)"),
            ("count", "default", "all"),
            ("sentences", "default", "global"),
            ("split", "default", "none"),
            ("dispatch", "picked", "direct"),
            ("dispatch", "even", "local_or_shuffle"),
            ("count", "default", "partial_key(word)"),
            ("count", "default", "custom(Modulo)"),
        ]

    def test_tick_frequency(self):
        """A component's tick_tuple_freq_secs (or Storm's key) is read from its config."""
        builder = wordcount()
        builder.set_bolt("ticking", Sink(), config={"tick_tuple_freq_secs": 2}).shuffle_grouping("split")
        builder.set_bolt("storm", Sink(), config={"topology.tick.tuple.freq.secs": 0.5}).shuffle_grouping("split")
        components = builder.create_topology().components

        def freq(cid: str) -> float | None:
            return Config().merged(components[cid].config).tick_tuple_freq_secs

        assert freq("ticking") == 2.0
        assert freq("storm") == 0.5
        assert freq("count") is None

    def test_component_asks_for_its_own_config(self):
        """get_component_configuration() is Storm's per-component config; set_bolt's config wins."""

        class Flusher(Sink):
            def get_component_configuration(self) -> dict[str, Any]:
                return {"tick_tuple_freq_secs": 5, "flush_rows": 10}

        builder = wordcount()
        builder.set_bolt("own", Flusher()).shuffle_grouping("split")
        builder.set_bolt("given", Flusher(), config={"tick_tuple_freq_secs": 1}).shuffle_grouping("split")
        components = builder.create_topology().components
        assert components["own"].config == {"tick_tuple_freq_secs": 5, "flush_rows": 10}
        assert components["given"].config == {"tick_tuple_freq_secs": 1, "flush_rows": 10}

    def test_builder_config_wins_under_either_spelling(self):
        """The component asks with Storm's key, the builder gives the field name: no conflict."""

        class Ticking(Sink):
            def get_component_configuration(self) -> dict[str, Any]:
                return {"topology.tick.tuple.freq.secs": 5}

        builder = wordcount()
        builder.set_bolt("own", Ticking(), config={"tick_tuple_freq_secs": 1}).shuffle_grouping("split")
        config = builder.create_topology().components["own"].config
        assert Config().merged(config).tick_tuple_freq_secs == 1

    def test_builder_can_grow_after_create(self):
        """A topology already created is not changed by later additions to its builder."""
        builder = wordcount()
        topology = builder.create_topology()
        builder.set_bolt("more", Sink()).shuffle_grouping("count")
        assert "more" not in topology.components
        assert topology.subscribers("count") == {}


class TestOutputsShorthand:
    def test_outputs_declare_the_default_stream(self):
        """A class attribute ``outputs`` declares those fields on the default stream."""
        components = wordcount().create_topology().components
        assert components["count"].streams == {"default": StreamDeclaration(("word", "count"))}
        assert components["sentences"].streams == {"default": StreamDeclaration(("sentence",))}

    def test_no_outputs_no_streams(self):
        """A component without ``outputs`` or declare_output_fields declares nothing."""
        builder = wordcount()
        builder.set_bolt("sink", Sink()).shuffle_grouping("count")
        assert builder.create_topology().components["sink"].streams == {}

    def test_declare_output_fields_overrides(self):
        """A declare_output_fields of its own replaces the shorthand."""
        builder = wordcount()
        builder.set_bolt("dispatch", Dispatch()).shuffle_grouping("split")
        assert builder.create_topology().components["dispatch"].streams == {
            "even": StreamDeclaration(("n",)),
            "picked": StreamDeclaration(("n",), direct=True),
        }
