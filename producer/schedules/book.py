"""``Schedules``: add, list, pause, resume and remove one tenant's run schedules (the Python side
of ``tether schedule ...``).

>>> schedules = Schedules()                              # settings from TETHER_* variables
>>> schedules.add("digest", session_id="s-1", agent="notes", input="daily digest",
...               cron="0 7 * * *")
>>> [(s.name, s.next_tick) for s in schedules.list()]

A schedule belongs to a tenant (``TETHER_TENANT``, or ``tenant=``): it is stored in that tenant's
keyspace (:mod:`tether.producer.schedules.store`), so with per-tenant Redis users only that
tenant's credential (and the operator's) creates, lists, changes or removes it, and the beat runs
it for that tenant only. Every argument is checked before anything is written (an invalid cron
expression, an unknown agent, a taken name: one :class:`~tether.errors.UsageError` naming the
value). A running beat (``tether beat``) sees a change on its next loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tether.errors import ConfigurationError, InputTooLarge, ScheduleNotFound, UnknownAgent
from tether.ids import validate_tenant
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, redis_from_url, translate_errors
from tether.producer.schedules.model import MissedTicks, Schedule, parse_schedule, validate_name
from tether.producer.schedules.presence import BeatPresence, list_beats
from tether.producer.schedules.store import (
    Refused,
    ScheduleStore,
    StoredSchedule,
    max_definition_bytes,
)
from tether.producer.schedules.ticks import first_last_tick, next_tick
from tether.producer.submission import acting_for
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


def check_single_node(settings: Settings) -> str:
    """The state Redis URL, when the beat can run on it.

    Raises:
        ConfigurationError: it is a Redis Cluster (the beat needs one Redis node).
    """
    redis_url = settings.effective_redis_url
    if redis_url.startswith(("redis+cluster", "rediss+cluster")):
        raise ConfigurationError(
            f"scheduled runs need a single Redis node, and TETHER_REDIS_URL is a cluster "
            f"({redis_url.split('://', 1)[0]}://); run beat against a plain redis:// URL"
        )
    return redis_url


class Schedules:
    """The run schedules of one tenant (``tenant``, default ``settings.tenant``); every method
    also takes ``tenant=`` to act for another one (the operator's credential may, a tenant's
    may not: :class:`~tether.errors.PermissionDenied` naming the tenant).

    Args:
        settings: settings (default: read from the environment).
        tenant: the tenant whose schedules these are (default: ``TETHER_TENANT``).
        **overrides: setting overrides, e.g. ``redis_url=...``.
    """

    def __init__(
        self, settings: Settings | None = None, *, tenant: str | None = None, **overrides: Any
    ) -> None:
        self.settings = settings or load_settings(**overrides)
        self.tenant = validate_tenant(tenant or self.settings.tenant)
        self.keys = RedisKeys(self.settings.namespace)
        self._redis = redis_from_url(check_single_node(self.settings))
        self.store = ScheduleStore(
            self._redis,
            self.keys,
            max_definition_bytes=max_definition_bytes(self.settings.max_input_bytes),
        )

    def close(self) -> None:
        """Close the Redis connection."""
        self._redis.close()

    def __enter__(self) -> Schedules:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        """Add a schedule: a run of ``agent`` on ``session_id`` of ``tenant`` with ``input`` at
        every tick of ``cron`` (five fields, UTC) or every ``every_s`` seconds; ``missed``:
        what a beat does with ticks missed while none ran (``catch_up``: one run; ``skip``:
        none). The input is stored with its credentials masked, as a run's
        (``TETHER_REDACT_INPUTS``).

        Raises:
            InvalidInput: a bad name, id, cron expression or interval.
            InputTooLarge: the input is over ``TETHER_MAX_INPUT_BYTES``.
            UnknownAgent: no agent of that name is registered here.
            ScheduleExists: the name is taken (remove it first).
            PermissionDenied: this credential may not act for ``tenant``.
        """
        if self.settings.redact_inputs:
            # the definition lives in Redis as long as the schedule does: a key pasted into
            # its input must not, as a run's input is redacted before it is submitted
            input = mask_input(input)
        owner = self._scope(tenant)
        schedule = parse_schedule(
            name=name,
            session_id=session_id,
            agent=agent,
            input=input,
            cron=cron,
            every_s=every_s,
            tenant=owner,
            missed=missed,
        )
        self._check_input(schedule.input)
        self._check_agent(schedule.agent)
        stored = StoredSchedule(
            tenant=owner,
            schedule=schedule,
            enabled=True,
            last_tick=first_last_tick(schedule, datetime.now(UTC)),
        )
        with acting_for(self.settings, [owner]):
            self.store.create(stored)
        return self._view(stored)

    def get(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        """One schedule and its state.

        Raises:
            ScheduleNotFound: no schedule of that name (or one that no longer validates).
        """
        owner = self._scope(tenant)
        with acting_for(self.settings, [owner]):
            found = self.store.read(owner, validate_name(name))
        return self._view(_checked(found))

    def list(self, *, tenant: str | None = None) -> list[ScheduleView]:
        """Every schedule of the tenant, by name (one that no longer validates is left out:
        the beat logs it, and ``remove`` removes it)."""
        owner = self._scope(tenant)
        with acting_for(self.settings, [owner]):
            found = self.store.read_many(owner, self.store.names(owner))
            return [self._view(s) for s in found if isinstance(s, StoredSchedule)]

    def pause(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        """Stop firing ``name`` until :meth:`resume` (ticks meanwhile are missed ticks)."""
        return self._set_enabled(name, tenant, enabled=False)

    def resume(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        """Fire ``name`` again; the ticks missed while paused follow its ``missed`` policy."""
        return self._set_enabled(name, tenant, enabled=True)

    def remove(self, name: str, *, tenant: str | None = None) -> None:
        """Remove ``name`` (also one that no longer validates); runs it already submitted go
        on.

        Raises:
            ScheduleNotFound: no schedule of that name.
        """
        owner = self._scope(tenant)
        with acting_for(self.settings, [owner]):
            if not self.store.remove(owner, validate_name(name)):
                self.store.read(owner, name)  # raises ScheduleNotFound

    def beats(self) -> Sequence[BeatPresence]:
        """The live beats, the one firing the schedules first (empty: none fires them).

        Raises:
            PermissionDenied: a tenant's credential (the beats' records are the operator's).
        """
        return list_beats(self._redis, self.keys)

    # --- helpers -------------------------------------------------------------------------------

    def _scope(self, tenant: str | None) -> str:
        return validate_tenant(tenant or self.tenant)

    def _set_enabled(self, name: str, tenant: str | None, *, enabled: bool) -> ScheduleView:
        owner = self._scope(tenant)
        with acting_for(self.settings, [owner]):
            changed = self.store.set_enabled(owner, validate_name(name), enabled=enabled)
        return self._view(changed)

    def _check_input(self, input: str | None) -> None:
        size = len((input or "").encode())
        if size > self.settings.max_input_bytes:
            raise InputTooLarge(
                f"the schedule's input is {size} bytes, over TETHER_MAX_INPUT_BYTES="
                f"{self.settings.max_input_bytes}; shorten it or raise the limit"
            )

    def _check_agent(self, agent: str) -> None:
        from tether.runtime.registry import AgentRegistry

        known = AgentRegistry.default(self.settings.agent_modules).names()
        if agent not in known:
            raise UnknownAgent(
                f"unknown agent {agent!r}; known agents: {', '.join(known)}. Register it with "
                "TETHER_AGENT_MODULES (here and on the workers) or the 'tether.agents' entry point"
            )

    def _view(self, stored: StoredSchedule) -> ScheduleView:
        schedule, last = stored.schedule, stored.last_tick
        run_id = None
        if last is not None:
            index = self.keys.request(stored.tenant, schedule.session_id, schedule.request_id(last))
            with translate_errors(describe_client(self._redis)):
                found = self._redis.get(index)
            run_id = found.decode() if isinstance(found, bytes) else None
        return ScheduleView(
            schedule=schedule,
            paused=not stored.enabled,
            last_tick=last,
            next_tick=None if last is None else next_tick(schedule, last),
            last_run_id=run_id,
        )


def _checked(found: StoredSchedule | Refused) -> StoredSchedule:
    if isinstance(found, Refused):
        raise ScheduleNotFound(
            f"schedule {found.name!r} is not a valid schedule ({found.reason}: {found.detail}); "
            f"remove it with 'tether schedule remove {found.name}', then add it again"
        )
    return found
