"""Event archive implementations (see :mod:`shared.archive` for the protocol).

- :class:`InMemoryEventArchive`: a locked dict, for tests and single-process use.
- :class:`LocalEventArchive`: files under a directory.
- :class:`S3EventArchive`: S3 objects created with conditional writes.

All three bind :class:`shared.archives.base.BlobEventArchive` to a blob backend and pass the same
contract suite (``tests/test_archive_contract.py``).
"""

from shared.archives.base import BlobEventArchive
from shared.archives.local import LocalEventArchive
from shared.archives.memory import InMemoryEventArchive
from shared.archives.s3 import S3EventArchive

__all__ = [
    "BlobEventArchive",
    "InMemoryEventArchive",
    "LocalEventArchive",
    "S3EventArchive",
]
