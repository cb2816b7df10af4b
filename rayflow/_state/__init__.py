"""State that survives restarts: Storm's stateful bolts, checkpointed through the acker.

How the pieces fit, bottom up:

    key_value.py     ``KeyValueState``: what a bolt reads and writes, with the changes since the
                     last checkpoint kept apart so that a checkpoint writes only those
    provider.py      ``StateProvider``: where committed state lives (stage, commit, roll back,
                     each also over many namespaces in one call), and ``open_provider`` naming
                     the built-in ones; memory.py, sqlite.py, redis.py implement it
    checkpoint.py    the checkpoint protocol: the ``__checkpoint`` spout and stream, the actions,
                     the spout's transaction state machine, the wiring ``create_topology`` adds
    key_groups.py    how a stateful bolt's keys are spread over its tasks (Flink's key groups,
                     on the fields grouping's hash) so that its parallelism can change; the
                     layout record that refuses what cannot move; ``load_component``
    alignment.py     a bolt waits for a checkpoint tuple from every upstream task before acting

The bolt side (the stateful bolt's adapter, its collector that defers acks) lives with the
executors, in ``_executors/stateful_bolt.py``.
"""
