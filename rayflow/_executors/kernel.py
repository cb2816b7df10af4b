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
from array import array
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, TypeVar

from .._acking.anchoring import ID_TYPECODE
from .._metrics import TaskMetrics
from .._outbox import AckerMail, DataBatch, ValueColumn, c_flat_mail
from .._router import Route
from .._tuple import Tuple, TupleSource

__all__ = ["BUILD", "KERNEL", "PURE_PYTHON_ENV", "load", "load_extension", "read_ids"]

T = TypeVar("T")

PURE_PYTHON_ENV = "RAYFLOW_PURE_PYTHON"
"""Set to ``1``, the C kernel is not loaded even where it is built."""


def _import_kernel() -> ModuleType:
    """``rayflow._speedups``, if it was built (by name: a compiled module that may not exist)."""
    return importlib.import_module("rayflow._speedups")


def load_extension(
    set_up: Callable[[ModuleType], T],
    import_module: Callable[[], ModuleType],
    environ: Mapping[str, str],
    pure: str,
    name: str,
) -> tuple[T | None, str]:
    """What ``set_up`` makes of an optional C extension, or ``None`` where its Python runs
    instead, and a line saying which runs (``pure``: the Python's name, ``name``: the
    extension's). Every C part of rayflow is loaded this way, so that one switch
    (``RAYFLOW_PURE_PYTHON=1``) turns them all off and each falls back alike: not built, or
    built against another Python (``ImportError``: never a crash), or refused by ``set_up``
    (a build older than the Python it must match)."""
    if environ.get(PURE_PYTHON_ENV, "") == "1":
        return None, f"{pure}: {PURE_PYTHON_ENV}=1"
    try:
        module = import_module()
    except ImportError as exc:  # not built, or built against another Python
        return None, f"{pure}: no {name} ({exc})"
    try:
        return set_up(module), name
    except Exception as exc:  # a slot renamed since the build, or an older build
        return None, f"{pure}: the {name} does not fit this rayflow ({exc}); reinstall to rebuild it"


def _set_up(kernel: ModuleType) -> ModuleType:
    kernel.setup(Tuple, TupleSource, DataBatch, Route, AckerMail, TaskMetrics, os.urandom(32))
    DataBatch.new_ids = kernel.IdBuffer  # batches made from now on: the emit kernels append raw ids
    ValueColumn.join_strings = kernel.join_strings
    AckerMail.flatten = c_flat_mail(kernel.flat_mail, kernel.IdBuffer)
    AckerMail.new_ids = kernel.IdBuffer  # mails made from now on: the run loop appends raw acks
    return kernel


def load(
    environ: Mapping[str, str] = os.environ,
    import_kernel: Callable[[], ModuleType] = _import_kernel,
) -> tuple[ModuleType | None, str]:
    """The kernel set up to run (``None`` for pure Python) and a line saying which build runs."""
    return load_extension(_set_up, import_kernel, environ, "pure Python", "C kernel")


KERNEL, BUILD = load()
"""The C kernel (``None``: pure Python), and which build runs."""


def _id_reader(kernel: ModuleType | None) -> Callable[[Any], Iterator[int]]:
    if kernel is None:
        return iter
    reader = kernel.IdReader

    def read_ids(ids: Any) -> Iterator[int]:
        # A payload's id array: the kernel's reader, which run_inline reads raw; anything else
        # (a list, in tests and batches made before the kernel loaded) as it is.
        return reader(ids) if ids.__class__ is array and ids.typecode == ID_TYPECODE else iter(ids)

    return read_ids


read_ids = _id_reader(KERNEL)
"""``iter`` of a received payload's trees (``DataPayload``), as the bolt executors read them: the
C kernel's ``IdReader`` where it runs (an iterator of the same ints, which its ``run_inline``
reads without an int per id), else ``iter``."""
