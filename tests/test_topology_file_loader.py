"""Topology files: what a good file builds, and what every broken file in the corpus must say.

Each file in ``tests/topology_file_corpus/`` starts with ``# expect:`` lines: the problems it must give,
no more and no fewer. The classes they name are in ``tests/topology_file_components.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent

import pytest

from rayflow import Config, RayflowError
from rayflow._groupings import CustomGrouping, FieldsGrouping, PartialKeyGrouping, ShuffleGrouping
from rayflow.topology_file import Problem, SpecError, TopologySpec, load_spec, load_topology

from .topology_file_components import Count, FirstTask, Upper, WordSpout

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "topology_file_corpus").glob("*.yaml"))
EXPECT = "# expect: "


def expectations(path: Path) -> list[str]:
    return [line[len(EXPECT) :] for line in path.read_text().splitlines() if line.startswith(EXPECT)]


def problems_of(path: Path | str, **kwargs: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_topology(path, **kwargs)  # type: ignore[arg-type]
    return [str(p) for p in caught.value.problems]


@pytest.fixture
def write(tmp_path: Path):
    def write(text: str, name: str = "topology.yaml") -> Path:
        path = tmp_path / name
        path.write_text(dedent(text))
        return path

    return write


GOOD = """\
    name: words
    config:
      topology.acker.executors: 2
      message_timeout_secs: 5
      my.own.setting: kept
    spouts:
      - id: words
        class: tests.topology_file_components.WordSpout
        kwargs: {words: [a, b], rounds: 3}
    bolts:
      - id: upper
        class: tests.topology_file_components.Upper
        parallelism: 3
        config: {tick_tuple_freq_secs: 2}
      - id: count
        class: tests.topology_file_components.Count
        args: [10]
        parallelism: 2
    streams:
      - from: words
        to: upper
        grouping: {type: shuffle}
      - from: upper
        to: count
        grouping: {type: fields, fields: [word]}
"""


class TestCorpus:
    def test_the_corpus_is_large_enough(self) -> None:
        assert len(CORPUS) >= 20

    @pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
    def test_broken_file_gives_exactly_its_expected_problems(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Paths are given relative to the repository root, as a user at the root would type them."""
        monkeypatch.chdir(ROOT)
        monkeypatch.delenv("RAYFLOW_CORPUS_UNSET", raising=False)
        expected = expectations(path)
        assert expected, f"{path.name} has no '# expect:' line"
        got = problems_of(path.relative_to(ROOT))
        for text in expected:
            assert any(text in problem for problem in got), f"{text!r} not among {got}"
        assert len(got) == len(expected), got


class TestGoodFile:
    def test_builds_the_topology_the_builder_would(self, write) -> None:
        loaded = load_topology(write(GOOD))
        components = loaded.topology.components
        assert loaded.name == "words"
        assert sorted(components) == ["count", "upper", "words"]
        assert isinstance(components["words"].component, WordSpout)
        assert components["words"].component.words == ["a", "b"]
        assert components["words"].component.rounds == 3
        assert isinstance(components["upper"].component, Upper)
        assert isinstance(components["count"].component, Count)
        assert components["count"].component.start == 10
        assert [c.parallelism for c in (components["words"], components["upper"], components["count"])] == [1, 3, 2]
        assert Config().merged(components["upper"].config).tick_tuple_freq_secs == 2
        [to_upper] = components["upper"].inputs
        assert (to_upper.component, to_upper.stream, type(to_upper.grouping)) == ("words", "default", ShuffleGrouping)
        [to_count] = components["count"].inputs
        assert isinstance(to_count.grouping, FieldsGrouping) and to_count.grouping.fields == ("word",)

    def test_config_accepts_storm_keys_field_names_and_user_keys(self, write) -> None:
        config = load_topology(write(GOOD)).config
        assert isinstance(config, Config)
        assert config.ackers == 2
        assert config.message_timeout_secs == 5
        assert config.to_conf()["my.own.setting"] == "kept"

    def test_json_works_too(self, write) -> None:
        import yaml

        document = yaml.safe_load(dedent(GOOD))
        path = write(json.dumps(document, indent=2), "topology.json")
        assert sorted(load_topology(path).topology.components) == ["count", "upper", "words"]

    def test_json_errors_have_lines(self, write) -> None:
        path = write(
            '{\n  "name": "j",\n  "spouts": [\n    {"id": "s", "class": "x.Y", "parallelism": 0}\n  ]\n}\n', "t.json"
        )
        assert any(p.endswith("t.json:4 spouts[0].parallelism: must be >= 1, got 0") for p in problems_of(path))

    def test_flux_style_upper_case_grouping_types(self, write) -> None:
        path = write(GOOD.replace("type: shuffle", "type: SHUFFLE").replace("type: fields", "type: FIELDS"))
        assert sorted(load_topology(path).topology.components) == ["count", "upper", "words"]

    def test_custom_and_partial_key_groupings(self, write) -> None:
        path = write(
            GOOD.replace(
                "grouping: {type: shuffle}", "grouping: {type: custom, class: tests.topology_file_components.FirstTask}"
            ).replace("type: fields,", "type: partial_key,")
        )
        components = load_topology(path).topology.components
        [to_upper] = components["upper"].inputs
        assert isinstance(to_upper.grouping, CustomGrouping) and isinstance(to_upper.grouping.grouping, FirstTask)
        [to_count] = components["count"].inputs
        assert isinstance(to_count.grouping, PartialKeyGrouping)

    def test_a_stream_other_than_default(self, write) -> None:
        path = write(GOOD.replace("grouping: {type: shuffle}", "grouping: {type: all, stream: default}"))
        [to_upper] = load_topology(path).topology.components["upper"].inputs
        assert to_upper.grouping.kind == "all"

    def test_yaml_anchors_and_merge_keys_work(self, write) -> None:
        path = write(
            """\
            name: anchors
            spouts:
              - &word_spout {id: words, class: tests.topology_file_components.WordSpout}
            bolts:
              - &bolt {id: upper, class: tests.topology_file_components.Upper, parallelism: 2}
              - {<<: *bolt, id: upper2}
            streams:
              - {from: words, to: upper, grouping: {type: shuffle}}
              - {from: words, to: upper2, grouping: {type: shuffle}}
            """
        )
        components = load_topology(path).topology.components
        assert components["upper2"].parallelism == 2


class TestLoadSpec:
    def test_validates_without_importing_classes(self, write) -> None:
        path = write(GOOD.replace("tests.topology_file_components.Upper", "no_such_package.Upper"))
        spec = load_spec(path)
        assert isinstance(spec, TopologySpec)
        assert spec.bolts[0].class_ == "no_such_package.Upper"
        with pytest.raises(SpecError, match="No module named 'no_such_package'"):
            load_topology(path)

    def test_schema_describes_the_format(self) -> None:
        schema = TopologySpec.model_json_schema(by_alias=True)
        assert {"name", "spouts", "bolts", "streams", "config", "includes"} <= set(schema["properties"])
        component = schema["$defs"]["ComponentEntry"]
        assert "class" in component["properties"] and component["additionalProperties"] is False
        assert "topology.message.timeout.secs" in schema["properties"]["config"]["properties"]
        assert "topology.tick.tuple.freq.secs" in component["properties"]["config"]["properties"]


class TestErrors:
    def test_topology_file_error_is_a_rayflow_error(self) -> None:
        assert issubclass(SpecError, RayflowError)

    def test_problems_are_sorted_and_printed_file_line_path_message(self) -> None:
        error = SpecError([Problem("b.yaml", 3, "x", "late"), Problem("a.yaml", 9, "bolts[1].parallelism", "bad")])
        assert [str(p) for p in error.problems] == ["a.yaml:9 bolts[1].parallelism: bad", "b.yaml:3 x: late"]
        assert "2 problem(s)" in str(error)

    def test_missing_file(self, tmp_path: Path) -> None:
        [problem] = problems_of(tmp_path / "nope.yaml")
        assert problem.endswith("nope.yaml: cannot read the file: No such file or directory")

    def test_problems_in_entries_that_failed_the_schema_are_still_found(self, write) -> None:
        """A bolt with a typo'd key still gets its class checked; a stream with a bad grouping
        still gets its references checked."""
        path = write(
            dedent(GOOD)
            .replace("parallelism: 3", "paralelism: 3")
            .replace("tests.topology_file_components.Upper", "tests.topology_file_components.Uper")
            .replace(
                "from: words\n    to: upper\n    grouping: {type: shuffle}",
                "from: wrds\n    to: upper\n    grouping: {type: x}",
            )
        )
        got = "\n".join(problems_of(path))
        assert "bolts[0].paralelism: unknown key (did you mean 'parallelism'?)" in got
        assert "bolts[0].class: cannot import tests.topology_file_components.Uper" in got
        assert "streams[0].from: unknown component 'wrds'" in got
        assert "streams[0].grouping.type: unknown grouping type 'x'" in got

    def test_graph_problems_between_sound_components_come_with_the_others(self, write) -> None:
        """The builder checks the sound part of the topology even when another part is broken."""
        path = write(
            dedent(GOOD)
            .replace("tests.topology_file_components.Count", "tests.topology_file_components.Cont")
            .replace("grouping: {type: shuffle}", "grouping: {type: fields, fields: [wrd]}")
        )
        got = problems_of(path)
        assert len(got) == 2, got
        assert "bolts[1].class: cannot import tests.topology_file_components.Cont" in got[0]
        assert got[1].endswith(
            "streams[0].grouping: fields grouping on field(s) ['wrd'] not declared by the stream (its fields: ['word'])"
        )

    def test_a_missing_top_level_package_comes_with_a_hint(self, write) -> None:
        """Run outside the project root, ``examples.wordcount`` does not import: say where to run."""
        [problem] = problems_of(
            write(GOOD.replace("tests.topology_file_components.Upper", "no_such_package.sub.Upper"))
        )
        assert "No module named 'no_such_package' (hint: run from the project root" in problem
        assert "or add that directory to PYTHONPATH" in problem

    def test_a_missing_submodule_needs_no_hint(self, write) -> None:
        """When the package imports, the path is right and the module name is the problem."""
        [problem] = problems_of(write(GOOD.replace("tests.topology_file_components.Upper", "tests.no_such.Upper")))
        assert problem.endswith("No module named 'tests.no_such'")

    def test_a_python_tag_is_never_run(self, write, tmp_path: Path) -> None:
        target = tmp_path / "created-by-yaml"
        path = write(
            GOOD.replace(
                "kwargs: {words: [a, b], rounds: 3}", f"args: !!python/object/apply:os.mkdir [{str(target)!r}]"
            )
        )
        [problem] = problems_of(path)
        assert "the YAML tag tag:yaml.org,2002:python/object/apply:os.mkdir is not allowed" in problem
        assert not target.exists()

    def test_a_recursive_alias_is_reported(self, write) -> None:
        path = write(GOOD.replace("kwargs: {words: [a, b], rounds: 3}", "args: &loop [*loop]"))
        assert any("recursive alias" in p for p in problems_of(path))


class TestConfigs:
    @pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.stem)
    def test_every_shipped_config_is_valid(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(ROOT)
        monkeypatch.syspath_prepend(str(ROOT))
        loaded = load_topology(path.relative_to(ROOT))
        assert loaded.topology.spouts
