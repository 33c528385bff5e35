"""A run schedule: what to run (session, agent, input, tenant), when (a cron expression or every
N seconds) and what to do with ticks missed while no beat ran; validated before anything is
written.

Persisted as the ``kwargs`` of its celery-redbeat entry (JSON). Versions:

- 1: ``name``, ``session_id``, ``agent``, ``input``, ``tenant``, ``cron`` | ``every_s``,
  ``missed`` (``skip`` or ``catch_up``). Golden file: ``tests/fixtures/schedule_entry_v1.json``.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from typing import Any, Literal

import pydantic
from celery import Celery
from celery.schedules import crontab
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import InvalidInput
from tether.ids import validate_id, validate_tenant

SCHEDULE_VERSION: Literal[1] = 1
#: Longest schedule name: the request id ``sched:<name>:<tick>`` stays within the id limit.
MAX_NAME_LENGTH = 64
_NAME_RE = re.compile(r"[A-Za-z0-9_\-.]{1,64}")
#: Longest interval of an ``every_s`` schedule (a year).
MAX_EVERY_S = 366 * 86_400

MissedTicks = Literal["skip", "catch_up"]


def validate_name(name: object) -> str:
    """``name`` if it can name a schedule: 1-64 of ``[A-Za-z0-9_-.]``, not starting with ``.``.

    Raises:
        InvalidInput: naming the value and the rule.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name.startswith("."):
        raise InvalidInput(
            f"schedule name {name!r} is not allowed; use 1-{MAX_NAME_LENGTH} characters from "
            "[A-Za-z0-9_-.], not starting with '.', e.g. 'nightly-report'"
        )
    return validate_id(name, kind="schedule name")


def is_valid_name(name: object) -> bool:
    """Whether ``name`` passes :func:`validate_name` (for names read back from Redis, where one
    that does not is skipped, not an error)."""
    try:
        validate_name(name)
    except InvalidInput:
        return False
    return True


def parse_cron(expression: str) -> crontab:
    """The Celery crontab of a five-field cron expression (``minute hour day month weekday``).

    Raises:
        InvalidInput: naming the expression and what is wrong with it.
    """
    try:
        cron = crontab.from_string(expression)
    except (ValueError, TypeError, IndexError) as exc:
        raise InvalidInput(
            f"cron expression {expression!r} is not valid ({exc}); use five fields "
            "'minute hour day-of-month month day-of-week', e.g. '*/5 * * * *'"
        ) from None
    # UTC from an app of its own: the current app's timezone would read that app's whole
    # configuration, and a producer (schedule add) may have no settings of the beat's app
    cron.app = _utc_app()
    return cron


@functools.cache
def _utc_app() -> Celery:
    return Celery("tether-cron", set_as_current=False, config_source={"timezone": "UTC"})


class Schedule(BaseModel):
    """One run schedule (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = SCHEDULE_VERSION
    name: str
    session_id: str
    agent: str = Field(min_length=1, max_length=200)
    input: str | None = None
    tenant: str
    cron: str | None = None
    every_s: int | None = Field(default=None, ge=1, le=MAX_EVERY_S)
    missed: MissedTicks = "catch_up"

    @pydantic.field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_name(value)

    @pydantic.field_validator("session_id")
    @classmethod
    def _session(cls, value: str) -> str:
        return validate_id(value)

    @pydantic.field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return validate_tenant(value)

    @pydantic.field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            parse_cron(value)
        return value

    @pydantic.model_validator(mode="after")
    def _one_timing(self) -> Schedule:
        if (self.cron is None) == (self.every_s is None):
            raise InvalidInput(
                f"schedule {self.name!r} needs exactly one of a cron expression (--cron) or an "
                "interval (--every-s)"
            )
        return self

    @property
    def timing(self) -> str:
        """How it fires, for people: the cron expression or ``every N s``."""
        return self.cron if self.cron is not None else f"every {self.every_s} s"

    def celery_schedule(self) -> Any:
        """The Celery schedule redbeat stores beside the entry (a crontab or an interval)."""
        from datetime import timedelta

        from celery.schedules import schedule

        if self.cron is not None:
            return parse_cron(self.cron)
        return schedule(run_every=timedelta(seconds=self.every_s or 1))

    def request_id(self, tick: datetime) -> str:
        """The request id of this schedule's run for ``tick`` (its scheduled time, not when it
        fired): every beat that fires the tick submits the same id, so the run happens once."""
        return f"sched:{self.name}:{int(tick.timestamp())}"


def parse_schedule(**fields: Any) -> Schedule:
    """A :class:`Schedule` from ``fields``.

    Raises:
        InvalidInput: one line naming each bad field and its value.
    """
    try:
        # the id, name and cron checks raise InvalidInput themselves (not a ValueError, so
        # pydantic lets it through with its own message)
        return Schedule(**fields)
    except pydantic.ValidationError as exc:
        problems = [
            f"{'.'.join(map(str, e['loc']))}={e.get('input')!r}: {e['msg']}" for e in exc.errors()
        ]
        raise InvalidInput("; ".join(problems)) from None
