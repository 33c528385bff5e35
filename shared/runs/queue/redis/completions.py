"""Following completions on Redis (the :class:`~tether.runs.queue.base.Completions` role): the
namespace feed every observer reads, and each producer's own feed, both sharded by session
(:data:`~tether.keys.DONE_SHARDS`, :data:`~tether.keys.FEED_SHARDS`: no slot is written by
every run).

A reader of one shard (``shard=n``: a producer's listener has one reader per shard, a canvas
wait reads its session's) gets plain stream ids as positions. A reader of a whole feed
(``shard=None``: the console) gets one position for all shards (:func:`merged_position`) and
merged entries: one ``XREAD`` over every shard on a single Redis; on a cluster, where one
command cannot name keys of several slots, one pipelined non-blocking ``XREAD`` per shard and,
when none had news, a pause of up to :data:`MERGED_PAUSE_MS` (an observer's feed, not a
handle's). The reading of replies is shared with the asyncio queue
(:mod:`tether.runs.queue.redis_aio`), so both read a batch in one round trip.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from tether.persistence.redis_conn import translate_errors
from tether.runs.contract import RunRef
from tether.runs.queue.base import Completion
from tether.runs.queue.redis._common import carried_result, done_entry
from tether.runs.queue.redis._part import RedisQueuePart

#: Completion entries read per ``XREAD``.
COMPLETIONS_PAGE = 1000
#: The longest pause of a merged read on a cluster when no shard had news.
MERGED_PAUSE_MS = 100
_SEP = b","


def completions_of(reply: Any) -> list[Completion]:
    """The completions of an ``XREAD`` reply of one feed shard, each with the result its entry
    carries (a producer's feed's small results)."""
    out = []
    for _key, entries in _streams(reply):
        for entry_id, fields in entries:
            position, ref = done_entry(entry_id, fields)
            out.append(Completion(position, ref, carried_result(fields)))
    return out


def _streams(reply: Any) -> list[tuple[Any, Any]]:
    """An ``XREAD`` reply as ``(key, entries)`` pairs (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(k, v[0] if v and isinstance(v[0], list) else v) for k, v in reply.items()]
    return [(k, v) for k, v in reply]


def newest_position(newest: Any) -> bytes:
    """The position of an ``XREVRANGE ... COUNT 1`` reply (``0-0``: the feed is empty)."""
    return cast(bytes, newest[0][0]) if newest else b"0-0"


def merged_position(ids: Sequence[bytes]) -> bytes:
    """One position for every shard of a feed (the shards' stream ids, in shard order; one id
    when they are all the same, as for an empty feed: ``0-0``)."""
    return ids[0] if len(set(ids)) == 1 else _SEP.join(ids)


def shard_ids(position: bytes, shards: int) -> list[bytes]:
    """The shards' stream ids of a :func:`merged_position` (a single id, as a reader from
    before the shards kept: every shard from there)."""
    ids = position.split(_SEP)
    return ids if len(ids) == shards else [ids[0]] * shards


def _stamp(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


def merge(replies: Sequence[tuple[int, Any]], ids: list[bytes]) -> list[Completion]:
    """Completions of several shards' ``XREAD`` replies (``(shard, reply)``), oldest first,
    each with the merged position after it (``ids``: the shards' ids before, moved on)."""
    tagged = [(shard, c) for shard, reply in replies for c in completions_of(reply)]
    tagged.sort(key=lambda sc: _stamp(sc[1].position))
    out = []
    for shard, completion in tagged:
        ids[shard] = completion.position
        out.append(completion._replace(position=merged_position(ids)))
    return out


def by_shard(keys: Sequence[str], reply: Any) -> list[tuple[int, Any]]:
    """An ``XREAD`` reply over several shard keys as ``(shard, reply of that shard)``."""
    index = {k.encode(): n for n, k in enumerate(keys)} | {k: n for n, k in enumerate(keys)}
    return [(index[key], [(key, entries)]) for key, entries in _streams(reply)]


class RedisCompletions(RedisQueuePart):
    """Read completion feeds."""

    def feed_shards(self, feed: str | None = None) -> int:
        """How many shards ``feed`` has (each with its own positions)."""
        return self.keys.feed_shards(feed)

    def feed_readers(self, feed: str | None = None) -> list[int | None]:
        """The shards each blocking reader of ``feed`` reads: one reader of the whole feed
        (``[None]``) on a single Redis, one per shard on a cluster."""
        return list(range(self.feed_shards(feed))) if self._cluster else [None]

    def done_last_id(self, feed: str | None = None, shard: int | None = None) -> bytes:
        """The position of the newest completion of ``feed``'s ``shard`` (``0-0`` when none),
        or of the whole feed (None: a :func:`merged_position`)."""
        shards = [shard] if shard is not None else range(self.feed_shards(feed))
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for n in shards:
                pipe.xrevrange(self.keys.feed_stream(feed, n), count=1)
            ids = [newest_position(newest) for newest in pipe.execute()]
        return merged_position(ids)

    def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completion entries of ``feed`` after ``after_id`` (blocks up to ``block_ms``)."""
        found = self.read_completions(after_id, block_ms, feed, shard)
        return [(c.position, c.ref) for c in found]

    def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None, shard: int | None = None
    ) -> list[Completion]:
        """:meth:`read_done`, with the result each entry carries (a producer's feed's small
        results)."""
        if shard is not None:
            with translate_errors(self._where):
                streams: dict[Any, Any] = {self.keys.feed_stream(feed, shard): after_id}
                reply = self.client.xread(streams, block=block_ms, count=COMPLETIONS_PAGE)
            return completions_of(reply)
        return self._read_merged(after_id, block_ms, feed)

    def _read_merged(self, after_id: bytes, block_ms: int, feed: str | None) -> list[Completion]:
        n = self.feed_shards(feed)
        keys = [self.keys.feed_stream(feed, shard) for shard in range(n)]
        ids = shard_ids(after_id, n)
        with translate_errors(self._where):
            if not self._cluster:
                streams = dict(zip(keys, ids, strict=True))
                reply = self.client.xread(streams, block=block_ms, count=COMPLETIONS_PAGE)  # type: ignore[arg-type]
                return merge(by_shard(keys, reply), ids)
            found = merge(self._each_shard(keys, ids), ids)
        if not found and block_ms > 0:
            time.sleep(min(block_ms, MERGED_PAUSE_MS) / 1000)
        return found

    def _each_shard(self, keys: list[str], ids: list[bytes]) -> list[tuple[int, Any]]:
        pipe = self.client.pipeline(transaction=False)
        for key, last in zip(keys, ids, strict=True):
            pipe.xread({key: last}, count=COMPLETIONS_PAGE)
        return list(enumerate(pipe.execute()))

    def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""
        with translate_errors(self._where):
            keys = [self.keys.producer_done(feed, n) for n in range(self.feed_shards(feed))]
            pipe = self.client.pipeline(transaction=False)
            for key in keys:  # one slot each: one DEL per shard
                pipe.delete(key)
            pipe.execute()
