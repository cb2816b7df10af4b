"""``AckerMail.take``: acks of trees whose inits wait in the same mail fold into those inits."""

from __future__ import annotations

from rayflow._outbox import AckerMail


def pairs(flat: object) -> dict[int, int]:
    values = list(flat)  # type: ignore[call-overload]
    return dict(zip(values[::2], values[1::2], strict=True))


def test_every_ack_folds_into_its_init() -> None:
    """A chained bolt that acked only the host's new trees: one init per tree, no acks."""
    mail = AckerMail()
    mail.inits.update({1: 0b1100, 2: 0b0011, 3: 7})
    mail.acks.update({1: 0b1010, 3: 7})
    sender, inits, acks, fails, resets = mail.take(9)
    assert sender == 9
    assert pairs(inits) == {1: 0b0110, 2: 0b0011, 3: 0}
    assert list(inits[::2]) == [1, 2, 3]  # the inits' order stays
    assert pairs(acks) == {} and fails == [] and resets == []
    assert len(mail) == 0


def test_acks_of_other_trees_stay_acks() -> None:
    """Acks of trees inited elsewhere go as acks; those of the mail's own trees still fold."""
    mail = AckerMail()
    mail.inits.update({1: 5, 2: 6})
    mail.acks.update({2: 6, 40: 9, 41: 3})
    _, inits, acks, _, _ = mail.take(9)
    assert pairs(inits) == {1: 5, 2: 0}
    assert pairs(acks) == {40: 9, 41: 3}
    assert len(mail) == 0
