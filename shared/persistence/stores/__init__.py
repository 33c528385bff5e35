"""Snapshot store implementations (see :mod:`tether.persistence.stores.base` for the protocol).

- :class:`InMemorySnapshotStore`: a locked dict, for tests and single-process use.
- :class:`LocalSnapshotStore`: files under a directory, safe across processes on one host.
- :class:`S3SnapshotStore`: S3 objects with conditional writes.

All three are thin bindings of :class:`tether.persistence.stores.blob.BlobSnapshotStore` to a blob
backend
and pass the same contract suite (``tests/test_store_contract.py``).
"""

from tether.persistence.stores.blob import BlobSnapshotStore
from tether.persistence.stores.local import LocalSnapshotStore
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.persistence.stores.s3 import S3SnapshotStore

__all__ = ["BlobSnapshotStore", "InMemorySnapshotStore", "LocalSnapshotStore", "S3SnapshotStore"]
