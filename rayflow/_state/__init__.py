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
    bolt_kind.py     ``StatefulBoltAdapter``: the bolt kind that runs a ``StatefulBolt`` in a
                     ``BoltExecutor`` (plugged in through ``_executors/bolt_kind.py`` and the
                     table in ``_executors/kinds.py``): its state, its held acks, the actions
    validation.py    what is checked of a stateful topology before it runs (``_run_checks``
                     calls ``check_state_settings``)

The public face is ``rayflow.state`` (the providers, ``load_component``) and ``rayflow``
(``StatefulBolt``, ``KeyValueState``, ``StateError``). This ``__init__`` imports none of its
modules: ``bolt_kind.py`` builds on ``rayflow._executors``, which imports ``checkpoint.py`` and
``alignment.py`` from here, so importing it with the package would go round in a circle.
"""
