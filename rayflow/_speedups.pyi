"""Types of the optional C kernel (``_speedups.c``, whose header says what each name does)."""

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ._collectors import BasicOutputCollector
from ._outbox import AckerMail

class EmitKernel:
    """``BasicOutputCollector.emit``'s fast path in C; off it, ``fallback``."""

    def __init__(
        self, executor: Any, collector: BasicOutputCollector, fallback: Callable[..., list[int]], default_stream: str
    ) -> None: ...
    def __call__(self, values: list[Any], stream: str = ...) -> list[int]: ...

class SpoutEmit:
    """``SpoutOutputCollector.emit``'s fast path in C (``SpoutExecutor.emit``); off it, ``fallback``."""

    def __init__(self, executor: Any, fallback: Callable[..., list[int]], default_stream: str) -> None: ...
    def __call__(self, values: list[Any], msg_id: Any = ..., stream: str = ...) -> list[int]: ...

class EmitCount:
    """``TaskMetrics.kernel_emits``: the emits the kernels counted for one task, in C."""

    def __init__(self) -> None: ...
    @property
    def value(self) -> int: ...

class IdBuffer:
    """``DataBatch.trees`` in the C build: 64-bit ids, appended raw by the kernels; extended with
    ``+=`` and indexed as a list, exported read-only through the buffer protocol."""

    def __init__(self) -> None: ...
    def __iadd__(self, ids: Iterable[int]) -> IdBuffer: ...
    def append(self, id: int, /) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def setup(
    tuple_type: type,
    source_type: type,
    batch_type: type,
    route_type: type,
    mail_type: type,
    metrics_type: type,
    seed: bytes,
    /,
) -> None: ...
def run_inline(
    task: Any,
    execute: Callable[[Any, BasicOutputCollector], object],
    collector: BasicOutputCollector,
    mails: list[AckerMail],
    column: list[Any],
    trees: Iterator[int],
    source: Any,
    joined: list[Any],
    on_error: Callable[[Any, Exception], object],
    /,
) -> int: ...
def counters() -> dict[str, int]: ...
