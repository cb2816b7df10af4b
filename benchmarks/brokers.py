"""Broker spouts against their bare clients, side by side in one run. Not a test: run it on a
quiet machine, with RabbitMQ on 127.0.0.1:5672 (guest/guest) and Redis on 127.0.0.1:6379.

    python benchmarks/brokers.py [--messages N] [--rounds 3] [--brokers rabbitmq redis] [--old-ref HEAD]

Every configuration drains the same N JSON messages from a fresh queue (or stream) and parses
each one (``json.loads``) before acking it:

- rabbitmq: queue -> ``RabbitMQSpout`` -> a parsing bolt that acks (one task each, one acker,
  ``Config()`` defaults) against a bare pika consumer (prefetch 5,000, ``basic_ack`` with
  ``multiple=True`` every 500 messages and after the last);
- redis: stream -> ``RedisStreamSpout`` -> the same bolt against a bare redis-py loop
  (``XREADGROUP count=1000`` and one ``XACK`` per read);
- ``--old-ref REF`` also runs both spouts as they are at that git revision (``git show``), to
  measure a change against what it replaces in the same run.

The clock runs from activation (or the first read) until the last message is acked to the
broker; filling the queue is not timed. Rounds interleave the configurations and turn their
order round every round; each ratio is the median of the rounds' ratios of two runs made one
after the other (``paired_ratio``).
"""

from __future__ import annotations

import argparse
import json
import os
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

import pika  # noqa: E402
import redis  # noqa: E402
from ray import cloudpickle  # noqa: E402

from benchmarks.wordcount import _median, paired_ratio  # noqa: E402
from rayflow import Bolt, Config, LocalCluster, OutputCollector, TopologyBuilder, TopologyContext, Tuple  # noqa: E402
from rayflow._components import Spout  # noqa: E402
from rayflow.connectors.rabbitmq import RabbitMQSpout  # noqa: E402
from rayflow.connectors.redis import RedisStreamSpout  # noqa: E402

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
REDIS_URL = "redis://127.0.0.1:6379/0"
BARE_PREFETCH = 5000
BARE_ACK_EVERY = 500
BARE_READ_COUNT = 1000


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

    started = time.perf_counter()
    channel.basic_consume(queue, on_message)
    while done[0] < n:
        connection.process_data_events(time_limit=0.01)
    if done[1]:
        channel.basic_ack(done[1], multiple=True)
    elapsed = time.perf_counter() - started
    connection.close()
    left = delete_queue(queue)
    assert left == 0, f"bare pika left {left} messages"
    return {"messages": n, "seconds": elapsed, "msgs_per_s": n / elapsed}


def run_rayflow(
    cluster: LocalCluster, n: int, spout: Spout, name: str, until_empty: Callable[[], bool]
) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("source", spout)
    builder.set_bolt("parse", ParseBolt()).shuffle_grouping("source")
    handle = cluster.submit_topology(
        f"{name}-{uuid.uuid4().hex[:6]}", Config(), builder.create_topology(), active=False
    )
    started = time.perf_counter()
    handle.activate()
    deadline = started + 600
    while handle.metrics()["source"]["acked"] < n:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{name}: not done after 600 s")
        time.sleep(0.02)
    # The spout acked every tree; the broker hears of the last ones at the next ack flush.
    while not until_empty():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{name}: the broker still holds messages after 600 s")
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    source = handle.metrics()["source"]
    handle.kill()
    assert source["failed"] == 0 and source["acked"] == n, source
    return {"messages": n, "seconds": elapsed, "msgs_per_s": n / elapsed}


def run_rabbitmq_spout(cluster: LocalCluster, n: int, spout_class: Callable[[str], Spout], name: str) -> dict[str, Any]:
    queue = fill_queue(n)
    try:
        return run_rayflow(cluster, n, spout_class(queue), name, lambda: queue_state(queue)[0] == 0)
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
    started = time.perf_counter()
    while done < n:
        reply: Any = client.xreadgroup("bench", "bare", {stream: ">"}, count=BARE_READ_COUNT)
        entries = reply[0][1] if reply else []
        for _, data in entries:
            record = json.loads(data[b"body"])
            done += record["amount"] >= 0
        if entries:
            client.xack(stream, "bench", *[entry_id for entry_id, _ in entries])
    elapsed = time.perf_counter() - started
    client.delete(stream)
    client.close()
    return {"messages": n, "seconds": elapsed, "msgs_per_s": n / elapsed}


def run_redis_spout(cluster: LocalCluster, n: int, spout_class: Callable[..., Spout], name: str) -> dict[str, Any]:
    stream = fill_stream(n)
    spout = spout_class(stream, "bench", fields=("body",))
    try:
        return run_rayflow(cluster, n, spout, name, lambda: stream_pending(stream, "bench") == 0)
    finally:
        redis.Redis.from_url(REDIS_URL).delete(stream)


# -- the run ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", nargs="*", default=["rabbitmq", "redis"], choices=["rabbitmq", "redis"])
    parser.add_argument("--old-ref", metavar="REF", help="also run the spouts of this git revision")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    n = args.messages

    configurations: dict[str, Callable[[LocalCluster], dict[str, Any]]] = {}
    if "rabbitmq" in args.brokers:
        configurations["bare pika"] = lambda _: run_bare_pika(n)
        configurations["RabbitMQSpout"] = lambda c: run_rabbitmq_spout(c, n, RabbitMQSpout, "rabbitmq-spout")
        if args.old_ref:
            old_rabbit = old_module(args.old_ref, "rabbitmq").RabbitMQSpout
            configurations[f"RabbitMQSpout@{args.old_ref}"] = lambda c: run_rabbitmq_spout(
                c, n, old_rabbit, "rabbitmq-old"
            )
    if "redis" in args.brokers:
        configurations["bare redis-py"] = lambda _: run_bare_redis(n)
        configurations["RedisStreamSpout"] = lambda c: run_redis_spout(c, n, RedisStreamSpout, "redis-spout")
        if args.old_ref:
            old_redis = old_module(args.old_ref, "redis").RedisStreamSpout
            configurations[f"RedisStreamSpout@{args.old_ref}"] = lambda c: run_redis_spout(c, n, old_redis, "redis-old")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configurations}
    with LocalCluster() as cluster:
        order = list(configurations)
        for round_ in range(args.rounds):
            for name in order if round_ % 2 == 0 else reversed(order):
                runs[name].append(configurations[name](cluster))
                print(f"  round {round_ + 1}: {name:<24}{runs[name][-1]['msgs_per_s']:>10,.0f} msg/s", flush=True)

    def rate_key(runs_: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "words_per_s": r["msgs_per_s"]} for r in runs_]

    pairs = [("RabbitMQSpout", "bare pika"), ("RedisStreamSpout", "bare redis-py")]
    for spout, bare in pairs[:]:
        pairs += [(f"{spout}@{args.old_ref}", bare), (spout, f"{spout}@{args.old_ref}")]
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "messages": n,
        "runs": {name: _median(rate_key(r)) for name, r in runs.items()},
        "paired_ratios": {
            f"{a} / {b}": paired_ratio(rate_key(runs[a]), rate_key(runs[b]))
            for a, b in pairs
            if a in runs and b in runs
        },
    }
    print(f"\n{'configuration':<28}{'msg/s (median)':>16}   runs")
    for name, run in results["runs"].items():
        each = ", ".join(f"{r['words_per_s'] / 1000:.1f}k" for r in run["runs"])
        print(f"{name:<28}{run['msgs_per_s']:>16,.0f}   {each}")
    for name, ratio in results["paired_ratios"].items():
        rounds = ", ".join(f"{r:.3f}" for r in ratio["rounds"])
        print(f"{name:<44}{ratio['median']:>8.3f}x   (rounds: {rounds})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
