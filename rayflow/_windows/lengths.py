"""``Count`` and ``Duration``: a window's length or slide, in tuples or in seconds.

Storm's ``BaseWindowedBolt.Count`` and ``Duration``; a length and a slide may mix the two
(``with_window(Duration(60), Count(10))``: the tuples of the last minute, every 10 tuples)."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from .._errors import ConfigError

__all__ = ["Count", "Duration", "Length"]


@dataclass(frozen=True)
class Count:
    """``n`` tuples (an integer >= 1).

    Raises:
        ConfigError: ``n`` is not an integer >= 1.
    """

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"Count takes an integer >= 1, got {self.n!r}")

    def __str__(self) -> str:
        return f"{self.n} tuples"


@dataclass(frozen=True, init=False)
class Duration:
    """A span of time: ``seconds`` (a float > 0) or a ``datetime.timedelta``.

    Raises:
        ConfigError: not a positive, finite number of seconds.
    """

    seconds: float

    def __init__(self, seconds: float | datetime.timedelta) -> None:
        if isinstance(seconds, datetime.timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ConfigError(f"Duration takes seconds (a number) or a timedelta, got {seconds!r}")
        if not math.isfinite(seconds) or seconds <= 0:
            raise ConfigError(f"Duration takes a positive, finite number of seconds, got {seconds!r}")
        object.__setattr__(self, "seconds", float(seconds))

    @property
    def ms(self) -> float:
        """Milliseconds, rounded to the microsecond (``Duration(8.011).ms`` is 8011.0, not 8010.999...)."""
        return round(self.seconds * 1000.0, 3)

    def __str__(self) -> str:
        return f"{self.seconds:g} s"


Length = Count | Duration
