"""RedisStreamSpout against the real Redis on 127.0.0.1, driven in-process (no Ray): the spout
object is opened with a recording collector and its ``next_tuple``/``ack``/``fail`` are called
as the spout executor calls them. Each test uses its own stream and deletes it."""

from __future__ import annotations

from typing import Any

import pytest

from rayflow._errors import ConfigError
from tests.conftest import eventually
from tests.connectors.brokers import REDIS_URL, FakeCollector, Proxy, context, drive

pytestmark = pytest.mark.broker

GROUP = "rayflow"


def opened(stream: str, task_id: int = 1, **kwargs: Any) -> tuple[Any, FakeCollector]:
    from rayflow.connectors.redis import RedisStreamSpout

    spout = RedisStreamSpout(stream, GROUP, **kwargs)
    collector = FakeCollector()
    spout.open({"max_spout_pending": 1000}, context(task_id), collector)
    spout.activate()
    return spout, collector


def pending(client: Any, stream: str) -> int:
    return int(client.xpending(stream, GROUP)["pending"])


class TestDelivery:
    def test_creates_the_group_and_reads_what_was_there_before(self, client: Any, stream: str) -> None:
        first = client.xadd(stream, {"word": "cow", "raw": b"\xff"}).decode()
        spout, collector = opened(stream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        assert collector.emitted == [([first, {"word": "cow", "raw": b"\xff"}], first)]
        assert spout.consumer == "source-1"
        spout.close()

    def test_fields_may_name_entry_fields(self, client: Any, stream: str) -> None:
        entry = client.xadd(stream, {"n": "7", "text": "seven"}).decode()
        spout, collector = opened(stream, fields=("id", "stream", "text", "missing"))
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        assert collector.emitted[0][0] == [entry, stream, "seven", None]
        spout.close()

    def test_xack_only_when_the_tree_is_acked(self, client: Any, stream: str) -> None:
        for i in range(3):
            client.xadd(stream, {"n": str(i)})
        spout, collector = opened(stream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 3)
        assert pending(client, stream) == 3
        spout.ack(collector.emitted[0][1])
        # acks go out in batches (ACK_LINGER_SECS after the previous one), sent without waiting
        assert drive(spout, collector, lambda: pending(client, stream) == 2)
        for _, msg_id in collector.emitted[1:]:
            spout.ack(msg_id)
        spout.close()
        assert pending(client, stream) == 0

    def test_a_failed_entry_is_emitted_again_with_its_data(self, client: Any, stream: str) -> None:
        entry = client.xadd(stream, {"n": "1"}).decode()
        spout, collector = opened(stream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        spout.fail(entry, "timeout")
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        assert collector.emitted[1] == collector.emitted[0]
        assert pending(client, stream) == 1
        spout.ack(entry)
        spout.close()
        assert pending(client, stream) == 0

    def test_a_failed_entry_someone_else_acked_is_not_replayed(self, client: Any, stream: str) -> None:
        entry = client.xadd(stream, {"n": "1"}).decode()
        spout, collector = opened(stream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        client.xack(stream, GROUP, entry)  # another consumer claimed it and finished it
        spout.fail(entry)
        assert not drive(spout, collector, lambda: len(collector.emitted) > 1, timeout=0.3)
        spout.close()

    def test_an_entry_deleted_while_pending_is_dropped(self, client: Any, stream: str) -> None:
        entry = client.xadd(stream, {"n": "1"}).decode()
        first, first_collector = opened(stream)
        assert drive(first, first_collector, lambda: len(first_collector.emitted) == 1)
        client.xdel(stream, entry)
        restarted, collector = opened(stream)  # same task: reads its pending list, finds the hole
        drive(restarted, collector, lambda: False, timeout=0.3)
        assert collector.emitted == [] and pending(client, stream) == 0
        restarted.close()


class TestFailures:
    def test_a_wave_of_failures_is_claimed_back_in_one_write(self, client: Any, stream: str) -> None:
        """300 trees time out at once: ``fail`` never waits for Redis, and the 300 entries are
        claimed back together (an ``XPENDING`` each, one ``XCLAIM``) on the connection of
        reads and acks; each comes again once, counted by Redis as its second delivery."""
        ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(300)]
        spout, collector = opened(stream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 300)
        writes: list[list[str]] = []
        send_all = spout._send_all

        def recorded(commands: list[tuple[Any, ...]], sent: list[Any]) -> bool:
            writes.append([command[0] for command in commands])
            return bool(send_all(commands, sent))

        spout._send_all = recorded
        for _, msg_id in collector.emitted:
            spout.fail(msg_id, "timeout")
        assert writes == []  # nothing sent, nothing waited for, by fail itself
        assert drive(spout, collector, lambda: len(collector.emitted) == 600)
        claims = [write for write in writes if "XCLAIM" in write]
        assert len(claims) == 1 and claims[0].count("XPENDING") == 300
        assert sorted(msg_id for _, msg_id in collector.emitted[300:]) == sorted(ids)
        deliveries = {int(p["times_delivered"]) for p in client.xpending_range(stream, GROUP, "-", "+", 300)}
        assert deliveries == {2}
        for _, msg_id in collector.emitted[300:]:
            spout.ack(msg_id)
        spout.close()
        assert pending(client, stream) == 0


class TestFaults:
    def test_a_reply_that_is_not_resp_makes_a_new_connection(self, client: Any, stream: str) -> None:
        """Garbage on the connection of reads and acks: reported once, the connection made
        again, the entries go on (before, a ValueError escaped every next_tuple)."""
        client.xadd(stream, {"n": "1"})
        proxy = Proxy(6379)
        try:
            spout, collector = opened(stream, url=proxy.url(REDIS_URL))
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            proxy.inject(b"$not-a-length\r\n")
            assert drive(spout, collector, lambda: len(collector.errors) == 1)
            assert "not RESP" in str(collector.errors[0])
            second = client.xadd(stream, {"n": "2"}).decode()
            assert drive(spout, collector, lambda: second in [msg_id for _, msg_id in collector.emitted])
            for _, msg_id in collector.emitted:
                spout.ack(msg_id)
            spout.close()
            assert pending(client, stream) == 0 and len(collector.errors) == 1
        finally:
            proxy.close()

    def test_a_restarted_task_reads_its_own_pending_entries_again(self, client: Any, stream: str) -> None:
        ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(5)]
        dead, dead_collector = opened(stream, task_id=3)
        assert drive(dead, dead_collector, lambda: len(dead_collector.emitted) == 5)
        dead.ack(ids[0])
        assert drive(dead, dead_collector, lambda: pending(client, stream) == 4)
        # the task dies here (never closed); its replacement is the same consumer
        again, collector = opened(stream, task_id=3)
        assert drive(again, collector, lambda: len(collector.emitted) == 4)
        assert [msg_id for _, msg_id in collector.emitted] == ids[1:]
        again.close()

    def test_entries_of_a_dead_consumer_are_claimed_after_claim_idle_ms(self, client: Any, stream: str) -> None:
        ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(4)]
        dead, dead_collector = opened(stream, task_id=1, claim_idle_ms=300)
        assert drive(dead, dead_collector, lambda: len(dead_collector.emitted) == 4)
        other, collector = opened(stream, task_id=2, claim_idle_ms=300)
        assert drive(other, collector, lambda: len(collector.emitted) == 4, timeout=5)
        assert sorted(msg_id for _, msg_id in collector.emitted) == ids
        assert other.claimed == 4
        for msg_id in ids:
            other.ack(msg_id)
        other.close()
        assert pending(client, stream) == 0

    def test_own_entries_in_flight_are_not_claimed_twice(self, client: Any, stream: str) -> None:
        client.xadd(stream, {"n": "1"})
        spout, collector = opened(stream, claim_idle_ms=50)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        assert not drive(spout, collector, lambda: len(collector.emitted) > 1, timeout=0.5)
        spout.close()

    def test_lost_connection_is_retried_with_backoff_and_reported_once(self, client: Any, stream: str) -> None:
        first = client.xadd(stream, {"n": "1"}).decode()
        proxy = Proxy(6379)
        try:
            spout, collector = opened(stream, url=proxy.url(REDIS_URL))
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            proxy.cut()
            spout.ack(first)  # cannot be sent now: kept until Redis answers again
            drive(spout, collector, lambda: False, timeout=1.0)
            assert len(collector.errors) == 1
            assert stream in str(collector.errors[0])
            assert pending(client, stream) == 1
            proxy.restore()
            second = client.xadd(stream, {"n": "2"}).decode()
            assert drive(spout, collector, lambda: len(collector.emitted) == 2)
            assert collector.emitted[1][1] == second and len(collector.errors) == 1
            assert eventually(lambda: pending(client, stream) == 1)
            spout.ack(second)
            spout.close()
            assert pending(client, stream) == 0
        finally:
            proxy.close()


class TestConstruction:
    def test_bad_values_name_the_stream_and_the_value(self) -> None:
        pytest.importorskip("redis")
        from rayflow.connectors.redis import RedisStreamSpout

        with pytest.raises(ConfigError, match="'orders': claim_idle_ms must be a positive int"):
            RedisStreamSpout("orders", "g", claim_idle_ms=0)
        with pytest.raises(ConfigError, match="group must be a non-empty string"):
            RedisStreamSpout("orders", "")
        with pytest.raises(ConfigError, match="url must be a redis://"):
            RedisStreamSpout("orders", "g", url="http://x")
