"""The run record's shape on Redis, named once: its hash fields, the states its ``status``
holds before the result does, and the fields of the completion-feed entry that points to it.

Python reads and writes the record only through these names, and the Lua scripts of the run
protocol never spell one: each script that touches the record declares ``-- @tables F S`` and
:func:`record_script` has the loader prepend them as Lua tables built from :class:`RunField` and
:class:`RunState` (``F.STATUS`` is ``'status'``, ``S.RUNNING`` is ``'RUNNING'``), so the two
languages share one spelling. ``tests/test_run_record_fields.py`` fails on a field name written
as a literal anywhere else. The scripts' KEYS, ARGV and reply slots are named in their own
headers (:mod:`tether.persistence.lua`).
"""

from __future__ import annotations

from enum import StrEnum

from tether.persistence.lua import LuaScript, load


class RunField(StrEnum):
    """The fields of a run record (the hash at :meth:`tether.keys.RedisKeys.run`).

    Every one but :attr:`WORKER` is an attribute of :class:`~tether.runs.queue.base.RunView`
    by the same name.
    """

    STATUS = "status"
    """A :class:`RunState` until the run has a result, then the result's status."""
    REQUEST = "request"
    """The request's JSON, as its producer serialized it."""
    RESULT = "result"
    """The result's JSON, once the run finished (or was refused)."""
    TENANT = "tenant"
    SESSION_ID = "session_id"
    REQUEST_ID = "request_id"
    SUBMITTED_AT_MS = "submitted_at_ms"
    STARTED_AT_MS = "started_at_ms"
    """When the newest attempt began."""
    WORKER = "worker"
    """The worker running the newest attempt."""
    QUEUE = "queue"
    """The broker queue serving the run (absent: unknown, the worker's own)."""
    RETRY_AT_MS = "retry_at_ms"
    """No attempt begins before then (a failed attempt's back-off)."""
    FAILED_BEFORE_COMMIT = "failed_before_commit"
    """Attempts that failed before they could write anything."""
    LAST_ERROR = "last_error"
    """Why the newest failed attempt failed."""
    WAITING = "waiting"
    """What the running run waits for (absent while it does not wait)."""


class RunState(StrEnum):
    """The status a run record holds while it is not finished (then: the result's status)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"


class FeedField(StrEnum):
    """The fields of a completion-feed entry: a pointer to a run, whose fields it names as the
    record does (a producer's own feed adds the result when it is small)."""

    RUN_ID = "run_id"
    STATUS = RunField.STATUS.value
    TENANT = RunField.TENANT.value
    SESSION_ID = RunField.SESSION_ID.value
    RESULT = RunField.RESULT.value


def record_script(name: str) -> LuaScript:
    """The script ``<name>.lua`` with the run record's tables: ``F`` (:class:`RunField`) and
    ``S`` (:class:`RunState`), for the scripts whose header asks for them."""
    return load(name, F=RunField, S=RunState)
