"""``RedisStateProvider``: state in Redis (the ``redis`` extra) -- survives tasks and nodes.

Per namespace three keys under ``key_prefix`` (default ``rayflow:state``): a hash of the
committed state, a hash of the staged changes (a deleted key staged as the empty string, which no
pickle is) and the committed txid. Keys and values are stored pickled. Staging is one pipelined
round trip; a commit is one Lua script (atomic, one round trip); a load reads the whole hash.

Survives what the Redis server survives: with persistence (AOF or RDB) configured there, the
loss of any rayflow task or node; without it, not a restart of the Redis server."""

from __future__ import annotations

import pickle
from typing import Any

from .._urls import redact_url
from .key_value import DELETED
from .provider import StateError, StateProvider

__all__ = ["RedisStateProvider"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
STAGE_CHUNK = 10_000
"""Fields per ``HSET`` while staging (one command may not carry millions of arguments)."""

COMMIT = """
local staged = redis.call('HGETALL', KEYS[2])
for i = 1, #staged, 2 do
  if staged[i + 1] == '' then
    redis.call('HDEL', KEYS[1], staged[i])
  else
    redis.call('HSET', KEYS[1], staged[i], staged[i + 1])
  end
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[3], ARGV[1])
return #staged / 2
"""


class RedisStateProvider(StateProvider):
    """``state_provider_config``: ``{"url": "redis://host:6379/0", "key_prefix": "rayflow:state"}``."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        super().__init__(config, topology_name)
        self.url = str(config.get("url") or DEFAULT_URL)
        self.prefix = str(config.get("key_prefix") or "rayflow:state")
        self._client: Any = None
        self._commit: Any = None

    def describe(self) -> str:
        return f"redis at {redact_url(self.url)}"

    def _redis(self) -> Any:
        if self._client is None:
            try:
                import redis
            except ImportError:
                raise StateError("state_provider 'redis' needs the redis extra: pip install 'rayflow[redis]'") from None
            self._client = redis.Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=5)
            self._commit = self._client.register_script(COMMIT)
        return self._client

    def _keys(self, namespace: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:{namespace}"
        return f"{base}:committed", f"{base}:staged", f"{base}:txid"

    def _call(self, what: str, work: Any) -> Any:
        try:
            return work(self._redis())
        except StateError:
            raise
        except Exception as exc:  # redis-py's errors, and OSError below them
            raise StateError(f"{what} at {redact_url(self.url)} failed: {type(exc).__name__}: {exc}") from None

    def ping(self) -> None:
        self._call("reaching the state store", lambda r: r.ping())

    def load(self, namespace: str) -> tuple[dict[Any, Any], int]:
        committed, _, txid_key = self._keys(namespace)

        def read(r: Any) -> tuple[dict[bytes, bytes], bytes | None]:
            pipe = r.pipeline(transaction=False)
            pipe.hgetall(committed)
            pipe.get(txid_key)
            data, txid = pipe.execute()
            return data, txid

        data, txid = self._call("loading the state", read)
        return {pickle.loads(k): pickle.loads(v) for k, v in data.items()}, int(txid or 0)

    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None:
        if not changes:
            return
        _, staged, _ = self._keys(namespace)
        fields = [
            (pickle.dumps(k, protocol=5), b"" if v is DELETED else pickle.dumps(v, protocol=5))
            for k, v in changes.items()
        ]

        def write(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            for start in range(0, len(fields), STAGE_CHUNK):
                pipe.hset(staged, mapping=dict(fields[start : start + STAGE_CHUNK]))
            pipe.execute()

        self._call("staging the state", write)

    def commit(self, namespace: str, txid: int) -> None:
        keys = list(self._keys(namespace))
        self._call("committing the state", lambda r: self._commit(keys=keys, args=[txid]))

    def rollback(self, namespace: str) -> None:
        _, staged, _ = self._keys(namespace)
        self._call("rolling back the state", lambda r: r.delete(staged))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
