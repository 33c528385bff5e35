"""Celery beat's scheduler for run schedules: celery-redbeat's, with Tether's ticks.

celery-redbeat keeps the entries in Redis (any process adds, pauses or removes one, and the
running beat sees it on its next loop) and lets one beat tick at a time (a Redis lock; a second
beat waits for it and takes over when the first dies). Two changes make a tick run exactly once,
lock or no lock:

- **Submit, then advance.** Celery's beat advances an entry before it sends it (a beat killed in
  between loses the tick); this one submits the run first and records the tick after, so a beat
  killed in between leaves the tick due for the next beat.
- **The tick is in the request id** (``sched:<name>:<tick>``, the tick's scheduled time, see
  :mod:`tether.producer.schedules.ticks`): the producer's idempotent submit turns a second
  submission of a tick, by a second beat or after a crash, into the same run.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pydantic
from celery.beat import ScheduleEntry
from redbeat.decoder import RedBeatJSONEncoder
from redbeat.schedulers import RedBeatScheduler, RedBeatSchedulerEntry, get_redis

from tether.errors import TetherError
from tether.persistence.lua import load
from tether.producer.schedules.model import Schedule
from tether.producer.schedules.ticks import next_tick, plan_tick

if TYPE_CHECKING:
    from tether.producer.client import Producer
    from tether.producer.handle import RunHandle

log = logging.getLogger("tether.schedules")
#: The task name redbeat stores with each entry; this scheduler submits runs itself and never
#: sends it (a plain RedBeatScheduler would send it, and workers refuse unknown tasks).
SCHEDULE_TASK = "tether.schedule"
#: Records a handled tick while the schedule exists.
TICK = load("schedule_tick")
#: Seconds a paused entry waits before the beat looks at it again.
PAUSED_RECHECK_S = 5.0


def aware(moment: datetime) -> datetime:
    """``moment`` in UTC (redbeat may hand back naive UTC datetimes)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class TetherEntry(RedBeatSchedulerEntry):  # type: ignore[misc]
    """A redbeat entry whose ``kwargs`` is a :class:`Schedule` and whose ``last_run_at`` is the
    schedule's last tick (its scheduled time, see :mod:`tether.producer.schedules.ticks`)."""

    @property
    def spec(self) -> Schedule:
        """The schedule this entry runs."""
        return Schedule.model_validate(self.kwargs)

    def checked_spec(self) -> Schedule | None:
        """:attr:`spec`, or None when the stored definition no longer validates (written by
        another version, edited by hand, or refused by a stricter check since): such an entry is
        not run, and never stops the beat or the other schedules."""
        try:
            return self.spec
        except (pydantic.ValidationError, TetherError) as exc:
            log.error(
                "schedule %s is not a valid schedule and is not run (remove it with `tether "
                "schedule remove %s`, then add it again): %s",
                self.name,
                self.name,
                exc,
            )
            return None

    def _next_instance(
        self, last_run_at: datetime | None = None, only_update_last_run_at: bool = False
    ) -> TetherEntry:
        """Record the handled tick as redbeat does, but only while the schedule exists
        (``schedule_tick.lua``): a beat that fired a tick of a schedule removed meanwhile
        brought its key back, and a schedule added again under the name inherited its old last
        tick (and fired the ticks it had "missed" at once)."""
        if not self.is_tether:
            return super()._next_instance(last_run_at, only_update_last_run_at)  # type: ignore[no-any-return]
        # celery's ScheduleEntry: a copy with the new last_run_at (redbeat's own override
        # writes it unconditionally, so skip it)
        entry: TetherEntry = ScheduleEntry._next_instance(self, last_run_at=last_run_at)
        meta = json.dumps(
            {"last_run_at": entry.last_run_at, "total_run_count": entry.total_run_count},
            cls=RedBeatJSONEncoder,
        )
        keys = TICK.keys(entry=self.key, schedule=self.app.redbeat_conf.schedule_key)
        get_redis(self.app).register_script(TICK.source)(
            keys=keys, args=TICK.argv(meta=meta, score=entry.score)
        )
        return entry

    @property
    def is_tether(self) -> bool:
        """Whether this is a run schedule (beat's own entries, if any, are plain redbeat's)."""
        return isinstance(self.kwargs, dict) and "version" in self.kwargs

    @property
    def last_tick(self) -> datetime | None:
        """The scheduled time of the last tick handled (or the start, for a new schedule)."""
        return None if self.last_run_at is None else aware(self.last_run_at)

    @property
    def due_at(self) -> datetime:
        """The next tick (in the past when it is overdue): redbeat's score of the entry."""
        if not self.is_tether:
            return super().due_at  # type: ignore[no-any-return]
        last = self.last_tick
        try:
            spec = self.spec
        except (pydantic.ValidationError, TetherError):  # is_due says why, and never runs it
            return aware(self._default_now())
        return aware(self._default_now()) if last is None else next_tick(spec, last)

    def is_due(self) -> tuple[bool, float]:
        """Celery beat's question: due now, and seconds until it should ask again."""
        if not self.is_tether:
            return super().is_due()  # type: ignore[no-any-return]
        if not self.enabled:
            return False, PAUSED_RECHECK_S
        spec = self.checked_spec()
        if spec is None:  # never a crash of the beat for one bad entry
            return False, PAUSED_RECHECK_S
        now = aware(self._default_now())
        remaining_s = (self.due_at - now).total_seconds()
        if remaining_s > 0:
            return False, remaining_s
        # due: ask again at the tick after the one about to run (not a fixed delay, which
        # would find that tick late and count it missed)
        plan = plan_tick(spec, self.last_tick or now, now)
        following = next_tick(spec, plan.last or now)
        return True, max(0.0, (following - now).total_seconds())


class TetherScheduler(RedBeatScheduler):  # type: ignore[misc]
    """``celery beat -S tether.producer.schedules.scheduler:TetherScheduler`` (``tether beat``
    sets it): submits each due tick's run through a :class:`Producer`."""

    Entry = TetherEntry

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()

    @property
    def tether_producer(self) -> Producer:
        """The producer this beat submits with (built on first use, from TETHER_* settings)."""
        with self._producer_lock:
            if self._producer is None:
                from tether.producer.client import Producer

                self._producer = Producer()
            return self._producer

    def apply_async(
        self, entry: TetherEntry, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> RunHandle | None:
        """Run the entry's due tick (per its missed-ticks policy), then record it."""
        if not entry.is_tether:
            return super().apply_async(entry, producer, advance, **kwargs)  # type: ignore[no-any-return]
        schedule = entry.spec
        last = entry.last_tick or aware(self.app.now())
        plan = plan_tick(schedule, last, aware(self.app.now()))
        handle = None
        if plan.fire is not None:
            handle = submit_tick(self.tether_producer, schedule, plan.fire)
            log.info(
                "schedule %s: tick %s is run %s",
                schedule.name,
                plan.fire.isoformat(),
                handle.run_id,
            )
        if plan.missed:
            log.warning(
                "schedule %s: %d missed tick(s) not run (missed=%s)",
                schedule.name,
                plan.missed,
                schedule.missed,
            )
        if plan.last is not None:
            entry._next_instance(last_run_at=plan.last)  # records the tick and the next score
        return handle

    def close(self) -> None:
        """Release the lock (redbeat), then close the producer."""
        super().close()
        with self._producer_lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None


def submit_tick(producer: Producer, schedule: Schedule, tick: datetime) -> RunHandle:
    """Submit the run of ``schedule``'s ``tick``: idempotent, whoever submits it and how often."""
    return producer.run_async(
        schedule.session_id,
        schedule.input,
        agent=schedule.agent,
        tenant=schedule.tenant,
        request_id=schedule.request_id(tick),
    )
