"""``AckWatermark``, the RabbitMQ spout's ack bookkeeping, against a model of the broker: deliveries
arrive, trees complete or fail in any order, time passes, acks are flushed, the channel is lost.
No broker needed. What must hold for every sequence:

- a delivery tag is settled once (a single ack of a tag the broker no longer holds is a channel
  error), and never before its tree completed;
- ``multiple=True`` only below the lowest open tag;
- no completed tree is forgotten: a flush of everything leaves nothing waiting.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rayflow.connectors._amqp.ack_watermark import AckWatermark

HOLD_CAP = 4
HOLD_SECS = 0.5


class Broker:
    """What RabbitMQ knows of one channel: the tags delivered and not settled yet."""

    def __init__(self) -> None:
        self.next_tag = 1
        self.outstanding: set[int] = set()

    def deliver(self, n: int) -> list[int]:
        tags = list(range(self.next_tag, self.next_tag + n))
        self.next_tag += n
        self.outstanding.update(tags)
        return tags

    def ack(self, tag: int, multiple: bool) -> set[int]:
        """The tags the ack settles; a single ack of a tag not outstanding is a channel error."""
        if multiple:
            settled = {t for t in self.outstanding if t <= tag}
        else:
            assert tag in self.outstanding, f"tag {tag} settled twice (PRECONDITION_FAILED - unknown delivery tag)"
            settled = {tag}
        self.outstanding -= settled
        return settled


class WatermarkMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.watermark = AckWatermark(HOLD_CAP, HOLD_SECS, clock=lambda: self.now)
        self.new_channel()

    def new_channel(self) -> None:
        self.broker = Broker()
        self.open: set[int] = set()
        self.done: set[int] = set()
        """Trees completed, their tags not acked yet."""

    @rule(n=st.integers(1, 6))
    def deliver(self, n: int) -> None:
        tags = self.broker.deliver(n)
        self.watermark.delivered(tags)
        self.open.update(tags)

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def tree_completes(self, data: st.DataObject) -> None:
        tag = data.draw(st.sampled_from(sorted(self.open)))
        self.watermark.done(tag)
        self.open.discard(tag)
        self.done.add(tag)

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def handed_back_or_dead_lettered(self, data: st.DataObject) -> None:
        """The spout nacks or rejects the tag (a failed tree): settled at once, never acked."""
        tag = data.draw(st.sampled_from(sorted(self.open)))
        self.watermark.settled(tag)
        self.broker.ack(tag, multiple=False)
        self.open.discard(tag)

    @rule(secs=st.sampled_from([0.0, 0.05, 0.2, 0.6]))
    def time_passes(self, secs: float) -> None:
        self.now += secs

    @rule(everything=st.booleans())
    def flush(self, everything: bool) -> None:
        for tag, multiple in self.watermark.acks(everything):
            if multiple and self.open:
                assert tag < min(self.open), f"multiple=True up to {tag} passes open tag {min(self.open)}"
            settled = self.broker.ack(tag, multiple)
            assert settled, f"an ack of {tag} that settles nothing"
            assert settled <= self.done, f"acked before their trees completed: {sorted(settled - self.done)}"
            self.done -= settled
        if everything:
            assert not self.done and self.watermark.waiting == 0

    @rule()
    def channel_lost(self) -> None:
        """The connection goes: the broker requeues what was not acked; tags start again at 1."""
        assert self.watermark.clear() == len(self.done)
        self.new_channel()

    @invariant()
    def open_tags_and_the_watermark_are_the_models(self) -> None:
        for tag in self.open | self.done:
            assert (tag in self.watermark) == (tag in self.open)
        assert self.watermark.watermark == (min(self.open) if self.open else None)
        assert self.watermark.waiting == len(self.done)

    @invariant()
    def every_tag_the_broker_holds_is_open_or_done(self) -> None:
        assert self.broker.outstanding == self.open | self.done


TestWatermarkAgainstTheBroker = WatermarkMachine.TestCase
TestWatermarkAgainstTheBroker.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


class TestAcks:
    def test_in_order_completions_are_one_multiple_ack(self) -> None:
        watermark = AckWatermark(HOLD_CAP, HOLD_SECS, clock=lambda: 0.0)
        watermark.delivered(range(1, 101))
        for tag in range(1, 101):
            watermark.done(tag)
        assert watermark.acks() == [(100, True)]

    def test_a_done_tag_above_an_open_one_waits_for_the_hold(self) -> None:
        """Tag 1's tree still runs: 2 and 3 wait, then go on their own once held long enough."""
        now = [0.0]
        watermark = AckWatermark(HOLD_CAP, HOLD_SECS, clock=lambda: now[0])
        watermark.delivered([1, 2, 3])
        watermark.done(3)
        watermark.done(2)
        assert watermark.acks() == []
        now[0] = HOLD_SECS
        assert watermark.acks() == [(3, False), (2, False)]
        watermark.done(1)
        assert watermark.acks() == [(1, True)]

    @given(st.permutations(list(range(1, 31))))
    def test_any_completion_order_acks_each_tag_once_when_flushed_at_the_end(self, order: list[int]) -> None:
        watermark = AckWatermark(HOLD_CAP, HOLD_SECS, clock=lambda: 0.0)
        watermark.delivered(range(1, 31))
        broker = Broker()
        broker.deliver(30)
        for tag in order:
            watermark.done(tag)
            for acked, multiple in watermark.acks():
                broker.ack(acked, multiple)
        for acked, multiple in watermark.acks(everything=True):
            broker.ack(acked, multiple)
        assert not broker.outstanding
