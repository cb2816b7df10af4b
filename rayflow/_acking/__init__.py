"""The acker: Storm's XOR tracking of tuple trees, in one package.

How the pieces fit, bottom up:

    anchoring.py     the edge-id arithmetic every task shares: ``new_id``, ``anchor`` (the tree of
                     a tuple emitted anchored to others), ``tree_acks`` (what acking one tells the
                     acker); it sits below the outbox, which stores ids in its typecode
    ledger.py        ``AckLedger``: the acker task's bookkeeping per tree, in flat arrays
    _ledger.c        the same ledger as a C type (optional extension ``_ledger_kernel``)
    ledger_build.py  which of the two runs (``LEDGER_BUILD``): C unless RAYFLOW_PURE_PYTHON=1 or
                     not built
    executor.py      ``AckerExecutor``: the acker task, feeding its traffic to the ledger and
                     telling each spout task how its trees ended

This module imports none of them: the outbox (below the executors) imports ``anchoring`` while
``executor`` builds on the executors' base, so importing the package must not pull in either.
"""
