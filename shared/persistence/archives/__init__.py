"""Event archive implementations (see :mod:`tether.persistence.archives.base` for the protocol).

- :class:`InMemoryEventArchive`: a locked dict, for tests and single-process use.
- :class:`LocalEventArchive`: files under a directory.
- :class:`S3EventArchive`: S3 objects created with conditional writes.

All three bind :class:`tether.persistence.archives.blob.BlobEventArchive` to a blob backend and
pass the same
contract suite (``tests/test_archive_contract.py``).
"""

from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.archives.local import LocalEventArchive
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.archives.s3 import S3EventArchive

__all__ = [
    "BlobEventArchive",
    "InMemoryEventArchive",
    "LocalEventArchive",
    "S3EventArchive",
]
