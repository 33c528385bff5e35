"""The child book on Redis: each session's family hash in its own slot
(``<p>:{<tenant>/<session>}:family``): a parent's children (fields ``spawn:<run id>``, the child
as spawned, and ``done:<run id>``, its end, written once), deleted field by field once no call
waits on the child (the hash goes with its last field). Every command touches one key, so it
runs the same on a Redis Cluster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from tether.core.children import ChildEnd
from tether.keys import RedisKeys
from tether.runs.waits.children import Family, SpawnedChild

_SPAWN = "spawn:"
_DONE = "done:"


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisChildBook:
    """:class:`~tether.runs.waits.children.ChildBook` on a Redis or a Redis Cluster."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys

    def _key(self, tenant: str, session_id: str) -> str:
        return family_key(self._keys, tenant, session_id)

    def spawned(self, tenant: str, parent_session_id: str, spawns: Sequence[SpawnedChild]) -> None:
        if not spawns:
            return
        key = self._key(tenant, parent_session_id)
        self._client.hset(
            key, mapping={_SPAWN + c.child.run_id: c.model_dump_json() for c in spawns}
        )

    def ended(
        self, tenant: str, parent_session_id: str, end: ChildEnd, *, vouched: bool = False
    ) -> bool:
        key = self._key(tenant, parent_session_id)
        if not vouched and not self._client.hexists(key, _SPAWN + end.run_id):
            return False
        self._client.hsetnx(key, _DONE + end.run_id, end.model_dump_json())
        return True

    def family(self, tenant: str, parent_session_id: str) -> Family:
        return parse_family(self._client.hgetall(self._key(tenant, parent_session_id)))

    def forget(self, tenant: str, parent_session_id: str, child_run_ids: Sequence[str]) -> None:
        if child_run_ids:  # the fields read, not the key: a spawn recorded meanwhile stays
            fields = [p + run_id for run_id in child_run_ids for p in (_SPAWN, _DONE)]
            self._client.hdel(self._key(tenant, parent_session_id), *fields)


def family_key(keys: RedisKeys, tenant: str, session_id: str) -> str:
    """The session's family hash (for a listing that reads many in one pipeline:
    ``HGETALL`` it, then :func:`parse_family`)."""
    return keys.session_waits(tenant, session_id, "family")


def parse_family(raw: dict[Any, Any]) -> Family:
    """A family hash as read (``HGETALL``)."""
    family = Family({}, {})
    for field, value in raw.items():
        name = _text(field)
        if name.startswith(_SPAWN):
            family.spawned[name[len(_SPAWN) :]] = SpawnedChild.model_validate_json(value)
        elif name.startswith(_DONE):
            family.ended[name[len(_DONE) :]] = ChildEnd.model_validate_json(value)
    return family
