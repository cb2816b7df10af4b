"""``StateProvider``: where a stateful task's committed state lives, and how a checkpoint writes it.

A checkpoint is two-phase across the whole topology (Storm's): every stateful task first
*stages* its changes (prepare), and only once all have staged does each *commit* them; if any
task cannot stage, every task *rolls back* to what it last committed. So a provider keeps, per
namespace (one per task: ``topology/component/task``), the committed mapping and the staged
changes, and offers exactly these operations:

    load(ns)               the committed mapping and the txid it was committed at (0: never)
    stage(ns, txid, ch)    add changes (key -> value, or ``DELETED``) to what is staged; staged
                           changes accumulate until a commit or a rollback
    commit(ns, txid)       apply everything staged, atomically, and record ``txid``; with nothing
                           staged it only records ``txid`` (a repeated commit is harmless)
    rollback(ns)           drop what is staged
    ping()                 raise ``StateError`` if the store cannot be reached

A stateful task keeps its state in many namespaces (one per key group it owns:
``key_groups.py``), so each operation has a bulk form over namespaces -- ``load_many``,
``stage_many``, ``commit_many``, ``rollback_many`` -- that a task calls once per checkpoint step.
Their defaults call the single forms in turn; a provider overrides them to do the step in one
transaction or round trip. ``namespaces(prefix)`` lists the namespaces holding committed
state, so that state of the layout before key groups (per task id) can be found and carried
over; a provider that cannot list returns none.

Every write must be durable when the call returns (for what the provider promises to survive)
and ``commit`` atomic: a task that dies inside it finds either the old or the new state.

A provider of the user's own is a subclass named by its dotted path in ``state_provider``;
it is built in each task with ``cls(config, topology_name)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from .._dotted import resolve
from .._errors import ConfigError, StateError
from .._suggest import did_you_mean

__all__ = [
    "BUILT_IN",
    "StateError",
    "StateProvider",
    "open_provider",
    "provider_class",
    "task_provider",
    "topology_name",
]


class StateProvider(ABC):
    """A store of committed state for the stateful tasks of one topology (see the module doc)."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        self.config = config
        self.topology_name = topology_name

    @abstractmethod
    def load(self, namespace: str) -> tuple[dict[Any, Any], int]: ...

    @abstractmethod
    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None: ...

    @abstractmethod
    def commit(self, namespace: str, txid: int) -> None: ...

    @abstractmethod
    def rollback(self, namespace: str) -> None: ...

    def load_many(self, namespaces: Sequence[str]) -> dict[str, tuple[dict[Any, Any], int]]:
        """``load`` of each namespace."""
        return {ns: self.load(ns) for ns in namespaces}

    def stage_many(self, txid: int, changes: Mapping[str, dict[Any, Any]]) -> None:
        """``stage`` of each namespace's changes."""
        for ns, ns_changes in changes.items():
            self.stage(ns, txid, ns_changes)

    def commit_many(self, namespaces: Sequence[str], txid: int) -> None:
        """``commit`` of each namespace (all of them atomically, where the store can)."""
        for ns in namespaces:
            self.commit(ns, txid)

    def rollback_many(self, namespaces: Sequence[str]) -> None:
        """``rollback`` of each namespace."""
        for ns in namespaces:
            self.rollback(ns)

    def namespaces(self, prefix: str) -> list[str]:
        """The namespaces starting with ``prefix`` that hold committed state (default: none known)."""
        return []

    def ping(self) -> None:  # noqa: B027 -- optional: a provider without a server is always reachable
        """Raise ``StateError`` when the store cannot be reached (the default: always reachable)."""
        return None

    def describe(self) -> str:
        """Where the state lives, for messages (a URL without its password, a directory)."""
        return type(self).__name__

    def close(self) -> None:  # noqa: B027 -- optional: most providers hold nothing to close
        return None


BUILT_IN = {
    "memory": "rayflow._state.memory.MemoryStateProvider",
    "sqlite": "rayflow._state.sqlite.SqliteStateProvider",
    "redis": "rayflow._state.redis.RedisStateProvider",
}


def provider_class(name: str) -> type[StateProvider]:
    """The provider class ``state_provider`` names: a built-in name or a dotted class path."""
    if not isinstance(name, str) or (name not in BUILT_IN and "." not in name):
        raise ConfigError(
            f"state_provider: {name!r} is not one of {sorted(BUILT_IN)} nor a dotted class path"
            f"{did_you_mean(str(name), list(BUILT_IN))}"
        )
    cls = resolve(BUILT_IN.get(name, name), "package.module.MyStateProvider")
    if not (isinstance(cls, type) and issubclass(cls, StateProvider)):
        raise ConfigError(f"state_provider: {name!r} is not a subclass of rayflow.state.StateProvider")
    return cls


def open_provider(name: str, config: dict[str, Any] | None, topology_name: str) -> StateProvider:
    """Build the provider a task's config names (raises ``ConfigError`` for a bad name or config)."""
    cls = provider_class(name)
    if config is not None and not isinstance(config, dict):
        # not repeated: a URL given in place of the mapping holds its password
        raise ConfigError(f"state_provider_config must be a mapping, got a {type(config).__name__}")
    return cls(dict(config or {}), topology_name)


def topology_name(conf: dict[str, Any]) -> str:
    """The name a task's config says its topology was submitted under (``"topology"`` if none)."""
    return str(conf.get("topology.name") or "topology")


def task_provider(conf: dict[str, Any]) -> StateProvider:
    """The provider a task's config (``Config.to_conf()``) names, for that task to use."""
    return open_provider(conf["state_provider"], conf.get("state_provider_config"), topology_name(conf))
