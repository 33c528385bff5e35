"""Lease managers: :class:`InMemoryLeaseManager` and :class:`RedisLeaseManager`.

Both implement :class:`shared.lease.LeaseManager` and pass ``tests/test_lease_contract.py``.
"""

from shared.leases.memory import InMemoryLeaseManager
from shared.leases.redis import RedisLeaseManager

__all__ = ["InMemoryLeaseManager", "RedisLeaseManager"]
