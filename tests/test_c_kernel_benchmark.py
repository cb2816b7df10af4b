"""``benchmarks/c_kernel.py``: the shipped C kernel against pure Python, on one build of one
revision (``docs/performance.md``). These tests keep its plumbing working: the semantics tests
it runs are in the tree, and -- where a C compiler and Python's headers are -- a copy of the tree
builds the kernel with ``setup.py`` as the install does, and each build runs what it says."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest

from benchmarks.c_kernel import BUILDS, SEMANTICS_TESTS, check
from benchmarks.revisions import build_kernel

REPO = Path(__file__).resolve().parents[1]


def _cannot_build() -> str | None:
    """Why the kernel cannot be built here, or ``None`` if it can."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python.h (the Python development headers)"
    return None


class TestCKernelBenchmark:
    def test_the_semantics_tests_it_runs_are_in_the_tree(self) -> None:
        assert [m for m in SEMANTICS_TESTS if not (REPO / m).is_file()] == []

    @pytest.mark.skipif(_cannot_build() is not None, reason=f"cannot build the C kernel: {_cannot_build()}")
    def test_a_copy_of_the_tree_builds_the_kernel_and_each_build_runs_what_it_says(self, tmp_path: Path) -> None:
        """A few seconds: the build, then 200 sentences on each build in a child process, every
        one acked (``inprocess.py`` asserts it); on the kernel, through its C paths only."""
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd")
        for folder in ("rayflow", "examples"):
            shutil.copytree(REPO / folder, tmp_path / folder, ignore=ignore)
        for file in ("setup.py", "pyproject.toml", "README.md", "benchmarks/inprocess.py"):
            (tmp_path / file).parent.mkdir(exist_ok=True)
            shutil.copyfile(REPO / file, tmp_path / file)
        assert build_kernel(tmp_path) == ""
        counters = {build: check(tmp_path, build) for build in BUILDS}
        assert counters["pure"] == {}
        assert counters["kernel"]["emit_fallback"] == 0
