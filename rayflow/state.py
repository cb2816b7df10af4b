"""State that survives restarts: the providers a stateful topology can keep its state in.

``StatefulBolt``, ``KeyValueState`` and ``StateError`` are in ``rayflow`` itself; this module
holds the ``StateProvider`` interface and the built-in providers, for a user who writes a
provider of their own (named by its dotted path in ``Config.state_provider``) or builds one
to look at a topology's committed state:

    from rayflow.state import SqliteStateProvider, load_component
    provider = SqliteStateProvider({"dir": "/data/state"}, "wordcount")
    counts = load_component(provider, "wordcount", "count")   # every task's keys, merged
"""

from ._errors import StateError
from ._state.key_groups import load_component
from ._state.key_value import DELETED, KeyValueState
from ._state.memory import MemoryStateProvider
from ._state.provider import StateProvider
from ._state.redis import RedisStateProvider
from ._state.sqlite import SqliteStateProvider

__all__ = [
    "DELETED",
    "KeyValueState",
    "MemoryStateProvider",
    "RedisStateProvider",
    "SqliteStateProvider",
    "StateError",
    "StateProvider",
    "load_component",
]
