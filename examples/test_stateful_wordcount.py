"""How to unit-test a stateful bolt: the word count of ``stateful_wordcount.py``, without a cluster.

``complete_topology`` runs checkpoints on its simulated clock (state in memory unless the config
names a provider), so a test sees what a restart would: the committed counts, and the sentences
acked only once the checkpoint after them committed.

Run:  python -m pytest examples/test_stateful_wordcount.py
"""

from __future__ import annotations

import random
from collections import Counter

from examples.stateful_wordcount import StatefulWordCount, build, truth
from examples.wordcount import SentenceSpout, SplitSentence
from rayflow import Config, TopologyBuilder
from rayflow.testing import complete_topology

FED = ["the cow jumped over the moon", "the man went to the store"]


def test_counts_are_kept_in_state_and_every_sentence_is_acked_at_a_commit() -> None:
    result = complete_topology(build(sentences=0), mocked_sources={"sentences": [[s] for s in FED]})
    assert sorted(result.acked("sentences")) == [0, 1]
    tasks: list[StatefulWordCount] = result.components("count")
    counts = sum((Counter(dict(task.counts.items())) for task in tasks), Counter[str]())
    assert counts == Counter(" ".join(FED).split())
    assert result.metrics()["count"]["checkpoints"] >= 1


def test_exactly_once_every_sentence_counted_once_through_failures() -> None:
    """The sentence spout can go back (``position``/``seek``), so the word count runs
    exactly-once: a split that fails a tenth of the sentences makes the whole topology roll back
    to its last checkpoint each time, and every sentence ends counted once. (A small pending
    budget keeps each checkpoint's share small: with many failures, a rollback repeats the
    whole share since the last commit.)"""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(40))
    builder.set_bolt("split", SplitSentence(fail_rate=0.1)).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulWordCount(), parallelism=2).fields_grouping("split", ["word"])
    random.seed(3)  # which sentences the split fails
    result = complete_topology(
        builder.create_topology(), Config(processing_guarantee="exactly_once", max_spout_pending=4)
    )
    tasks: list[StatefulWordCount] = result.components("count")
    counts = sum((Counter(dict(task.counts.items())) for task in tasks), Counter[str]())
    assert counts == truth(40)
    assert sorted(result.acked("sentences")) == list(range(40))
    assert result.metrics()["count"]["rollbacks"] >= 1
