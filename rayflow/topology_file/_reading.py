"""What reading a topology file may cost, and reading within it.

A topology file, with everything it includes, is one *load*. A load reads each real path once
(a file included ten times, or through ten symlinks, is read once) and stays within a
``Budget``: at most ``MAX_FILES`` files, ``MAX_LOAD_BYTES`` of text after substitution, and
``MAX_VALUES`` values (keys included) once YAML aliases, merge keys and includes are expanded. Only regular files
are read (``includes: [/dev/zero]`` or a FIFO is refused, not waited on), and never more than
the bytes left in the budget, so a hostile file is an error naming the file, never a hang or an
exhausted memory. The limits are far above any topology written by hand (the ones we ship are
under 4 KiB and 300 values); data that large belongs in a file a component reads.

A ``--properties`` file is read on its own, with ``read_text`` and the ``MAX_FILE_BYTES`` bound.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .._errors import RayflowError

__all__ = [
    "MAX_DEPTH",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_LOAD_BYTES",
    "MAX_SCALAR_CHARS",
    "MAX_VALUES",
    "Budget",
    "OverBudget",
    "read_text",
]

MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest ``--properties`` file read: 4 MiB."""
MAX_FILES = 64
"""The most files one load reads: the topology file and every distinct file it includes."""
MAX_LOAD_BYTES = 256 * 1024
"""The most text one load parses, over all its files, after ``${...}`` substitution: 256 KiB."""
MAX_VALUES = 10_000
"""The most values one load parses or builds, keys included, counted after aliases, merge keys
and includes are expanded (every key, scalar, list and mapping once per place it appears)."""
MAX_DEPTH = 100
"""Collections nested deeper than this are refused: no topology needs it, and later checks recurse."""
MAX_SCALAR_CHARS = 64 * 1024
"""The longest single value: every message that quotes a value, and every did-you-mean, stays small."""


class OverBudget(RayflowError, ValueError):
    """A file too large, or a load over one of its limits; the message says which (without the
    file), and ``line``, when not 0, where in the file the limit was passed. A ``ValueError``
    too, as a file that cannot be read as text is."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


@dataclass
class Budget:
    """What one load has read so far, checked against the limits above."""

    files: int = 0
    bytes: int = 0
    values: int = 0

    def read(self, path: str | Path) -> str:
        """The UTF-8 text of the regular file ``path``, counted as one file. Raises ``OverBudget``
        when it is a file too many or would pass the bytes left, ``OSError`` if it cannot be
        read, and ``ValueError`` (``UnicodeDecodeError`` among them) if it is not a regular file
        or not UTF-8."""
        if self.files >= MAX_FILES:
            raise OverBudget(f"one load reads at most {MAX_FILES} files (the topology file and its includes)")
        try:
            text = read_text(path, self.bytes_left())
        except OverBudget:
            raise OverBudget(self._over_bytes()) from None
        self.files += 1
        return text

    def charge_bytes(self, count: int) -> None:
        """Count ``count`` characters of text to parse (a file's text after substitution); the
        limit is in bytes as read, which are as many for ASCII and never fewer."""
        if self.bytes + count > MAX_LOAD_BYTES:
            raise OverBudget(self._over_bytes())
        self.bytes += count

    def bytes_left(self) -> int:
        return MAX_LOAD_BYTES - self.bytes

    def charge_values(self, count: int) -> None:
        """Count ``count`` values parsed or built."""
        if self.values + count > MAX_VALUES:
            raise OverBudget(
                f"more than {MAX_VALUES:,} values and keys in the file and its includes, counting each alias,"
                " merge key and include where it is used (an alias expanding without bound?)"
            )
        self.values += count

    def _over_bytes(self) -> str:
        return f"more than {MAX_LOAD_BYTES // 1024} KiB of text in the file and its includes, the limit for one load"


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, of at most ``limit`` bytes (only that many
    and one more are ever read). Raises ``OSError`` if it cannot be read, ``OverBudget`` if it
    is larger, and ``ValueError`` (``UnicodeDecodeError`` among them) if it is not a regular file
    or not UTF-8; the message says which (without the path)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError("not a regular file")
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OverBudget(f"larger than {limit / (1024 * 1024):g} MiB, the limit for a file rayflow reads")
    return data.decode("utf-8")
