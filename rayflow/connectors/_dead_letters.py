"""How often a broker spout replays one message before it gives up on it (shared).

A message whose tree fails every time (a poison message: a body no bolt can parse, a record a
database refuses) would otherwise be replayed forever, keeping a slot of the pending budget
and hiding among the good ones. Each broker spout bounds the replays of one message by
``max_replays`` and then dead-letters it the broker's way, so the broker keeps it where an
operator can look at it (and replay it by hand) while the topology moves on:

    RabbitMQ   ``basic_reject(requeue=False)``: the queue's dead-letter exchange gets it
    Redis      ``XADD`` to a dead-letter stream and ``XACK``, in one ``MULTI``
    NATS       ``term``: JetStream stops redelivering it and publishes an advisory

Each dead letter adds one to the spout's ``dead_lettered`` counter (``metrics()``) and logs a
warning with the message's id and the reason of its last fail.
"""

from __future__ import annotations

from .._errors import ConfigError

__all__ = ["DEFAULT_MAX_REPLAYS", "replay_bound"]

DEFAULT_MAX_REPLAYS = 10
"""Replays of one message before it is dead-lettered: 11 deliveries in all. As Azure Service
Bus's default ``MaxDeliveryCount`` (10): enough that a failure which passes (a timeout under
load, a dependency restarting) does not dead-letter good messages, few enough that a poison
message is parked within seconds of explicit fails (replays are immediate) or ten message
timeouts."""


def replay_bound(where: str, max_replays: object) -> int | None:
    """``max_replays`` checked: an int >= 0, or ``None`` (-1 is accepted for it, as in
    ``Config.max_task_restarts``) for no bound: a message then fails and comes back forever."""
    if max_replays is None or max_replays == -1:
        return None
    if isinstance(max_replays, bool) or not isinstance(max_replays, int) or max_replays < 0:
        raise ConfigError(
            f"{where}: max_replays must be an int >= 0 (replays before a message is dead-lettered), "
            f"or None for no bound, got {max_replays!r}"
        )
    return max_replays
