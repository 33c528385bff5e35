"""Snapshot store implementations (see :mod:`shared.store` for the protocol).

- :class:`InMemorySnapshotStore`: a locked dict, for tests and single-process use.
- :class:`LocalSnapshotStore`: files under a directory, safe across processes on one host.
- :class:`S3SnapshotStore`: S3 objects with conditional writes.

All three are thin bindings of :class:`shared.stores.base.BlobSnapshotStore` to a blob backend
and pass the same contract suite (``tests/test_store_contract.py``).
"""

from shared.stores.base import BlobSnapshotStore
from shared.stores.local import LocalSnapshotStore
from shared.stores.memory import InMemorySnapshotStore
from shared.stores.s3 import S3SnapshotStore

__all__ = ["BlobSnapshotStore", "InMemorySnapshotStore", "LocalSnapshotStore", "S3SnapshotStore"]
