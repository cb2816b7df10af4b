"""A broker spout in a topology without ackers (``ackers=0``) acks each message to its broker as
it emits it: at-most-once, which the user may want but should not get silently. Every runner
warns at submit (``_run_checks``), naming each such spout. No broker is needed: nothing
connects before the spouts are opened."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from rayflow import TopologyBuilder
from rayflow.connectors.nats import NatsJetStreamSpout
from rayflow.connectors.rabbitmq import RabbitMQSpout
from rayflow.connectors.redis import RedisStreamSpout
from rayflow.testing import FeederSpout, InProcessTopology
from tests.connectors.brokers import FailPoison


def topology(spouts: dict[str, Any]) -> Any:
    builder = TopologyBuilder()
    for name, spout in spouts.items():
        builder.set_spout(name, spout)
    bolt = builder.set_bolt("work", FailPoison())
    for name in spouts:
        bolt.shuffle_grouping(name)
    return builder.create_topology()


BROKER_SPOUTS = {
    "orders": RabbitMQSpout("orders"),
    "events": NatsJetStreamSpout("EVENTS", "rayflow"),
    "clicks": RedisStreamSpout("clicks", "rayflow"),
}


def test_each_broker_spout_is_named_when_the_topology_has_no_ackers() -> None:
    with pytest.warns(UserWarning) as caught:
        InProcessTopology(topology({**BROKER_SPOUTS, "feed": FeederSpout(["n"])}), {"ackers": 0}, active=False)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3, messages
    for name, kind in [("orders", "RabbitMQSpout"), ("events", "NatsJetStreamSpout"), ("clicks", "RedisStreamSpout")]:
        said = next(m for m in messages if f"spout {name!r}" in m)
        assert kind in said and "ackers=0" in said and "at-most-once" in said
    assert not any("'feed'" in m for m in messages)  # a spout without a broker: nothing to say


def test_with_ackers_nothing_is_said() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        InProcessTopology(topology(BROKER_SPOUTS), {"ackers": 1}, active=False)
