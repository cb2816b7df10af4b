"""``benchmarks/compiled.py``: the hot path compiled with mypyc, measured against pure Python
(``docs/performance.md``, *A compiled hot path*). mypyc does not ship: the benchmark compiles an
exported copy, after applying the source changes mypyc needs (``PATCHES``). These tests keep those
changes applying to the tree as it stands, so that the measurement can be run again; they build
nothing."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from benchmarks.compiled import HOT_PATH, PATCHES, patch

REPO = Path(__file__).resolve().parents[1]


class TestCompiledBenchmark:
    def test_every_module_it_compiles_is_in_the_tree(self) -> None:
        """A module moved or renamed would make mypyc fail before it measured anything."""
        assert [m for m in HOT_PATH if not (REPO / m).is_file()] == []
        assert set(PATCHES) <= set(HOT_PATH)

    def test_its_patches_apply_to_the_tree_and_leave_valid_python(self, tmp_path: Path) -> None:
        for module in HOT_PATH:
            (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / module, tmp_path / module)
        patch(tmp_path, HOT_PATH)
        for module in HOT_PATH:
            text = (tmp_path / module).read_text(encoding="utf-8")
            ast.parse(text, filename=module)
            assert all(new in text for _, new in PATCHES.get(module, []))

    def test_a_patch_that_no_longer_applies_stops_the_run_naming_its_file(self, tmp_path: Path) -> None:
        module = next(iter(PATCHES))
        (tmp_path / module).parent.mkdir(parents=True)
        (tmp_path / module).write_text('"""Rewritten since."""\n', encoding="utf-8")
        with pytest.raises(SystemExit, match=module):
            patch(tmp_path, [module])
