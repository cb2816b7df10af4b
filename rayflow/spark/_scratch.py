"""What starting Spark leaves on disk, and taking it away again.

Every Spark start through raydp writes:

- the scratch of the Spark driver and executors (``spark-*``, ``blockmgr-*``, the Python
  workers' files) under ``spark.local.dir`` and ``java.io.tmpdir``, by default the system temp
  directory. Spark deletes them from its JVMs' shutdown hooks, which do not run for raydp's
  executors (Ray kills them);
- 40 MB copies of Ray's Java library (``libcore_worker_library_java.so``), extracted by Ray's
  Java runtime to load it: the Spark driver's JVM into ``/tmp/ray/<milliseconds>/`` (a path Ray
  hard-codes), the Java workers (raydp's app master, the executors) into the Ray session's
  directory, one copy shared by every Java worker of the session. Neither Ray nor raydp removes
  them.

So each Spark start gets a scratch directory of rayflow's own (``rayflow-spark-<pid>-*`` in the
system temp directory) as its ``spark.local.dir`` and ``java.io.tmpdir``, removed when that
Spark stops or its process exits, or by a later start on the machine when that process died
without either. The driver JVM's copy of the library is removed once Spark has started: Linux
keeps a loaded library mapped after its file is gone. The session's copy is removed when Spark
is stopped and no process on the node has it loaded (another Spark of the session may still
run on it). Library copies are removed under Ray's own lock on their directory (``file_lock``),
which its Java runtime holds while it extracts one.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "LIBRARY",
    "SCRATCH_PREFIX",
    "loaded_library_copies",
    "new_scratch_dir",
    "remove_driver_library_copy",
    "remove_scratch_dir",
    "remove_session_library_copy",
    "session_library_copy",
]

logger = logging.getLogger("rayflow")

LIBRARY = "libcore_worker_library_java.so"
SCRATCH_PREFIX = "rayflow-spark-"
_RAY_DRIVER_LIBRARY_ROOT = Path("/tmp/ray")
"""Where Ray's Java runtime extracts the library for a driver JVM (hard-coded in Ray)."""


def new_scratch_dir() -> str:
    """A new scratch directory for one Spark start, removed at this process's exit at the
    latest; the leftovers of processes that died first are removed on the way."""
    _remove_dead_scratch_dirs()
    path = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, path, True)
    return path


def remove_scratch_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def _remove_dead_scratch_dirs() -> None:
    pattern = re.compile(re.escape(SCRATCH_PREFIX) + r"(\d+)-")
    for entry in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        match = pattern.match(entry.name)
        if match and entry.is_dir() and entry.stat().st_uid == os.getuid() and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


def remove_driver_library_copy(jvm_pid: int) -> None:
    """Remove the copy of Ray's Java library that the driver JVM ``jvm_pid`` extracted into a
    directory of its own under ``/tmp/ray`` and has loaded."""
    for copy in loaded_library_copies(jvm_pid):
        folder = copy.parent
        if folder.parent == _RAY_DRIVER_LIBRARY_ROOT and folder.name.isdigit():
            with _ray_file_lock(folder):
                copy.unlink(missing_ok=True)
            shutil.rmtree(folder, ignore_errors=True)


def session_library_copy() -> Path | None:
    """The session's copy of Ray's Java library, when Ray runs here and one was extracted."""
    import ray

    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    copy = Path(context.get_temp_dir()) / context.get_session_name() / LIBRARY
    return copy if copy.exists() else None


def remove_session_library_copy(wait_secs: float = 10.0) -> None:
    """Remove the session's copy of Ray's Java library once no process here has it loaded,
    waiting up to ``wait_secs`` for stopped Java workers to exit; kept if one still runs."""
    copy = session_library_copy()
    if copy is None:
        return
    deadline = time.monotonic() + wait_secs
    while _loaded_anywhere(copy):
        if time.monotonic() >= deadline:
            logger.debug("%s is still loaded by a Java worker; kept", copy)
            return
        time.sleep(0.2)
    with _ray_file_lock(copy.parent):
        if not _loaded_anywhere(copy):
            copy.unlink(missing_ok=True)


def loaded_library_copies(pid: int) -> list[Path]:
    """The copies of Ray's Java library process ``pid`` has mapped (a removed one included)."""
    return sorted({Path(path) for path in _mapped_paths(pid) if Path(path).name == LIBRARY})


def _loaded_anywhere(copy: Path) -> bool:
    target = str(copy)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and target in _mapped_paths(int(entry.name)):
            return True
    return False


def _mapped_paths(pid: int) -> set[str]:
    """The files process ``pid`` has mapped (``(deleted)`` marks stripped); empty when it is
    gone or not ours to read."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    paths = set()
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            paths.add(parts[5].removesuffix(" (deleted)"))
    return paths


@contextlib.contextmanager
def _ray_file_lock(folder: Path) -> Iterator[None]:
    """Ray's Java runtime's lock on a library directory (a POSIX lock on ``file_lock``, as Java's
    ``FileChannel.lock`` takes it), so that a copy is never removed while it is being extracted."""
    lock = folder / "file_lock"
    if not lock.exists():
        yield
        return
    try:
        handle = lock.open("rb+")
    except OSError:
        yield
        return
    with handle:
        fcntl.lockf(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
