"""Spouts reading real brokers, each keeping Storm's promise with the broker's own redelivery:
the broker is told a message is done only when its tuple tree completes.

    rabbitmq        RabbitMQSpout       (extra ``rabbitmq``: pika)
    redis           RedisStreamSpout    (extra ``redis``: redis-py, hiredis)
    nats            NatsJetStreamSpout  (extra ``nats``: nothing more, it speaks NATS itself)

Each protocol in a room of its own, below its spout:

    _amqp/          AMQP 0-9-1: errors, codec (pika's), handshake, the consumer, the ack watermark
    _nats/          NATS: the wire format, one connection
    _resp           Redis's replies read off the socket, parsed by hiredis (RESP2 and RESP3)

Shared by the spouts, below the protocols:

    _errors         BrokerError, the family every connector error belongs to
    _outage         retry with backoff, report once per outage
    _connecting     a connection made on a thread of its own
    _upkeep         liveness duties on time while ``next_tuple`` is not called
    _dead_letters   the bound on replays of one message, ``max_replays``
    _wire           payload decoding, URL redaction

Import a connector from its module (``from rayflow.connectors.rabbitmq import RabbitMQSpout``):
this package imports no broker client, so installing one extra is enough for its connector.
"""
