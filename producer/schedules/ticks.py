"""Tick arithmetic of a schedule, without I/O: the next tick after the last one, and what a beat
does when it finds ticks due.

A schedule's state is its *last tick*: the scheduled time of the last tick it handled (never the
wall-clock time a beat fired it), so every beat computes the same next tick from the same state,
and an interval schedule does not drift by the beat's lateness. Interval ticks sit on a grid
(multiples of ``every_s`` since the epoch); cron ticks are the expression's times (UTC).

Missed ticks: when a beat finds more than one tick due at once (no beat ran for a while, or
the schedule was paused), ``catch_up`` runs once, for the latest of them, and ``skip`` runs none;
either way the schedule goes on from the tick after now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tether.producer.schedules.model import Schedule, parse_cron

#: Cron ticks counted one by one after an outage, at most (a day of a minutely schedule);
#: beyond, the latest is searched back from now.
MAX_COUNTED_TICKS = 1_440


@dataclass(frozen=True)
class TickPlan:
    """What to do now: run ``fire`` (or nothing), then record ``last`` as the last tick."""

    fire: datetime | None
    last: datetime | None
    missed: int


def first_last_tick(schedule: Schedule, now: datetime) -> datetime:
    """The last tick a new schedule starts from: the grid point at or before ``now`` for an
    interval, ``now`` (whole seconds) for a cron; its first run is the tick after it."""
    now = now.astimezone(UTC).replace(microsecond=0)
    if schedule.every_s is not None:
        seconds = int(now.timestamp()) // schedule.every_s * schedule.every_s
        return datetime.fromtimestamp(seconds, UTC)
    return now


def next_tick(schedule: Schedule, last: datetime) -> datetime:
    """The first tick after ``last``."""
    if schedule.every_s is not None:
        return last + timedelta(seconds=schedule.every_s)
    start, delta, _ = parse_cron(schedule.cron or "").remaining_delta(last.astimezone(UTC))
    tick: datetime = start + delta
    return tick.astimezone(UTC)


def plan_tick(schedule: Schedule, last: datetime, now: datetime) -> TickPlan:
    """What a beat does at ``now`` for a schedule whose last tick is ``last``."""
    first = next_tick(schedule, last)
    if first > now:
        return TickPlan(fire=None, last=None, missed=0)
    latest, due = _latest_due(schedule, first, now)
    if due == 1:
        return TickPlan(fire=first, last=first, missed=0)
    if schedule.missed == "catch_up":
        return TickPlan(fire=latest, last=latest, missed=due - 1)
    return TickPlan(fire=None, last=latest, missed=due)


def _latest_due(schedule: Schedule, first: datetime, now: datetime) -> tuple[datetime, int]:
    """The latest tick at or before ``now`` (``first`` is due) and how many are due."""
    if schedule.every_s is not None:
        steps = int((now - first).total_seconds()) // schedule.every_s
        return first + timedelta(seconds=steps * schedule.every_s), steps + 1
    latest, due = first, 1
    while due < MAX_COUNTED_TICKS:
        following = next_tick(schedule, latest)
        if following > now:
            return latest, due
        latest, due = following, due + 1
    # a very long outage: the latest tick is the last one before the next tick after now
    return _tick_before(schedule, now, latest), due


def _tick_before(schedule: Schedule, now: datetime, floor: datetime) -> datetime:
    """The latest cron tick at or before ``now``, searched back from ``now`` in widening
    windows (never before ``floor``, a tick known to be due)."""
    window = timedelta(hours=1)
    while True:
        start = max(floor, now - window)
        latest, tick = start, next_tick(schedule, start)
        while tick <= now:
            latest, tick = tick, next_tick(schedule, tick)
        if latest > start or start == floor:
            return latest
        window *= 4
