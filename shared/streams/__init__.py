"""Event streams: :class:`InMemoryEventStream` and :class:`RedisEventStream`.

Both implement :class:`shared.stream.EventStream` and pass ``tests/test_stream_contract.py``;
the shared semantics (view, rewinds, tail cursor) are in :mod:`shared.streams._common`.
"""

from shared.streams.memory import InMemoryEventStream
from shared.streams.redis import RedisEventStream

__all__ = ["InMemoryEventStream", "RedisEventStream"]
