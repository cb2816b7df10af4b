"""``${key}`` from properties, ``${ENV-NAME}`` from the environment, replaced before parsing."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from rayflow.topology_file import SpecError, load_spec, read_properties
from rayflow.topology_file._substitution import substitute

TEMPLATE = """\
    name: ${name}
    spouts:
      - id: words
        class: tests.topology_file_components.WordSpout
        parallelism: ${spout.parallelism}
        kwargs: {words: ["${ENV-GREETING}", "${ENV-GREETING}-${suffix}"]}
"""
PROPS = {"name": "subst", "spout.parallelism": "3", "suffix": "x"}


@pytest.fixture
def template(tmp_path: Path) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(dedent(TEMPLATE))
    return path


class TestSubstitute:
    def test_properties_and_environment(self) -> None:
        text, left = substitute("a: ${k} ${ENV-HOME}", {"k": "v"}, {"HOME": "/h"})
        assert text == "a: v /h"
        assert left.originals == []

    def test_an_unresolved_placeholder_becomes_a_token_that_restores(self) -> None:
        text, left = substitute("a: ${missing}", {}, {})
        assert "${" not in text
        restored, problems = left.restore(text)
        assert restored == "a: ${missing}"
        assert problems == ["unresolved ${missing}: pass --set missing=VALUE or define it in a --properties file"]

    def test_dollar_dollar_is_a_literal(self) -> None:
        text, left = substitute("a: $${k}", {"k": "v"}, {})
        assert left.restore(text) == ("a: ${k}", [])

    def test_spaces_inside_the_braces_are_ignored(self) -> None:
        assert substitute("${ k }", {"k": "v"}, {})[0] == "v"

    def test_a_value_spanning_lines_is_refused(self) -> None:
        text, left = substitute("a: ${k}", {"k": "one\ntwo"}, {})
        assert "spans several lines" in left.restore(text)[1][0]

    def test_empty_placeholder(self) -> None:
        text, left = substitute("a: ${}", {}, {})
        assert "empty placeholder" in left.restore(text)[1][0]


class TestInFiles:
    def test_values_are_substituted_as_text_so_numbers_stay_numbers(self, template: Path) -> None:
        spec = load_spec(template, PROPS, environ={"GREETING": "hello"})
        assert spec.name == "subst"
        assert spec.spouts[0].parallelism == 3
        assert spec.spouts[0].kwargs == {"words": ["hello", "hello-x"]}

    def test_environment_defaults_to_os_environ(self, template: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("GREETING", "hi")
        assert load_spec(template, PROPS).spouts[0].kwargs["words"] == ["hi", "hi-x"]

    def test_every_unresolved_placeholder_is_reported_where_it_is(self, template: Path) -> None:
        with pytest.raises(SpecError) as caught:
            load_spec(template, {"name": "n"}, environ={})
        got = [str(p) for p in caught.value.problems]
        assert got == [
            f"{template}:5 spouts[0].parallelism: unresolved ${{spout.parallelism}}: "
            "pass --set spout.parallelism=VALUE or define it in a --properties file",
            f"{template}:6 spouts[0].kwargs.words[0]: unresolved ${{ENV-GREETING}}: "
            "environment variable GREETING is not set",
            f"{template}:6 spouts[0].kwargs.words[1]: unresolved ${{ENV-GREETING}}: "
            "environment variable GREETING is not set",
            f"{template}:6 spouts[0].kwargs.words[1]: unresolved ${{suffix}}: "
            "pass --set suffix=VALUE or define it in a --properties file",
        ]

    def test_a_placeholder_in_a_comment_costs_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "t.yaml"
        path.write_text("# set ${nothing} here\nname: n\nspouts: [{id: s, class: a.B}]\n")
        assert load_spec(path).name == "n"

    def test_an_unresolved_placeholder_in_a_flow_list_is_not_a_syntax_error(self, tmp_path: Path) -> None:
        path = tmp_path / "t.yaml"
        path.write_text("name: n\nspouts: [{id: s, class: a.B, args: [${first}, 2]}]\n")
        with pytest.raises(SpecError) as caught:
            load_spec(path)
        [problem] = caught.value.problems
        assert str(problem) == f"{path}:2 spouts[0].args[0]: unresolved ${{first}}: " + (
            "pass --set first=VALUE or define it in a --properties file"
        )

    def test_a_substituted_value_keeps_line_numbers(self, tmp_path: Path) -> None:
        path = tmp_path / "t.yaml"
        path.write_text("name: ${name}\nspouts:\n  - id: s\n    class: a.B\n    parallelism: 0\n")
        with pytest.raises(SpecError, match=r"t.yaml:5 spouts\[0\].parallelism: must be >= 1"):
            load_spec(path, {"name": "a-much-longer-name-than-the-placeholder"})


class TestReadProperties:
    def test_java_style_properties(self, tmp_path: Path) -> None:
        path = tmp_path / "dev.properties"
        path.write_text("# comment\n! also a comment\n\nname = dev\nspout.parallelism: 2\nempty=\nurl=http://h:1/x=y\n")
        assert read_properties(path) == {"name": "dev", "spout.parallelism": "2", "empty": "", "url": "http://h:1/x=y"}

    def test_a_line_without_a_separator_is_an_error_naming_the_line(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.properties"
        path.write_text("a=1\njust words\n")
        with pytest.raises(ValueError, match=r"bad.properties:2: expected key=value"):
            read_properties(path)
