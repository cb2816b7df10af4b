"""rayflow's exceptions.

RayflowError                 base of everything rayflow raises on purpose
├── TopologyError            the topology graph is invalid (lists every problem)
├── ConfigError              a configuration value is invalid
├── EmitError                a component emitted something its declaration forbids
└── StateError               a state store cannot be reached or refused a write

FailedException              raised by user code in a BasicBolt to fail the input tuple;
                             not a RayflowError because it is a signal, not a fault
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ConfigError", "EmitError", "FailedException", "RayflowError", "StateError", "TopologyError"]


class RayflowError(Exception):
    """Base class of the errors rayflow raises."""


class TopologyError(RayflowError):
    """The topology cannot run. ``problems`` holds one line per thing to fix."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid topology ({len(self.problems)} problem(s)):\n{lines}")


class ConfigError(RayflowError):
    """A configuration value is missing, of the wrong type, or out of range."""


class EmitError(RayflowError):
    """An emit that the component's declared outputs do not allow (raised at the call)."""


class StateError(RayflowError):
    """A state store cannot be reached or refused a write (the message names the store)."""


class FailedException(Exception):
    """Raise from ``BasicBolt.execute`` to fail the input tuple (its spout tuple is replayed)."""
