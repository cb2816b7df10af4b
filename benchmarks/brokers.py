"""Broker spouts against their bare clients, side by side in one run. Not a test: run it on a
quiet machine, with RabbitMQ on 127.0.0.1:5672 (guest/guest), Redis on 127.0.0.1:6379 and NATS
(JetStream enabled) on 127.0.0.1:4222.

    python benchmarks/brokers.py [--messages N] [--rounds 3] [--brokers rabbitmq redis nats] [--old-ref HEAD]
                                 [--tasks 1 2]

Every configuration drains the same N JSON messages from a fresh queue (or stream) and parses
each one (``json.loads``) before acking it:

- rabbitmq: queue -> ``RabbitMQSpout`` -> a parsing bolt that acks (one task each, one acker,
  ``Config()`` defaults) against a bare pika consumer (prefetch 5,000, ``basic_ack`` with
  ``multiple=True`` every 500 messages and after the last);
- redis: stream -> ``RedisStreamSpout`` -> the same bolt against a bare redis-py loop
  (``XREADGROUP count=1000`` and one ``XACK`` per read);
- nats: JetStream stream -> ``NatsJetStreamSpout`` -> the same bolt against two bare nats-py
  loops on a durable pull consumer, each acking every message (explicit acks are one message
  at a time): ``fetch(500)``, nats-py's pull API, and a hand-made pull (a request for 500 at a
  time answered to an inbox subscription with a callback, as the spout pulls), which spares
  ``fetch``'s timer per message;
- ``--tasks 1 2`` (the default) also runs each spout with two tasks (``parallelism=2``) on the
  one queue, consumer group or durable consumer, still into one parsing bolt, against the one
  bare consumer: can a topology read a broker faster than one client loop can;
- every run on Ray (and every bare loop) also reports CPU time per message: of this process and
  all it started (the local Ray: the task actors, raylet, GCS), of the broker's server, and how
  busy the whole machine was. The spouts and the bare loops do the same client work, so with
  the machine's cores all busy a ratio measures CPU per message, not a slow spout;
- ``--old-ref REF`` also runs the RabbitMQ and Redis spouts as they are at that git revision
  (``git show``), to measure a change against what it replaces in the same run;
- ``--cpu`` measures this process's CPU time per message instead, which a busy machine
  disturbs far less than the wall clock: each spout is driven in this process, without Ray (a
  stand-in collector; the driver parses each message and acks it at once, as the bolt and the
  acker would), from ``open`` to ``close``, and each bare loop from its first read to its last
  ack. The client threads count (the NATS spout's), the brokers' own processes do not.

The clock runs from activation (or the first read) until the last message is acked to the
broker; filling the queue is not timed. With ``--cpu`` the rates are messages per CPU second.
Rounds interleave the configurations and turn their order round every round; each ratio is the
median of the rounds' ratios of two runs made one after the other (``paired_ratio``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere: find benchmarks/

import asyncio  # noqa: E402

import nats  # noqa: E402
import nats.errors  # noqa: E402
import pika  # noqa: E402
import psutil  # type: ignore[import-untyped]  # noqa: E402
import redis  # noqa: E402
from nats.js.api import AckPolicy, ConsumerConfig  # noqa: E402
from ray import cloudpickle  # noqa: E402

from benchmarks.wordcount import _median, paired_ratio  # noqa: E402
from rayflow import Bolt, Config, LocalCluster, OutputCollector, TopologyBuilder, TopologyContext, Tuple  # noqa: E402
from rayflow._components import Spout  # noqa: E402
from rayflow._tuple import DEFAULT_STREAM  # noqa: E402
from rayflow.connectors.nats import NatsJetStreamSpout  # noqa: E402
from rayflow.connectors.rabbitmq import RabbitMQSpout  # noqa: E402
from rayflow.connectors.redis import RedisStreamSpout  # noqa: E402

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
REDIS_URL = "redis://127.0.0.1:6379/0"
BARE_PREFETCH = 5000
BARE_ACK_EVERY = 500
BARE_READ_COUNT = 1000
NATS_URL = "nats://127.0.0.1:4222"
BARE_FETCH = 500
BARE_MAX_ACK_PENDING = 20_000


BROKER_PROCESSES = ("redis-server", "beam.smp", "nats-server")
"""The brokers' server processes, whose CPU time each run also reports."""


class CpuMeter:
    """CPU time spent during a run: by this process and every process it started (the local Ray:
    raylet, GCS, the task actors' workers), by the broker servers, and by the whole machine
    (``box_busy``: the share of all cores busy, whoever used them; another job on the machine
    shows here). Per message, these tell a spout that is slow from a machine out of cores."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.ours = self._tree()
        self.brokers = self._brokers()
        self.box = _box_jiffies()

    @staticmethod
    def _tree() -> dict[int, float]:
        me = psutil.Process()
        times: dict[int, float] = {}
        for proc in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
                times[proc.pid] = cpu.user + cpu.system
        return times

    @staticmethod
    def _brokers() -> float:
        total = 0.0
        for proc in psutil.process_iter(["name", "cpu_times"]):
            if proc.info["name"] in BROKER_PROCESSES and proc.info["cpu_times"] is not None:
                total += proc.info["cpu_times"].user + proc.info["cpu_times"].system
        return total

    def stop(self, n: int) -> dict[str, float]:
        """Figures since the meter started, per message of ``n``."""
        ours = sum(cpu - self.ours.get(pid, 0.0) for pid, cpu in self._tree().items())
        brokers = self._brokers() - self.brokers
        busy, total = (after - before for after, before in zip(_box_jiffies(), self.box, strict=True))
        return {
            "tree_cpu_us_per_msg": ours / n * 1e6,
            "broker_cpu_us_per_msg": brokers / n * 1e6,
            "box_busy": busy / max(total, 1),
        }


def _box_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (``/proc/stat``)."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def measured(n: int, seconds: float, cpu_secs: float | None = None, meter: CpuMeter | None = None) -> dict[str, Any]:
    """A run's figures: wall time and rate, and (when measured) this process's CPU time per
    message and what ``meter`` saw."""
    run: dict[str, Any] = {"messages": n, "seconds": seconds, "msgs_per_s": n / seconds}
    if cpu_secs is not None:
        run.update(cpu_secs=cpu_secs, cpu_us_per_msg=cpu_secs / n * 1e6, msgs_per_cpu_s=n / max(cpu_secs, 1e-9))
    if meter is not None:
        run.update(meter.stop(n))
    return run


def message(i: int) -> bytes:
    return json.dumps({"id": i, "user": f"u{i % 1000}", "amount": i % 97, "note": "x" * 40}).encode()


class ParseBolt(Bolt):
    """Parses each message's body (JSON) and acks it."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.parsed = 0

    def execute(self, tup: Tuple) -> None:
        record = json.loads(tup[0])
        self.parsed += record["amount"] >= 0
        self.collector.ack(tup)


# -- RabbitMQ ---------------------------------------------------------------------------------
def fill_queue(n: int) -> str:
    queue = f"rayflow-bench-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    channel.queue_declare(queue)
    for i in range(n):
        channel.basic_publish("", queue, message(i))
    while channel.queue_declare(queue, passive=True).method.message_count < n:
        time.sleep(0.05)
    connection.close()
    return queue


def delete_queue(queue: str) -> int:
    """Delete ``queue``; how many messages it still held."""
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    left = int(connection.channel().queue_delete(queue).method.message_count)
    connection.close()
    return left


def queue_state(queue: str) -> tuple[int, int]:
    """(messages ready or unacked, consumers)."""
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    method = connection.channel().queue_declare(queue, passive=True).method
    connection.close()
    return int(method.message_count), int(method.consumer_count)


def run_bare_pika(n: int) -> dict[str, Any]:
    queue = fill_queue(n)
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=BARE_PREFETCH)
    done = [0, 0]  # consumed, last delivery tag not acked yet

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        record = json.loads(body)
        done[0] += record["amount"] >= 0
        done[1] = method.delivery_tag
        if done[0] % BARE_ACK_EVERY == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)
            done[1] = 0

    meter = CpuMeter()
    started, cpu = time.perf_counter(), time.process_time()
    channel.basic_consume(queue, on_message)
    while done[0] < n:
        connection.process_data_events(time_limit=0.01)
    if done[1]:
        channel.basic_ack(done[1], multiple=True)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    run = measured(n, elapsed, cpu, meter)
    connection.close()
    left = delete_queue(queue)
    assert left == 0, f"bare pika left {left} messages"
    return run


def run_rayflow(
    cluster: LocalCluster | None,
    n: int,
    spout: Spout,
    name: str,
    until_empty: Callable[[], bool],
    parallelism: int = 1,
) -> dict[str, Any]:
    """Drain ``n`` messages through ``spout`` (``parallelism`` tasks) -> ``ParseBolt`` (one
    task) on ``cluster`` (or in this process, without Ray, when ``cluster`` is ``None``:
    ``--cpu``, one task)."""
    if cluster is None:
        return drive_in_process(spout, n, name, until_empty)
    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=parallelism)
    builder.set_bolt("parse", ParseBolt()).shuffle_grouping("source")
    handle = cluster.submit_topology(
        f"{name}-{uuid.uuid4().hex[:6]}", Config(), builder.create_topology(), active=False
    )
    meter = CpuMeter()
    started = time.perf_counter()
    handle.activate()
    deadline = started + 600
    wait_for_acks(handle, n, started, deadline, name)
    # The spout acked every tree; the broker hears of the last ones at the next ack flush.
    while not until_empty():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{name}: the broker still holds messages after 600 s")
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    run = measured(n, elapsed, meter=meter)
    source = handle.metrics()["source"]
    handle.kill()
    assert source["failed"] == 0 and source["acked"] == n, source
    return run


def wait_for_acks(handle: Any, n: int, started: float, deadline: float, name: str) -> None:
    """Return once the ``source`` spout acked ``n`` trees. ``metrics()`` is a Ray call to every
    task (about 10 ms of CPU in all, on 2 cores), so polling it every few milliseconds would
    take a core from the topology it measures, and a bare loop pays nothing of the kind. So
    each wait is half the time the remaining messages need at the rate so far (5 ms to 0.5 s):
    some ten polls a run, the last within a few milliseconds of the end."""
    while (acked := handle.metrics()["source"]["acked"]) < n:
        now = time.perf_counter()
        if now > deadline:
            raise RuntimeError(f"{name}: {acked} of {n} acked, not done after {deadline - started:.0f} s")
        rate = acked / max(now - started, 1e-3)
        time.sleep(min(0.5, max(0.005, (n - acked) / rate / 2)) if rate > 0 else 0.1)


class AckingCollector:
    """Stands in for the spout executor in ``--cpu`` runs: keeps what the spout emits for the
    driver, which parses each message and acks it."""

    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any]] = []

    def emit(self, values: list[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        self.emitted.append((values, msg_id))
        return []

    def exhausted(self) -> None:
        pass

    def report_error(self, exc: BaseException) -> None:
        print(f"  the spout reported: {type(exc).__name__}: {exc}", flush=True)

    def count(self, name: str, amount: int = 1) -> None:
        pass


def drive_in_process(spout: Spout, n: int, name: str, until_empty: Callable[[], bool]) -> dict[str, Any]:
    collector = AckingCollector()
    conf = {"max_spout_pending": Config().max_spout_pending, "message_timeout_secs": 30.0}
    started, cpu = time.perf_counter(), time.process_time()
    deadline = started + 600
    spout.open(conf, TopologyContext(1, {1: "source"}, {"source": {}}), collector)  # type: ignore[arg-type]
    spout.activate()
    done = 0
    while done < n:
        spout.next_tuple()
        emitted, collector.emitted = collector.emitted, []
        for values, msg_id in emitted:
            record = json.loads(values[0])
            done += record["amount"] >= 0
            spout.ack(msg_id)
        if not emitted:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{name}: {done} of {n} messages after 600 s")
            time.sleep(0.0002)  # waiting for the broker: no CPU
    spout.close()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    while not until_empty():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{name}: the broker still holds messages after 600 s")
        time.sleep(0.01)
    return measured(n, elapsed, cpu)


def run_rabbitmq_spout(
    cluster: LocalCluster | None, n: int, spout_class: Callable[[str], Spout], name: str, parallelism: int = 1
) -> dict[str, Any]:
    queue = fill_queue(n)
    try:
        return run_rayflow(cluster, n, spout_class(queue), name, lambda: queue_state(queue)[0] == 0, parallelism)
    finally:
        left = delete_queue(queue)
        assert left == 0, f"{name} left {left} messages"


def old_module(ref: str, name: str) -> Any:
    """Connector module ``name`` (``rabbitmq``) as it is at git revision ``ref``, its classes
    pickled by value for the Ray workers."""
    path = f"rayflow/connectors/{name}.py"
    source = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    module = types.ModuleType(f"rayflow.connectors._{name}_old")
    module.__package__ = "rayflow.connectors"
    sys.modules[module.__name__] = module
    exec(compile(source.stdout, f"{ref}:{path}", "exec"), module.__dict__)
    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return module


# -- Redis ------------------------------------------------------------------------------------
def fill_stream(n: int) -> str:
    stream = f"rayflow-bench-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS_URL)
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"body": message(i)})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    client.close()
    return stream


def stream_pending(stream: str, group: str) -> int:
    """Entries of ``stream`` not yet acked by ``group`` (read or not)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        info = next(g for g in client.xinfo_groups(stream) if g["name"].decode() == group)
        return int(info["pending"]) + int(info.get("lag") or 0)
    finally:
        client.close()


def run_bare_redis(n: int) -> dict[str, Any]:
    stream = fill_stream(n)
    client = redis.Redis.from_url(REDIS_URL)
    client.xgroup_create(stream, "bench", id="0")
    done = 0
    meter = CpuMeter()
    started, cpu = time.perf_counter(), time.process_time()
    while done < n:
        reply: Any = client.xreadgroup("bench", "bare", {stream: ">"}, count=BARE_READ_COUNT)
        entries = reply[0][1] if reply else []
        for _, data in entries:
            record = json.loads(data[b"body"])
            done += record["amount"] >= 0
        if entries:
            client.xack(stream, "bench", *[entry_id for entry_id, _ in entries])
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    run = measured(n, elapsed, cpu, meter)
    client.delete(stream)
    client.close()
    return run


def run_redis_spout(
    cluster: LocalCluster | None, n: int, spout_class: Callable[..., Spout], name: str, parallelism: int = 1
) -> dict[str, Any]:
    stream = fill_stream(n)
    spout = spout_class(stream, "bench", fields=("body",))
    try:
        return run_rayflow(cluster, n, spout, name, lambda: stream_pending(stream, "bench") == 0, parallelism)
    finally:
        redis.Redis.from_url(REDIS_URL).delete(stream)


# -- NATS JetStream ---------------------------------------------------------------------------
async def _nats(work: Callable[[Any, Any], Any]) -> Any:
    client = await nats.connect(NATS_URL)
    try:
        return await work(client, client.jetstream())
    finally:
        await client.close()


def fill_nats_stream(n: int) -> str:
    """A new stream holding ``n`` messages on subject ``<stream>.m`` (published without waiting
    for each ack, then counted)."""
    stream = f"rayflow_bench_{uuid.uuid4().hex[:8]}"

    async def fill(client: Any, js: Any) -> None:
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        for i in range(n):
            await client.publish(f"{stream}.m", message(i))
        await client.flush()
        while (await js.stream_info(stream)).state.messages < n:
            await asyncio.sleep(0.05)

    asyncio.run(_nats(fill))
    return stream


def delete_nats_stream(stream: str) -> None:
    async def delete(_: Any, js: Any) -> None:
        await js.delete_stream(stream)

    asyncio.run(_nats(delete))


def nats_unacked(stream: str, durable: str) -> int:
    """Messages of consumer ``durable`` delivered and not acked, or not delivered yet."""

    async def count(_: Any, js: Any) -> int:
        info = await js.consumer_info(stream, durable)
        return int(info.num_ack_pending) + int(info.num_pending)

    result: int = asyncio.run(_nats(count))
    return result


def run_bare_nats(n: int) -> dict[str, Any]:
    stream = fill_nats_stream(n)

    async def drain(client: Any, js: Any) -> tuple[float, float, dict[str, float]]:
        config = ConsumerConfig(
            durable_name="bare", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=BARE_MAX_ACK_PENDING
        )
        await js.add_consumer(stream, config)
        subscription = await js.pull_subscribe_bind("bare", stream)
        done = 0
        meter = CpuMeter()
        started, cpu = time.perf_counter(), time.process_time()
        while done < n:
            try:
                messages = await subscription.fetch(BARE_FETCH, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            for msg in messages:
                record = json.loads(msg.data)
                done += record["amount"] >= 0
                await msg.ack()
        await client.flush()  # the last acks out; then the clock stops once the server has them all
        cpu = time.process_time() - cpu
        while (await js.consumer_info(stream, "bare")).num_ack_pending:
            await asyncio.sleep(0.001)
        return time.perf_counter() - started, cpu, meter.stop(n)

    try:
        elapsed, cpu, figures = asyncio.run(_nats(drain))
    finally:
        delete_nats_stream(stream)
    return {**measured(n, elapsed, cpu), **figures}


def run_bare_nats_callback(n: int) -> dict[str, Any]:
    stream = fill_nats_stream(n)

    async def drain(client: Any, js: Any) -> tuple[float, float, dict[str, float]]:
        config = ConsumerConfig(
            durable_name="bare", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=BARE_MAX_ACK_PENDING
        )
        await js.add_consumer(stream, config)
        inbox = client.new_inbox()
        received: list[Any] = []
        request_over = asyncio.Event()

        async def on_message(msg: Any) -> None:
            if msg.headers and msg.headers.get("Status"):
                if msg.headers["Status"] != "100":  # 404, 408, 409: this request is over
                    request_over.set()
                return
            received.append(msg)
            if len(received) >= BARE_FETCH:
                request_over.set()

        await client.subscribe(inbox, cb=on_message)
        request = json.dumps({"batch": BARE_FETCH, "expires": 1_000_000_000}).encode()
        done = 0
        meter = CpuMeter()
        started, cpu = time.perf_counter(), time.process_time()
        while done < n:
            request_over.clear()
            await client.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.bare", request, reply=inbox)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(request_over.wait(), 2.0)
            messages, received[:] = received[:], []
            for msg in messages:
                record = json.loads(msg.data)
                done += record["amount"] >= 0
                await msg.ack()
        await client.flush()
        cpu = time.process_time() - cpu
        while (await js.consumer_info(stream, "bare")).num_ack_pending:
            await asyncio.sleep(0.001)
        return time.perf_counter() - started, cpu, meter.stop(n)

    try:
        elapsed, cpu, figures = asyncio.run(_nats(drain))
    finally:
        delete_nats_stream(stream)
    return {**measured(n, elapsed, cpu), **figures}


def run_nats_spout(
    cluster: LocalCluster | None, n: int, spout_class: Callable[..., Spout], name: str, parallelism: int = 1
) -> dict[str, Any]:
    stream = fill_nats_stream(n)
    spout = spout_class(stream, "bench", fields=("data",))
    try:
        return run_rayflow(cluster, n, spout, name, lambda: nats_unacked(stream, "bench") == 0, parallelism)
    finally:
        delete_nats_stream(stream)


# -- the run ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--brokers", nargs="*", default=["rabbitmq", "redis", "nats"], choices=["rabbitmq", "redis", "nats"]
    )
    parser.add_argument("--old-ref", metavar="REF", help="also run the spouts of this git revision")
    parser.add_argument("--cpu", action="store_true", help="CPU time per message, spouts in this process (no Ray)")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument(
        "--tasks", type=int, nargs="*", default=[1, 2], help="spout parallelisms to run (2: two tasks, one queue)"
    )
    args = parser.parse_args(argv)
    n = args.messages
    many = [p for p in args.tasks if p > 1] if not args.cpu else []

    configurations: dict[str, Callable[[LocalCluster | None], dict[str, Any]]] = {}
    if "rabbitmq" in args.brokers:
        configurations["bare pika"] = lambda _: run_bare_pika(n)
        configurations["RabbitMQSpout"] = lambda c: run_rabbitmq_spout(c, n, RabbitMQSpout, "rabbitmq-spout")
        if args.old_ref:
            old_rabbit = old_module(args.old_ref, "rabbitmq").RabbitMQSpout
            configurations[f"RabbitMQSpout@{args.old_ref}"] = lambda c: run_rabbitmq_spout(
                c, n, old_rabbit, "rabbitmq-old"
            )
        for p in many:
            configurations[f"RabbitMQSpout x{p}"] = lambda c, p=p: run_rabbitmq_spout(  # type: ignore[misc]
                c, n, RabbitMQSpout, f"rabbitmq-spout-x{p}", p
            )
    if "redis" in args.brokers:
        configurations["bare redis-py"] = lambda _: run_bare_redis(n)
        configurations["RedisStreamSpout"] = lambda c: run_redis_spout(c, n, RedisStreamSpout, "redis-spout")
        if args.old_ref:
            old_redis = old_module(args.old_ref, "redis").RedisStreamSpout
            configurations[f"RedisStreamSpout@{args.old_ref}"] = lambda c: run_redis_spout(c, n, old_redis, "redis-old")
        for p in many:
            configurations[f"RedisStreamSpout x{p}"] = lambda c, p=p: run_redis_spout(  # type: ignore[misc]
                c, n, RedisStreamSpout, f"redis-spout-x{p}", p
            )
    if "nats" in args.brokers:
        configurations["bare nats-py"] = lambda _: run_bare_nats(n)
        configurations["bare nats-py callback"] = lambda _: run_bare_nats_callback(n)
        configurations["NatsJetStreamSpout"] = lambda c: run_nats_spout(c, n, NatsJetStreamSpout, "nats-spout")
        for p in many:
            configurations[f"NatsJetStreamSpout x{p}"] = lambda c, p=p: run_nats_spout(  # type: ignore[misc]
                c, n, NatsJetStreamSpout, f"nats-spout-x{p}", p
            )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configurations}
    rate, unit = ("msgs_per_cpu_s", "msg/CPU-s") if args.cpu else ("msgs_per_s", "msg/s")
    with contextlib.nullcontext(None) if args.cpu else LocalCluster() as cluster:
        order = list(configurations)
        for round_ in range(args.rounds):
            for name in order if round_ % 2 == 0 else reversed(order):
                runs[name].append(configurations[name](cluster))
                run = runs[name][-1]
                cpu = f"   {run['cpu_us_per_msg']:6.1f} CPU-us/msg" if "cpu_us_per_msg" in run else ""
                if "tree_cpu_us_per_msg" in run:
                    cpu += (
                        f"   ours {run['tree_cpu_us_per_msg']:6.1f} + broker {run['broker_cpu_us_per_msg']:5.1f}"
                        f" CPU-us/msg, box {run['box_busy']:4.0%} busy"
                    )
                print(f"  round {round_ + 1}: {name:<24}{run['msgs_per_s']:>10,.0f} msg/s{cpu}", flush=True)

    def rate_key(runs_: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "words_per_s": r[rate]} for r in runs_]

    pairs = [("RabbitMQSpout", "bare pika"), ("RedisStreamSpout", "bare redis-py")]
    for spout, bare in pairs[:]:
        pairs += [(f"{spout}@{args.old_ref}", bare), (spout, f"{spout}@{args.old_ref}")]
    pairs += [("NatsJetStreamSpout", "bare nats-py"), ("NatsJetStreamSpout", "bare nats-py callback")]
    for p in many:
        pairs += [
            (f"RabbitMQSpout x{p}", "bare pika"),
            (f"RedisStreamSpout x{p}", "bare redis-py"),
            (f"NatsJetStreamSpout x{p}", "bare nats-py callback"),
        ]
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "messages": n,
        "measure": unit,
        "runs": {name: _median(rate_key(r)) for name, r in runs.items()},
        "paired_ratios": {
            f"{a} / {b}": paired_ratio(rate_key(runs[a]), rate_key(runs[b]))
            for a, b in pairs
            if a in runs and b in runs
        },
    }
    print(f"\n{'configuration':<28}{unit + ' (median)':>20}   runs")
    for name, run in results["runs"].items():
        each = ", ".join(f"{r['words_per_s'] / 1000:.1f}k" for r in run["runs"])
        print(f"{name:<28}{run[rate]:>20,.0f}   {each}")
    for name, ratio in results["paired_ratios"].items():
        rounds = ", ".join(f"{r:.3f}" for r in ratio["rounds"])
        print(f"{name:<44}{ratio['median']:>8.3f}x   (rounds: {rounds})")
    cpu_runs = {name: r for name, r in runs.items() if r and "tree_cpu_us_per_msg" in r[0]}
    if cpu_runs:
        print(f"\n{'CPU-us per message (median)':<28}{'ours':>8}{'broker':>8}{'sum':>8}{'box busy':>10}")
        for name, r in cpu_runs.items():
            ours, broker = (
                statistics.median(x[key] for x in r) for key in ("tree_cpu_us_per_msg", "broker_cpu_us_per_msg")
            )
            busy = statistics.median(x["box_busy"] for x in r)
            print(f"{name:<28}{ours:>8.1f}{broker:>8.1f}{ours + broker:>8.1f}{busy:>10.0%}")
        results["cpu_us_per_msg"] = {
            name: {
                key: statistics.median(x[key] for x in r)
                for key in ("tree_cpu_us_per_msg", "broker_cpu_us_per_msg", "box_busy")
            }
            for name, r in cpu_runs.items()
        }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
