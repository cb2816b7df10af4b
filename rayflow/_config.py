"""Topology configuration: Storm's keys, validated by pydantic.

Every field accepts its Storm dotted key as an alias (``topology.message.timeout.secs``), so a
config written for Storm reads unchanged. Keys rayflow does not know are kept and handed to the
components in ``conf``, as Storm does with user keys -- except a key in rayflow's own namespace
(``rayflow.``) or one a letter or two away from a key rayflow knows: those are typos.

This module is the one place that knows the keys. ``Config.problems`` lists everything wrong
with a mapping, one ``ConfigProblem`` per key, so that a topology file can put each on its line;
making a ``Config`` raises ``ConfigError`` listing the same problems.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from ._errors import ConfigError
from ._pending import DEFAULT_MAX_SPOUT_PENDING
from ._suggest import did_you_mean
from ._urls import redact_url

__all__ = [
    "DEFAULT_HANDSHAKE_SECS",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_HANDSHAKES",
    "Config",
    "ConfigProblem",
]

DEFAULT_MAX_FRAME_BYTES = 256 * 1024 * 1024
DEFAULT_HANDSHAKE_SECS = 5.0
"""A TLS handshake between two tasks takes milliseconds, even on a busy node."""
DEFAULT_MAX_HANDSHAKES = 128
"""Above every task of a large topology dialling one acker at the same moment."""
"""256 MiB: five times the largest tuple the tests send (50 MB), with room for a batch of large
tuples, and still a bound a task's memory survives when a peer announces a huge frame."""
_NAMESPACE = "rayflow."
_VALUES_ONLY = "rayflow.config.values_only"
"""Validation context flag: check the values only (``Config.problems`` has checked the keys)."""


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config mapping: the ``key`` as it was given, and what is wrong.

    ``error`` is pydantic's description of a bad value (for callers that word it their own way);
    ``same_as`` is the other spelling of a setting given twice."""

    key: str
    message: str
    error: ErrorDetails | None = None
    same_as: str | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class Config(BaseModel):
    """Topology-wide settings; a plain ``dict`` is accepted wherever a ``Config`` is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True)

    message_timeout_secs: float = Field(30.0, gt=0, alias="topology.message.timeout.secs")
    ackers: int = Field(1, ge=0, alias="topology.acker.executors")
    max_spout_pending: int | None = Field(DEFAULT_MAX_SPOUT_PENDING, ge=1, alias="topology.max.spout.pending")
    """Trees in flight per spout task; ``None`` lifts the cap. Finite by default, and larger by
    default for a topology whose components need more in flight: ``_pending.py`` decides it."""
    enable_message_timeouts: bool = Field(True, alias="topology.enable.message.timeouts")
    debug: bool = Field(False, alias="topology.debug")
    tick_tuple_freq_secs: float | None = Field(None, gt=0, alias="topology.tick.tuple.freq.secs")
    """Deliver a tick tuple this often to every bolt it applies to (usually set per component)."""
    state_provider: str = Field("sqlite", min_length=1, alias="topology.state.provider")
    """Where stateful bolts keep their committed state: ``"memory"`` (lost with its task; the
    in-process runner's default), ``"sqlite"`` (a file on the task's node, no server),
    ``"redis"``, or the dotted path of a ``rayflow.state.StateProvider`` subclass."""
    state_provider_config: dict[str, Any] = Field(default_factory=dict, alias="topology.state.provider.config")
    """The provider's settings, e.g. ``{"url": "redis://127.0.0.1:6379/0"}`` or ``{"dir": "/data/state"}``."""
    checkpoint_interval_ms: float = Field(1000.0, gt=0, alias="topology.state.checkpoint.interval.ms")
    """How often stateful bolts commit their state. A spout at half its pending budget asks for
    a checkpoint sooner: a stateful bolt's acks wait for the commit, and so do the spout's trees."""
    processing_guarantee: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once", alias="topology.processing.guarantee"
    )
    """``"at_least_once"``: Storm's acking (and at-least-once state). ``"exactly_once"``: every
    checkpoint is a consistent cut of every spout's position and every stateful task's state,
    and any failure takes the whole topology back to the last committed cut
    (``docs/concepts/guarantees.md``)."""
    max_task_restarts: int = Field(-1, ge=-1, alias="rayflow.task.max.restarts")
    """How often one task may be restarted after its actor died; -1 = always, 0 = never."""

    chaining: bool = Field(True, alias="rayflow.chaining")
    """Run a bolt fed by one component with as many tasks, through ``shuffle``, ``none`` or
    ``local_or_shuffle``, in that component's process: task *i* with task *i*, its batches
    handed over in the process instead of on a stream (operator chaining,
    ``docs/concepts/runtime.md``). ``False`` in the topology's config chains nothing; in a
    component's own config, it keeps that component out of any chain."""

    # rayflow's transport knobs. Defaults suit a small machine; see benchmarks/ for their effect.
    batch_size: int = Field(2000, ge=1, alias="rayflow.batch.size")
    """Tuples per batch sent to one task: a batch is sent as soon as it is full."""
    linger_ms: float = Field(8.0, gt=0, alias="rayflow.batch.linger.ms")
    """A data batch that is not full is sent after at most this long. Below saturation lingers,
    not batch size, set how many frames a topology sends; every frame costs CPU (mostly waking
    its receiver: ``docs/performance.md``), and a longer linger adds to the complete latency."""
    control_linger_ms: float = Field(8.0, gt=0, alias="rayflow.control.linger.ms")
    """Under load, acker traffic (acks to the ackers, results to the spouts) is sent at most once
    per this period per task; when a task has sent nothing for this long it goes at once."""
    max_inflight_batches: int = Field(64, ge=1, alias="rayflow.max.inflight.batches")
    """Unfinished batches (frames) a task may have outstanding to one destination before it waits."""
    max_inflight_tuples: int = Field(20_000, ge=1, alias="rayflow.max.inflight.tuples")
    """Unprocessed tuples a task may have queued toward one destination before it waits: the
    backlog a stuck task may build before its producers stop."""
    task_cpus: float = Field(0.01, ge=0, alias="rayflow.task.cpus")
    """Ray CPU resource reserved per task actor: fractional so small machines place topologies."""
    cpu_pinning: bool = Field(False, alias="rayflow.worker.cpu.pinning")
    """Pin each task actor's process to a core of its own on its node (Linux; ackers stay
    free): the busy processes of a pipeline then never share a core (``_runtime/cpu_pinning.py``
    says why they would). For a node the topology has to itself: pinned topologies that share
    a node share its first cores."""
    max_frame_bytes: int = Field(DEFAULT_MAX_FRAME_BYTES, ge=1024, alias="rayflow.stream.max.frame.bytes")
    """The largest frame (one batch of tuples, pickled) a task accepts on a stream; a longer one
    closes the stream, and a sender drops a frame over it (its trees time out and replay)."""
    handshake_secs: float = Field(DEFAULT_HANDSHAKE_SECS, gt=0, alias="rayflow.stream.handshake.secs")
    """A connection that has not proven itself a task of this topology within this long is
    closed; a sender that gets no answer in time counts its destination unreachable for now."""
    max_handshakes: int = Field(DEFAULT_MAX_HANDSHAKES, ge=1, alias="rayflow.stream.max.handshakes")
    """Handshakes one task lets run at once; a new connection over it evicts the oldest, so idle
    connections cannot keep the topology's own tasks out, and a flood costs at most this many
    half-open connections."""
    bind_host: str | None = Field(None, alias="rayflow.stream.bind.host")
    """The IP address task actors listen on. ``None``: the node's IP as Ray knows it. An address
    of every interface (``0.0.0.0``, ``::``) listens on all of them and still tells peers the
    node's IP; an address that does not exist on a node fails the task's start, naming it."""

    @field_validator("bind_host")
    @classmethod
    def _an_ip_address(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise ValueError("must be an IP address such as 10.0.0.5 or 0.0.0.0") from None
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _raise_config_error(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        """Every way of making or changing a ``Config`` reports its problems as ``ConfigError``."""
        if info.context is not None and info.context.get(_VALUES_ONLY):
            return handler(data)
        if isinstance(data, Mapping):
            problems = cls.problems(data)
            if problems:
                raise ConfigError("invalid config: " + "; ".join(map(str, problems)))
        try:
            return handler(data)
        except ValidationError as exc:
            raise ConfigError("invalid config: " + "; ".join(map(str, _value_problems(exc)))) from None

    @classmethod
    def problems(cls, data: Mapping[Any, Any]) -> list[ConfigProblem]:
        """Everything wrong with ``data`` as a config, in its key order: a key that is not a
        string, a typo of a known key, a setting given under both its name and its Storm key,
        a bad value. An empty list means ``Config.of(data)`` succeeds."""
        problems: list[ConfigProblem] = []
        spelled: dict[str, str] = {}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if not isinstance(key, str):
                problems.append(ConfigProblem(repr(key), f"keys must be strings, got {key!r}"))
                continue
            name = _FIELD_OF.get(key)
            if name is None:
                typo = _typo(key)
                if typo:
                    problems.append(ConfigProblem(key, typo))
                else:
                    values[key] = value
                continue
            first = spelled.setdefault(name, key)
            if first != key:
                problems.append(
                    ConfigProblem(key, f"{first!r} and {key!r} both set {name}: give one of them", same_as=first)
                )
                continue
            values[key] = value
        try:
            cls.model_validate(values, context={_VALUES_ONLY: True})
        except ValidationError as exc:
            problems += _value_problems(exc)
        order = {key: i for i, key in enumerate(map(str, data))}
        return sorted(problems, key=lambda p: order.get(p.key, -1))

    @staticmethod
    def setting(key: str) -> str:
        """The field a key sets (``topology.acker.executors`` -> ``ackers``); a user key is its own."""
        return _FIELD_OF.get(key, key)

    @classmethod
    def of(cls, conf: Config | Mapping[str, Any] | None) -> Config:
        """Coerce a ``Config``, a dict (field names or Storm keys) or ``None`` into a ``Config``."""
        if conf is None:
            return cls()
        if isinstance(conf, Config):
            return conf
        if not isinstance(conf, Mapping):
            raise ConfigError(f"config must be a Config or a dict, not {type(conf).__name__}")
        return cls.model_validate(dict(conf))

    def merged(self, overrides: Mapping[str, Any] | None) -> Config:
        """A copy with ``overrides`` (field names or Storm keys) applied on top."""
        if not overrides:
            return self
        problems = Config.problems(overrides)
        if problems:
            raise ConfigError("invalid config: " + "; ".join(map(str, problems)))
        base = self.model_dump()
        base.update({Config.setting(k): v for k, v in overrides.items()})
        merged = Config.of(base)
        # What the user set stays known (defaults that depend on the topology look at it).
        given = {Config.setting(k) for k in overrides} & set(Config.model_fields)
        object.__setattr__(merged, "__pydantic_fields_set__", self.model_fields_set | given)
        return merged

    def storm_settings_without_effect(self) -> list[str]:
        """What to tell a user migrating from Storm about the Storm settings in this config
        that rayflow keeps (components still find them in their ``conf``) but does not act on:
        one line per such key, saying what decides the matter in rayflow instead."""
        extras = self.model_extra or {}
        return [
            f"{key} is kept for the components but rayflow does not use it: {why}"
            for key, why in _STORM_ONLY.items()
            if key in extras
        ]

    def to_conf(self) -> dict[str, Any]:
        """The dict components receive: every field under its name and its Storm key, plus extras."""
        conf = self.model_dump()
        conf.update(self.model_dump(by_alias=True))
        return conf


_STORM_ONLY: dict[str, str] = {
    "topology.workers": "every task runs in its own Ray actor (its own process), so a component's "
    "parallelism sets how many processes it gets",
}
"""Storm settings a Storm user is likely to carry over that have no effect in rayflow, and why."""

_FIELD_OF: dict[str, str] = {
    key: name for name, field in Config.model_fields.items() for key in (name, field.alias) if key
}
"""Every spelling of every field (its name, its Storm key) -> the field's name."""


def _typo(key: str) -> str | None:
    """Why an unknown ``key`` is refused, or ``None`` when it is a user key for the components."""
    if key.startswith(_NAMESPACE):
        return "unknown rayflow config key" + did_you_mean(key, _FIELD_OF)
    hint = did_you_mean(key, _FIELD_OF, cutoff=0.85)
    return "unknown config key" + hint if hint else None


def _value_problems(exc: ValidationError) -> list[ConfigProblem]:
    return [
        ConfigProblem(
            ".".join(map(str, err["loc"])) or "config",
            f"{err['msg']}, got {redact_url(repr(err['input']))}",  # a URL given in the wrong place keeps its secret
            error=err,
        )
        for err in exc.errors()
    ]
