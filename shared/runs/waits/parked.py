"""Calls parked on the fleet as listings show them (``tether status``, the console): each
waiting session's parked calls and what each waits for now, a wait on children counted from the
session's family record (``children 2/3 (all)``), for a whole page in one pipelined round trip
(both records of a session are in its slot)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any, NamedTuple

import redis

from tether.keys import RedisKeys
from tether.runs.waits.base import WaitRecord
from tether.runs.waits.children_redis import family_key, parse_family

#: Waiting sessions a listing reads at most (the rest are counted as not shown).
MAX_LISTED = 200


class ParkedCall(NamedTuple):
    """One parked call and what it waits for now."""

    record: WaitRecord
    reason: str


def read_parked(
    client: redis.Redis, keys: RedisKeys, sessions: Sequence[tuple[str, str]]
) -> list[ParkedCall]:
    """The parked calls of ``sessions`` (``(tenant, session)``; those waiting for nothing any
    more give none), oldest first."""
    if not sessions:
        return []
    pipe = client.pipeline(transaction=False)
    for tenant, session_id in sessions:
        pipe.hvals(keys.session_waits(tenant, session_id))
        pipe.hgetall(family_key(keys, tenant, session_id))
    replies: list[Any] = pipe.execute()
    calls: list[ParkedCall] = []
    for raw_records, raw_family in zip(replies[::2], replies[1::2], strict=True):
        records = [WaitRecord.model_validate_json(raw) for raw in raw_records]
        ended = parse_family(raw_family).ended if raw_family else {}
        calls.extend(ParkedCall(r, r.wait_for.reason(ended)) for r in records)
    return sorted(calls, key=lambda c: (c.record.parked_at_ms, c.record.call_id))


def first(sessions: Iterable[tuple[str, str]], limit: int = MAX_LISTED) -> list[tuple[str, str]]:
    """The first ``limit`` of ``sessions`` (a listing of marks reads no further)."""
    return list(islice(sessions, limit))
