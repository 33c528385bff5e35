"""``tether schedule migrate``: move schedules stored before tenants owned them
(``<ns>:{~sched}:<name>``, indexed by ``<ns>:{~sched}::schedule``) into their tenants'
keyspaces, with their last tick.

Run it once with the operator's credential after upgrading. The tenant of a moved schedule is
the one its definition names: in the old layout any credential that reached ``{~sched}`` could
write that field, so the command prints every move (name, tenant) for the operator to check.
An entry that does not validate, or whose name is taken in its tenant's keyspace, stays where it
is and is reported; the beat does not run entries of the old layout (it logs how many are left).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from tether.errors import ScheduleExists
from tether.ids import is_valid_id
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.producer.schedules.store import Refused, ScheduleStore, decode

Outcome = Literal["moved", "exists", "invalid"]


@dataclass(frozen=True)
class Moved:
    """What happened to one entry of the old layout."""

    key: str
    name: str
    tenant: str | None
    outcome: Outcome
    detail: str = ""


def migrate_legacy(store: ScheduleStore) -> list[Moved]:
    """Move every entry of the old layout that validates into its tenant's keyspace."""
    with translate_errors(describe_client(store.client)):
        return _migrate(store)


def _migrate(store: ScheduleStore) -> list[Moved]:
    client, keys = store.client, store.keys
    legacy = keys.legacy_schedules()
    done = []
    for raw in client.zrange(legacy, 0, -1):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        name = key.removeprefix(keys.beat_prefix())
        definition, meta = client.hmget(key, ["definition", "meta"])
        if definition is None:  # removed meanwhile, or an index entry left behind
            client.zrem(legacy, key)
            continue
        done.append(_move(store, key, name, definition, meta))
    return done


def _move(
    store: ScheduleStore, key: str, name: str, definition: bytes | str, meta: bytes | str | None
) -> Moved:
    claimed = _claimed_tenant(definition)
    found = decode(claimed or "-", name, definition, meta) if claimed else None
    if found is None or isinstance(found, Refused):
        detail = found.detail if isinstance(found, Refused) else "it names no valid tenant"
        return Moved(key, name, claimed, "invalid", detail)
    try:
        store.create(found)
    except ScheduleExists:
        return Moved(key, name, found.tenant, "exists", "its name is taken in that keyspace")
    with store.client.pipeline() as pipe:
        pipe.delete(key)
        pipe.zrem(store.keys.legacy_schedules(), key)
        pipe.execute()
    return Moved(key, name, found.tenant, "moved")


def _claimed_tenant(definition: bytes | str) -> str | None:
    try:
        tenant = json.loads(definition)["kwargs"]["tenant"]
    except (ValueError, KeyError, TypeError):
        return None
    return tenant if is_valid_id(tenant) else None
