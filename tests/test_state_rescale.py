"""A stateful bolt's parallelism changed between runs: its state follows its keys.

The topology: sentences -> split -> count (a ``StatefulBolt``, fields-grouped on the word),
state in SQLite (or Redis) under one topology name. Run it with ``count`` on 2 tasks, then on
3, then on 1: every task must start with exactly the words the fields grouping now sends it
(each word in one task only), and every count must go on from the last run's, exactly, at
least once and exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rayflow import Config, StateError, TopologyContext, TopologyError
from rayflow._groupings import FieldsGrouping, StreamId, key_bytes, stable_hash
from rayflow._state.key_groups import (
    DEFAULT_MAX_PARALLELISM,
    Layout,
    check_layout,
    group_namespace,
    key_group,
    layout_of,
    owned_groups,
    owner,
    split_changes,
)
from rayflow._state.provider import open_provider
from rayflow._state.validation import check_state_settings
from rayflow.state import SqliteStateProvider, load_component
from rayflow.testing import CompletedTopology, complete_topology

from . import exactly_once_components as eo
from .state_components import StatefulCount, wordcount

SENTENCES = ["the cow jumped over the moon", "an apple a day", "the man went to the store", "four score and seven"]
TRUTH = Counter(w for s in SENTENCES for w in s.split())
M = DEFAULT_MAX_PARALLELISM


@pytest.fixture(params=["sqlite", "redis"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The settings of a durable provider, and the topology name, fresh for each test."""
    if request.param == "sqlite":
        yield {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}, "topology.name": "wc"}
        return
    from tests.connectors.brokers import REDIS_URL, require_redis, unique

    require_redis()
    prefix = unique("rayflow-test-rescale")
    yield {
        "state_provider": "redis",
        "state_provider_config": {"url": REDIS_URL, "key_prefix": prefix},
        "topology.name": "wc",
    }
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def per_task_state(result: CompletedTopology) -> list[dict[str, int]]:
    """Each count task's state after the run, by task id."""
    return [dict(task.counts.items()) for task in result.components("count")]


def assert_placed(states: list[dict[str, int]]) -> None:
    """Every key is in the task the fields grouping sends it to, and in no other."""
    for index, state in enumerate(states):
        for word in state:
            assert owner(key_group(word, 1, M), len(states), M) == index, (word, index)


def last_counts(result: CompletedTopology) -> dict[str, int]:
    """The highest count each word was emitted with: what its task counted it up to."""
    last: dict[str, int] = {}
    for word, n in result.emitted("count"):
        last[word] = max(n, last.get(word, 0))
    return last


class TestKeyGroups:
    def test_the_groups_of_the_tasks_are_contiguous_and_cover_every_group_once(self) -> None:
        for tasks in (1, 2, 3, 5, 7, 128):
            ranges = [owned_groups(i, tasks, M) for i in range(tasks)]
            assert [g for r in ranges for g in r] == list(range(M))
            assert all(owner(g, tasks, M) == i for i, r in enumerate(ranges) for g in r)

    def test_a_key_group_is_the_fields_groupings_crc32_of_the_key(self) -> None:
        """The same hash as the fields grouping, not Python's salted one: one key, one group
        in every process."""
        assert key_group("moon", 1, M) == zlib.crc32(b"moon") % M
        assert key_group(7, 1, M) == zlib.crc32(key_bytes(7)) % M == key_group(7.0, 1, M)
        assert key_group(("de", "berlin"), 2, M) == stable_hash(["de", "berlin"]) % M
        assert key_group("not a pair", 2, M) == -1

    def test_the_fields_grouping_into_a_stateful_bolt_sends_each_key_to_its_groups_owner(self) -> None:
        result = complete_topology(wordcount(SENTENCES, count_tasks=3))
        states = per_task_state(result)
        assert_placed(states)
        assert sum(map(Counter, states), Counter()) == TRUTH

    def test_key_groups_are_the_same_in_every_process(self) -> None:
        """Processes with different PYTHONHASHSEED put every key in the same group as this one."""
        keys: list[Any] = ["moon", "wörld", "", 7, -3, 2.5, None, ["a", 1]]
        script = (
            "import json, sys\n"
            "from rayflow._state.key_groups import key_group\n"
            "keys = [tuple(k) if type(k) is list else k for k in json.loads(sys.argv[1])]\n"
            "print(json.dumps([hash('moon'), [key_group(k, 1, 128) for k in keys]]))\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, json.dumps(keys)],
                env=env | {"PYTHONHASHSEED": seed},
                stdout=subprocess.PIPE,
                text=True,
            )
            for seed in ("1", "2")
        ]
        (salt_1, groups_1), (salt_2, groups_2) = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
        assert salt_1 != salt_2, "the seeds should salt str hashes differently"
        here = [key_group(k if type(k) is not list else tuple(k), 1, M) for k in keys]
        assert groups_1 == groups_2 == here

    @given(
        values=st.lists(
            st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.tuples(st.text(), st.integers())),
            min_size=1,
            max_size=20,
        ),
        tasks=st.integers(1, 12),
        groups=st.sampled_from([12, 13, 128]),
        fields=st.sampled_from([1, 2]),
    )
    def test_the_grouping_the_key_group_and_the_checkpoints_split_agree(
        self, values: list[Any], tasks: int, groups: int, fields: int
    ) -> None:
        """The grouping's and the checkpoint's inlined hashes are ``key_group``'s: the task a
        tuple goes to owns its key's group, and its checkpoint files the key under that group."""
        declared = ("a", "b")[:fields]
        context = TopologyContext(
            1, {1: "src"} | {2 + i: "count" for i in range(tasks)}, {"src": {"default": declared}}
        )
        grouping = FieldsGrouping(declared)
        grouping.key_groups = groups
        grouping.prepare(context, StreamId("src", "default"), [2 + i for i in range(tasks)])
        for value in values:
            row = [value] if fields == 1 else [value, value]
            key = value if fields == 1 else (value, value)
            index = grouping.choose_tasks(1, row)[0] - 2
            assert owner(key_group(key, fields, groups), tasks, groups) == index
            mine = owned_groups(index, tasks, groups)
            namespaces = [group_namespace("t", "count", g) for g in mine]
            staged, foreign = split_changes({key: 1}, fields, groups, mine, namespaces)
            assert foreign == [] and staged == {group_namespace("t", "count", key_group(key, fields, groups)): {key: 1}}

    def test_a_bolt_with_more_tasks_than_key_groups_is_refused(self) -> None:
        class Small(StatefulCount):
            max_parallelism = 2

        with pytest.raises(TopologyError, match=r"stateful bolt 'count': parallelism 3 is above its max_parallelism 2"):
            wordcount(SENTENCES, Small(), count_tasks=3)

    def test_only_a_bolt_fields_grouped_on_every_input_is_keyed(self) -> None:
        assert layout_of(wordcount(SENTENCES), "count").fields == 1
        assert layout_of(eo.wordcount(4), "count").fields == 1
        assert not layout_of(wordcount(SENTENCES), "split").keyed  # shuffle-grouped (not stateful, but alike)


class TestRescale:
    def test_at_least_once_2_then_3_then_1_tasks(self, durable: dict[str, Any]) -> None:
        for run, tasks in enumerate((2, 3, 1), start=1):
            result = complete_topology(wordcount(SENTENCES, count_tasks=tasks), durable)
            states = per_task_state(result)
            assert len(states) == tasks
            assert_placed(states)
            assert sum(map(Counter, states), Counter()) == Counter({w: run * n for w, n in TRUTH.items()})
            assert last_counts(result) == {w: run * n for w, n in TRUTH.items()}  # counted on from the last run

    def test_exactly_once_2_then_3_then_1_tasks(self, durable: dict[str, Any]) -> None:
        """Each run resumes from the last committed cut: the spout seeks to where it stood, so
        run k counts sentences 0..20k-1 once in all, whatever the parallelism (the count's
        name sorts before the spout's: a rescale moves the spout's task id, not its place)."""
        conf = {**durable, "processing_guarantee": "exactly_once"}
        for run, tasks in enumerate((2, 3, 1), start=1):
            result = complete_topology(eo.wordcount(20 * run, count=tasks), conf)
            states = per_task_state(result)
            assert_placed(states)
            assert sum(map(Counter, states), Counter()) == eo.true_counts(20 * run)
            assert last_counts(result) == eo.true_counts(20 * run)  # each word is in any 20 sentences

    def test_the_committed_state_reads_back_whole(self, durable: dict[str, Any]) -> None:
        complete_topology(wordcount(SENTENCES, count_tasks=2), durable)
        provider = open_provider(durable["state_provider"], durable["state_provider_config"], "wc")
        assert load_component(provider, "wc", "count") == TRUTH
        provider.close()


class TestRefusals:
    def test_state_kept_per_task_cannot_change_its_parallelism(self, tmp_path: Path) -> None:
        """A count that is shuffle-grouped has no keys to move: its state stays per task, and a
        run on another number of tasks is refused at submit, naming what to do."""
        conf = {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}, "topology.name": "wc"}
        complete_topology(shuffled(2), conf)
        check_state_settings(shuffled(2), Config.of(conf), reach=True)  # the same parallelism: fine
        with pytest.raises(
            StateError, match=r"kept per task by 2 task\(s\) .* cannot be spread over 3: keep parallelism 2"
        ):
            check_state_settings(shuffled(3), Config.of(conf), reach=True)

    def test_a_changed_max_parallelism_is_refused(self) -> None:
        recorded = {"fields": 1, "parallelism": 2, "max_parallelism": 128}
        with pytest.raises(StateError, match=r"kept in 128 key groups, and max_parallelism is now 64"):
            check_layout(recorded, Layout(1, 2, 64), "count", "here")

    def test_a_changed_number_of_grouping_fields_is_refused(self) -> None:
        recorded = {"fields": 1, "parallelism": 2, "max_parallelism": 128}
        with pytest.raises(
            StateError, match=r"keyed by the values of 1 field\(s\), and the bolt is now fields-grouped on 2"
        ):
            check_layout(recorded, Layout(2, 2, 128), "count", "here")

    def test_a_foreign_key_fails_the_checkpoint_naming_it(self) -> None:
        class Total(StatefulCount):
            def execute(self, tup: Any) -> None:
                self.counts.put("__total__", self.counts.get("__total__", 0) + 1)
                super().execute(tup)

        with pytest.warns(UserWarning, match="stopped unfinished"):  # the checkpoint fails every time
            result = complete_topology(wordcount(SENTENCES, Total(), count_tasks=2), max_rounds=3)
        error = result.metrics()["count"]["last_error"]
        assert "state key(s) such as '__total__' belong to key groups other tasks own" in error


def shuffled(tasks: int, splits: int = 1) -> Any:
    """sentences -> a_split (``splits`` tasks, named to sort first) -> count (stateful, shuffle)."""
    from rayflow import TopologyBuilder

    from .state_components import Sentences, Split

    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences(SENTENCES))
    builder.set_bolt("a_split", Split(), splits).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulCount(), tasks).shuffle_grouping("a_split")
    return builder.create_topology()


class TestStateKeptPerTask:
    def test_it_is_kept_by_the_tasks_place_not_its_id(self, tmp_path: Path) -> None:
        """A component named before the count gets more tasks, so every count task id moves:
        each count task still finds its own state, and the counts go on exactly."""
        conf = {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}, "topology.name": "wc"}
        first = complete_topology(shuffled(2, splits=1), conf)
        second = complete_topology(shuffled(2, splits=3), conf)
        ids = [[t for t, c in shuffled(2, splits).task_layout(1).items() if c == "count"] for splits in (1, 3)]
        assert ids == [[3, 4], [5, 6]]  # after __checkpoint and a_split
        before = per_task_state(first)
        after = per_task_state(second)
        assert sum(map(Counter, after), Counter()) == Counter({w: 2 * n for w, n in TRUTH.items()})
        assert all(set(b) <= set(a) for b, a in zip(before, after, strict=True))  # each task kept its own keys


class TestStateBeforeKeyGroups:
    def test_state_kept_per_task_id_is_carried_into_the_key_groups(self, tmp_path: Path) -> None:
        """State committed by rayflow before key groups (``wc/count/<task id>``, by 2 tasks):
        a keyed run on 3 tasks loads each word from whichever old task held it, counts on, and
        its first commit writes the words into their groups; the next run does not read the old
        namespaces again."""
        settings = {"dir": str(tmp_path)}
        conf = {"state_provider": "sqlite", "state_provider_config": settings, "topology.name": "wc"}
        provider = SqliteStateProvider(settings, "wc")
        words = sorted(TRUTH)
        for task, part in ((5, words[::2]), (6, words[1::2])):
            provider.stage(f"wc/count/{task}", 3, {w: TRUTH[w] for w in part})
            provider.commit(f"wc/count/{task}", 3)
        for run in (2, 3):
            result = complete_topology(wordcount(SENTENCES, count_tasks=3), conf)
            assert_placed(per_task_state(result))
            assert load_component(provider, "wc", "count") == Counter({w: run * n for w, n in TRUTH.items()})
        groups = [f"wc/count/group-{g}" for g in range(M)]  # the old namespaces stay, unread
        assert sorted(provider.namespaces("wc/count/")) == sorted(
            [*groups, "wc/count/5", "wc/count/6", "wc/count/layout"]
        )
        provider.close()

    def test_per_task_state_kept_under_task_ids_is_carried_by_the_tasks_place(self, tmp_path: Path) -> None:
        settings = {"dir": str(tmp_path)}
        conf = {"state_provider": "sqlite", "state_provider_config": settings, "topology.name": "wc"}
        provider = SqliteStateProvider(settings, "wc")
        for task, words in ((9, {"the": 10}), (10, {"cow": 20})):  # ids 9 and 10: 10 sorts before 9 as text
            provider.stage(f"wc/count/{task}", 3, words)
            provider.commit(f"wc/count/{task}", 3)
        result = complete_topology(shuffled(2), conf)
        before = [Counter({"the": 10}), Counter({"cow": 20})]
        states = per_task_state(result)
        assert all(
            set(b) <= set(s) and all(s[w] >= n for w, n in b.items()) for b, s in zip(before, states, strict=True)
        )
        assert sum(map(Counter, states), Counter()) == TRUTH + Counter({"the": 10, "cow": 20})

    def test_per_task_state_of_another_number_of_tasks_is_refused(self, tmp_path: Path) -> None:
        settings = {"dir": str(tmp_path)}
        conf = {"state_provider": "sqlite", "state_provider_config": settings, "topology.name": "wc"}
        provider = SqliteStateProvider(settings, "wc")
        provider.stage("wc/count/4", 3, {"the": 10})
        provider.commit("wc/count/4", 3)
        with pytest.warns(UserWarning, match="stopped unfinished"):
            result = complete_topology(shuffled(2), conf, max_rounds=3)
        assert (
            "was kept by 1 task(s) under their task ids (rayflow before key groups), not by 2"
            in (result.metrics()["count"]["last_error"])
        )
