"""Which acker ledger runs: the C one (``_ledger.c``, module ``_ledger_kernel``) or
``ledger.AckLedger`` in Python, which stays the contract and the fallback.

The C ledger is an optional extension, built on install beside the C kernel (``setup.py``). It
runs when it imports; the Python one runs when ``RAYFLOW_PURE_PYTHON=1`` is set (the C kernel's
switch, ``kernel.PURE_PYTHON_ENV``: one switch turns every C part off) or the import fails (not
built, or built for another interpreter: an ABI mismatch must fall back, not crash). Decided once
per process, at import, as the kernel is: every acker of a process runs the same ledger.

``LEDGER_BUILD`` says which runs, and why, in a line for a user (``rayflow --version``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType

from .._executors.kernel import PURE_PYTHON_ENV
from . import ledger

__all__ = ["LEDGER_BUILD", "AckLedger", "load"]

LedgerClass = type[ledger.AckLedger]
"""The Python class, or the C type that answers as it does (not a subclass: the same methods)."""


def _import_kernel() -> ModuleType:
    """``rayflow._acking._ledger_kernel``, if it was built (by name: it may not exist)."""
    return importlib.import_module("rayflow._acking._ledger_kernel")


def load(
    environ: dict[str, str] | os._Environ[str] = os.environ,
    import_kernel: Callable[[], ModuleType] = _import_kernel,
) -> tuple[LedgerClass, str]:
    """The ledger class to run and a line saying which it is."""
    if environ.get(PURE_PYTHON_ENV, "") == "1":
        return ledger.AckLedger, f"pure Python ledger: {PURE_PYTHON_ENV}=1"
    try:
        kernel = import_kernel()
    except ImportError as exc:  # not built, or built against another Python
        return ledger.AckLedger, f"pure Python ledger: no C ledger ({exc})"
    try:
        kernel.setup(ledger.Outcome)
        c_ledger: LedgerClass = kernel.AckLedger
    except Exception as exc:  # an older build
        return ledger.AckLedger, f"pure Python ledger: the C ledger does not fit this rayflow ({exc}); reinstall"
    return c_ledger, "C ledger"


AckLedger, LEDGER_BUILD = load()
"""The acker's ledger class (the C type, or ``ledger.AckLedger``), and which one it is."""
