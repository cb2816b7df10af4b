"""What is checked of a stateful topology's settings before it runs (at submit, and when the
in-process runner starts): the checkpoint interval against the message timeout, the provider's
name and settings, and -- on Ray -- that the store can be reached and that each stateful
bolt's committed state can be loaded with its parallelism and groupings (``key_groups.py``)."""

from __future__ import annotations

from .._components import StatefulBolt
from .._config import Config
from .._errors import ConfigError, StateError
from .._topology import Topology
from .key_groups import check_layout, layout_of, read_layout
from .provider import open_provider, topology_name

__all__ = ["check_state_settings"]


def check_state_settings(topology: Topology, conf: Config, *, reach: bool) -> None:
    """Raise ``ConfigError`` (or ``StateError`` for a store that cannot be reached, when
    ``reach``) naming the setting and the numbers; a topology without state passes."""
    if not topology.stateful:
        return
    if conf.ackers == 0:
        raise ConfigError(
            "ackers=0 with a stateful bolt: checkpoints complete through the acker (a commit must "
            "know that every stateful task has prepared), so a stateful topology needs ackers >= 1"
        )
    interval = conf.checkpoint_interval_ms
    timeout_ms = conf.message_timeout_secs * 1000.0
    if conf.enable_message_timeouts and interval >= timeout_ms:
        raise ConfigError(
            f"checkpoint_interval_ms ({interval:g}) must be below the message timeout "
            f"({timeout_ms:g} ms, message_timeout_secs={conf.message_timeout_secs:g}): a stateful bolt's "
            "acks wait for the next commit, so its input trees would time out before it"
        )
    name = topology_name(conf.model_extra or {})
    provider = open_provider(conf.state_provider, conf.state_provider_config, name)
    if reach:
        try:
            try:
                provider.ping()
            except StateError as exc:
                raise StateError(f"state_provider {conf.state_provider!r}: {exc}") from None
            for spec in topology.bolts:
                if isinstance(spec.component, StatefulBolt):
                    recorded = read_layout(provider, name, spec.id)
                    check_layout(recorded, layout_of(topology, spec.id), spec.id, provider.describe())
        finally:
            provider.close()
