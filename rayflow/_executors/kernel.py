"""Which build runs the per-tuple paths -- a ``BasicBolt``'s emit and run loop, a spout's emit,
``Tuple.__getitem__`` -- the C kernel or pure Python.

The kernel (``rayflow/_speedups.c``) is an optional extension, built on install where a C
compiler and Python's headers are (``setup.py``). It runs when it imports and its ``setup``
accepts the classes whose slots it writes; pure Python runs when ``RAYFLOW_PURE_PYTHON=1`` is
set, or the import fails (not built, or built for another interpreter: an ABI mismatch must
fall back, not crash), or ``setup`` refuses (a slot renamed since the build). Decided once per
process, at import: every executor of a process runs the same build, and a Ray task actor
decides in its own process -- the environment variable reaches it through Ray's worker
environment, as every variable set in the driver does for the workers of a local Ray.

``BUILD`` says which build runs, and why, in a line for a user (``rayflow --version``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType

from .._outbox import AckerMail, DataBatch
from .._router import Route
from .._tuple import Tuple, TupleSource

__all__ = ["BUILD", "KERNEL", "PURE_PYTHON_ENV", "load"]

PURE_PYTHON_ENV = "RAYFLOW_PURE_PYTHON"
"""Set to ``1``, the C kernel is not loaded even where it is built."""


def _import_kernel() -> ModuleType:
    """``rayflow._speedups``, if it was built (by name: a compiled module that may not exist)."""
    return importlib.import_module("rayflow._speedups")


def load(
    environ: dict[str, str] | os._Environ[str] = os.environ,
    import_kernel: Callable[[], ModuleType] = _import_kernel,
) -> tuple[ModuleType | None, str]:
    """The kernel set up to run (``None`` for pure Python) and a line saying which build runs."""
    if environ.get(PURE_PYTHON_ENV, "") == "1":
        return None, f"pure Python: {PURE_PYTHON_ENV}=1"
    try:
        kernel = import_kernel()
    except ImportError as exc:  # not built, or built against another Python
        return None, f"pure Python: no C kernel ({exc})"
    try:
        kernel.setup(Tuple, TupleSource, DataBatch, Route, AckerMail, os.urandom(32))
    except Exception as exc:  # a slot renamed since the build, or an older build
        return None, f"pure Python: the C kernel does not fit this rayflow ({exc}); reinstall to rebuild it"
    return kernel, "C kernel"


KERNEL, BUILD = load()
"""The C kernel (``None``: pure Python), and which build runs."""
