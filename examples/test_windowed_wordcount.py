"""How to unit-test a windowed bolt: the event-time top words of ``windowed_wordcount.py``,
without a cluster. ``complete_topology`` drives the watermark on its simulated clock, so 200 s
of event time in 10 s windows takes a fraction of a second.

Run:  python -m pytest examples/test_windowed_wordcount.py
"""

from __future__ import annotations

from examples.windowed_wordcount import CONF, LATE_EVERY, SENTENCES, CountLate, build
from rayflow.testing import complete_topology


def test_every_window_closes_the_late_words_are_counted_and_every_sentence_is_acked() -> None:
    result = complete_topology(build(sentences=1_000), CONF)
    assert result.finished
    assert sorted(result.acked("sentences")) == list(range(1_000))
    windows = result.emitted("top")
    ends = [end for end, _ in windows]
    assert ends == sorted(ends) and len(ends) == len(set(ends))  # each window once, in order
    full = [top for _, top in windows if top[0][1] > 10]  # not the edges of the stream
    assert full and all(top[0][0] == "the" for top in full)
    # Every 50th sentence arrives after its window fired: its words, and only they, are late.
    held_back = [i for i in range(1_000) if i % LATE_EVERY == LATE_EVERY - 1]
    late: list[CountLate] = result.components("late")
    assert late[0].late == sum(len(SENTENCES[i % len(SENTENCES)].split()) for i in held_back)
