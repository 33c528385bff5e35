"""Calls parked on the fleet: where they are recorded, how the fleet finds the due ones, and the
ids that make each wake exactly once.

- :mod:`.base`: the :class:`~.base.WaitRecord`, the :class:`~.base.WaitIndex` seam (the session's
  wait records and the sharded index of wake times), the wake's deterministic ids.
- :mod:`.memory`, :mod:`.redis`: its backends (``tests/test_wait_index_contract.py``).
- :mod:`.marks`: the durable marks beside the sessions' heads that let recovery rebuild the index
  after Redis lost it (a flush, a rollback), reading only the waiting sessions.
"""
