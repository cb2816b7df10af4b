"""Topology configuration: Storm's keys, validated by pydantic.

Every field accepts its Storm dotted key as an alias (``topology.message.timeout.secs``), so a
config written for Storm reads unchanged. Keys rayflow does not know are kept and handed to the
components in ``conf``, as Storm does with user keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ConfigError

__all__ = ["DEFAULT_MAX_SPOUT_PENDING", "Config"]

DEFAULT_MAX_SPOUT_PENDING = 5000


class Config(BaseModel):
    """Topology-wide settings; a plain ``dict`` is accepted wherever a ``Config`` is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True)

    message_timeout_secs: float = Field(30.0, gt=0, alias="topology.message.timeout.secs")
    ackers: int = Field(1, ge=0, alias="topology.acker.executors")
    max_spout_pending: int | None = Field(DEFAULT_MAX_SPOUT_PENDING, ge=1, alias="topology.max.spout.pending")
    """Trees in flight per spout task. Finite by default so that a bolt that never acks cannot
    grow the spout's and the acker's memory without bound; ``None`` lifts the cap."""
    enable_message_timeouts: bool = Field(True, alias="topology.enable.message.timeouts")
    debug: bool = Field(False, alias="topology.debug")
    tick_tuple_freq_secs: float | None = Field(None, gt=0, alias="topology.tick.tuple.freq.secs")
    """Deliver a tick tuple this often to every bolt it applies to (usually set per component)."""
    max_task_restarts: int = Field(-1, ge=-1, alias="rayflow.task.max.restarts")
    """How often one task may be restarted after its actor died; -1 = always, 0 = never."""

    # rayflow's transport knobs. Defaults suit a small machine; see benchmarks/ for their effect.
    batch_size: int = Field(2000, ge=1, alias="rayflow.batch.size")
    """Tuples per batch sent to one task: a batch is sent as soon as it is full."""
    linger_ms: float = Field(2.0, gt=0, alias="rayflow.batch.linger.ms")
    """A data batch that is not full is sent after at most this long."""
    control_linger_ms: float = Field(10.0, gt=0, alias="rayflow.control.linger.ms")
    """Under load, acker traffic (acks to the ackers, results to the spouts) is sent at most once
    per this period per task; when a task has sent nothing for this long it goes at once."""
    max_inflight_batches: int = Field(4, ge=1, alias="rayflow.max.inflight.batches")
    """Unprocessed batches a task may have outstanding to one destination before it waits."""
    task_cpus: float = Field(0.01, ge=0, alias="rayflow.task.cpus")
    """Ray CPU resource reserved per task actor: fractional so small machines place topologies."""

    @model_validator(mode="wrap")
    @classmethod
    def _raise_config_error(cls, data: Any, handler: Any) -> Any:
        """Every way of making or changing a ``Config`` reports bad values as ``ConfigError``."""
        try:
            return handler(data)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None

    @classmethod
    def of(cls, conf: Config | dict[str, Any] | None) -> Config:
        """Coerce a ``Config``, a dict (field names or Storm keys) or ``None`` into a ``Config``."""
        if conf is None:
            return cls()
        if isinstance(conf, Config):
            return conf
        if not isinstance(conf, dict):
            raise ConfigError(f"config must be a Config or a dict, not {type(conf).__name__}")
        return cls.model_validate(conf)

    def merged(self, overrides: dict[str, Any] | None) -> Config:
        """A copy with ``overrides`` (field names or Storm keys) applied on top."""
        if not overrides:
            return self
        names = {f.alias: name for name, f in type(self).model_fields.items() if f.alias}
        base = self.model_dump()
        base.update({names.get(k, k): v for k, v in overrides.items()})
        return Config.of(base)

    def to_conf(self) -> dict[str, Any]:
        """The dict components receive: every field under its name and its Storm key, plus extras."""
        conf = self.model_dump()
        conf.update(self.model_dump(by_alias=True))
        return conf


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "config"
        lines.append(f"{where}: {err['msg']}")
    return "invalid config: " + "; ".join(lines)
