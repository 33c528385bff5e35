"""Head caches: :class:`InMemoryHeadCache` and :class:`RedisHeadCache`.

Both implement :class:`tether.persistence.headcache.base.HeadCache` and pass
``tests/test_head_cache_contract.py``.
"""

from tether.persistence.headcache.base import CachedHead, HeadCache
from tether.persistence.headcache.memory import InMemoryHeadCache
from tether.persistence.headcache.redis import RedisHeadCache

__all__ = ["CachedHead", "HeadCache", "InMemoryHeadCache", "RedisHeadCache"]
