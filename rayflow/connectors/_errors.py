"""The connectors' errors: one family under ``RayflowError``.

    RayflowError                       (rayflow)
    └── BrokerError                    a broker cannot be reached, or refused what a spout asked
        ├── AmqpError                  RabbitMQ (``_amqp.errors``)
        │   ├── ConnectionLost         the socket closed, failed, timed out, or carried non-AMQP
        │   ├── BrokerClosed           the broker closed the channel or connection (with its code)
        │   └── ConsumerCancelled      the broker cancelled the consumer (queue deleted)
        ├── NatsError                  NATS and JetStream (``_nats.wire``): ``-ERR``, API errors, statuses
        └── RedisStreamError           Redis (``redis``): redis-py's errors and malformed replies

A spout does not raise these from ``next_tuple``, ``ack`` or ``fail``: it retries with backoff
and reports each outage once (``_outage``), as a ``BrokerError`` that says where (spout,
task, URL with its secrets redacted), what went wrong and what to check. The error it stands
for is its ``__cause__``.
"""

from __future__ import annotations

from .._errors import RayflowError

__all__ = ["BrokerError"]


class BrokerError(RayflowError):
    """A broker could not be reached, dropped the connection, or refused what the spout asked;
    the message names the spout and what to check."""
