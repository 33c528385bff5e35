"""``Schedules``: add, list, pause, resume and remove run schedules (the Python side of
``tether schedule ...``).

>>> schedules = Schedules()                              # settings from TETHER_* variables
>>> schedules.add("digest", session_id="s-1", agent="notes", input="daily digest",
...               cron="0 7 * * *")
>>> [(s.name, s.next_tick) for s in schedules.list()]

Every argument is checked before anything is written (an invalid cron expression, an unknown
agent, a taken name: one :class:`~tether.errors.UsageError` naming the value). A running beat
(``tether beat``) sees a change on its next loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redbeat.schedulers import ensure_conf, get_redis

from tether.errors import ScheduleExists, ScheduleNotFound, UnknownAgent
from tether.keys import RedisKeys
from tether.producer.schedules.beat import build_beat_app
from tether.producer.schedules.model import MissedTicks, Schedule, parse_schedule, validate_name
from tether.producer.schedules.scheduler import SCHEDULE_TASK, TetherEntry
from tether.producer.schedules.ticks import first_last_tick, next_tick
from tether.runtime.redaction import mask_input
from tether.settings import Settings, load_settings


@dataclass(frozen=True)
class ScheduleView:
    """A schedule with its state."""

    schedule: Schedule
    paused: bool
    last_tick: datetime | None
    """The scheduled time of the last tick handled (for a new schedule: when it was added)."""
    next_tick: datetime | None
    last_run_id: str | None
    """The run of the last tick, if it ran (and its record has not expired)."""

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.schedule.name

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``tether schedule list --json``, the console)."""
        return {
            **self.schedule.model_dump(mode="json"),
            "timing": self.schedule.timing,
            "paused": self.paused,
            "last_tick": _iso(self.last_tick),
            "next_tick": None if self.paused else _iso(self.next_tick),
            "last_run_id": self.last_run_id,
        }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


class Schedules:
    """The run schedules of one deployment (``settings.namespace`` in its Redis).

    Args:
        settings: settings (default: read from the environment).
        **overrides: setting overrides, e.g. ``redis_url=...``.
    """

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        self.settings = settings or load_settings(**overrides)
        self.app = build_beat_app(self.settings)
        ensure_conf(self.app)
        self.keys = RedisKeys(self.settings.namespace)
        self._redis = get_redis(self.app)

    def add(
        self,
        name: str,
        *,
        session_id: str,
        agent: str,
        input: str | None = None,
        cron: str | None = None,
        every_s: int | None = None,
        tenant: str | None = None,
        missed: MissedTicks = "catch_up",
    ) -> ScheduleView:
        """Add a schedule: a run of ``agent`` on ``session_id`` with ``input`` at every tick of
        ``cron`` (five fields, UTC) or every ``every_s`` seconds; ``missed``: what a beat does
        with ticks missed while none ran (``catch_up``: one run; ``skip``: none). The input is
        stored with its credentials masked, as a run's (``TETHER_REDACT_INPUTS``).

        Raises:
            InvalidInput: a bad name, id, cron expression or interval.
            UnknownAgent: no agent of that name is registered here.
            ScheduleExists: the name is taken (remove it first).
        """
        if self.settings.redact_inputs:
            # the definition lives in Redis as long as the schedule does: a key pasted into
            # its input must not, as a run's input is redacted before it is submitted
            input = mask_input(input)
        schedule = parse_schedule(
            name=name,
            session_id=session_id,
            agent=agent,
            input=input,
            cron=cron,
            every_s=every_s,
            tenant=tenant or self.settings.tenant,
            missed=missed,
        )
        self._check_agent(schedule.agent)
        entry = TetherEntry(
            name=schedule.name,
            task=SCHEDULE_TASK,
            schedule=schedule.celery_schedule(),
            kwargs=schedule.model_dump(mode="json"),
            enabled=True,
            app=self.app,
        )
        entry.last_run_at = first_last_tick(schedule, datetime.now(UTC))
        # the definition field is the claim on the name: a second add of it finds it taken
        if not self._redis.hsetnx(entry.key, "definition", "{}"):
            raise ScheduleExists(
                f"schedule {schedule.name!r} already exists; remove it first with "
                f"'tether schedule remove {schedule.name}'"
            )
        # a fresh schedule starts at the tick before now, never at a state left under its name
        # (redbeat's save keeps a stored meta)
        self._redis.hdel(entry.key, "meta")
        entry.save()
        return self._view(entry)

    def get(self, name: str) -> ScheduleView:
        """One schedule and its state.

        Raises:
            ScheduleNotFound: no schedule of that name.
        """
        return self._view(self._entry(name))

    def list(self) -> list[ScheduleView]:
        """Every schedule, by name."""
        conf = self.app.redbeat_conf
        views = []
        for key in self._redis.zrange(conf.schedule_key, 0, -1):
            try:
                entry = TetherEntry.from_key(key, app=self.app)
            except KeyError:  # removed meanwhile
                continue
            if entry.is_tether and entry.checked_spec() is not None:  # else logged, skipped
                views.append(self._view(entry))
        return sorted(views, key=lambda view: view.name)

    def pause(self, name: str) -> ScheduleView:
        """Stop firing ``name`` until :meth:`resume` (ticks meanwhile are missed ticks)."""
        return self._set_enabled(name, enabled=False)

    def resume(self, name: str) -> ScheduleView:
        """Fire ``name`` again; the ticks missed while paused follow its ``missed`` policy."""
        return self._set_enabled(name, enabled=True)

    def remove(self, name: str) -> None:
        """Remove ``name``; runs it already submitted go on."""
        self._entry(name).delete()

    # --- helpers -------------------------------------------------------------------------------

    def _entry(self, name: str) -> TetherEntry:
        key = TetherEntry.generate_key(self.app, validate_name(name))
        try:
            entry: TetherEntry = TetherEntry.from_key(key, app=self.app)
        except KeyError:
            raise ScheduleNotFound(
                f"no schedule {name!r}; 'tether schedule list' shows the schedules"
            ) from None
        return entry

    def _set_enabled(self, name: str, *, enabled: bool) -> ScheduleView:
        entry = self._entry(name)
        entry.enabled = enabled
        entry.save()
        return self._view(entry)

    def _check_agent(self, agent: str) -> None:
        from tether.runtime.registry import AgentRegistry

        known = AgentRegistry.default(self.settings.agent_modules).names()
        if agent not in known:
            raise UnknownAgent(
                f"unknown agent {agent!r}; known agents: {', '.join(known)}. Register it with "
                "TETHER_AGENT_MODULES (here and on the workers) or the 'tether.agents' entry point"
            )

    def _view(self, entry: TetherEntry) -> ScheduleView:
        schedule = entry.spec
        last = entry.last_tick
        run_id = None
        if last is not None:
            index = self.keys.request(
                schedule.tenant, schedule.session_id, schedule.request_id(last)
            )
            found = self._redis.get(index)
            run_id = found if isinstance(found, str) else None
        return ScheduleView(
            schedule=schedule,
            paused=not entry.enabled,
            last_tick=last,
            next_tick=None if last is None else next_tick(schedule, last),
            last_run_id=run_id,
        )
