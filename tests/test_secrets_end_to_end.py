"""Secrets stay secret end to end (issue 32, item 5): broker spouts given URLs with a password
or token in every form a URL parser reads -- ``/``, ``#`` and ``@`` percent-encoded, a raw
``@``, a NATS token, user and password, a ``?password=`` -- each pointed at a closed port of
127.0.0.1, so that every connect fails and is reported. Then no piece of any secret shows
anywhere a user or a scraper looks: the driver's log (and what the tasks' logs carried there),
its stdout and stderr, Ray's log files (each worker's stdout and stderr among them),
``handle.metrics()`` and ``task_metrics()``, the web page's HTML, API and ``/metrics``, and
``rayflow list``'s rows (made in this process: the command would join Ray again). A password
with a raw ``/``, ``?`` or ``#``, which every parser cuts (and quotes a piece of as the port),
is refused when the spout is made, and the error shows none of it; so is any other place a
URL given by mistake would be repeated.

``tests/connectors/test_wire.py`` has ``redact_url``'s table of URLs; this is where they go.
"""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import ray
from typer.testing import CliRunner

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Config,
    ConfigError,
    Spout,
    TopologyBuilder,
    Tuple,
    submit_topology,
)
from rayflow._cli import app
from rayflow._cli.detached import _row
from rayflow._cli.jobs import entrypoint, placeholder_package, read_placeholders, runtime_env
from rayflow._runtime.control import running_topologies
from rayflow._state.provider import open_provider
from rayflow._ui import UiServer
from rayflow._urls import redact_url
from rayflow.connectors.nats import NatsJetStreamSpout
from rayflow.connectors.rabbitmq import RabbitMQSpout
from rayflow.connectors.redis import RedisStreamSpout
from rayflow.topology_file import read_properties

from .conftest import eventually
from .ui_helpers import get

DEADLINE = 45.0
"""How long the spouts' first failures may take to be reported on a shared, busy machine."""

SECRET = re.compile(r"Hush\d+")
"""Every secret below is made of pieces like ``Hush12``, one per side of each ``/``, ``#`` or
``@`` in it: a piece of a secret seen anywhere is a leak, however the secret was cut."""


def closed_ports(count: int) -> list[int]:
    """Ports of 127.0.0.1 that nothing listens on (bound together, so distinct, then closed)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


SPOUTS: dict[str, Callable[[str], Spout]] = {
    "amqp": lambda url: RabbitMQSpout("q", url=url),
    "nats": lambda url: NatsJetStreamSpout("s", "d", url=url),
    "redis": lambda url: RedisStreamSpout("s", "g", url=url),
}
"""Each broker spout, made with a URL of its scheme."""

URLS = {
    "amqp-encoded": ("amqp", "amqp://guest:" + quote("Hush11/Hush12#Hush13@Hush14", safe="") + "@127.0.0.1:{port}/"),
    "amqp-raw-at": ("amqp", "amqp://guest:Hush21@Hush22@127.0.0.1:{port}/"),
    "nats-token": ("nats", "nats://Hush31@127.0.0.1:{port}"),
    "nats-password": ("nats", "nats://user:Hush41%2FHush42%23Hush43@Hush44@127.0.0.1:{port}"),
    "redis-encoded": ("redis", "redis://:Hush51%23Hush52%2FHush53%40Hush54@127.0.0.1:{port}/0"),
    "redis-query": ("redis", "redis://127.0.0.1:{port}/0?password=Hush55"),
}
"""The URL of each spout of the topology, by component id: its broker, and the URL with its
secret (a closed port put in)."""


class Sink(BasicBolt):
    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        """Never called: no spout connects."""


class TestAPasswordAParserCutsIsRefused:
    """A raw ``/``, ``?`` or ``#`` before the last ``@``: a ``ConfigError`` when the spout is
    made (on the driver, before anything runs), saying how to write it, and quoting none of it."""

    @pytest.mark.parametrize("kind", sorted(SPOUTS))
    @pytest.mark.parametrize(
        "user_info",
        [":Hush61#Hush62", ":Hush71/Hush72", "user:Hush81?Hush82", "Hush91/Hush92", ":Hush01/Hush02@Hush03#Hush04"],
    )
    def test_refused_quoting_no_piece(self, kind: str, user_info: str) -> None:
        with pytest.raises(ConfigError, match="Percent-encode") as refused:
            SPOUTS[kind](f"{kind}://{user_info}@127.0.0.1:1/0")
        assert SECRET.findall(str(refused.value)) == []

    def test_the_redis_state_provider_too(self) -> None:
        with pytest.raises(ConfigError, match="Percent-encode") as refused:
            open_provider("redis", {"url": "redis://:Hush61#Hush62@127.0.0.1:1/0"}, "t")
        assert SECRET.findall(str(refused.value)) == []

    def test_the_same_password_percent_encoded_is_taken(self) -> None:
        for kind, make in SPOUTS.items():
            make(f"{kind}://user:{quote('Hush61#Hush62/Hush63?Hush64@Hush65', safe='')}@127.0.0.1:1/0")


def test_a_secret_in_a_query_value_is_redacted() -> None:
    """pika's ``ssl_options`` is a mapping in the query: its ``password`` unlocks the client key."""
    options = quote(str({"certfile": "c.pem", "keyfile": "k.pem", "password": "Hush97"}))
    assert redact_url(f"amqps://app:Hush98@mq:5671/%2F?ssl_options={options}&heartbeat=5") == (
        "amqps://app:***@mq:5671/%2F?ssl_options=***&heartbeat=5"
    )


def test_rayflow_submit_keeps_the_placeholders_off_the_jobs_command_line(tmp_path: Path) -> None:
    """Ray shows a job's entrypoint to anyone who lists jobs: the values travel in a package of
    their own, which the job's ``rayflow run`` reads back."""
    import sys

    given = {"parallelism": "2", "REDIS_URL": "redis://:Hush99@cache/0", "db_password": "Hush00"}
    package = placeholder_package(given, tmp_path, "rayflow-wc-abc123")
    command = entrypoint(Path("wordcount.yaml"), package.name, inactive=False)
    assert SECRET.findall(command) == [] and "--placeholders-from" in command
    assert runtime_env(tmp_path, package)["py_modules"] == [str(package)]
    sys.path.insert(0, str(tmp_path))
    try:
        assert sorted(read_placeholders(package.name)) == sorted(f"{k}={v}" for k, v in given.items())
    finally:
        sys.path.remove(str(tmp_path))


class TestAUrlInTheWrongPlace:
    """A URL given where a mapping or a number is wanted: the error says what was given, with
    its secret redacted."""

    def test_a_state_provider_url_given_in_place_of_its_config(self) -> None:
        with pytest.raises(ConfigError, match="must be a mapping, got a str") as refused:
            open_provider("redis", "redis://:Hush61@127.0.0.1:1/0", "t")  # type: ignore[arg-type]
        assert SECRET.findall(str(refused.value)) == []

    def test_config(self) -> None:
        with pytest.raises(ConfigError, match=re.escape("got 'redis://:***@127.0.0.1:1/0'")) as refused:
            Config(state_provider_config="redis://:Hush71@127.0.0.1:1/0")  # type: ignore[arg-type]
        assert SECRET.findall(str(refused.value)) == []

    def test_rayflow_validate(self, tmp_path: Path) -> None:
        path = tmp_path / "topology.yaml"
        path.write_text(WRONG_PLACES)
        result = CliRunner().invoke(app, ["validate", str(path)], env=WIDE)
        assert result.exit_code != 0 and "got 'redis://:***@127.0.0.1:1/0'" in result.output, result.output
        assert SECRET.findall(result.output) == []

    def test_a_properties_line_that_is_not_key_value_is_not_repeated(self, tmp_path: Path) -> None:
        path = tmp_path / "secrets.properties"
        path.write_text("user=app\npassword Hush91\n")
        with pytest.raises(ValueError, match="secrets.properties:2: expected key=value") as refused:
            read_properties(path)
        assert SECRET.findall(str(refused.value)) == []

    def test_a_url_given_to_set_without_a_key(self, tmp_path: Path) -> None:
        path = tmp_path / "topology.yaml"
        path.write_text(WRONG_PLACES)
        result = CliRunner().invoke(app, ["validate", str(path), "--set", "redis://:Hush96@127.0.0.1:1/0"], env=WIDE)
        assert result.exit_code != 0 and "expected KEY=VALUE" in result.output, result.output
        assert SECRET.findall(result.output) == []


WIDE = {"COLUMNS": "400"}
"""A terminal wide enough that no line of a command's output is wrapped (and a secret cut)."""

WRONG_PLACES = """\
name: wrong-places
config: {state_provider: redis, state_provider_config: "redis://:Hush81@127.0.0.1:1/0"}
spouts:
  - {id: events, class: rayflow.connectors.redis.RedisStreamSpout, kwargs: "redis://:Hush82@127.0.0.1:1/0"}
bolts:
  - {id: sink, class: tests.test_secrets_end_to_end.Sink}
streams:
  - {from: events, to: sink, grouping: {type: shuffle}}
"""


def ray_logs() -> Path:
    """The session's log directory: Ray's processes', and each worker's stdout and stderr."""
    node = ray._private.worker._global_node
    assert node is not None
    return Path(node.get_logs_dir_path())


def ray_log_texts() -> dict[str, str]:
    """Each of the session's log files, by name. A long session's Ray rotates and removes logs
    while they are listed (a dead worker's, say): one gone meanwhile is skipped, not an error."""
    texts: dict[str, str] = {}
    for path in ray_logs().rglob("*"):
        try:
            if path.is_file():
                texts[f"Ray's {path.relative_to(ray_logs())}"] = path.read_text(errors="replace")
        except OSError:
            continue
    return texts


def page_errors(url: str) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = json.loads(get(url + "api/errors")[1])["errors"]
    return errors


def reported(handle: Any, components: list[str]) -> bool:
    metrics = handle.metrics()
    return all(metrics[c].get("errors") for c in components)


def test_no_piece_of_a_secret_shows_after_failing_connects(
    ray_cluster: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="rayflow")
    builder = TopologyBuilder()
    components = list(URLS)
    sink = builder.set_bolt("sink", Sink())
    for (cid, (kind, url)), port in zip(URLS.items(), closed_ports(len(URLS)), strict=True):
        builder.set_spout(cid, SPOUTS[kind](url.format(port=port)))
        sink.shuffle_grouping(cid)
    topology = builder.create_topology()
    handle = submit_topology("secrets-kept", Config(message_timeout_secs=10), topology)
    page = UiServer(poll_secs=0.2)
    try:
        assert eventually(lambda: reported(handle, components), timeout=DEADLINE), handle.metrics()
        url = page.serve(handle, topology).url
        assert eventually(lambda: all(c in caplog.text for c in components), timeout=DEADLINE), caplog.text
        assert eventually(lambda: len(page_errors(url)) >= len(components), timeout=DEADLINE), page_errors(url)
        seen = {
            "handle.metrics()": repr(handle.metrics()),
            "handle.task_metrics()": repr(handle.task_metrics()),
            **{
                path: get(url + path)[1].decode()
                for path in ("", "api/topology", "api/metrics", "api/errors", "api/history", "api/graph.svg")
            },
            "/metrics (Prometheus)": get(url + "metrics")[1].decode(),
            "rayflow list": repr([_row(name, control) for name, control in running_topologies().items()]),
        }
    finally:
        handle.kill()
        page.close()
    out, err = capfd.readouterr()
    seen |= {"the driver's log": caplog.text, "stdout": out, "stderr": err}
    seen |= ray_log_texts()
    leaks = {where: sorted(set(SECRET.findall(text))) for where, text in seen.items()}
    assert {where: pieces for where, pieces in leaks.items() if pieces} == {}
    for spout in components:  # each failure was reported, naming its spout and the URL it redacted
        assert any(spout in line and "***" in line for line in caplog.text.splitlines()), spout
    assert "secrets-kept" in seen["rayflow list"]
