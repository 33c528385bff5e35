"""Where run schedules live: each in its tenant's own keyspace, in celery-redbeat's entry format,
read back strictly, since a tenant's credential writes them and the beat acts on them.

Keys (:mod:`tether.keys`): ``<ns>:{<tenant>/~sched}`` (zset: schedule names scored by their next
tick, Unix s, ``+inf`` while paused) and ``<ns>:{<tenant>/~sched}:<name>`` (hash), one slot per
tenant, under the documented per-tenant ACL pattern ``~<ns>:{<tenant>/*``. The hash's fields:

- ``definition``: JSON ``{"name", "task": "tether.schedule", "args": null, "kwargs": <the
  Schedule, format v1>, "options": {}, "schedule": <its Celery schedule, redbeat's encoding>,
  "enabled": bool}``, the fields of redbeat's ``RedBeatSchedulerEntry`` (golden file
  ``tests/fixtures/schedule_entry_v1.json``);
- ``meta``: JSON ``{"last_run_at": <redbeat's datetime>, "total_run_count": n}``: the last tick.

Reading (:func:`decode`) trusts nothing but the key: the tenant is the keyspace the entry was
found in, the name is the zset's member, and the entry is refused (a :class:`Refused`, never an
exception) when it is larger than the limit, is not JSON, names another task, does not validate
as a :class:`Schedule`, or names another tenant or another name. Nothing stored is decoded into
an object of its choosing (redbeat's decoder builds whatever ``__type__`` names): the Celery
schedule is rebuilt from the validated ``kwargs``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal, cast

import pydantic
import redis

from tether.errors import ConflictError, ScheduleExists, ScheduleNotFound, TetherError
from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.producer.schedules.model import Schedule, is_valid_name
from tether.producer.schedules.ticks import next_tick

#: The task name stored with each entry (redbeat's ``task``). The beat never sends a task: it
#: submits the schedule's run; an entry naming any other task is refused.
SCHEDULE_TASK = "tether.schedule"
#: Records a handled tick while the schedule exists.
TICK = load("schedule_tick")
#: What a definition may hold beyond its input (names, ids, timing, JSON escapes).
DEFINITION_OVERHEAD_BYTES = 16_384
#: Entries read per round trip.
_BATCH = 200
_WATCH_ATTEMPTS = 5

#: Why an entry is not run: not a Tether schedule (another task, not JSON), a schedule that does
#: not validate, one naming another tenant, one larger than the limit, or a run the producer
#: refused for good (its input or its tenant's budget).
Reason = Literal["not_a_schedule", "invalid", "other_tenant", "too_large", "submit_refused"]


@dataclass(frozen=True)
class StoredSchedule:
    """One schedule as stored: whose it is (the keyspace it is in), what, and its state."""

    tenant: str
    schedule: Schedule
    enabled: bool
    last_tick: datetime | None
    """The scheduled time of the last tick handled (for a new schedule: when it was added)."""
    total_run_count: int = 0

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.schedule.name

    def score(self) -> float:
        """Its score in the tenant's zset: its next tick (now, without a last tick), or
        ``+inf`` while paused (the beat never loads it)."""
        if not self.enabled:
            return math.inf
        if self.last_tick is None:
            return 0.0
        return next_tick(self.schedule, self.last_tick).timestamp()


@dataclass(frozen=True)
class Refused:
    """An entry the beat does not run, and why (logged and counted by the beat)."""

    tenant: str
    name: str
    reason: Reason
    detail: str


def max_definition_bytes(max_input_bytes: int) -> int:
    """The longest definition read back: an input at the limit (every byte escaped to six in
    JSON at worst) plus the rest."""
    return 6 * max_input_bytes + DEFINITION_OVERHEAD_BYTES


# --- the format ----------------------------------------------------------------------------------


def encode_definition(schedule: Schedule, *, enabled: bool) -> str:
    """The ``definition`` field of ``schedule`` (redbeat's entry fields, in its order)."""
    return json.dumps(
        {
            "name": schedule.name,
            "task": SCHEDULE_TASK,
            "args": None,
            "kwargs": schedule.model_dump(mode="json"),
            "options": {},
            "schedule": _celery_schedule(schedule),
            "enabled": enabled,
        }
    )


def _celery_schedule(schedule: Schedule) -> dict[str, Any]:
    """redbeat's encoding of the schedule's crontab or interval (kept for the format; the beat
    rebuilds it from ``kwargs``)."""
    if schedule.cron is not None:
        minute, hour, day_of_month, month_of_year, day_of_week = schedule.cron.split()
        return {
            "__type__": "crontab",
            "minute": minute,
            "hour": hour,
            "day_of_week": day_of_week,
            "day_of_month": day_of_month,
            "month_of_year": month_of_year,
        }
    return {"__type__": "interval", "every": float(schedule.every_s or 0), "relative": False}


def encode_meta(last_tick: datetime | None, total_run_count: int = 0) -> str:
    """The ``meta`` field: the last tick in redbeat's datetime encoding (UTC)."""
    last = None
    if last_tick is not None:
        moment = last_tick.astimezone(UTC)
        last = {
            "__type__": "datetime",
            **{f: getattr(moment, f) for f in ("year", "month", "day", "hour", "minute")},
            "second": moment.second,
            "microsecond": moment.microsecond,
            "timezone": 0.0,
        }
    return json.dumps({"last_run_at": last, "total_run_count": total_run_count})


def decode(
    tenant: str, name: str, definition: bytes | str | None, meta: bytes | str | None
) -> StoredSchedule | Refused | None:
    """The schedule ``name`` of ``tenant`` from its stored fields; None when it has no
    definition (removed), a :class:`Refused` when it is no valid Tether schedule of that tenant
    and name."""
    if definition is None:
        return None
    try:
        doc = json.loads(definition)
    except (ValueError, UnicodeDecodeError):
        return Refused(tenant, name, "not_a_schedule", "its definition is not JSON")
    if not isinstance(doc, dict) or doc.get("task") != SCHEDULE_TASK:
        task = doc.get("task") if isinstance(doc, dict) else None
        return Refused(tenant, name, "not_a_schedule", f"it names task {_shown(task)}")
    try:
        schedule = Schedule.model_validate(doc.get("kwargs"))
    except (pydantic.ValidationError, TetherError) as exc:
        return Refused(tenant, name, "invalid", _first_line(exc))
    if schedule.tenant != tenant:
        return Refused(tenant, name, "other_tenant", f"it names tenant {_shown(schedule.tenant)}")
    if schedule.name != name:
        return Refused(tenant, name, "invalid", f"it names schedule {_shown(schedule.name)}")
    enabled = doc.get("enabled", True)
    try:
        last, count = _decode_meta(meta)
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        return Refused(tenant, name, "invalid", f"its meta does not read ({exc})")
    return StoredSchedule(tenant, schedule, enabled is not False, last, count)


def _decode_meta(meta: bytes | str | None) -> tuple[datetime | None, int]:
    if not meta:
        return None, 0
    doc = json.loads(meta)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    count = doc.get("total_run_count") or 0
    if not isinstance(count, int):
        raise TypeError("total_run_count is not a number")
    last = doc.get("last_run_at")
    if last is None:
        return None, count
    if not isinstance(last, dict) or last.get("__type__") != "datetime":
        raise ValueError("last_run_at is not a datetime")
    offset = last.get("timezone", 0.0)
    if offset == "UTC":
        offset = 0.0
    if not isinstance(offset, int | float):
        raise TypeError(f"timezone {offset!r} is not an offset in seconds")
    fields = {f: last[f] for f in ("year", "month", "day", "hour", "minute", "second")}
    if not all(isinstance(v, int) for v in fields.values()):
        raise TypeError("a date field is not a number")
    moment = datetime(
        **fields,
        microsecond=int(last.get("microsecond") or 0),
        tzinfo=timezone(timedelta(seconds=offset)),
    )
    return moment.astimezone(UTC), count


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


# --- the store -----------------------------------------------------------------------------------


class ScheduleStore:
    """The run schedules of one namespace, each in its tenant's keyspace.

    Args:
        client: a Redis client (bytes responses): a tenant's credential edits its own schedules,
            the beat's (the operator's) reads every tenant's.
        keys: the namespace's key names.
        max_definition_bytes: the longest definition read back (:func:`max_definition_bytes`);
            a longer one is refused unread.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, max_definition_bytes: int) -> None:
        self.client = client
        self.keys = keys
        self.max_definition_bytes = max_definition_bytes
        self._tick = client.register_script(TICK.source)

    def _errors(self) -> Any:
        return translate_errors(describe_client(self.client))

    # --- editing (a tenant's credential) ------------------------------------------------------

    def create(self, stored: StoredSchedule) -> None:
        """Store a new schedule.

        Raises:
            ScheduleExists: one of that name exists in the tenant's keyspace.
        """
        entry = self.keys.schedule(stored.tenant, stored.name)

        def write(pipe: Any) -> None:
            if pipe.hexists(entry, "definition"):
                raise ScheduleExists(
                    f"schedule {stored.name!r} already exists; remove it first with "
                    f"'tether schedule remove {stored.name}'"
                )
            pipe.multi()
            self._write(pipe, stored)

        self._transaction(entry, write)

    def _write(self, pipe: Any, stored: StoredSchedule) -> None:
        entry = self.keys.schedule(stored.tenant, stored.name)
        pipe.hset(
            entry,
            mapping={
                "definition": encode_definition(stored.schedule, enabled=stored.enabled),
                "meta": encode_meta(stored.last_tick, stored.total_run_count),
            },
        )
        pipe.zadd(self.keys.schedules(stored.tenant), {stored.name: stored.score()})

    def set_enabled(self, tenant: str, name: str, *, enabled: bool) -> StoredSchedule:
        """Pause or resume a schedule (its last tick stays: ticks missed meanwhile follow its
        ``missed`` policy).

        Raises:
            ScheduleNotFound: no schedule of that name (or none that reads).
        """
        entry = self.keys.schedule(tenant, name)
        changed: list[StoredSchedule] = []

        def write(pipe: Any) -> None:
            definition, meta = pipe.hmget(entry, ["definition", "meta"])
            found = _found(tenant, name, decode(tenant, name, definition, meta))
            pipe.multi()
            changed[:] = [replace(found, enabled=enabled)]
            self._write(pipe, changed[0])

        self._transaction(entry, write)
        return changed[0]

    def _transaction(self, entry: str, body: Any) -> None:
        with self._errors():
            for _ in range(_WATCH_ATTEMPTS):
                with self.client.pipeline() as pipe:
                    try:
                        pipe.watch(entry)  # type: ignore[no-untyped-call]
                        body(pipe)
                        pipe.execute()
                        return
                    except redis.WatchError:
                        continue  # the beat recorded a tick meanwhile: read it again
        raise ConflictError(
            f"{entry} changed {_WATCH_ATTEMPTS} times while it was edited; try again"
        )

    def remove(self, tenant: str, name: str) -> bool:
        """Remove a schedule; False when there was none."""
        with self._errors(), self.client.pipeline() as pipe:
            pipe.delete(self.keys.schedule(tenant, name))
            pipe.zrem(self.keys.schedules(tenant), name)
            deleted, _ = pipe.execute()
        return bool(deleted)

    # --- reading ------------------------------------------------------------------------------

    def read(self, tenant: str, name: str) -> StoredSchedule | Refused:
        """One schedule of ``tenant``.

        Raises:
            ScheduleNotFound: no schedule of that name.
        """
        found = self.read_many(tenant, [name])
        if not found:
            raise ScheduleNotFound(
                f"no schedule {name!r}; 'tether schedule list' shows the schedules"
            )
        return found[0]

    def names(self, tenant: str) -> list[str]:
        """The names of ``tenant``'s schedules."""
        with self._errors():
            members = cast("list[bytes]", self.client.zrange(self.keys.schedules(tenant), 0, -1))
        # what a tenant wrote there by hand and can name no schedule is no schedule of its
        return sorted(name for m in members if is_valid_name(name := _text(m)))

    def read_many(self, tenant: str, names: Sequence[str]) -> list[StoredSchedule | Refused]:
        """``names`` of ``tenant``, those that exist, in order. A definition longer than the
        limit is refused unread (the beat reads what a tenant wrote)."""
        out: list[StoredSchedule | Refused] = []
        for start in range(0, len(names), _BATCH):
            out += self._read_batch(tenant, names[start : start + _BATCH])
        return out

    def _read_batch(self, tenant: str, names: Sequence[str]) -> list[StoredSchedule | Refused]:
        entries = [self.keys.schedule(tenant, n) for n in names]
        with self._errors():
            pipe = self.client.pipeline(transaction=False)
            for entry in entries:
                pipe.hstrlen(entry, "definition")
                pipe.hstrlen(entry, "meta")
            sizes = pipe.execute()
            small = [
                i
                for i in range(len(names))
                if 0 < max(sizes[2 * i], sizes[2 * i + 1]) <= self.max_definition_bytes
            ]
            pipe = self.client.pipeline(transaction=False)
            for i in small:
                pipe.hmget(entries[i], ["definition", "meta"])
            fields = dict(zip(small, pipe.execute(), strict=True))
        out: list[StoredSchedule | Refused] = []
        for i, name in enumerate(names):
            if i in fields:
                found = decode(tenant, name, *fields[i])
            elif sizes[2 * i] > 0:
                found = Refused(tenant, name, "too_large", f"{sizes[2 * i]} bytes")
            else:
                found = None  # removed
            if found is not None:
                out.append(found)
        return out

    # --- the beat -----------------------------------------------------------------------------

    def owners(self) -> set[str]:
        """Every tenant that has schedules (a SCAN of the keyspace: the beat runs it now and
        then, never per tick)."""
        pattern = self.keys.schedule_owners()
        with self._errors():
            found = self.client.scan_iter(match=pattern, count=1000, _type="zset")
            owners = {self.keys.schedule_owner(_text(key)) for key in found}
        return {tenant for tenant in owners if tenant is not None}

    def legacy_count(self) -> int:
        """How many schedules are left in the layout of before tenants owned them (see
        :mod:`tether.producer.schedules.migrate`)."""
        with self._errors():
            return int(self.client.zcard(self.keys.legacy_schedules()))

    def due(self, tenants: Iterable[str], until_s: float, *, limit: int) -> dict[str, list[str]]:
        """The members of each tenant's schedule index whose next tick is at or before
        ``until_s``, at most ``limit`` per tenant (earliest first): one tenant's many cannot
        crowd out the others. A member is what the tenant wrote: check it names a schedule
        (:func:`~tether.producer.schedules.model.is_valid_name`) before reading it."""
        ordered = sorted(tenants)
        with self._errors():
            pipe = self.client.pipeline(transaction=False)
            for tenant in ordered:
                pipe.zrangebyscore(self.keys.schedules(tenant), "-inf", until_s, 0, limit)
            found = pipe.execute()
        return {
            t: [_text(m, errors="replace") for m in names]
            for t, names in zip(ordered, found, strict=True)
        }

    def record_tick(self, stored: StoredSchedule, last_tick: datetime) -> bool:
        """Record ``last_tick`` as handled, only while the schedule exists; False when it is
        gone (removed while its tick ran)."""
        following = replace(stored, last_tick=last_tick, total_run_count=stored.total_run_count + 1)
        keys = TICK.keys(
            entry=self.keys.schedule(stored.tenant, stored.name),
            schedules=self.keys.schedules(stored.tenant),
        )
        argv = TICK.argv(
            meta=encode_meta(last_tick, following.total_run_count),
            score=following.score(),
            name=stored.name,
        )
        with self._errors():
            return bool(self._tick(keys=keys, args=argv))


def _found(tenant: str, name: str, found: StoredSchedule | Refused | None) -> StoredSchedule:
    if found is None:
        raise ScheduleNotFound(f"no schedule {name!r}; 'tether schedule list' shows the schedules")
    if isinstance(found, Refused):
        raise ScheduleNotFound(
            f"schedule {name!r} of tenant {tenant!r} is not a valid schedule ({found.detail}); "
            f"remove it with 'tether schedule remove {name}', then add it again"
        )
    return found


def _text(value: bytes | str, errors: str = "strict") -> str:
    return value.decode(errors=errors) if isinstance(value, bytes) else value
