"""The archive hint on Redis (:class:`~tether.persistence.saving.ArchiveHint`): how far a
session's events are known archived, one small key per session."""

from __future__ import annotations

import contextlib
from typing import cast

import redis

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors


class RedisArchiveHint:
    """:class:`~tether.persistence.saving.ArchiveHint` on Redis: one small key per session.

    Losing it (a Redis flush) only costs one identical segment rewrite on the next commit.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, ttl_s: int = 7 * 24 * 3600) -> None:
        self._client = client
        self._keys = keys
        self._ttl_s = ttl_s
        self._where = describe_client(client)

    def archived_through(self, tenant: str, session_id: str) -> int:
        """The highest sequence number known archived (0 when unknown or unreachable)."""
        try:
            with translate_errors(self._where):
                raw = self._client.get(self._keys.archived(tenant, session_id))
        except TetherError:
            return 0
        return int(cast(bytes, raw)) if raw else 0

    def record(self, tenant: str, session_id: str, seq: int) -> None:
        """Remember that events up to ``seq`` are archived (best effort)."""
        with contextlib.suppress(TetherError), translate_errors(self._where):
            self._client.set(self._keys.archived(tenant, session_id), seq, ex=self._ttl_s)
