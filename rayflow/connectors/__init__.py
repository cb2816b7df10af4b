"""Spouts reading real brokers, each keeping Storm's promise with the broker's own redelivery:
the broker is told a message is done only when its tuple tree completes.

    rabbitmq        RabbitMQSpout       (extra ``rabbitmq``: pika)
    redis           RedisStreamSpout    (extra ``redis``: redis-py)
    nats            NatsJetStreamSpout  (extra ``nats``: nothing more, it speaks NATS itself)
    _dead_letters   the bound on replays of one message, ``max_replays`` (shared)
    _outage         retry with backoff, report once per outage (shared)
    _wire           payload decoding, URL redaction (shared)

Import a connector from its module (``from rayflow.connectors.rabbitmq import RabbitMQSpout``):
this package imports no broker client, so installing one extra is enough for its connector.
"""
