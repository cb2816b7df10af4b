"""Which acker ledger runs: the C one (``_ledger.c``, module ``_ledger_kernel``) or
``ledger.AckLedger`` in Python, which stays the contract and the fallback.

The C ledger is an optional extension, built on install beside the C kernel (``setup.py``). It
runs when it imports; the Python one runs when ``RAYFLOW_PURE_PYTHON=1`` is set (the C kernel's
switch: one switch turns every C part off) or the import fails (not built, or built for another
interpreter: an ABI mismatch must fall back, not crash) -- ``kernel.load_extension`` decides, as
it does for the kernel. Decided once per process, at import: every acker of a process runs the
same ledger.

``LEDGER_BUILD`` says which runs, and why, in a line for a user (``rayflow --version``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from types import ModuleType

from .._executors.kernel import load_extension
from . import ledger

__all__ = ["LEDGER_BUILD", "AckLedger", "load"]

LedgerClass = type[ledger.AckLedger]
"""The Python class, or the C type that answers as it does (not a subclass: the same methods)."""


def _import_kernel() -> ModuleType:
    """``rayflow._acking._ledger_kernel``, if it was built (by name: it may not exist)."""
    return importlib.import_module("rayflow._acking._ledger_kernel")


def _set_up(kernel: ModuleType) -> LedgerClass:
    kernel.setup(ledger.Outcome)
    c_ledger: LedgerClass = kernel.AckLedger
    return c_ledger


def load(
    environ: Mapping[str, str] = os.environ,
    import_kernel: Callable[[], ModuleType] = _import_kernel,
) -> tuple[LedgerClass, str]:
    """The ledger class to run and a line saying which it is."""
    c_ledger, build = load_extension(_set_up, import_kernel, environ, "pure Python ledger", "C ledger")
    return c_ledger or ledger.AckLedger, build


AckLedger, LEDGER_BUILD = load()
"""The acker's ledger class (the C type, or ``ledger.AckLedger``), and which one it is."""
