"""Where the ``rayflow`` command writes: ``out`` (stdout: results, tables, progress lines) and
``err`` (stderr: problems, Ray's start-up, the exit code's meaning).

Other modules of the command use them as ``console.out`` and ``console.err``, looked up at each
use, so that a test can swap in consoles of its own.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

__all__ = ["err", "out"]

# Piped output has no terminal width to fit: give the tables room rather than rich's 80 columns.
_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 132
out = Console(highlight=False, width=_WIDTH)
err = Console(stderr=True, highlight=False, width=_WIDTH)
