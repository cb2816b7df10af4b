"""The optional C extensions: the kernel of a BasicBolt's emit and run loop
(``rayflow/_speedups.c``) and the acker's ledger (``rayflow/_acking/_ledger.c``).

Everything else about the package is in ``pyproject.toml``; this file only adds the extensions,
which setuptools builds on install -- in place, beside the source, for ``pip install -e`` -- and
leaves out, with a warning, when it cannot be built (no C compiler, no Python headers): rayflow
then runs on pure Python, which ``rayflow --version`` says. It is not built where they
do not apply: another interpreter than CPython, or a free-threaded build (the kernel holds
borrowed references that only the GIL keeps valid, and the ledger's table is unlocked). Each
is optional on its own: one that fails to build leaves the other, and its Python runs instead.
"""

import platform
import sys
import sysconfig

from setuptools import Extension, setup

KERNEL = Extension(
    "rayflow._speedups",
    ["rayflow/_speedups.c"],
    extra_compile_args=[] if sys.platform == "win32" else ["-O2"],  # as benchmarks/c_kernel.py measured it
    optional=True,
)
LEDGER = Extension(
    "rayflow._acking._ledger_kernel",
    ["rayflow/_acking/_ledger.c"],
    extra_compile_args=[] if sys.platform == "win32" else ["-O2"],
    optional=True,
)

applies = platform.python_implementation() == "CPython" and not sysconfig.get_config_var("Py_GIL_DISABLED")
setup(ext_modules=[KERNEL, LEDGER] if applies else [])
