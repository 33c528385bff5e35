"""Signals sent to sessions: the mailbox each session has in its own keyspace, and the wake of a
call parked on one.

- :mod:`.base`: the :class:`~.base.SignalMailbox` seam, what a payload must be, the wake.
- :mod:`.memory`, :mod:`.redis`: its backends (``tests/test_signal_mailbox_contract.py``).
"""
