"""Lease managers: :class:`InMemoryLeaseManager` and :class:`RedisLeaseManager`.

Both implement :class:`tether.runs.leases.base.LeaseManager` and pass
``tests/test_lease_contract.py``.
"""

from tether.runs.leases.memory import InMemoryLeaseManager
from tether.runs.leases.redis import RedisLeaseManager

__all__ = ["InMemoryLeaseManager", "RedisLeaseManager"]
