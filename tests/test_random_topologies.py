"""Random word counts through the executors' real paths: every sentence acked exactly once.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._topology import TopologyBuilder
from rayflow.testing import InProcessTopology

from .executor_components import (
    BasicFieldsCount,
    BasicSplit,
    FieldsCount,
    Sentences,
)


class TestRandomTopologies:
    """Word counts of random sizes and shapes, run through the executors' real paths (columnar
    batches cut at random sizes, fields keys remembered, BasicBolt inline acking, several
    ackers, a spout whose small pending budget saturates it, so that its shuffle sends in runs),
    with payloads delivered in random order: every sentence is acked exactly once, or failed
    when it holds the word that is failed."""

    @settings(max_examples=40, deadline=None)
    @given(
        sentences=st.lists(st.lists(st.sampled_from("a b c d e".split()), min_size=0, max_size=5), max_size=12),
        split=st.integers(1, 3),
        count=st.integers(1, 3),
        ackers=st.integers(1, 2),
        batch_size=st.integers(1, 4),
        seed=st.integers(0, 2**16),
        basic_count=st.booleans(),
        max_pending=st.one_of(st.none(), st.integers(1, 4)),
    )
    def test_every_tree_settles_once(self, sentences, split, count, ackers, batch_size, seed, basic_count, max_pending):
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("split", BasicSplit(), parallelism=split).shuffle_grouping("sentences")
        counter = BasicFieldsCount("e") if basic_count else FieldsCount("e")
        builder.set_bolt("count", counter, parallelism=count).fields_grouping("split", ["word"])
        wire = InProcessTopology(
            builder.create_topology(),
            {"ackers": ackers, "batch_size": batch_size, "max_spout_pending": max_pending},
            delivery="random",
            seed=seed,
        )
        spout = wire.components("sentences")[0]
        for i, words in enumerate(sentences):
            spout.feed(" ".join(words), msg_id=i)
        wire.run()
        failing = {i for i, words in enumerate(sentences) if "e" in words}
        assert sorted(spout.acked) == [i for i in range(len(sentences)) if i not in failing]
        assert sorted(spout.failed) == sorted(failing)
        # Acks that reach the acker after their tree failed linger until they expire.
        wire.advance(4 * wire.conf.message_timeout_secs)
        assert wire.pending_trees() == 0
        assert len(spout.acked) + len(spout.failed) == len(sentences)
