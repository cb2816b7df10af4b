"""``RedisStateProvider``: state in Redis (the ``redis`` extra) -- survives tasks and nodes.

Per namespace, under ``key_prefix`` (default ``rayflow:state``): a hash of the committed state
(pickled key -> pickled value), a list of staged changes and the committed txid. A stage pushes
each namespace's changes as msgpack arrays of pickled keys and values (msgpack raw strings, which
the Lua side's ``cmsgpack`` reads; a deleted key staged as the empty string, which no pickle is),
chunked, every namespace of the step in one script call; a commit is one Lua script over all the
step's namespaces (atomic, one round trip) that unpacks them and writes each chunk with one
``HSET`` and one ``HDEL``; a load reads whole hashes, pipelined. (A hash ``...:staged``, one field
per key, is what rayflow staged before; a commit still applies one left there.) ``namespaces``
scans the keyspace (``SCAN MATCH``): a task does it once, when its component has no layout
record yet (``key_groups.py``).

Survives what the Redis server survives: with persistence (AOF or RDB) configured there, the
loss of any rayflow task or node; without it, not a restart of the Redis server."""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack  # type: ignore[import-untyped]  # a dependency of Ray's; Lua has cmsgpack built in

from .._errors import ConfigError
from .._urls import CUT_USER_INFO, cut_user_info, redact_url
from .key_value import DELETED
from .provider import StateError, StateProvider

__all__ = ["RedisStateProvider"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
STAGE_CHUNK = 2_000
"""Keys per staged chunk: the script writes each chunk with one ``HSET`` (two arguments a key,
within what Lua's ``unpack`` takes) and one ``HDEL``."""

STAGE = """
for i = 1, #KEYS do redis.call('RPUSH', KEYS[i], ARGV[i]) end
"""
"""Every chunk of a step in one command (atomic): cheaper to send than a pipeline of ``RPUSH``."""

COMMIT = """
local function apply(committed, sets, dels)
  if #sets > 0 then redis.call('HSET', committed, unpack(sets)) end
  if #dels > 0 then redis.call('HDEL', committed, unpack(dels)) end
end
local applied = 0
for n = 1, #KEYS, 4 do
  local committed, staging, txid, legacy = KEYS[n], KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
  if redis.call('EXISTS', legacy) == 1 then
    local staged = redis.call('HGETALL', legacy)
    for i = 1, #staged, 2 do
      if staged[i + 1] == '' then redis.call('HDEL', committed, staged[i])
      else redis.call('HSET', committed, staged[i], staged[i + 1]) end
    end
    redis.call('DEL', legacy)
  end
  for _, blob in ipairs(redis.call('LRANGE', staging, 0, -1)) do
    local items = cmsgpack.unpack(blob)
    local sets, dels = {}, {}
    for i = 1, #items, 2 do
      if items[i + 1] == '' then dels[#dels + 1] = items[i]
      else sets[#sets + 1] = items[i]; sets[#sets + 1] = items[i + 1] end
    end
    apply(committed, sets, dels)
    applied = applied + #items / 2
  end
  redis.call('DEL', staging)
  redis.call('SET', txid, ARGV[1])
end
return applied
"""


class RedisStateProvider(StateProvider):
    """``state_provider_config``: ``{"url": "redis://host:6379/0", "key_prefix": "rayflow:state"}``."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        super().__init__(config, topology_name)
        self.url = str(config.get("url") or DEFAULT_URL)
        if cut_user_info(self.url):
            raise ConfigError(f"state_provider_config 'url' {CUT_USER_INFO}")
        self.prefix = str(config.get("key_prefix") or "rayflow:state")
        self._client: Any = None
        self._commit: Any = None
        self._stage: Any = None

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
            self._stage = self._client.register_script(STAGE)
        return self._client

    def _keys(self, namespace: str) -> tuple[str, str, str, str]:
        """The committed hash, the staged list, the txid and the staged hash of rayflow before."""
        base = f"{self.prefix}:{namespace}"
        return f"{base}:committed", f"{base}:staging", f"{base}:txid", f"{base}:staged"

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
        return self.load_many([namespace])[namespace]

    def load_many(self, namespaces: Sequence[str]) -> dict[str, tuple[dict[Any, Any], int]]:
        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for ns in namespaces:
                committed, _, txid, _ = self._keys(ns)
                pipe.hgetall(committed)
                pipe.get(txid)
            return pipe.execute()  # type: ignore[no-any-return]

        replies = self._call("loading the state", read) if namespaces else []
        loads = pickle.loads
        return {
            ns: ({loads(k): loads(v) for k, v in replies[2 * i].items()}, int(replies[2 * i + 1] or 0))
            for i, ns in enumerate(namespaces)
        }

    def namespaces(self, prefix: str) -> list[str]:
        base = f"{self.prefix}:"
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in base + prefix) + "*:txid"

        def scan(r: Any) -> list[str]:
            return [key.decode()[len(base) : -len(":txid")] for key in r.scan_iter(match=pattern, count=1000)]

        return sorted(self._call("listing the state", scan))

    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None:
        self.stage_many(txid, {namespace: changes})

    def stage_many(self, txid: int, changes: Mapping[str, dict[Any, Any]]) -> None:
        dumps, packb = pickle.dumps, msgpack.packb
        blobs: list[tuple[str, bytes]] = []
        for ns, ns_changes in changes.items():
            items = list(ns_changes.items())
            _, staging, _, _ = self._keys(ns)
            for start in range(0, len(items), STAGE_CHUNK):
                flat: list[bytes] = []
                for k, v in items[start : start + STAGE_CHUNK]:
                    flat.append(dumps(k, protocol=5))
                    flat.append(b"" if v is DELETED else dumps(v, protocol=5))
                blobs.append((staging, packb(flat, use_bin_type=False)))
        if blobs:
            keys, args = [staging for staging, _ in blobs], [blob for _, blob in blobs]
            self._call("staging the state", lambda r: self._stage(keys=keys, args=args))

    def commit(self, namespace: str, txid: int) -> None:
        self.commit_many([namespace], txid)

    def commit_many(self, namespaces: Sequence[str], txid: int) -> None:
        keys = [key for ns in namespaces for key in self._keys(ns)]
        if keys:
            self._call("committing the state", lambda r: self._commit(keys=keys, args=[txid]))

    def rollback(self, namespace: str) -> None:
        self.rollback_many([namespace])

    def rollback_many(self, namespaces: Sequence[str]) -> None:
        keys = [key for ns in namespaces for key in self._keys(ns)[1::2]]  # the staged list and hash
        if keys:
            self._call("rolling back the state", lambda r: r.delete(*keys))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
