"""Following completions on Redis (the :class:`~tether.runs.queue.base.Completions` role): the
namespace feed every observer reads, and each producer's own feed."""

from __future__ import annotations

from typing import Any, cast

from tether.persistence.redis_conn import translate_errors
from tether.runs.contract import RunRef
from tether.runs.queue.base import Completion
from tether.runs.queue.redis._common import carried_result, done_entry
from tether.runs.queue.redis._part import RedisQueuePart


class RedisCompletions(RedisQueuePart):
    """Read completion feeds."""

    def done_last_id(self, feed: str | None = None) -> bytes:
        """The id of the newest completion entry of ``feed`` (``0-0`` when none)."""
        with translate_errors(self._where):
            entries = self.client.xrevrange(self.keys.feed_stream(feed), count=1)
        return cast(bytes, entries[0][0]) if entries else b"0-0"

    def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completion entries of ``feed`` after ``after_id`` (blocks up to ``block_ms``)."""
        return [(c.position, c.ref) for c in self.read_completions(after_id, block_ms, feed)]

    def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None
    ) -> list[Completion]:
        """:meth:`read_done`, with the result each entry carries (a producer's feed's small
        results)."""
        with translate_errors(self._where):
            streams: dict[Any, Any] = {self.keys.feed_stream(feed): after_id}
            reply = cast(Any, self.client.xread(streams, block=block_ms, count=1000))
        out = []
        for _key, entries in reply or []:
            for entry_id, fields in entries:
                position, ref = done_entry(entry_id, fields)
                out.append(Completion(position, ref, carried_result(fields)))
        return out

    def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""
        with translate_errors(self._where):
            self.client.delete(self.keys.producer_done(feed))
