"""The run queue on Redis (see :mod:`tether.runs.queue.base` for the seam), one module per role
Protocol, composed by :class:`RedisRunQueue`; its asyncio twin,
:mod:`~tether.runs.queue.redis_aio`, is the producer-facing part on ``redis.asyncio``, running
the same scripts through the same builders (:mod:`~tether.runs.queue.redis._common`).

Submission, begin, finish, cancel and idle release are one Lua script each, so each is atomic;
the scripts are ``.lua`` files in :mod:`tether.persistence.lua`, and every key they touch is
built by :mod:`tether.keys`.
"""

from __future__ import annotations

from tether.runs.queue.redis._common import done_entry, run_view
from tether.runs.queue.redis.cancellation import RedisCancellation
from tether.runs.queue.redis.completions import RedisCompletions
from tether.runs.queue.redis.recovery import RedisRecovery
from tether.runs.queue.redis.session_queue import RedisSessionQueue
from tether.runs.queue.redis.submissions import RedisSubmissions

__all__ = ["RedisRunQueue", "done_entry", "run_view"]


class RedisRunQueue(
    RedisSubmissions, RedisSessionQueue, RedisCancellation, RedisRecovery, RedisCompletions
):
    """:class:`~tether.runs.queue.base.RunQueue` on Redis: every role on one client.

    Args:
        client: a bytes Redis client (:func:`tether.persistence.redis_conn.redis_from_url`).
        keys: the key schema (namespace).
        result_ttl_s: how long run records and request-id indexes live.
    """
