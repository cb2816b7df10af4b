"""Detached runs, as Storm's CLI has them: ``rayflow submit`` (``storm jar``), ``list``,
``activate``, ``deactivate`` and ``kill NAME``, on a cluster of their own.

Ray Jobs need a cluster with a dashboard, which the session's Ray does not start. So this module
starts one with ``ray start --head`` on free ports and a temporary directory of its own, and at
the end kills exactly the processes that name that directory (``ray stop`` would stop every Ray
on the machine). The topology is a word count whose spout is paced (``PACED``), shipped in a
project directory of its own as a user's would be. The commands run as subprocesses with a
user's minimal environment. Where the dashboard cannot start, the module skips and says why.

The control actor's own rules (one topology per name, a script's handle killed in place) are
checked on the session's Ray, in-process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from rayflow import BasicBolt, Config, TopologyBuilder, TopologyError, submit_topology
from rayflow._runtime.control import TopologyNameTaken, ask, find

from .conftest import eventually
from .topology_file_components import EndlessSpout, Sink

ROOT = Path(__file__).resolve().parent.parent
START_SECS = 240.0
"""``ray start`` with a dashboard; a job's driver joining it and starting the topology: 30-60 s on
a 2-core box, minutes when other work crowds it."""
COMMAND_SECS = 120.0
RAY = str(Path(sys.executable).with_name("ray"))
"""This interpreter's own ``ray``: another Python's, earlier on PATH, would start a cluster whose
jobs cannot import rayflow."""

PACED = '''\
    """A sentence spout paced to a rate: the word count runs for as long as the test needs."""

    import time

    from examples.wordcount import SENTENCES
    from rayflow import Spout


    class PacedSentences(Spout):
        outputs = ["sentence"]

        def __init__(self, per_sec: float) -> None:
            self.per_sec = per_sec

        def open(self, conf, context, collector) -> None:
            self.collector, self.sent, self.next_at = collector, 0, time.monotonic()

        def next_tuple(self) -> None:
            while self.next_at <= time.monotonic():
                self.collector.emit([SENTENCES[self.sent % len(SENTENCES)]], msg_id=self.sent)
                self.sent += 1
                self.next_at += 1.0 / self.per_sec
'''

WORDCOUNT = """\
    name: ${name}
    config:
      topology.message.timeout.secs: 10
    spouts:
      - {id: sentences, class: paced.PacedSentences, kwargs: {per_sec: 100}}
    bolts:
      - {id: split, class: examples.wordcount.SplitSentence, parallelism: 2}
      - {id: count, class: examples.wordcount.WordCount, parallelism: 2}
    streams:
      - {from: sentences, to: split, grouping: {type: shuffle}}
      - {from: split, to: count, grouping: {type: fields, fields: [word]}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def user_env() -> dict[str, str]:
    """What a user's shell has, not what this test process set up (RAY_ADDRESS, RAY_AUTH_MODE...)."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "RAY_USAGE_STATS_ENABLED": "0"}


class JobsCluster:
    """A Ray head with a dashboard, started by this module and stopped by it."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rfjobs-")  # short: Ray's socket paths must fit
        self.address = f"127.0.0.1:{free_port()}"
        self.dashboard = f"http://127.0.0.1:{free_port()}"

    def start(self, agent_port: int | None = None) -> str | None:
        """Start it (its dashboard agent on ``agent_port``, default a free one); ``None``, or why
        it could not start."""
        command = [
            RAY, "start", "--head", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
            "--port", self.address.rpartition(":")[2], "--include-dashboard=true", "--dashboard-host", "127.0.0.1",
            "--dashboard-port", self.dashboard.rpartition(":")[2],
            "--dashboard-agent-listen-port", str(agent_port or free_port()),
            "--ray-client-server-port", str(free_port()), "--temp-dir", self.temp_dir, "--num-cpus", "2",
            "--object-store-memory", str(200 * 1024 * 1024),
        ]  # fmt: skip
        try:
            started = subprocess.run(command, env=user_env(), capture_output=True, text=True, timeout=START_SECS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`ray start --head` failed: {exc}"
        if started.returncode != 0:
            last = (started.stderr.strip().splitlines() or ["no output"])[-1]
            return f"`ray start --head` exited {started.returncode}: {last}"
        if not eventually(self._jobs_api_answers, timeout=START_SECS, interval=1.0):
            return f"Ray's dashboard (its Jobs API) did not answer at {self.dashboard} within {START_SECS:g}s"
        return None

    def _jobs_api_answers(self) -> bool:
        try:
            self.jobs()
            return True
        except Exception:
            return False

    def jobs(self) -> Any:
        """A Jobs API client, as ``ray job list`` would make one (with this machine's token)."""
        from ray._raylet import AuthenticationTokenLoader
        from ray.job_submission import JobSubmissionClient

        tokens = AuthenticationTokenLoader.instance()
        if not tokens.has_token(ignore_auth_mode=True):
            return JobSubmissionClient(self.dashboard)
        token = dict(tokens.get_token_for_http_header(ignore_auth_mode=True))
        return JobSubmissionClient(self.dashboard, headers=token)

    def stop(self) -> None:
        """Kill the processes of this cluster, and only them: those that name its temporary
        directory or write their logs there (Ray's agents rename themselves), and their children."""
        import psutil

        def ours(process: psutil.Process) -> bool:
            try:
                named = " ".join(process.cmdline())
                return self.temp_dir in named or any(f.path.startswith(self.temp_dir) for f in process.open_files())
            except psutil.Error:
                return False

        mine = {p.pid: p for p in psutil.process_iter() if p.pid != os.getpid() and ours(p)}
        for process in list(mine.values()):
            with contextlib.suppress(psutil.Error):
                mine.update({child.pid: child for child in process.children(recursive=True)})
        for process in mine.values():
            with contextlib.suppress(psutil.Error):
                process.terminate()
        _, alive = psutil.wait_procs(list(mine.values()), timeout=15)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=5)  # none may write into the directory once it is removed
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs_cluster() -> Iterator[JobsCluster]:
    """Started twice at most: on a loaded machine the raylet can miss Ray's 30 s to register."""
    problem = None
    for _ in range(2):
        cluster = JobsCluster()
        try:
            problem = cluster.start()
            if problem is None:
                yield cluster
                return
        finally:
            cluster.stop()
    pytest.skip(f"no Ray cluster with a dashboard for Ray Jobs: {problem}")


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    """A user's project: the word count's file, its paced spout, and the example's bolts."""
    with tempfile.TemporaryDirectory(prefix="rfproject-") as tmp:
        path = Path(tmp)
        (path / "examples").mkdir()
        (path / "examples" / "__init__.py").write_text("")
        shutil.copy(ROOT / "examples" / "wordcount.py", path / "examples" / "wordcount.py")
        (path / "paced.py").write_text(dedent(PACED))
        (path / "wordcount.yaml").write_text(dedent(WORDCOUNT))
        yield path


def rayflow(project: Path, *args: str, timeout: float = COMMAND_SECS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rayflow", *args],
        cwd=project,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def submit(project: Path, cluster: JobsCluster, name: str) -> subprocess.CompletedProcess[str]:
    """``rayflow submit`` of the word count as ``name``; it waits for the job to start the topology."""
    start = ["--start-timeout", str(START_SECS)]
    args = ["submit", "wordcount.yaml", "--set", f"name={name}", "--address", cluster.address, *start]
    return rayflow(project, *args, timeout=START_SECS + COMMAND_SECS)


def listed(project: Path, cluster: JobsCluster) -> dict[str, dict[str, Any]]:
    """``rayflow list --json``, by name."""
    result = rayflow(project, "list", "--address", cluster.address, "--json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def stays(check: Callable[[], bool], secs: float) -> bool:
    """``check`` holds every time it is looked at for ``secs`` seconds."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if not check():
            return False
    return check()


@pytest.mark.cluster
class TestSubmittedWordCount:
    """One word count submitted with ``rayflow submit``, then listed, paused, resumed and killed
    by name, in that order (the steps share the job)."""

    @pytest.fixture(scope="class")
    def submission(self, jobs_cluster: JobsCluster, project: Path) -> Iterator[tuple[str, str]]:
        """The submission id of the word count ``wc`` and what ``submit`` printed; its job is
        stopped at the end whatever happened."""
        result = submit(project, jobs_cluster, "wc")
        assert result.returncode == 0, result.stdout + result.stderr
        submission = result.stdout.split("runs as Ray job ")[1].split()[0]
        yield submission, result.stdout
        jobs = jobs_cluster.jobs()
        if not jobs.get_job_status(submission).is_terminal():
            jobs.stop_job(submission)

    @pytest.fixture(scope="class")
    def submitted(self, submission: tuple[str, str]) -> str:
        return submission[0]

    @pytest.fixture(scope="class")
    def submit_output(self, submission: tuple[str, str]) -> str:
        return submission[1]

    def test_runs_as_a_ray_job_that_ray_job_list_sees(self, jobs_cluster: JobsCluster, submitted: str) -> None:
        jobs = {job.submission_id: job for job in jobs_cluster.jobs().list_jobs()}
        assert jobs[submitted].status == "RUNNING"
        assert jobs[submitted].entrypoint.startswith("python -m rayflow run wordcount.yaml --address auto")
        assert jobs[submitted].metadata["rayflow.topology"] == "wc"

    def test_list_shows_it_active_with_its_job_and_trees_acked(
        self, jobs_cluster: JobsCluster, project: Path, submitted: str
    ) -> None:
        row = listed(project, jobs_cluster)["wc"]
        assert (row["status"], row["tasks"], row["job"]) == ("active", 6, submitted)  # 1 + 2 + 2 + the acker
        assert row["failed"] == 0
        assert eventually(lambda: listed(project, jobs_cluster)["wc"]["acked"] > row["acked"], timeout=30)

    def test_a_second_topology_of_the_name_is_refused(
        self, jobs_cluster: JobsCluster, project: Path, submitted: str
    ) -> None:
        result = submit(project, jobs_cluster, "wc")
        assert result.returncode == 1
        refusal = " ".join(result.stderr.split())
        assert f"a topology named 'wc' already runs on this Ray cluster (Ray job {submitted}" in refusal
        assert "kill it first (`rayflow kill wc`)" in refusal
        assert len([job for job in jobs_cluster.jobs().list_jobs() if job.metadata.get("rayflow.topology")]) == 1

    def test_deactivate_stops_the_spout_and_activate_lets_it_go_on(
        self, jobs_cluster: JobsCluster, project: Path, submitted: str
    ) -> None:
        result = rayflow(project, "deactivate", "wc", "--address", jobs_cluster.address)
        assert result.returncode == 0, result.stderr
        assert "topology 'wc' is inactive" in result.stdout
        paused = listed(project, jobs_cluster)["wc"]
        assert paused["status"] == "inactive"
        assert stays(lambda: listed(project, jobs_cluster)["wc"]["emitted"] == paused["emitted"], secs=3)

        result = rayflow(project, "activate", "wc", "--address", jobs_cluster.address)
        assert result.returncode == 0, result.stderr
        assert "topology 'wc' is active" in result.stdout
        assert eventually(lambda: listed(project, jobs_cluster)["wc"]["emitted"] > paused["emitted"], timeout=30)

    def test_submit_names_the_cluster_and_a_log_command_that_works(
        self, jobs_cluster: JobsCluster, project: Path, submitted: str, submit_output: str
    ) -> None:
        """What ``submit`` prints to follow the job works from a shell on a machine with other
        Rays: the cluster named, token mode on when the cluster wants the token."""
        assert f"on the Ray cluster at {jobs_cluster.address}" in submit_output
        assert f"rayflow kill wc --address {jobs_cluster.address}" in submit_output
        (logs,) = [line.split("its log:", 1)[1].split() for line in submit_output.splitlines() if "its log:" in line]
        env = dict(word.split("=", 1) for word in logs if "=" in word and not word.startswith("-"))
        command = [word for word in logs if word not in (f"{k}={v}" for k, v in env.items()) and word != "--follow"]
        assert command[:4] == ["ray", "job", "logs", submitted] and "--address" in command
        shown = subprocess.run(
            [RAY, *command[1:]], env={**user_env(), **env}, capture_output=True, text=True, timeout=COMMAND_SECS
        )
        assert shown.returncode == 0, shown.stderr
        assert "rayflow" in shown.stdout or "sentences" in shown.stdout

    def test_kill_without_a_named_cluster_is_refused_saying_which_it_would_take(
        self, jobs_cluster: JobsCluster, project: Path, submitted: str
    ) -> None:
        """``--address auto`` finds whichever Ray runs here (this machine runs several): a kill
        needs the cluster named, and says which one auto found."""
        for command in ("kill", "deactivate"):
            result = rayflow(project, command, "wc")
            assert result.returncode == 2, result.stdout + result.stderr
            said = " ".join(result.stderr.split())
            assert f"`rayflow {command}` acts only on a cluster you name" in said
            assert f"rayflow {command} wc --address" in said and "(or set RAY_ADDRESS)" in said
        assert listed(project, jobs_cluster)["wc"]["status"] == "active"

    def test_kill_by_name_ends_the_topology_and_its_job(
        self, jobs_cluster: JobsCluster, project: Path, submitted: str
    ) -> None:
        result = rayflow(project, "kill", "wc", "--address", jobs_cluster.address, "--wait", "5")
        assert result.returncode == 0, result.stderr
        assert "killed topology 'wc'" in result.stdout
        assert "wc" not in listed(project, jobs_cluster)
        jobs = jobs_cluster.jobs()
        assert eventually(lambda: jobs.get_job_status(submitted).is_terminal(), timeout=60)
        assert jobs.get_job_status(submitted) == "SUCCEEDED"  # rayflow run's exit 0: every tree acked
        log = jobs.get_job_logs(submitted)
        assert "killed from outside (`rayflow kill`)" in log
        assert "sentences: every tuple tree was acked" in log


@pytest.mark.cluster
class TestAnyRunningTopology:
    def test_a_rayflow_run_in_another_terminal_is_listed_and_killed_by_name(
        self, jobs_cluster: JobsCluster, project: Path
    ) -> None:
        """``rayflow run`` stops as after Ctrl-C when its topology is killed from elsewhere: its
        summary, and its usual exit code."""
        command = [sys.executable, "-m", "rayflow", "run", "wordcount.yaml", "--set", "name=terminal"]
        run = subprocess.Popen(
            [*command, "--address", jobs_cluster.address],
            cwd=project,
            env=user_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert eventually(lambda: "terminal" in listed(project, jobs_cluster), timeout=START_SECS, interval=1.0)
            row = listed(project, jobs_cluster)["terminal"]
            assert row["status"] == "active" and row["driver"].startswith(f"pid {run.pid} ")
            result = rayflow(project, "kill", "terminal", "--address", jobs_cluster.address, "--wait", "0")
            assert result.returncode == 0, result.stderr
            out, err = run.communicate(timeout=COMMAND_SECS)
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
                run.communicate(timeout=COMMAND_SECS)
        assert "summary after" in out and "(interrupted)" in out
        assert run.returncode in (0, 2), err  # 2: trees still pending when the kill came (--wait 0)

    def test_kill_of_an_unknown_name_says_so(self, jobs_cluster: JobsCluster, project: Path) -> None:
        result = rayflow(project, "kill", "nosuch", "--address", jobs_cluster.address)
        assert result.returncode == 4
        assert "no topology named 'nosuch' runs on this cluster" in result.stderr

    def test_the_dashboard_address_is_explained(self, jobs_cluster: JobsCluster, project: Path) -> None:
        result = rayflow(project, "list", "--address", jobs_cluster.dashboard)
        assert result.returncode == 1
        explained = " ".join(result.stderr.split())
        assert f"{jobs_cluster.dashboard} is a web address: Ray's dashboard, where its Jobs API is" in explained
        assert "give --address HOST:PORT" in explained


@pytest.mark.cluster
def test_a_head_whose_agent_port_was_taken_is_explained(project: Path) -> None:
    """Another program holds the port of the head's dashboard agent, as another Ray on the
    machine does with Ray's default 52365: the head starts, its Jobs API answers, but no agent
    runs jobs ("No available agent to submit job"). ``submit`` says why, from the agent's log,
    and which flag moves the port."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = JobsCluster()
        try:
            problem = cluster.start(agent_port=port)
            if problem is not None:
                pytest.skip(f"no Ray cluster with a dashboard for Ray Jobs: {problem}")
            result = submit(project, cluster, "agentless")
        finally:
            cluster.stop()
    said = " ".join(result.stderr.split())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the cluster has no job agent to run the job (Ray answered: No available agent to submit job)" in said
    assert "dashboard_agent.log" in said and "address already in use" in said and str(port) in said
    assert "start the head again with `--dashboard-agent-listen-port` set to a free port" in said


# -- the control actor, on the session's Ray --------------------------------------------------------


def _explode() -> None:
    raise RuntimeError("this bolt only loads where its GPU driver is")


class Unbuildable(BasicBolt):
    """Pickles in the driver, cannot be re-built in a worker."""

    def __reduce__(self) -> Any:
        return (_explode, ())

    def execute(self, tup: Any, collector: Any) -> None:
        pass


def endless() -> Any:
    builder = TopologyBuilder()
    builder.set_spout("numbers", EndlessSpout())
    builder.set_bolt("sink", Sink()).shuffle_grouping("numbers")
    return builder.create_topology()


@pytest.mark.ray
class TestOneTopologyPerName:
    def test_a_second_topology_of_a_running_name_is_refused_until_the_first_is_killed(self, ray_cluster: str) -> None:
        first = submit_topology("twice", Config(max_spout_pending=50), endless())
        try:
            with pytest.raises(TopologyNameTaken, match=r"a topology named 'twice' already runs on this Ray cluster"):
                submit_topology("twice", Config(), endless())
        finally:
            first.kill()
        second = submit_topology("twice", Config(max_spout_pending=50), endless())
        second.kill()
        assert find("twice") is None

    def test_a_topology_that_cannot_start_does_not_keep_its_name(self, ray_cluster: str) -> None:
        builder = TopologyBuilder()
        builder.set_spout("numbers", EndlessSpout())
        builder.set_bolt("gpu", Unbuildable()).shuffle_grouping("numbers")
        with pytest.raises(TopologyError, match="cannot be re-built in its task"):
            submit_topology("unbuildable", Config(), builder.create_topology())
        assert find("unbuildable") is None

    def test_a_script_driver_has_its_handle_killed_in_place(self, ray_cluster: str) -> None:
        """A kill from outside, for a driver that is not ``rayflow run``: the tasks stop, the
        name is free, the process goes on."""
        handle = submit_topology("scripted", Config(max_spout_pending=50), endless())
        try:
            control = find("scripted")
            assert ask(control, "deactivate", 20)["active"] is False
            assert ask(control, "kill", 20) == {"killing": "killed by its driver"}
            assert eventually(lambda: handle.killed and find("scripted") is None, timeout=30)
        finally:
            handle.kill()
