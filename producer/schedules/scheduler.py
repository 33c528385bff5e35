"""Celery beat's scheduler for run schedules: celery-redbeat's lock, Tether's tenants and ticks.

celery-redbeat lets one beat tick at a time (a Redis lock, ``<ns>:{~sched}::lock``; a second beat
waits for it and takes over when the first dies). Everything else is Tether's:

- **Every tenant's schedules, each in its tenant's keyspace.** The beat (the operator's
  credential) finds the tenants that have schedules by a SCAN (:meth:`ScheduleStore.owners`,
  every :data:`DISCOVERY_MIN_INTERVAL_S` or more, see :class:`Discovery`), and loads the due
  ones of each from the tenant's own zset. The tenant of a run is the keyspace its schedule was
  found in, never a field of what the tenant wrote: an entry that names another tenant, another
  task (any redbeat entry that is no Tether schedule), or does not validate is refused, logged
  once and counted (:class:`Refusals`), and never published.
- **Submit, then advance.** Celery's beat advances an entry before it sends it (a beat killed in
  between loses the tick); this one submits the run first and records the tick after, so a beat
  killed in between leaves the tick due for the next beat.
- **The tick is in the request id** (``sched:<name>:<tick>``, the tick's scheduled time, see
  :mod:`tether.producer.schedules.ticks`), and the run is registered in the owner's keyspace
  before it is published (the producer's submit): a second submission of a tick, by a second
  beat or after a crash, is the same run.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from redbeat.schedulers import RedBeatScheduler

from tether.errors import BudgetExceeded, InfrastructureError, UsageError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.producer.schedules.model import is_valid_name
from tether.producer.schedules.presence import BeatHeartbeat, BeatPresence, new_presence
from tether.producer.schedules.store import (
    SCHEDULE_TASK,
    Refused,
    ScheduleStore,
    StoredSchedule,
    max_definition_bytes,
)
from tether.producer.schedules.ticks import first_last_tick, next_tick, plan_tick
from tether.settings import Settings, load_settings

if TYPE_CHECKING:
    from tether.producer.client import Producer
    from tether.producer.handle import RunHandle

log = logging.getLogger("tether.schedules")
#: Seconds a paused entry waits before the beat looks at it again.
PAUSED_RECHECK_S = 5.0
#: Due schedules loaded per tenant per loop: one tenant's thousands cannot stall the others.
DUE_PER_TENANT = 100
#: Refusals remembered so each is logged once; beyond, the memory starts afresh.
MAX_REMEMBERED_REFUSALS = 10_000
#: Shortest pause between two scans for the tenants that have schedules (a new tenant's first
#: schedule is found within about this); a scan that takes long spaces them further.
DISCOVERY_MIN_INTERVAL_S = 5.0
#: The share of the beat's time a scan may take: the next one waits 1 / this x its duration.
DISCOVERY_MAX_SHARE = 0.05


def aware(moment: datetime) -> datetime:
    """``moment`` in UTC (Celery may hand back naive UTC datetimes)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class TetherEntry:
    """One tenant's schedule as the beat's loop sees it (Celery asks :meth:`is_due`)."""

    task = SCHEDULE_TASK

    def __init__(self, stored: StoredSchedule, now: datetime) -> None:
        self.stored = stored
        self.now = now

    @property
    def name(self) -> str:
        """``<tenant>/<name>`` (names are unique per tenant only)."""
        return f"{self.stored.tenant}/{self.stored.name}"

    def is_due(self) -> tuple[bool, float]:
        """Celery beat's question: due now, and seconds until it should ask again."""
        stored = self.stored
        if not stored.enabled:
            return False, PAUSED_RECHECK_S
        if stored.last_tick is None:  # written without a state: the beat gives it one
            return True, PAUSED_RECHECK_S
        remaining_s = (next_tick(stored.schedule, stored.last_tick) - self.now).total_seconds()
        if remaining_s > 0:
            return False, remaining_s
        # due: ask again at the tick after the one about to run (not a fixed delay, which
        # would find that tick late and count it missed)
        plan = plan_tick(stored.schedule, stored.last_tick, self.now)
        following = next_tick(stored.schedule, plan.last or self.now)
        return True, max(0.0, (following - self.now).total_seconds())


class Refusals:
    """Entries the beat refused: each logged once per content (the beat looks again every
    loop) and counted by reason."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def refuse(self, refused: Refused) -> None:
        """Log and count ``refused`` unless this very refusal was seen already."""
        digest = hashlib.sha256(f"{refused.reason}|{refused.detail}".encode()).hexdigest()
        with self._lock:
            mark = (refused.tenant, refused.name, digest)
            if mark in self._seen:
                return
            if len(self._seen) >= MAX_REMEMBERED_REFUSALS:
                self._seen.clear()  # a tenant rewriting junk forever: say it again, stay bounded
            self._seen.add(mark)
            self.counts[refused.reason] += 1
        log.error(
            "schedule %s of tenant %s is refused and not run (%s: %s); its tenant can remove it "
            "with `tether schedule remove %s`",
            refused.name,
            refused.tenant,
            refused.reason,
            refused.detail,
            refused.name,
        )


class Discovery:
    """The tenants that have schedules, scanned for now and then: every
    :data:`DISCOVERY_MIN_INTERVAL_S`, or less often when a scan takes long (a large keyspace),
    so scans never take more than :data:`DISCOVERY_MAX_SHARE` of the beat's time."""

    def __init__(self, store: ScheduleStore) -> None:
        self.store = store
        self.tenants: set[str] = set()
        self._next_at = 0.0
        self._legacy = 0

    def current(self) -> set[str]:
        """The tenants known, scanned again first when it is time."""
        now = time.monotonic()
        if now >= self._next_at:
            self.tenants = self.store.owners()
            took_s = time.monotonic() - now
            self._next_at = time.monotonic() + max(
                DISCOVERY_MIN_INTERVAL_S, took_s / DISCOVERY_MAX_SHARE
            )
            self._warn_legacy()
        return self.tenants

    def _warn_legacy(self) -> None:
        legacy = self.store.legacy_count()
        if legacy == self._legacy:
            return  # said already
        self._legacy = legacy
        if legacy:
            log.warning(
                "%d schedule(s) are stored in the layout of before tenants owned their "
                "schedules and are not run; move them into their tenants' keyspaces with "
                "`tether schedule migrate` (the operator's credential)",
                legacy,
            )


class TetherScheduler(RedBeatScheduler):  # type: ignore[misc]
    """``celery beat -S tether.producer.schedules.scheduler:TetherScheduler`` (``tether beat``
    sets it): submits each due tick's run through a :class:`Producer`.

    Args:
        settings: the beat's settings (default: read from the environment).
    """

    def __init__(self, *args: Any, settings: Settings | None = None, **kwargs: Any) -> None:
        self.settings = settings or load_settings()
        self.keys = RedisKeys(self.settings.namespace)
        self._client = redis_from_url(self.settings.effective_redis_url)
        self.store = ScheduleStore(
            self._client,
            self.keys,
            max_definition_bytes=max_definition_bytes(self.settings.max_input_bytes),
        )
        self.discovery = Discovery(self.store)
        self.refusals = Refusals()
        self.fired = 0
        self._presence = new_presence()
        self._heartbeat: BeatHeartbeat | None = None
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        """Start the presence heartbeat (a beat process, not a lazy one). The beat runs no
        static entries (``beat_schedule``): it only submits schedules' runs."""
        if self.app.conf.beat_schedule:
            log.warning("beat_schedule entries are not run by Tether's beat; add schedules instead")
        self._heartbeat = BeatHeartbeat(self._client, self.keys, self.presence).start()

    def presence(self) -> BeatPresence:
        """This beat's presence record now."""
        return self._presence.model_copy(
            update={
                "ticking": self.lock is not None,
                "tenants": len(self.discovery.tenants),
                "fired": self.fired,
                "refused": dict(self.refusals.counts),
            }
        )

    @property
    def tether_producer(self) -> Producer:
        """The producer this beat submits with (built on first use, from its settings)."""
        with self._producer_lock:
            if self._producer is None:
                from tether.producer.client import Producer

                self._producer = Producer(self.settings)
            return self._producer

    @property
    def schedule(self) -> dict[str, TetherEntry]:
        """The entries due now or within one loop, of every tenant (what Celery's loop asks
        ``is_due`` of); refused ones are logged, counted and left out."""
        now = aware(self.app.now())
        until_s = now.timestamp() + self.max_interval
        entries: dict[str, TetherEntry] = {}
        try:
            due = self.store.due(self.discovery.current(), until_s, limit=DUE_PER_TENANT)
            for tenant, members in due.items():
                for entry in self._load(tenant, members, now):
                    entries[entry.name] = entry
        except InfrastructureError as exc:  # Redis away: the next loop tries again
            log.warning("schedules not read this loop: %s", exc)
        return entries

    def _load(self, tenant: str, members: list[str], now: datetime) -> list[TetherEntry]:
        """The schedules ``members`` of ``tenant``'s index name, refusing what is not one."""
        names = [m for m in members if is_valid_name(m)]
        for junk in (m for m in members if m not in names):
            # what the tenant wrote, shown escaped: it must not forge lines of the beat's log
            self.refusals.refuse(Refused(tenant, repr(junk[:80]), "invalid", "no schedule name"))
        entries = []
        for found in self.store.read_many(tenant, names):
            if isinstance(found, Refused):
                self.refusals.refuse(found)
            else:
                entries.append(TetherEntry(found, now))
        return entries

    def apply_async(
        self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> RunHandle | None:
        """Run the entry's due tick (per its missed-ticks policy), then record it. Nothing but a
        :class:`TetherEntry` is ever run, and nothing is ever sent as a Celery task."""
        if not isinstance(entry, TetherEntry):
            self.refusals.refuse(
                Refused("?", str(getattr(entry, "name", "?")), "not_a_schedule", "not Tether's")
            )
            return None
        stored = entry.stored
        now = aware(self.app.now())
        if stored.last_tick is None:
            self.store.record_tick(stored, first_last_tick(stored.schedule, now))
            return None
        plan = plan_tick(stored.schedule, stored.last_tick, now)
        handle = None
        if plan.fire is not None:
            handle = self._fire(stored, plan.fire)
        if plan.missed:
            log.warning(
                "schedule %s of tenant %s: %d missed tick(s) not run (missed=%s)",
                stored.name,
                stored.tenant,
                plan.missed,
                stored.schedule.missed,
            )
        if plan.last is not None:
            self.store.record_tick(stored, plan.last)
        return handle

    def _fire(self, stored: StoredSchedule, tick: datetime) -> RunHandle | None:
        """Submit the tick's run; a run the producer refuses for good (bad input, the tenant's
        budget) is logged and counted, and the tick counts as handled."""
        try:
            handle = submit_tick(self.tether_producer, stored, tick)
        except (UsageError, BudgetExceeded) as exc:
            self.refusals.refuse(
                Refused(stored.tenant, stored.name, "submit_refused", f"tick {tick}: {exc}")
            )
            return None
        self.fired += 1
        log.info(
            "schedule %s of tenant %s: tick %s is run %s",
            stored.name,
            stored.tenant,
            tick.isoformat(),
            handle.run_id,
        )
        return handle

    def close(self) -> None:
        """Release the lock (redbeat), withdraw the presence, then close the producer and the
        Redis client."""
        super().close()
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        with self._producer_lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None
        self._client.close()


def submit_tick(producer: Producer, stored: StoredSchedule, tick: datetime) -> RunHandle:
    """Submit the run of ``stored``'s ``tick`` for the tenant whose keyspace holds it:
    registered there before it is published, and idempotent, whoever submits it and how
    often."""
    schedule = stored.schedule
    return producer.run_async(
        schedule.session_id,
        schedule.input,
        agent=schedule.agent,
        tenant=stored.tenant,
        request_id=schedule.request_id(tick),
    )
