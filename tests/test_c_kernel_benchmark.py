"""``benchmarks/c_kernel.py``: a hand-written C kernel for a ``BasicBolt``'s emit and run loop,
measured against pure Python (``docs/performance.md``). The kernel does not ship: the benchmark
builds it in an exported copy, wired in by text patches (``PATCHES``) to the Python it replaces.
These tests keep those patches applying to the tree as it stands, so that the measurement can be
run again; they build nothing -- but for one, which builds the kernel against the tree and runs a
short word count through it when a C compiler and Python's headers are there."""

from __future__ import annotations

import ast
import shutil
import sysconfig
from pathlib import Path

import pytest

from benchmarks.c_kernel import KERNELS, KERNELS_LINE, MODULE_SOURCE, PATCHES, SEMANTICS_TESTS, SOURCE, build, check
from benchmarks.c_kernel import patch as patch_tree

REPO = Path(__file__).resolve().parents[1]


def _copy(tmp_path: Path, modules: list[str]) -> None:
    for module in modules:
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / module, tmp_path / module)


def _compiler() -> str | None:
    """Why the kernel cannot be built here, or ``None`` if it can."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python.h (the Python development headers)"
    return None


class TestCKernelBenchmark:
    def test_everything_it_patches_builds_and_tests_is_in_the_tree(self) -> None:
        """A module moved or renamed would stop the benchmark before it measured anything."""
        assert SOURCE.is_file()
        assert [m for m in [*PATCHES, *SEMANTICS_TESTS] if not (REPO / m).is_file()] == []

    @pytest.mark.parametrize("kernels", list(KERNELS))
    def test_its_patches_apply_to_the_tree_and_leave_valid_python(self, tmp_path: Path, kernels: str) -> None:
        _copy(tmp_path, list(PATCHES))
        patch_tree(tmp_path, kernels)
        for module, patches in PATCHES.items():
            text = (tmp_path / module).read_text(encoding="utf-8")
            ast.parse(text, filename=module)
            assert all(new.replace(KERNELS_LINE, f'KERNELS = "{kernels}"') in text for _, new in patches)
        assert f'KERNELS = "{kernels}"' in (tmp_path / "rayflow/_executors/basic_bolt.py").read_text(encoding="utf-8")
        assert (tmp_path / MODULE_SOURCE).read_bytes() == SOURCE.read_bytes()

    @pytest.mark.parametrize("module", list(PATCHES))
    def test_a_patch_that_no_longer_applies_stops_the_run_naming_its_file(self, tmp_path: Path, module: str) -> None:
        _copy(tmp_path, list(PATCHES))
        (tmp_path / module).write_text('"""Rewritten since."""\n', encoding="utf-8")
        with pytest.raises(SystemExit, match=module):
            patch_tree(tmp_path)

    @pytest.mark.skipif(_compiler() is not None, reason=f"cannot build the C kernel: {_compiler()}")
    def test_the_kernel_builds_against_the_tree_and_a_word_count_takes_its_c_paths(self, tmp_path: Path) -> None:
        """A few seconds: the build, then 300 sentences through both kernels in a child
        process, every one acked (``inprocess.py`` asserts it), no emit off the fast path."""
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.c")
        for folder in ("rayflow", "examples"):
            shutil.copytree(REPO / folder, tmp_path / folder, ignore=ignore)
        _copy(tmp_path, ["benchmarks/inprocess.py"])
        build(tmp_path, "both")
        counters = check(tmp_path, "both", sentences=300)
        assert counters["emit_fast"] > 0
        assert counters["run_inline"] > 0
        assert counters["emit_fallback"] == 0
