"""Fixtures shared by the connector tests: a fresh RabbitMQ queue, Redis stream and NATS
JetStream stream per test, deleted afterwards. Each skips the test with a clear reason when
its broker is not running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.connectors.brokers import (
    RABBITMQ_URL,
    REDIS_URL,
    nats_call,
    require_nats,
    require_rabbitmq,
    require_redis,
    unique,
)


@pytest.fixture
def queue() -> Iterator[str]:
    """The name of a new, empty RabbitMQ queue."""
    require_rabbitmq()
    import pika

    name = unique("queue")
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    connection.channel().queue_declare(name)
    try:
        yield name
    finally:
        connection.channel().queue_delete(name)
        connection.close()


@pytest.fixture
def client() -> Any:
    """A redis-py client of the Redis on 127.0.0.1."""
    require_redis()
    import redis

    return redis.Redis.from_url(REDIS_URL)


@pytest.fixture
def stream(client: Any) -> Iterator[str]:
    """The name of a Redis stream no one has used yet."""
    name = unique("stream")
    try:
        yield name
    finally:
        client.delete(name)


@pytest.fixture
def jetstream() -> Iterator[str]:
    """The name of a new JetStream stream (file storage) holding the subjects ``<name>.>``."""
    require_nats()
    name = unique("stream").replace("-", "_")

    async def add(js: Any) -> None:
        await js.add_stream(name=name, subjects=[f"{name}.>"])

    async def delete(js: Any) -> None:
        await js.delete_stream(name)

    nats_call(add)
    try:
        yield name
    finally:
        nats_call(delete)
