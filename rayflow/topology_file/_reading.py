"""Reading the files a topology names (the file itself, its includes, a ``--properties`` file)
with a bound: only regular files, at most ``MAX_FILE_BYTES``, so that ``includes: [/dev/zero]``
or a FIFO is an error naming the file rather than a hang or an exhausted memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["MAX_FILE_BYTES", "read_text"]

MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest topology, included or properties file read: 4 MiB."""


def read_text(path: str | Path) -> str:
    """The UTF-8 text of the regular file ``path``. Raises ``OSError`` if it cannot be read and
    ``ValueError`` (``UnicodeDecodeError`` among them) if it is not a regular file, is larger
    than ``MAX_FILE_BYTES`` or is not UTF-8; the message says which (without the path)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError("not a regular file")
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, the limit for a file rayflow reads")
    return data.decode("utf-8")
