"""``rayflow schema`` and the loader agree: every file the loader accepts, the JSON Schema an
editor uses accepts too, so the editor never flags a valid file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rayflow.topology_file import SpecError, TopologySpec, load_spec

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "topology_file_corpus"
SHIPPED = sorted([*(ROOT / "configs").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])


def _accepted_by_the_loader(path: Path) -> bool:
    try:
        load_spec(path)
    except SpecError:
        return False
    return True


VALID_CORPUS = [p for p in sorted(CORPUS.glob("*.yaml")) if _accepted_by_the_loader(p)]
TOPOLOGY = """
name: t
spouts:
  - {id: words, class: tests.topology_file_components.WordSpout}
bolts:
  - {id: upper, class: tests.topology_file_components.Upper}
  - {id: count, class: tests.topology_file_components.Count}
streams:
  - {from: words, to: upper, grouping: {type: shuffle}}
  - {from: upper, to: count, grouping: {type: fields, fields: [word]}}
"""


def schema_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(TopologySpec.model_json_schema(by_alias=True))
    return [error.message for error in validator.iter_errors(document)]


class TestSchemaAgreesWithTheLoader:
    @pytest.mark.parametrize("path", [*SHIPPED, *VALID_CORPUS], ids=lambda p: p.stem)
    def test_every_valid_file_satisfies_the_schema(self, path: Path) -> None:
        """The shipped topologies and the corpus files the schema stage accepts."""
        assert _accepted_by_the_loader(path)
        assert schema_errors(yaml.safe_load(path.read_text())) == []

    def test_the_corpus_has_valid_files(self) -> None:
        """Files whose problems come after the schema (classes, references) are checked above."""
        assert len(VALID_CORPUS) >= 10

    @pytest.mark.parametrize("spelling", ["SHUFFLE", "FIELDS"])
    def test_flux_upper_case_grouping_types(self, spelling: str, tmp_path: Path) -> None:
        """``FIELDS`` and ``SHUFFLE``, as Flux writes them, pass both."""
        text = TOPOLOGY.replace(f"type: {spelling.lower()}", f"type: {spelling}")
        (tmp_path / "t.yaml").write_text(text)
        assert _accepted_by_the_loader(tmp_path / "t.yaml")
        assert schema_errors(yaml.safe_load(text)) == []

    def test_mixed_case_grouping_types_fail_both(self, tmp_path: Path) -> None:
        """``Fields`` is neither spelling: the loader and the schema both refuse it."""
        text = TOPOLOGY.replace("type: fields", "type: Fields")
        (tmp_path / "t.yaml").write_text(text)
        with pytest.raises(SpecError, match="unknown grouping type 'Fields'"):
            load_spec(tmp_path / "t.yaml")
        assert len(schema_errors(yaml.safe_load(text))) == 1
