"""How to unit-test a topology: the word count of ``wordcount.py``, without a cluster.

``complete_topology`` runs the topology in this process -- no Ray -- until every spout is
exhausted and nothing is pending, then tells what happened: what each component emitted, which
message ids each spout was told were acked or failed, and each task's bolt object. It is
deterministic, and message timeouts run on a simulated clock, so a test takes milliseconds.

``mocked_sources`` swaps a spout for one that emits the rows you give it, once each, with the
row's index as its message id -- and never replays. Keep the real spout when replays are what
you want to test.

Run:  python -m pytest examples/test_wordcount.py
"""

from __future__ import annotations

import random
from collections import Counter

from examples.wordcount import SENTENCES, WordCount, build
from rayflow.testing import CompletedTopology, complete_topology

FED = ["the cow jumped over the moon", "the man went to the store", "four score and seven years ago"]
"""What the tests feed in place of the spout."""


def word_counts(result: CompletedTopology) -> Counter[str]:
    """The counts of all count tasks together (a fields grouping gives each word to one task)."""
    tasks: list[WordCount] = result.components("count")
    assert not set.intersection(*(set(task.counts) for task in tasks)), "a word was counted by two tasks"
    return sum((Counter(task.counts) for task in tasks), Counter())


def test_counts_every_word_of_every_sentence() -> None:
    """Three sentences fed to split and count (two tasks each): every sentence is acked, and the
    counts are those of a plain Counter over the words."""
    result = complete_topology(
        build(sentences=0, fail_rate=0.0, split=2, count=2),
        mocked_sources={"sentences": [[s] for s in FED]},
    )
    assert result.finished
    assert sorted(result.acked("sentences")) == [0, 1, 2]
    assert result.failed("sentences") == []
    assert word_counts(result) == Counter(" ".join(FED).split())
    # count emits (word, running count): the last "the" it emitted carries the total.
    assert [pair for pair in result.emitted("count") if pair[0] == "the"][-1] == ["the", 4]


def test_a_failed_sentence_is_lost_when_the_spout_does_not_replay() -> None:
    """split fails about half of the sentences; the mocked spout never replays, so the counts
    are those of the acked sentences only: at-least-once is the spout's job."""
    random.seed(1)  # split draws its failures from `random`, and runs in this process
    rows = [[FED[i % len(FED)]] for i in range(20)]
    result = complete_topology(build(sentences=0, fail_rate=0.5, split=2, count=2), mocked_sources={"sentences": rows})
    acked, failed = result.acked("sentences"), result.failed("sentences")
    assert failed, "with fail_rate=0.5 some of the 20 sentences fail"
    assert sorted(acked + failed) == list(range(20))  # each told once: acked or failed
    assert word_counts(result) == Counter(w for i in acked for w in rows[i][0].split())


def test_the_sentence_spout_replays_failed_sentences_until_all_are_acked() -> None:
    """The real SentenceSpout (30 sentences) replays whatever fails: the run ends with every
    sentence acked exactly once, each failure followed by a replay, and -- since split fails a
    sentence before emitting any of its words -- counts equal to a plain Counter."""
    random.seed(1)
    total = 30
    result = complete_topology(build(sentences=total, fail_rate=0.3, split=2, count=2))
    assert result.finished
    acked, failed = result.acked("sentences"), result.failed("sentences")
    assert sorted(acked) == list(range(total))
    assert failed
    assert len(result.emitted("sentences")) == total + len(failed)  # one replay per failure
    assert result.rounds == 0  # explicit fails are replayed at once: no message timed out
    # SentenceSpout's sentence i is SENTENCES[i % len(SENTENCES)].
    assert word_counts(result) == Counter(w for i in range(total) for w in SENTENCES[i % len(SENTENCES)].split())
