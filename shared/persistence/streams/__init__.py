"""Event streams: :class:`InMemoryEventStream` and :class:`RedisEventStream`.

Both implement :class:`tether.persistence.streams.base.EventStream` and pass
``tests/test_stream_contract.py``;
the shared semantics (view, rewinds, tail cursor) are in :mod:`tether.persistence.streams._common`.
"""

from tether.persistence.streams.memory import InMemoryEventStream
from tether.persistence.streams.redis import RedisEventStream

__all__ = ["InMemoryEventStream", "RedisEventStream"]
