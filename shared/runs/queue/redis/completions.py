"""Following completions on Redis (the :class:`~tether.runs.queue.base.Completions` role): the
namespace feed every observer reads, and each producer's own feed. The reading of a feed's
reply (:func:`completions_of`) is shared with the asyncio queue
(:mod:`tether.runs.queue.redis_aio`), so both read a batch in one round trip."""

from __future__ import annotations

from typing import Any, cast

from tether.persistence.redis_conn import translate_errors
from tether.runs.contract import RunRef
from tether.runs.queue.base import Completion
from tether.runs.queue.redis._common import carried_result, done_entry
from tether.runs.queue.redis._part import RedisQueuePart

#: Completion entries read per ``XREAD``.
COMPLETIONS_PAGE = 1000


def completions_of(reply: Any) -> list[Completion]:
    """The completions of an ``XREAD`` reply of one feed, each with the result its entry
    carries (a producer's feed's small results)."""
    out = []
    for _key, entries in reply or []:
        for entry_id, fields in entries:
            position, ref = done_entry(entry_id, fields)
            out.append(Completion(position, ref, carried_result(fields)))
    return out


def newest_position(newest: Any) -> bytes:
    """The position of an ``XREVRANGE ... COUNT 1`` reply (``0-0``: the feed is empty)."""
    return cast(bytes, newest[0][0]) if newest else b"0-0"


class RedisCompletions(RedisQueuePart):
    """Read completion feeds."""

    def done_last_id(self, feed: str | None = None) -> bytes:
        """The id of the newest completion entry of ``feed`` (``0-0`` when none)."""
        with translate_errors(self._where):
            newest = self.client.xrevrange(self.keys.feed_stream(feed), count=1)
        return newest_position(newest)

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
            reply = self.client.xread(streams, block=block_ms, count=COMPLETIONS_PAGE)
        return completions_of(reply)

    def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""
        with translate_errors(self._where):
            self.client.delete(self.keys.producer_done(feed))
