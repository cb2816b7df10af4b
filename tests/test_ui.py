"""The web page's server and JSON API, as a script (or the page) uses them.

First what the recorder makes of consecutive polls (throughput, complete latency, errors), and
how a page meets its handle (it listens before it has one, and closes once the handle is
killed), with no Ray; and that the runtime imports nothing of the page. Then a word count on the
session's Ray, a page serving its handle: the API answers, counters grow, errors show with their
time and task, the buttons' POSTs act -- and only with the header a page of another site cannot
send -- and a kill from the page stops the topology and its server. Last, ``LocalCluster(ui=True)``
and ``rayflow run --ui``.
"""

from __future__ import annotations

import ast
import ipaddress
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rayflow import Config, ConfigError, LocalCluster, RayflowError, TopologyHandle, submit_topology
from rayflow._cli import app
from rayflow._metrics import TaskMetrics
from rayflow._ui import UiServer
from rayflow._ui._recorder import Poll, history_point, new_errors
from rayflow.topology_file._drawing import CHAIN_LABEL

from .conftest import eventually
from .ui_helpers import WORDCOUNT_YAML, FakeHandle, get, get_json, post, task, wordcount

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 60.0
"""How long a condition may take on a shared, busy machine."""
ACT = {"X-Rayflow-Token": "local"}
"""What the page sends with a POST on loopback without a token: any value will do."""


class TestRecorder:
    """Two polls one second apart, as the recorder sees them."""

    def polls(self) -> tuple[Poll, Poll]:
        spout, bolt = TaskMetrics("sentences", "spout"), TaskMetrics("split", "bolt")
        before = {1: task(spout, 1, pending=0, exhausted=False), 2: task(bolt, 2, pending=0)}
        spout.emitted = 300
        bolt.executed = 120
        for seconds in (0.010, 0.030):
            spout.latency("complete_latency_ms").add(seconds)
        after = {1: task(spout, 1, pending=0, exhausted=False), 2: task(bolt, 2, pending=0)}
        return Poll.of(before, at=100.0), Poll.of(after, at=101.0)

    def test_throughput_is_a_spouts_emitted_and_a_bolts_executed_per_second(self) -> None:
        point = history_point(*self.polls())
        assert point["time"] == 101.0
        assert point["throughput"] == {"sentences": 300.0, "split": 120.0}

    def test_complete_latency_is_the_mean_of_the_trees_completed_in_between(self) -> None:
        assert history_point(*self.polls())["complete_latency_ms"]["sentences"] == pytest.approx(20.0)

    def test_a_task_that_restarted_counts_from_zero_again(self) -> None:
        before, after = self.polls()
        after.tasks[1]["emitted"] = 50  # fewer than before: a new actor started over
        after.components["sentences"]["emitted"] = 50
        before.components["sentences"]["emitted"] = 400
        assert history_point(before, after)["throughput"]["sentences"] == 50.0

    def test_a_new_error_is_listed_with_its_time_task_and_count(self) -> None:
        bolt = TaskMetrics("split", "bolt")
        before = Poll.of({4: task(bolt, 4, pending=0)})
        bolt.errors = 3
        bolt.last_error = "execute raised: ValueError: bad"
        after = Poll.of({4: task(bolt, 4, pending=0)})
        (error,) = new_errors(before, after)
        assert error == {
            "time": bolt.last_error_at,
            "task": 4,
            "component": "split",
            "error": "execute raised: ValueError: bad",
            "count": 3,
        }
        assert new_errors(after, after) == []  # seen already

    def test_another_address_than_loopback_needs_a_token(self) -> None:
        with pytest.raises(ConfigError, match="give a token"):
            UiServer(host="0.0.0.0")


class TestPageAndHandle:
    """The page takes a handle and watches it; nothing of the runtime starts or stops it."""

    def test_it_listens_before_it_has_a_handle_and_answers_once_it_has_one(self) -> None:
        """``rayflow run --ui`` prints the URL before Ray starts: a request sent then is answered
        once the topology runs, not refused."""
        page = UiServer(ray_metrics=False, poll_secs=0.05)
        try:
            with socket.create_connection((page.host, page.port), timeout=DEADLINE) as early:
                early.sendall(f"GET /api/topology HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n\r\n".encode())
                page.serve(FakeHandle("early"))
                answer = early.makefile("rb").readline()
            assert answer.startswith(b"HTTP/1.") and b" 200 " in answer
            assert get_json(page.url + "api/topology")["name"] == "early"
        finally:
            page.close()

    def test_it_closes_once_its_handle_is_killed(self) -> None:
        handle = FakeHandle("t")
        page = UiServer(ray_metrics=False, poll_secs=0.05).serve(handle)
        assert get_json(page.url + "api/topology")["state"] == "active"
        handle.killed = True
        assert eventually(lambda: page.closed and refused(page.url), timeout=DEADLINE)

    def test_the_api_says_where_each_task_runs_and_what_it_holds(self) -> None:
        """Its state, node, resources and GPUs, as ``task_metrics()`` gives them (issue 33)."""
        handle = FakeHandle("placed")
        where = {"node_ip": "10.0.0.7", "resources": {"CPU": 0.01, "GPU": 1.0}, "gpu_ids": [1]}
        handle.tasks = {
            1: {**task(TaskMetrics("embed", "bolt"), 1, pending=0), **where, "state": "running"},
            2: {**task(TaskMetrics("embed", "bolt"), 2, pending=0), "state": "waiting for resources"},
        }
        page = UiServer(ray_metrics=False, poll_secs=0.05).serve(handle)
        try:
            tasks = get_json(page.url + "api/metrics")["tasks"]
        finally:
            page.close()
        assert {k: tasks["1"][k] for k in ("state", *where)} == {"state": "running", **where}
        assert tasks["2"]["state"] == "waiting for resources"

    @pytest.mark.parametrize("chained", [True, False], ids=["chained", "not chained"])
    def test_the_page_shows_a_chain_as_the_tasks_run_it(self, chained: bool) -> None:
        """Each task's ``host``, and the graph's chain, read off the hosts: sentences -> split
        (shuffle, one task each) is chained by default, but the page draws what runs."""
        handle = FakeHandle("chain")
        components = {1: ("sentences", "spout"), 2: ("split", "bolt"), 3: ("count", "bolt")}
        hosts = {1: 1, 2: 1 if chained else 2, 3: 3}
        extra = {"spout": {"pending": 0, "exhausted": False}, "bolt": {"pending": 0}}
        handle.tasks = {
            t: {**task(TaskMetrics(c, k), t, **extra[k]), "host": hosts[t]} for t, (c, k) in components.items()
        }
        page = UiServer(ray_metrics=False, poll_secs=0.05).serve(handle, wordcount(split=1))
        try:
            tasks = get_json(page.url + "api/metrics")["tasks"]
            status, svg = get(page.url + "api/graph.svg")
        finally:
            page.close()
        assert {t: m["host"] for t, m in tasks.items()} == {str(t): h for t, h in hosts.items()}
        if status == 503:
            pytest.skip("Graphviz's dot is not installed")
        assert status == 200 and b"fields(word)" in svg
        assert (b"shuffle, chained" in svg) is chained and (CHAIN_LABEL.encode() in svg) is chained

    def test_a_killed_topology_has_no_page(self) -> None:
        handle = FakeHandle("gone")
        handle.killed = True
        page = UiServer(ray_metrics=False)
        try:
            with pytest.raises(RayflowError, match="'gone' was killed: there is nothing left to show"):
                page.serve(handle)
        finally:
            page.close()

    def test_the_runtime_imports_nothing_of_what_watches_it(self) -> None:
        """``rayflow/_runtime`` does not import the page, ``LocalCluster`` or the command, not
        even inside a function: they compose the runtime from above."""
        above = ("rayflow._ui", "rayflow._local_cluster", "rayflow._cli")
        found = []
        for path in sorted((ROOT / "rayflow" / "_runtime").glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom):
                    module = node.module or ""
                    name = "rayflow." + module if node.level == 2 else f"rayflow._runtime.{module}"
                    names = [name] + [f"{name}.{alias.name}" for alias in node.names]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                found += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith(above)]
        assert not found


@pytest.fixture(scope="module")
def running(ray_cluster: str) -> Iterator[tuple[TopologyHandle, str]]:
    """A word count at 300 sentences a second whose split raises on every 200th sentence, each
    of its two tasks on a GPU of the session's, its page served: (handle, page URL)."""
    conf = Config(message_timeout_secs=10, max_spout_pending=300)
    topology = wordcount(rate=300, raise_every=200, split_resources={"num_gpus": 1})
    handle = submit_topology("ui-wordcount", conf, topology)
    page = UiServer()
    try:
        yield handle, page.serve(handle, topology).url
    finally:
        handle.kill()
        page.close()


def emitted(url: str) -> int:
    return int(get_json(url + "api/metrics")["components"]["sentences"]["emitted"])


class TestJsonApi:
    def test_the_page_and_its_files_are_served(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        status, page = get(url)
        assert status == 200 and b"<title>rayflow</title>" in page
        for name in ("static/app.js", "static/style.css"):
            assert get(url + name)[0] == 200

    def test_topology_names_its_components_and_their_inputs(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        topology = get_json(url + "api/topology")
        assert topology["name"] == "ui-wordcount" and topology["state"] == "active"
        components = {c["id"]: c for c in topology["components"]}
        assert components["split"]["tasks"] == 2
        (count_input,) = components["count"]["inputs"]
        assert count_input == {"component": "split", "stream": "default", "grouping": "fields(word)"}

    def test_metrics_grow_and_tell_each_task(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        first = emitted(url)
        assert eventually(lambda: emitted(url) > first, timeout=DEADLINE)
        tasks = get_json(url + "api/metrics")["tasks"]
        assert sorted(m["component"] for m in tasks.values()) == ["__acker", "count", "sentences", "split", "split"]
        assert all(m["alive"] and m["node_id"] and m["pid"] for m in tasks.values())

    def test_each_task_says_where_it_runs_and_what_it_holds(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        tasks = get_json(url + "api/metrics")["tasks"].values()
        assert {m["state"] for m in tasks} == {"running"}
        assert all(ipaddress.ip_address(m["node_ip"]) for m in tasks)
        split = [m for m in tasks if m["component"] == "split"]
        assert [m["resources"]["GPU"] for m in split] == [1.0, 1.0]
        assert sorted(len(m["gpu_ids"]) for m in split) == [1, 1] and split[0]["gpu_ids"] != split[1]["gpu_ids"]
        assert all(m["gpu_ids"] == [] and not m["resources"].get("GPU") for m in tasks if m["component"] != "split")

    def test_history_has_a_point_per_poll(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        assert eventually(lambda: len(get_json(url + "api/history")["points"]) >= 2, timeout=DEADLINE)
        points = get_json(url + "api/history")["points"]
        assert [p["time"] for p in points] == sorted(p["time"] for p in points)
        assert set(points[-1]["throughput"]) == {"sentences", "split", "count"}
        later = get_json(url + f"api/history?since={points[-1]['time']}")["points"]
        assert all(p["time"] > points[-1]["time"] for p in later)

    def test_errors_show_with_their_time_task_and_component(self, running: tuple[TopologyHandle, str]) -> None:
        handle, url = running
        assert eventually(lambda: get_json(url + "api/errors")["errors"], timeout=DEADLINE)
        error = get_json(url + "api/errors")["errors"][0]
        split_tasks = {t for t, m in handle.task_metrics().items() if m["component"] == "split"}
        assert error["component"] == "split" and error["task"] in split_tasks
        assert "ValueError: sentence" in error["error"] and "is one too many" in error["error"]
        assert time.time() - DEADLINE * 5 < error["time"] <= time.time() and error["count"] >= 1

    def test_the_graph_is_drawn_as_rayflow_graph_draws_it(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        status, body = get(url + "api/graph.svg")
        if status == 503:
            pytest.skip("Graphviz's dot is not installed")
        assert status == 200 and body.lstrip().startswith(b"<?xml") and b"fields(word)" in body

    def test_an_unknown_path_is_a_json_404(self, running: tuple[TopologyHandle, str]) -> None:
        _, url = running
        status, body = get(url + "api/nothing")
        assert status == 404 and b"no such page" in body


class TestActions:
    def test_a_post_without_the_header_is_refused(self, running: tuple[TopologyHandle, str]) -> None:
        handle, url = running
        status, answer = post(url + "api/deactivate")
        assert status == 403 and "X-Rayflow-Token" in answer["error"]
        assert handle.active

    def test_another_host_name_is_refused_on_loopback(self, running: tuple[TopologyHandle, str]) -> None:
        """A site that rebinds its DNS name to 127.0.0.1 still sends its own name as Host."""
        _, url = running
        status, body = get(url + "api/topology", headers={"Host": "attacker.example"})
        assert status == 403 and b"attacker.example" in body

    def test_deactivate_stops_the_spout_and_activate_starts_it_again(self, running: tuple[TopologyHandle, str]) -> None:
        handle, url = running
        status, answer = post(url + "api/deactivate", ACT)
        assert status == 200 and answer == {"action": "deactivate", "state": "inactive"}
        assert get_json(url + "api/topology")["state"] == "inactive"
        try:
            stopped = handle.metrics()["sentences"]["emitted"]
            assert eventually(lambda: get_json(url + "api/metrics")["components"]["sentences"]["emitted"] == stopped)
        finally:
            status, answer = post(url + "api/activate", ACT)
        assert status == 200 and answer["state"] == "active"
        assert eventually(lambda: emitted(url) > stopped, timeout=DEADLINE)

    def test_with_a_token_only_the_token_acts(self, running: tuple[TopologyHandle, str]) -> None:
        handle, _ = running
        server = UiServer(token="s3cret", ray_metrics=False).serve(handle)
        try:
            assert "s3cret" not in server.url  # the page asks for it (tests/test_ui_bounds.py)
            assert post(server.url + "api/activate", {"X-Rayflow-Token": "guess"})[0] == 403
            assert post(server.url + "api/activate", {"X-Rayflow-Token": "s3cret"}) == (
                200,
                {"action": "activate", "state": "active"},
            )
        finally:
            server.close()


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    except ConnectionError:  # the server closed under a request that was in progress
        return False
    return False


def test_local_cluster_serves_a_page_per_topology_and_kill_from_it_stops_both(
    ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``LocalCluster(ui=True)`` on the session's Ray: the page is up at once, its URL printed
    (a plain script shows it); Kill answers, the topology is killed, its server stops answering."""
    with LocalCluster(ui=True) as cluster:
        handle = cluster.submit_topology("ui-kill", {"max_spout_pending": 50}, wordcount(rate=50, split=1))
        url = cluster.serve_ui(handle)  # the URL of the page the cluster started
        assert f"topology 'ui-kill': web page {url}" in capsys.readouterr().err
        assert get_json(url + "api/topology")["name"] == "ui-kill"
        assert post(url + "api/kill", ACT) == (200, {"action": "kill", "state": "killed"})
        assert eventually(lambda: handle.killed and refused(url + "api/topology"), timeout=DEADLINE)


def test_rayflow_run_ui_prints_the_page_and_ends_when_killed_from_it(ray_cluster: str, tmp_path: Path) -> None:
    """``rayflow run FILE --ui`` prints the page's URL first, before anything it says while Ray
    starts; a Kill from the page ends the run with its summary."""
    path = tmp_path / "wordcount.yaml"
    path.write_text(WORDCOUNT_YAML, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayflow", "run", str(path), "--ui", "--duration", "120", "--address", ray_cluster],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("web page: http://127.0.0.1:"), first
        url = first.split()[2]
        assert eventually(lambda: emitted(url) > 0, timeout=DEADLINE)
        assert post(url + "api/kill", ACT)[0] == 200
        out, _ = proc.communicate(timeout=DEADLINE)
        assert "killed from outside this terminal" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_rayflow_run_ui_on_another_address_needs_the_token_given() -> None:
    """No token is made up (it would have to be printed): without ``RAYFLOW_UI_TOKEN`` the run
    stops before anything starts or listens."""
    argv = ["run", "configs/wordcount.yaml", "--ui", "--host", "0.0.0.0"]
    result = CliRunner().invoke(app, argv, env={"RAYFLOW_UI_TOKEN": ""})
    assert result.exit_code == 1 and "give a token" in " ".join(result.stderr.split())
    assert "web page: http" not in result.stdout


def test_port_without_ui_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["run", "configs/wordcount.yaml", "--port", "8080"])
    assert result.exit_code == 2 and "add --ui" in " ".join(result.stderr.replace("│", " ").split())
