"""Exactly-once: Flink's aligned-barrier snapshots on Storm's checkpoint protocol.

At-least-once state (``_state/checkpoint.py``) sends checkpoints from the checkpoint spout
straight to the bolts that read a spout, so a checkpoint says nothing about where each spout
stood: an input whose tree failed after part of it was counted is counted again on replay.
Exactly-once makes every checkpoint a *consistent cut* instead:

- the checkpoint spout still runs the transaction (PREPARE, COMMIT, ROLLBACK, INITSTATE) and still
  learns from the acker when every task has acted, but it sends each step to every *spout task*
  (a ``Barrier``, as control traffic), and the tuple tree of that step runs through them: each
  spout task acts on the step (PREPARE stages its ``position()``, COMMIT commits it and calls
  ``Spout.ack`` for what the cut covers, ROLLBACK and a first INITSTATE ``seek`` to the committed
  position) and emits it on, in order with its data, to every task that reads it;
- every bolt aligns PREPARE and ROLLBACK as Flink aligns barriers: an input that has delivered
  the step is held back until every input has (``BlockingAlignment``), so what a stateful bolt
  stages at PREPARE is exactly the effect of what every spout emitted before its position, and
  what reaches it after a ROLLBACK is exactly what the spouts emitted after seeking;
- any failure -- a tree failed or timed out, a task restarted, a checkpoint failed -- rolls the
  whole topology back to the last committed cut (the spout asks for it with
  ``ROLLBACK_REQUEST``): nothing in flight survives the ROLLBACK's alignment, and no ``fail`` is
  called, since the spouts' positions are what replays.

``wiring.py`` turns a topology into its exactly-once form at submit; ``spout_cut.py`` is a spout
task's share of the protocol; ``barrier.py`` the messages.
"""
