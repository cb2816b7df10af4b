"""How to unit-test a stateful bolt: the word count of ``stateful_wordcount.py``, without a cluster.

``complete_topology`` runs checkpoints on its simulated clock (state in memory unless the config
names a provider), so a test sees what a restart would: the committed counts, and the sentences
acked only once the checkpoint after them committed.

Run:  python -m pytest examples/test_stateful_wordcount.py
"""

from __future__ import annotations

from collections import Counter

from examples.stateful_wordcount import StatefulWordCount, build
from rayflow.testing import complete_topology

FED = ["the cow jumped over the moon", "the man went to the store"]


def test_counts_are_kept_in_state_and_every_sentence_is_acked_at_a_commit() -> None:
    result = complete_topology(build(sentences=0), mocked_sources={"sentences": [[s] for s in FED]})
    assert sorted(result.acked("sentences")) == [0, 1]
    tasks: list[StatefulWordCount] = result.components("count")
    counts = sum((Counter(dict(task.counts.items())) for task in tasks), Counter[str]())
    assert counts == Counter(" ".join(FED).split())
    assert result.metrics()["count"]["checkpoints"] >= 1
