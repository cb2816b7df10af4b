"""NatsJetStreamSpout against the real NATS (JetStream) on 127.0.0.1:4222.

Most tests drive the spout object in-process, as the spout executor calls it (a recording
collector, ``next_tuple``/``ack``/``fail``); the last ones run topologies on the session's Ray:
a poison message among good ones is terminated after exactly ``max_replays`` replays and
counted in ``metrics()``, a tree whose timeout a bolt keeps resetting is not redelivered, and
the YAML word count runs. Each test uses its own stream and deletes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rayflow._errors import ConfigError
from tests.conftest import eventually
from tests.connectors.brokers import (
    NATS_URL,
    POISON,
    FailPoison,
    FakeCollector,
    Proxy,
    context,
    drive,
    nats_call,
    nats_consumer,
    nats_pending,
    nats_publish,
    poison_topology,
    require_nats,
    run_until,
    unique,
)

pytestmark = pytest.mark.broker

DURABLE = "rayflow"


def opened(
    stream: str, task_id: int = 1, conf: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[Any, FakeCollector]:
    from rayflow.connectors.nats import NatsJetStreamSpout

    spout = NatsJetStreamSpout(stream, DURABLE, **kwargs)
    collector = FakeCollector()
    spout.open({"max_spout_pending": 1000, **(conf or {})}, context(task_id), collector)
    spout.activate()
    return spout, collector


def stream_messages(stream: str) -> int:
    async def count(js: Any) -> int:
        return int((await js.stream_info(stream)).state.messages)

    result: int = nats_call(count)
    return result


class TestDelivery:
    def test_one_tuple_per_message_with_the_fields_asked_for(self, jetstream: str) -> None:
        nats_publish(f"{jetstream}.a", "the cow jumped", b"\xff\xfe raw")
        spout, collector = opened(jetstream, fields=("subject", "data", "sequence", "num_delivered", "stream"))
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        assert [values for values, _ in collector.emitted] == [
            [f"{jetstream}.a", "the cow jumped", 1, 1, jetstream],
            [f"{jetstream}.a", b"\xff\xfe raw", 2, 1, jetstream],
        ]
        spout.close()

    def test_ack_only_when_the_tree_is_acked(self, jetstream: str) -> None:
        nats_publish(f"{jetstream}.a", "a", "b", "c")
        spout, collector = opened(jetstream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 3)
        assert nats_pending(jetstream, DURABLE) == (3, 0)
        spout.ack(collector.emitted[1][1])
        assert drive(spout, collector, lambda: nats_pending(jetstream, DURABLE) == (2, 0))
        for _, msg_id in (collector.emitted[0], collector.emitted[2]):
            spout.ack(msg_id)
        spout.close()
        assert nats_pending(jetstream, DURABLE) == (0, 0)

    def test_a_failed_message_comes_again_from_the_server(self, jetstream: str) -> None:
        nats_publish(f"{jetstream}.a", "once more")
        spout, collector = opened(jetstream, fields=("data", "num_delivered"))
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        spout.fail(collector.emitted[0][1], "timeout")
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        assert collector.emitted[1][0] == ["once more", 2]
        spout.ack(collector.emitted[1][1])
        spout.close()
        assert nats_pending(jetstream, DURABLE) == (0, 0) and spout.replayed == 1

    def test_subject_filters_the_stream(self, jetstream: str) -> None:
        nats_publish(f"{jetstream}.keep", "k1")
        nats_publish(f"{jetstream}.skip", "s1")
        nats_publish(f"{jetstream}.keep", "k2")
        spout, collector = opened(jetstream, subject=f"{jetstream}.keep", fields=("data",))
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        assert not drive(spout, collector, lambda: len(collector.emitted) > 2, timeout=0.5)
        assert [values for values, _ in collector.emitted] == [["k1"], ["k2"]]
        spout.close()

    def test_close_hands_back_what_was_not_emitted(self, jetstream: str) -> None:
        """Messages pulled and not emitted are ``nak``-ed at close: the next task gets them at
        once, not after ``ack_wait`` (37.5 s here)."""
        nats_publish(f"{jetstream}.a", *[f"m{i}" for i in range(30)])
        first, collector = opened(jetstream, conf={"max_spout_pending": 64}, fields=("data",))
        assert drive(first, collector, lambda: len(collector.emitted) >= 1)
        emitted = len(collector.emitted)
        for _, msg_id in collector.emitted:
            first.ack(msg_id)
        first.close()
        again, collector = opened(jetstream, fields=("data",))
        assert drive(again, collector, lambda: len(collector.emitted) == 30 - emitted, timeout=5)
        for _, msg_id in collector.emitted:
            again.ack(msg_id)
        again.close()
        assert eventually(lambda: nats_pending(jetstream, DURABLE) == (0, 0), timeout=5)

    def test_two_tasks_share_the_durable_consumer(self, jetstream: str) -> None:
        """Each message goes to one of the two tasks, once."""
        sent = [f"m{i}" for i in range(200)]
        nats_publish(f"{jetstream}.a", *sent)
        one, first = opened(jetstream, task_id=1, conf={"max_spout_pending": 40}, fields=("data",))
        two, second = opened(jetstream, task_id=2, conf={"max_spout_pending": 40}, fields=("data",))
        received: list[str] = []

        def both_ack() -> bool:
            for spout, collector in ((one, first), (two, second)):
                spout.next_tuple()
                while collector.emitted:
                    values, msg_id = collector.emitted.pop()
                    received.append(values[0])
                    spout.ack(msg_id)
            return nats_pending(jetstream, DURABLE) == (0, 0)

        assert eventually(both_ack, timeout=20, interval=0.01)
        one.close()
        two.close()
        assert sorted(received) == sorted(sent)


class TestDeadLetters:
    def test_terminated_after_max_replays_and_the_stream_keeps_it(self, jetstream: str) -> None:
        """In-process topology: ten good messages and a poison one, which FailPoison fails
        every time: 1 + 3 deliveries, then ``term``; the good ones are acked."""
        from rayflow.connectors.nats import NatsJetStreamSpout

        good = [f"m{i}" for i in range(10)]
        nats_publish(f"{jetstream}.a", *good[:5], POISON, *good[5:])
        run = poison_topology(NatsJetStreamSpout(jetstream, DURABLE, fields=("data",), max_replays=3))
        assert run_until(run, lambda: run.metrics()["source"]["dead_lettered"] == 1)
        assert run_until(run, lambda: run.metrics()["source"]["acked"] == len(good))
        run.close()
        assert run.metrics()["source"]["failed"] == 4
        assert sum(values == [POISON] for values in run.emitted("source")) == 4
        assert eventually(lambda: nats_pending(jetstream, DURABLE) == (0, 0), timeout=5)
        assert stream_messages(jetstream) == 11  # terminated is not deleted

    def test_the_server_counts_replays_across_a_restart(self, jetstream: str) -> None:
        """Two fails, then the task closes holding the third delivery (its tree lost): the
        server redelivers it after ``ack_wait``, to a task that terminates it at its fail."""
        nats_publish(f"{jetstream}.a", POISON)
        conf = {"message_timeout_secs": 0.8}  # ack_wait 1 s
        dying, collector = opened(jetstream, conf=conf, fields=("data", "num_delivered"), max_replays=3)
        for emits in (1, 2, 3):
            assert drive(dying, collector, lambda n=emits: len(collector.emitted) == n)  # type: ignore[misc]
            if emits < 3:
                dying.fail(collector.emitted[-1][1], "failed")
        dying.close()
        again, collector = opened(jetstream, conf=conf, fields=("data", "num_delivered"), max_replays=3)
        assert drive(again, collector, lambda: len(collector.emitted) == 1)
        assert collector.emitted[0][0] == [POISON, 4]
        again.fail(collector.emitted[0][1], "timeout")
        assert collector.counts["dead_lettered"] == 1
        assert not drive(again, collector, lambda: len(collector.emitted) > 1, timeout=1.5)
        again.close()
        assert nats_pending(jetstream, DURABLE) == (0, 0)


class TestExistingConsumers:
    """A consumer that exists is checked before it is used: one the spout cannot keep
    at-least-once with is refused, with an error that says why and what to do."""

    @pytest.mark.parametrize("policy", ["all", "none"])
    def test_an_ack_policy_other_than_explicit_is_refused(self, jetstream: str, policy: str) -> None:
        nats_consumer(jetstream, DURABLE, ack_policy=policy)
        nats_publish(f"{jetstream}.a", "kept")
        spout, collector = opened(jetstream)
        assert drive(spout, collector, lambda: len(collector.errors) == 1)
        said = str(collector.errors[0])
        assert f"ack_policy {policy!r}" in said and "'explicit'" in said and "nats consumer rm" in said
        assert not drive(spout, collector, lambda: bool(collector.emitted), timeout=0.5)
        spout.close()
        assert nats_pending(jetstream, DURABLE) == (0, 1)  # not delivered, so not lost

    def test_a_push_consumer_is_refused(self, jetstream: str) -> None:
        nats_consumer(jetstream, DURABLE, ack_policy="explicit", deliver_subject=f"pushed.{jetstream}")
        spout, collector = opened(jetstream)
        assert drive(spout, collector, lambda: len(collector.errors) == 1)
        assert "is a push consumer" in str(collector.errors[0])
        spout.close()

    def test_a_pull_larger_than_the_consumers_max_batch_is_made_smaller_and_said_once(self, jetstream: str) -> None:
        """JetStream answers a pull over ``max_batch`` with a 409 for ever: the spout says so
        once and pulls ``max_batch`` at a time."""
        nats_consumer(jetstream, DURABLE, ack_policy="explicit", max_batch=5)
        payloads = [f"m{i}" for i in range(30)]
        nats_publish(f"{jetstream}.a", *payloads)
        spout, collector = opened(jetstream, fields=("data",))
        assert drive(spout, collector, lambda: len(collector.emitted) == 30)
        assert sorted(values[0] for values, _ in collector.emitted) == sorted(payloads)
        assert len(collector.errors) == 1 and "at most 5 messages" in str(collector.errors[0])
        for _, msg_id in collector.emitted:
            spout.ack(msg_id)
        spout.close()
        assert eventually(lambda: nats_pending(jetstream, DURABLE) == (0, 0), timeout=5)

    def test_the_consumers_ack_wait_sets_the_in_progress_rounds(self, jetstream: str) -> None:
        """Message timeout 30 s (a created consumer would wait 37.5 s), the consumer's
        ``ack_wait`` 2 s: a message held 5 s is not redelivered."""
        nats_consumer(jetstream, DURABLE, ack_policy="explicit", ack_wait=2_000_000_000)
        nats_publish(f"{jetstream}.a", "held")
        spout, collector = opened(jetstream, conf={"message_timeout_secs": 30}, fields=("data",))
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        assert not drive(spout, collector, lambda: len(collector.emitted) > 1, timeout=5)
        spout.ack(collector.emitted[0][1])
        spout.close()
        assert eventually(lambda: nats_pending(jetstream, DURABLE) == (0, 0), timeout=5)


class TestFaults:
    def test_a_half_open_connection_is_noticed_by_the_spouts_pings(self, jetstream: str) -> None:
        """The network stops carrying anything without closing the connection while no pull
        request is out (the spout deactivated, only its upkeep running): the spout's PINGs go
        unanswered, and within three ping intervals it reports the connection as half-open and
        makes a new one."""
        from rayflow.connectors.nats import FETCH_WAIT_SECS, MAX_PINGS_OUT, PING_INTERVAL_SECS

        proxy = Proxy(4222)
        try:
            spout, collector = opened(jetstream, url=proxy.url(NATS_URL), fields=("data",))
            assert drive(spout, collector, lambda: nats_pending(jetstream, DURABLE) == (0, 0))
            spout.deactivate()
            drive(spout, collector, lambda: False, timeout=FETCH_WAIT_SECS + 0.5, upkeep_only=True)  # the pull ends
            proxy.freeze()
            window = PING_INTERVAL_SECS * (MAX_PINGS_OUT + 1) + 5
            assert drive(spout, collector, lambda: len(collector.errors) == 1, timeout=window, upkeep_only=True)
            assert "half-open" in str(collector.errors[0])
            proxy.restore()
            spout.activate()
            nats_publish(f"{jetstream}.a", "after")
            assert drive(spout, collector, lambda: len(collector.emitted) == 1, timeout=20)
            spout.ack(collector.emitted[0][1])
            spout.close()
        finally:
            proxy.close()

    def test_a_missing_stream_is_reported_once_and_picked_up_once_it_exists(self) -> None:
        require_nats()
        name = unique("late").replace("-", "_")
        spout, collector = opened(name)
        try:
            assert drive(spout, collector, lambda: len(collector.errors) == 1)
            assert name in str(collector.errors[0])

            async def add(js: Any) -> None:
                await js.add_stream(name=name, subjects=[f"{name}.>"])

            nats_call(add)
            nats_publish(f"{name}.a", "finally")
            assert drive(spout, collector, lambda: len(collector.emitted) == 1, timeout=15)
            assert len(collector.errors) == 1
            spout.ack(collector.emitted[0][1])
            spout.close()
        finally:

            async def delete(js: Any) -> None:
                await js.delete_stream(name)

            nats_call(delete)

    def test_a_consumer_deleted_under_the_spout_is_created_again(self, jetstream: str) -> None:
        """Its pull request goes unanswered; the lookup finds no consumer: an outage, reported
        once, and the reconnect creates the consumer again."""
        spout, collector = opened(jetstream, fields=("data",))
        assert drive(spout, collector, lambda: nats_pending(jetstream, DURABLE) == (0, 0))

        async def delete(js: Any) -> None:
            await js.delete_consumer(jetstream, DURABLE)

        nats_call(delete)
        assert drive(spout, collector, lambda: len(collector.errors) == 1, timeout=10)
        assert "consumer not found" in str(collector.errors[0])
        nats_publish(f"{jetstream}.a", "after")
        assert drive(spout, collector, lambda: len(collector.emitted) == 1, timeout=10)
        spout.ack(collector.emitted[0][1])
        spout.close()
        assert nats_pending(jetstream, DURABLE) == (0, 0) and len(collector.errors) == 1

    def test_a_lost_connection_is_reported_once_and_the_spout_goes_on(self, jetstream: str) -> None:
        proxy = Proxy(4222)
        try:
            nats_publish(f"{jetstream}.a", "before")
            spout, collector = opened(jetstream, url=proxy.url(NATS_URL), fields=("data",))
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            spout.ack(collector.emitted[0][1])
            assert drive(spout, collector, lambda: nats_pending(jetstream, DURABLE) == (0, 0))
            proxy.cut()
            assert drive(spout, collector, lambda: len(collector.errors) == 1)
            proxy.restore()
            nats_publish(f"{jetstream}.a", "after")
            assert drive(spout, collector, lambda: len(collector.emitted) == 2, timeout=20)
            assert collector.emitted[1][0] == ["after"] and len(collector.errors) == 1
            spout.ack(collector.emitted[1][1])
            spout.close()
            assert nats_pending(jetstream, DURABLE) == (0, 0)
        finally:
            proxy.close()


class TestConstruction:
    def test_bad_values_name_the_stream_and_the_value(self) -> None:
        pytest.importorskip("nats")
        from rayflow.connectors.nats import NatsJetStreamSpout

        with pytest.raises(ConfigError, match="durable must be a non-empty name"):
            NatsJetStreamSpout("ORDERS", "a.b")
        with pytest.raises(ConfigError, match="'ORDERS': url must be a nats://"):
            NatsJetStreamSpout("ORDERS", "d", url="amqp://x")
        with pytest.raises(ConfigError, match=r"unknown field\(s\) \['body'\]"):
            NatsJetStreamSpout("ORDERS", "d", fields=("body",))
        with pytest.raises(ConfigError, match="batch must be a positive int"):
            NatsJetStreamSpout("ORDERS", "d", batch=0)
        with pytest.raises(ConfigError, match="max_replays must be an int >= 0"):
            NatsJetStreamSpout("ORDERS", "d", max_replays=-5)


# -- on Ray -----------------------------------------------------------------------------------
def test_on_ray_the_poison_message_is_terminated_and_counted(ray_cluster: str, jetstream: str) -> None:
    import rayflow
    from rayflow import Config, TopologyBuilder
    from rayflow.connectors.nats import NatsJetStreamSpout

    nats_publish(f"{jetstream}.a", *[f"m{i}" for i in range(5)], POISON, *[f"m{i}" for i in range(5, 10)])
    builder = TopologyBuilder()
    builder.set_spout("source", NatsJetStreamSpout(jetstream, DURABLE, fields=("data",), max_replays=2))
    builder.set_bolt("work", FailPoison()).shuffle_grouping("source")
    handle = rayflow.submit_topology(unique("topology"), Config(message_timeout_secs=10), builder.create_topology())
    try:
        assert eventually(lambda: handle.metrics()["source"]["dead_lettered"] == 1)
        assert eventually(lambda: handle.metrics()["source"]["acked"] == 10)
        source = handle.metrics()["source"]
        assert (source["failed"], source["emitted"]) == (3, 13)
        [task] = [t for t in handle.task_metrics().values() if t["component"] == "source"]
        assert task["dead_lettered"] == 1
        assert eventually(lambda: nats_pending(jetstream, DURABLE) == (0, 0), timeout=5)
    finally:
        handle.kill()


def test_on_ray_a_tree_whose_timeout_is_reset_is_kept_from_redelivery(ray_cluster: str, jetstream: str) -> None:
    """message timeout 1 s, so the consumer's ack_wait is 1.25 s; the Holder resets the tree's
    timeout at every tick for 4 s: the spout's ``in_progress`` keeps JetStream from redelivering."""
    import rayflow
    from rayflow import Config, TopologyBuilder
    from rayflow.connectors.nats import NatsJetStreamSpout
    from tests.topology_helpers import Board, Holder

    nats_publish(f"{jetstream}.a", "long work")
    board = Board.remote()
    builder = TopologyBuilder()
    builder.set_spout("source", NatsJetStreamSpout(jetstream, DURABLE))
    builder.set_bolt("work", Holder(board, reset=True), config={"tick_tuple_freq_secs": 0.2}).shuffle_grouping("source")
    handle = rayflow.submit_topology(unique("topology"), Config(message_timeout_secs=1), builder.create_topology())
    try:
        assert eventually(lambda: handle.metrics()["source"]["emitted"] == 1)
        assert not eventually(lambda: handle.metrics()["source"]["emitted"] > 1, timeout=4)
        assert nats_pending(jetstream, DURABLE) == (1, 0)
        board.set.remote("release")
        assert eventually(lambda: handle.metrics()["source"]["acked"] == 1)
        assert handle.metrics()["source"]["failed"] == 0
        assert eventually(lambda: nats_pending(jetstream, DURABLE) == (0, 0), timeout=5)
    finally:
        handle.kill()


def test_the_yaml_word_count_loads_and_runs(ray_cluster: str, jetstream: str, tmp_path: Path) -> None:
    """configs/nats_wordcount.yaml, on a stream of this test's own (its names swapped in)."""
    from rayflow.connectors.nats import NatsJetStreamSpout
    from rayflow.topology_file import load_topology

    original = Path(__file__).parents[2] / "configs" / "nats_wordcount.yaml"
    loaded = load_topology(original)
    spout = loaded.topology.components["sentences"].component
    assert isinstance(spout, NatsJetStreamSpout)
    assert (spout.stream, spout.durable, spout.subject, spout.fields) == ("SENTENCES", "wordcount", None, ("data",))

    import rayflow

    copy = tmp_path / "nats_wordcount.yaml"
    copy.write_text(original.read_text().replace("SENTENCES", jetstream))
    mine = load_topology(copy)
    nats_publish(f"{jetstream}.en", *["the cow jumped over the moon"] * 20)
    handle = rayflow.submit_topology(unique("topology"), mine.config, mine.topology)
    try:
        assert eventually(lambda: handle.metrics()["sentences"]["acked"] == 20)
        assert handle.metrics()["count"]["executed"] == 120
        assert eventually(lambda: nats_pending(jetstream, "wordcount") == (0, 0), timeout=5)
    finally:
        handle.kill()
