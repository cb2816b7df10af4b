"""The bolt task: tick tuples, and user code that raises or emits what cannot travel.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

from collections import deque

from .executor_components import (
    BasicSplit,
    BasicTicked,
    BrokenOpen,
    Count,
    Hold,
    Poison,
    Reasons,
    Ticked,
    Wire,
    pipeline,
)


class TestTicks:
    def test_tick_tuple(self):
        """A tick is a tuple from __system on __tick carrying the frequency; it is not tracked."""
        wire = Wire(pipeline(Ticked()))
        wire.task("bolt").tick(2.0)
        wire.settle()
        (tick,) = wire.bolts("bolt")[0].ticks
        assert tick.is_tick()
        assert tick[0] == 2.0
        assert wire.control == deque()

    def test_ticks_stay_out_of_the_users_counters(self):
        """Storm's ticks are system tuples: acked or not, they count as neither executed nor
        acked, and a bolt that never acks them (it holds them, as a sink does) does not use up
        the slots that sample its process latency."""
        wire = Wire(pipeline(Ticked()))
        bolt = wire.task("bolt")
        for _ in range(3):
            bolt.tick(1.0)
        wire.settle()
        assert (bolt.metrics.executed, bolt.metrics.acked, bolt.metrics.failed) == (0, 0, 0)
        assert not bolt._timed

    def test_a_basic_bolt_emit_on_a_tick_is_unanchored(self):
        """A ``BasicBolt`` that emits while handling a tick emits an untracked tuple: the tick
        has no tree to join, and nothing reaches an acker."""
        wire = Wire(pipeline(BasicTicked(), downstream=Count()))
        wire.task("bolt").tick(1.0)
        wire.settle()
        assert wire.control == deque()
        assert wire.bolts("downstream")[0].counts == {"tick": 1}


class TestFaults:
    def test_unpicklable_value_fails_only_its_tree(self):
        """A value that cannot be pickled fails its own tuple's tree, is reported on the emitting
        component, and the rest of the batch goes on."""
        wire = Wire(pipeline(Poison(), downstream=Count()))
        wire.spout().feed("good words", msg_id=1)
        wire.spout().feed("one poison word", msg_id=2)
        wire.spout().feed("more good words", msg_id=3)
        wire.run()
        assert sorted(wire.spout().acked) == [1, 3]
        assert wire.spout().failed == [2]
        assert sum(wire.bolts("downstream")[0].counts.values()) == 7
        bolt = wire.task("bolt")
        assert bolt.metrics.errors == 1 and "cannot be pickled" in bolt.metrics.last_error

    def test_fail_reason_failed_or_timeout(self):
        """A spout whose fail takes a reason hears "failed" for an explicit fail, "timeout" for a
        tree that timed out; one taking only the msg id keeps working (Sentences)."""
        wire = Wire(pipeline(BasicSplit(), downstream=Count(fail_word="cow"), spout=Reasons()))
        wire.spout().feed("the cow", msg_id=1)
        wire.run()
        assert wire.spout().failed == [(1, "failed")]
        wire = Wire(pipeline(Hold(), spout=Reasons()))
        wire.spout().feed("held", msg_id=2)
        wire.run()
        wire.advance(2 * wire.conf.message_timeout_secs + 1)
        assert wire.spout().failed == [(2, "timeout")]

    def test_spout_whose_open_raised_is_not_driven_until_opened_again(self):
        """open raised: reported once, next_tuple never called; a later activate opens it."""
        BrokenOpen.opened = 0
        wire = Wire(pipeline(BasicSplit(), spout=BrokenOpen()))
        spout = wire.task("sentences")
        assert spout.metrics.errors == 1 and "open raised" in spout.metrics.last_error
        assert not spout.wants_next_tuple() and wire.run() == 0
        wire.activate()
        assert spout.wants_next_tuple() and spout.metrics.errors == 1
        wire.spout().feed("back", msg_id=1)
        wire.run()
        assert wire.spout().acked == [1]
