"""``includes``: files merged in before validation, with ``override`` deciding who wins."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from rayflow import Config
from rayflow.topology_file import SpecError, load_spec, load_topology

BASE = """\
    name: base
    config:
      topology.acker.executors: 3
      topology.debug: true
    spouts:
      - {id: words, class: tests.topology_file_components.WordSpout, parallelism: 2}
    bolts:
      - {id: upper, class: tests.topology_file_components.Upper, parallelism: 4}
    streams:
      - {from: words, to: upper, grouping: {type: shuffle}}
"""


@pytest.fixture
def files(tmp_path: Path):
    def write(**texts: str) -> Path:
        for name, text in texts.items():
            path = tmp_path / f"{name}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dedent(text))
        return tmp_path / f"{next(iter(texts))}.yaml"

    return write


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_topology(path)
    return [str(p) for p in caught.value.problems]


class TestMerging:
    def test_without_override_the_including_file_wins(self, files) -> None:
        main = files(
            main="""\
            name: main
            includes: [base.yaml]
            config:
              topology.acker.executors: 1
            bolts:
              - {id: upper, class: tests.topology_file_components.Upper, parallelism: 1}
            """,
            base=BASE,
        )
        spec = load_spec(main)
        assert spec.name == "main"
        assert Config.of(spec.config).ackers == 1
        assert Config.of(spec.config).debug is True  # filled in from base
        assert [(b.id, b.parallelism) for b in spec.bolts] == [("upper", 1)]
        assert [s.id for s in spec.spouts] == ["words"]
        assert len(spec.streams) == 1

    def test_with_override_the_included_file_wins(self, files) -> None:
        main = files(
            main="""\
            name: main
            includes:
              - {file: base.yaml, override: true}
            config:
              topology.acker.executors: 1
              topology.max.spout.pending: 10
            bolts:
              - {id: upper, class: tests.topology_file_components.Upper, parallelism: 1}
            """,
            base=BASE,
        )
        spec = load_spec(main)
        config = Config.of(spec.config)
        assert spec.name == "base"
        assert config.ackers == 3
        assert config.max_spout_pending == 10  # only main sets it
        assert [(b.id, b.parallelism) for b in spec.bolts] == [("upper", 4)]

    def test_components_merge_by_id_and_streams_by_endpoints(self, files) -> None:
        main = files(
            main="""\
            name: main
            includes: [base.yaml]
            bolts:
              - {id: count, class: tests.topology_file_components.Count}
            streams:
              - {from: upper, to: count, grouping: {type: fields, fields: [word]}}
              - {from: words, to: upper, grouping: {type: all}}
            """,
            base=BASE,
        )
        spec = load_spec(main)
        assert [b.id for b in spec.bolts] == ["upper", "count"]
        assert [(s.from_, s.to, s.grouping.type) for s in spec.streams] == [
            ("words", "upper", "all"),
            ("upper", "count", "fields"),
        ]
        assert sorted(load_topology(main).topology.components) == ["count", "upper", "words"]

    def test_later_includes_win_over_earlier_ones_and_nesting_works(self, files) -> None:
        main = files(
            main="""\
            name: main
            includes: [base.yaml, sub/tuning.yaml]
            """,
            base=BASE,
            **{
                "sub/tuning": """\
                includes: [more.yaml]
                config: {topology.acker.executors: 5}
                """,
                "sub/more": """\
                config: {topology.max.spout.pending: 7, topology.acker.executors: 6}
                """,
            },
        )
        config = Config.of(load_spec(main).config)
        assert config.ackers == 5  # tuning wins over the more.yaml it includes
        assert config.max_spout_pending == 7

    def test_config_merges_by_setting_whatever_its_spelling(self, files) -> None:
        """The including file's ``ackers`` replaces the included ``topology.acker.executors``:
        one setting, so no 'given twice' problem."""
        main = files(
            main="""\
            name: main
            includes: [base.yaml]
            config: {ackers: 1}
            """,
            base=BASE,
        )
        config = load_topology(main).config
        assert (config.ackers, config.debug) == (1, True)

    def test_the_same_file_included_twice_is_not_a_cycle(self, files) -> None:
        main = files(
            main="""\
            name: main
            includes: [a.yaml, b.yaml]
            """,
            a="includes: [base.yaml]\n",
            b="includes: [base.yaml]\n",
            base=BASE,
        )
        assert [s.id for s in load_spec(main).spouts] == ["words"]


class TestProblems:
    def test_a_problem_in_an_included_file_names_that_file_and_line(self, files, tmp_path: Path) -> None:
        main = files(
            main="""\
            name: main
            includes: [base.yaml]
            """,
            base=BASE.replace("parallelism: 4", "parallelism: 0"),
        )
        assert problems(main) == [f"{tmp_path}/base.yaml:8 bolts[0].parallelism: must be >= 1, got 0"]

    def test_a_cycle_is_reported_at_the_include_that_closes_it(self, files, tmp_path: Path) -> None:
        main = files(main="name: main\nincludes: [a.yaml]\n", a="includes: [b.yaml]\n", b="\nincludes: [a.yaml]\n")
        [cycle] = [p for p in problems(main) if "include cycle:" in p]
        a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
        assert cycle == f"{b}:2 includes[0]: include cycle: {a} -> {b} -> {a}"

    def test_a_file_including_itself(self, files, tmp_path: Path) -> None:
        main = files(main="name: main\nincludes:\n  - file: main.yaml\n")
        assert (
            f"{tmp_path}/main.yaml:3 includes[0].file: include cycle: {tmp_path}/main.yaml -> {tmp_path}/main.yaml"
            in problems(main)
        )

    def test_bad_include_entries(self, files, tmp_path: Path) -> None:
        main = files(
            main="""\
            name: main
            includes:
              - {file: base.yaml, overide: true}
              - {override: true}
              - missing.yaml
            """,
            base=BASE,
        )
        got = problems(main)
        assert f"{tmp_path}/main.yaml:3 includes[0].overide: unknown key (did you mean 'override'?)" in got
        assert f"{tmp_path}/main.yaml:4 includes[1].file: required key is missing" in got
        assert any(p.startswith(f"{tmp_path}/main.yaml:5 includes[2]: cannot read included file") for p in got)

    def test_includes_must_be_a_list(self, files, tmp_path: Path) -> None:
        main = files(main="name: main\nincludes: base.yaml\n", base=BASE)
        assert f"{tmp_path}/main.yaml:2 includes: must be a list of files to include" in problems(main)

    def test_a_syntax_error_in_an_included_file(self, files, tmp_path: Path) -> None:
        main = files(main="name: main\nincludes: [base.yaml]\n", base="spouts: [\n")
        [problem, *_] = problems(main)
        assert problem.startswith(f"{tmp_path}/base.yaml:2: invalid YAML")

    def test_an_included_file_must_be_a_mapping(self, files, tmp_path: Path) -> None:
        main = files(main="name: main\nincludes: [base.yaml]\n", base="- a\n- b\n")
        assert f"{tmp_path}/base.yaml:1: an included file must be a mapping, like a topology file" in problems(main)

    def test_placeholders_are_substituted_in_included_files(self, files) -> None:
        main = files(
            main="name: main\nincludes: [base.yaml]\n", base=BASE.replace("parallelism: 4", "parallelism: ${p}")
        )
        spec = load_spec(main, {"p": "6"})
        assert spec.bolts[0].parallelism == 6
