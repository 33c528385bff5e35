"""What the sync and asyncio run queues on Redis share: the scripts they run, how a call's
KEYS and ARGV are built, and how records and feed entries are read back.

Every script touches the keys of one session only (a run's keys live in its session's slot), so
each runs on one Redis Cluster node. The namespace-wide structures (the sharded active-session
index, the completion feeds, the tenant's run-id index) are written by plain commands pipelined
beside a script, never inside it. The scripts themselves are ``.lua`` files in
:mod:`tether.persistence.lua`; every key name comes from :class:`~tether.keys.RedisKeys`, and
every field of a run record or a feed entry from :mod:`tether.runs.queue.record`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from tether.core.events import now_ms
from tether.errors import InvalidId
from tether.ids import validate_id, validate_tenant
from tether.keys import RedisKeys
from tether.persistence.lua import Key
from tether.runs.contract import RunRef, RunRequest, RunResult, WireRequest
from tether.runs.queue.base import (
    DONE_MAX_LEN,
    FEED_RESULT_MAX_BYTES,
    IdleRelease,
    RunView,
    SubmitOutcome,
    SubmitState,
)
from tether.runs.queue.record import FeedField, RunField, record_script

SUBMIT = record_script("submit")
RECORD_REJECTED = record_script("record_rejected")
BEGIN = record_script("begin")
HAND_BACK = record_script("hand_back")
CANCEL = record_script("cancel")
FINISH = record_script("finish")
FINISH_RELEASE = record_script("finish_release")
RELEASE_IF_IDLE = record_script("release_if_idle")

SUBMIT_STATES = {
    1: SubmitState.QUEUED,
    0: SubmitState.DUPLICATE,
    2: SubmitState.BUSY,
    3: SubmitState.TAKEN,
}
IDLE_RELEASE = {1: IdleRelease.RELEASED, 0: IdleRelease.BUSY, -1: IdleRelease.LOST}
#: One announcement in this many also trims the feeds of entries older than the result TTL.
FEED_TRIM_EVERY = 16


def text(raw: Any) -> str:
    """A reply as text (replies are bytes on a bytes client)."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def run_view(
    run_id: str, raw: dict[bytes, bytes], known: WireRequest | None = None
) -> RunView | None:
    """A run record from its hash (None when it has none).

    ``known``: a request validated already (the one a worker's message carried). When the
    record's request is its very text, it is that request and is not validated again;
    otherwise the record's own request is validated: the registered copy is the one that runs.
    """
    if not raw:
        return None
    fields = {text(k): text(v) for k, v in raw.items()}
    request = result = None
    if known is not None and fields.get(RunField.REQUEST) == known.text:
        request = known.request
    elif RunField.REQUEST in fields:
        try:
            request = RunRequest.model_validate_json(fields[RunField.REQUEST])
        except ValueError:
            request = None
    if RunField.RESULT in fields:
        result = RunResult.model_validate_json(fields[RunField.RESULT])
    return RunView(
        run_id=run_id,
        status=fields.get(RunField.STATUS, "UNKNOWN"),
        tenant=fields.get(RunField.TENANT, ""),
        session_id=fields.get(RunField.SESSION_ID, ""),
        request_id=fields.get(RunField.REQUEST_ID, ""),
        request=request,
        result=result,
        submitted_at_ms=int(fields.get(RunField.SUBMITTED_AT_MS, 0)),
        started_at_ms=int(fields.get(RunField.STARTED_AT_MS, 0)),
        last_error=fields.get(RunField.LAST_ERROR),
        retry_at_ms=int(fields.get(RunField.RETRY_AT_MS, 0)),
        failed_before_commit=int(fields.get(RunField.FAILED_BEFORE_COMMIT, 0)),
        queue=fields.get(RunField.QUEUE) or None,
        waiting=fields.get(RunField.WAITING) or None,
    )


def submit_args(wire: WireRequest, queue: str | None, ttl_s: int) -> dict[str, Any]:
    """The named arguments of ``lib/submit.lua``'s ``submit()`` for a request and its JSON (the
    record stores the text as it is: a producer serializes once); the submit script takes them,
    and the claim script as its optional group when it carries a request."""
    request = wire.request
    return dict(
        run_id=request.run_id,
        request=wire.text,
        ttl_s=ttl_s,
        reject="1" if request.on_busy == "reject" else "0",
        tenant=request.tenant,
        session_id=request.session_id,
        request_id=request.request_id,
        submitted_at_ms=request.submitted_at_ms,
        queue=queue or "",
    )


def submit_argv(wire: WireRequest, queue: str | None, ttl_s: int) -> list[Any]:
    """ARGV of ``submit.lua`` (:func:`submit_args`, in declared order)."""
    return SUBMIT.argv(**submit_args(wire, queue, ttl_s))


def carried_keys(k: RedisKeys, request: RunRequest) -> dict[str, Key]:
    """The keys ``lib/submit.lua``'s ``submit()`` registers ``request`` under, by their names in
    ``submit.lua`` and ``claim.lua``: its request-id index entry and its run record."""
    t, s = request.tenant, request.session_id
    return dict(req_index=k.request(t, s, request.request_id), run=k.run(t, s, request.run_id))


def submit_keys(k: RedisKeys, request: RunRequest) -> list[Key]:
    """KEYS of ``submit.lua`` for ``request``."""
    pending = k.pending(request.tenant, request.session_id)
    return SUBMIT.keys(pending=pending, **carried_keys(k, request))


def rejected_argv(result: RunResult, ttl_s: int) -> list[Any]:
    """ARGV of ``record_rejected.lua`` for ``result``."""
    return RECORD_REJECTED.argv(
        status=result.status.value,
        result=result.model_dump_json(),
        tenant=result.tenant,
        session_id=result.session_id,
        request_id=result.request_id,
        ttl_s=ttl_s,
    )


def cancel_call(k: RedisKeys, ref: RunRef, ttl_s: int) -> tuple[list[Key], list[Any]]:
    """KEYS and ARGV of ``cancel.lua`` for the run ``ref``."""
    return CANCEL.keys(run=k.run(*ref), cancel=k.cancel(*ref)), CANCEL.argv(ttl_s=ttl_s)


def done_fields(result: RunResult) -> dict[Any, Any]:
    """The completion-feed entry announcing ``result``."""
    return {
        FeedField.RUN_ID: result.run_id,
        FeedField.STATUS: result.status.value,
        FeedField.TENANT: result.tenant,
        FeedField.SESSION_ID: result.session_id,
    }


def carried_result(fields: dict[bytes, bytes]) -> RunResult | None:
    """The result a feed entry carries (None: read the record)."""
    raw = fields.get(FeedField.RESULT.encode())
    if raw is None:
        return None
    try:
        return RunResult.model_validate_json(raw)
    except ValueError:  # a newer writer's format: the record answers instead
        return None


def announce(
    pipe: Any,
    k: RedisKeys,
    result: RunResult,
    reply_to: str | None,
    ttl_s: int,
    *,
    raw: str | None = None,
    observers: bool = True,
) -> None:
    """Queue on ``pipe`` the announcements of ``result``, each in the shard of its session:
    the namespace feed (``observers``: only workers write it; a producer announcing a run it
    refused itself writes its own feed alone), and the producer's own feed (which expires when
    its producer is gone: nobody reads it then).

    Feeds keep at most :data:`DONE_MAX_LEN` entries, and none much older than the run records
    they point to (``ttl_s``): an entry whose record expired announces nothing a reader can
    use. The age trim rides on one announcement in :data:`FEED_TRIM_EVERY` (chosen by run id;
    entry ids are milliseconds, so ``XTRIM MINID`` cuts by age), so memory follows the
    completion rate over the TTL, not the total number of runs, at a sixteenth of a command
    per run.
    """
    fields = done_fields(result)
    t, s = result.tenant, result.session_id
    entries = [(k.done(k.feed_shard_of(None, t, s)), fields)] if observers else []
    if reply_to is not None:
        # the producer's feed carries a small result, so its listener reads no record
        raw = raw if raw is not None else result.model_dump_json()
        mine = {**fields, FeedField.RESULT: raw} if len(raw) <= FEED_RESULT_MAX_BYTES else fields
        feed = k.feed(t, reply_to)
        entries.append((k.producer_done(feed, k.feed_shard_of(feed, t, s)), mine))
    trim = zlib.crc32(result.run_id.encode()) % FEED_TRIM_EVERY == 0  # run ids are random
    for feed, entry in entries:
        pipe.xadd(feed, entry, maxlen=DONE_MAX_LEN, approximate=True)
        if trim:
            pipe.xtrim(feed, minid=f"{now_ms() - ttl_s * 1000}-0", approximate=True)
    if reply_to is not None:
        pipe.expire(entries[-1][0], ttl_s)


def submit_outcomes(replies: Sequence[Any]) -> list[SubmitOutcome]:
    """The outcomes of a submit pipeline (script, index SET, active ZADD per request)."""
    named = [SUBMIT.reply(reply) for reply in replies[::3]]
    return [SubmitOutcome(text(r["run_id"]), SUBMIT_STATES[int(r["code"])]) for r in named]


def stray_index_keys(
    k: RedisKeys,
    requests: Sequence[RunRequest],
    outcomes: Sequence[SubmitOutcome],
    replies: Sequence[Any],
) -> list[str]:
    """Run-index entries the submit pipeline set (NX) for runs it did not create: a busy
    rejection, or a duplicate request answered with its first run. The index must not name a
    session for a run id that has no record there."""
    stray = []
    for request, outcome, index_set in zip(requests, outcomes, replies[1::3], strict=True):
        busy = outcome.state is SubmitState.BUSY
        other = outcome.state is SubmitState.DUPLICATE and outcome.run_id != request.run_id
        if index_set and (busy or other):
            stray.append(k.run_index(request.tenant, request.run_id))
    return stray


#: The run of a completion entry that names no valid run: it keeps only its position.
NO_RUN = RunRef("", "", "")


def done_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> tuple[bytes, RunRef]:
    """One completion-feed entry as ``(position, run)``.

    An entry is a pointer, never a fact: readers look the run up in its own record (the
    console, canvas waits), and an entry whose ids are missing or invalid (a deployment that
    still grants tenants the old write access, docs/upgrading.md) names :data:`NO_RUN` (its
    position still advances the reader).
    """
    try:
        ref = RunRef(
            validate_tenant(text(fields.get(FeedField.TENANT.encode(), b"default"))),
            validate_id(text(fields.get(FeedField.SESSION_ID.encode(), b""))),
            validate_id(text(fields.get(FeedField.RUN_ID.encode(), b"")), kind="run id"),
        )
    except (InvalidId, UnicodeDecodeError):
        return entry_id, NO_RUN
    return entry_id, ref
