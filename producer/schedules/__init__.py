"""Scheduled runs: run schedules kept in Redis and fired by Celery beat with celery-redbeat
(the ``schedules`` extra): :class:`Schedules` edits them (``tether schedule ...``),
:mod:`~tether.producer.schedules.beat` is the beat's app (``tether beat``). See
docs/schedules.md.

Names are imported on first use: importing the package imports neither Celery nor redbeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.producer.schedules.book import Schedules, ScheduleView
    from tether.producer.schedules.model import Schedule

__all__ = ["Schedule", "ScheduleView", "Schedules"]


def __getattr__(name: str) -> Any:
    if name in ("Schedules", "ScheduleView"):
        from tether.producer.schedules import book

        return getattr(book, name)
    if name == "Schedule":
        from tether.producer.schedules.model import Schedule

        return Schedule
    raise AttributeError(f"module 'tether.producer.schedules' has no attribute {name!r}")
