"""Runs in Celery's canvas: ``tether_run.s(session_id, input, agent=...)`` in chain, group, chord.

>>> from celery import chain, chord, group
>>> from tether.worker.canvas import tether_collect, tether_run
>>> chord(tether_run.s(f"s-{i % 10}", f"case {i}", agent="echo") for i in range(50))(
...     tether_collect.s()).get(timeout=120)      # {"count": 50, "by_status": {...}, ...}
>>> chain(tether_run.s("s-1", "draft", agent="writer"),
...       tether_run.s("s-2", agent="critic")).delay().get()   # s-2's input: s-1's output

The task result is the run's :class:`~tether.runs.contract.RunResult` as a JSON dict, whatever
its status (a failed run is a result whose ``status`` is ``FAILED``, not a failed task; the task
fails only when its arguments are invalid, or its run record is lost, or the wait runs out).

How it keeps exactly-once and per-session order, without deadlocking the pool:

- **Submitted when the signature is applied**, in the caller's process (:class:`CanvasRunTask`
  overrides ``apply_async``): the run enters its session's FIFO queue then, so the runs of one
  session in a group are applied in the group's order, whatever order the workers take the
  task messages in. A chain applies each step when the previous one finished (its input is the
  previous output), so steps on one session run in chain order.
- **One request id per canvas task** (``canvas:<task id>``, run id ``run-<task id>``): a
  redelivered task message, or the worker re-registering the request, finds it a duplicate and
  gets the same run; it is applied once.
- **The task drains the session itself**, as ``tether.run`` does, and returns its own run's
  result. If another worker holds the session's lease, that worker applies the queue in order,
  this run included, and the task waits for its run's completion (waking on the completion
  stream, trying the lease again every second: a dead holder's lease expires and this task takes
  over), for at most ``wait_s`` seconds (default and cap: ``TETHER_MAX_RUN_S + 60``, below the
  task time limit). A waiting task never holds a lease, and a lease holder never waits, so no
  set of canvas tasks can wait on each other.

Results go to a Redis result backend on ``TETHER_REDIS_URL`` (keys prefixed
``<namespace>-celery-results:``, expiring after ``TETHER_RESULT_TTL_S``), set on the worker app
when this module is imported; ``tether.run`` and ``tether.drain`` still store no result.
"""

from __future__ import annotations

import collections
import time
from typing import Any
from urllib.parse import urlsplit

from celery import Task, current_task
from celery.utils import uuid

from tether.core.results import RunStatus
from tether.errors import InvalidInput, RunLost, RunTimeout, SessionBusy
from tether.keys import RedisKeys, session_shard
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import (
    CANVAS_RUN_TASK,
    RunRequest,
    RunResult,
    canvas_run_id,
    parse_request,
)
from tether.runs.options import RUN_OPTIONS
from tether.runs.queue.base import RunQueue, SubmitState, preempt_for, submit
from tether.runs.queue.redis import RedisRunQueue
from tether.runtime.redaction import mask_input, mask_metadata
from tether.settings import Settings, load_settings
from tether.worker.app import app
from tether.worker.canvas_grants import granted_input, granted_step, grants_for, write_grants
from tether.worker.engine.admission import registered
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices
from tether.worker.tasks import get_services

CANVAS_COLLECT_TASK = "tether.canvas.collect"
#: Margin between the longest run and the longest wait of a canvas task (its soft time limit
#: is TETHER_MAX_RUN_S + 90).
WAIT_MARGIN_S = 60.0
#: What ``tether_run`` takes by keyword: the run options (:class:`RunOptions`; the request id is
#: the task's), and how long to wait for the run.
_OPTIONS = (RUN_OPTIONS - {"request_id"}) | {"wait_s"}


def _backend_url(redis_url: str) -> str:
    """Celery's spelling of a Redis URL (it names unix sockets ``socket://``)."""
    parts = urlsplit(redis_url)
    if parts.scheme == "unix":
        return "socket://" + redis_url.split("://", 1)[1]
    return redis_url


def _results_url(settings: Settings) -> str:
    """Where canvas results go: ``TETHER_REDIS_URL``; Celery cannot use a Redis Cluster, so with
    a ``redis+cluster://`` state store, the broker when it is a Redis, else Celery's ``rpc://``
    (replies over the AMQP broker)."""
    if "+cluster://" not in settings.effective_redis_url:
        return _backend_url(settings.effective_redis_url)
    if settings.effective_broker_url.startswith(("redis://", "rediss://", "unix://")):
        return _backend_url(settings.effective_broker_url)
    return "rpc://"


def _canvas_config() -> dict[str, Any]:
    settings = load_settings()
    return {
        "result_backend": _results_url(settings),
        "result_expires": settings.result_ttl_s,
        "result_backend_transport_options": {
            "global_keyprefix": f"{settings.namespace}-celery-results:"
        },
    }


# later defaults win over the app's own (lazy: nothing is read until Celery needs its config)
app.add_defaults(_canvas_config)


def canvas_request(
    args: tuple[Any, ...], kwargs: dict[str, Any], task_id: str, settings: Settings
) -> RunRequest:
    """The run request of a canvas task's call (validated; no I/O).

    Accepts ``(session_id, input)`` (positional or by name), and in a chain
    ``(previous_result, session_id[, input])``: without an input, the previous run's output is
    the input.

    Raises:
        InvalidInput: arguments missing, unknown or malformed.
    """
    previous: dict[str, Any] | None = None
    if args and isinstance(args[0], dict):
        if "run_id" not in args[0] or "status" not in args[0]:
            raise InvalidInput(
                "tether_run's first argument is a dict but not a RunResult; "
                "call tether_run.s(session_id, input, agent=...)"
            )
        previous, args = args[0], args[1:]
    named = dict(zip(("session_id", "input"), args, strict=False))
    unknown = set(kwargs) - _OPTIONS - {"session_id", "input"}
    if unknown or len(args) > 2 or set(named) & set(kwargs) or "agent" not in kwargs:
        raise InvalidInput(
            f"tether_run got {len(args)} positional arguments, options {sorted(kwargs)}; call "
            f"tether_run.s(session_id, input, agent=...) with options among {sorted(_OPTIONS)}"
        )
    named.update(kwargs)
    text = named.get("input")
    if text is None and previous is not None:
        text = previous.get("output")
    if text is None:
        raise InvalidInput(_no_input_message(previous))
    doc = {
        **{k: v for k, v in named.items() if k in RUN_OPTIONS},  # validated by RunRequest
        "run_id": canvas_run_id(task_id),
        "request_id": f"canvas:{task_id}",
        "tenant": named.get("tenant") or settings.tenant,
        "session_id": named.get("session_id"),
        "input": text,
    }
    request = parse_request(doc)
    request.check_input_size(settings.max_input_bytes)
    return request


def _no_input_message(previous: dict[str, Any] | None) -> str:
    """Why a step has no input: none given, or the previous run of its chain ended without an
    output (it failed: "needs an input" alone sent people looking at the wrong step)."""
    if previous is None:
        return "tether_run needs an input: tether_run.s(session_id, input, agent=...)"
    status = previous.get("status")
    cause = f"{previous.get('error_type')}: {previous.get('error_message')}"
    why = cause if previous.get("error_type") else f"status {status}, no output"
    return (
        f"tether_run in a chain has no input: the previous run {previous.get('run_id')} "
        f"(session {previous.get('session_id')}) ended {status} without an output ({why[:300]}); "
        "fix that step, or give this one its own input: tether_run.s(session_id, input, "
        "agent=...)"
    )


_caller_queue: tuple[Settings, RedisRunQueue] | None = None


def _caller_runs() -> tuple[Settings, RedisRunQueue]:
    """The run queue of a process applying signatures (no engine services needed there)."""
    global _caller_queue
    if _caller_queue is None:
        settings = load_settings()
        client = redis_from_url(settings.effective_redis_url)
        queue = RedisRunQueue(
            client, RedisKeys(settings.namespace), result_ttl_s=settings.result_ttl_s
        )
        _caller_queue = (settings, queue)
    return _caller_queue


def _submit(runs: RunQueue, request: RunRequest, queue: str) -> RunResult | None:
    """Register the request (idempotent); the result of a run refused at once (busy), else None.

    Raises:
        InvalidInput: the run id belongs to another request.
    """
    recorded = runs.get(request.ref)
    if recorded is not None and recorded.result is not None:
        return recorded.result  # finished, or refused when the signature was applied
    outcome = submit(runs, request, on=queue)
    if outcome.state is SubmitState.TAKEN:
        raise InvalidInput(
            f"run id {request.run_id} belongs to another request; "
            "give each canvas task its own task id"
        )
    if outcome.state is SubmitState.QUEUED:
        preempt_for(runs, request)
    if outcome.state is SubmitState.BUSY:
        busy = SessionBusy(
            f"session {request.tenant}/{request.session_id} is running or has queued runs, and "
            "on_busy='reject' was asked; retry later or use on_busy='enqueue'"
        )
        refused = RunResult.failure(request, RunStatus.FAILED, busy.error_type, str(busy))
        runs.record_rejected(refused, reply_to=request.reply_to)
        return refused
    return None


class CanvasRunTask(Task):  # type: ignore[misc]
    """Submits the run when the signature is applied, so group order is session order."""

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        *rest: Any,
        **options: Any,
    ) -> Any:
        task_id = task_id or uuid()
        settings, runs = _caller_runs()
        args, kwargs = masked_arguments(tuple(args or ()), dict(kwargs or {}), settings)
        kwargs["tenant"] = tenant = _applying_tenant(kwargs, settings)
        request = canvas_request(args, kwargs, task_id, settings)
        if settings.registered_runs_only and current_task:
            # a chain's next step, applied by a worker from a message body: registered from
            # the grant its tenant wrote when it applied the chain, never from that body
            request = _granted_request(runs, request, task_id, settings)
        elif settings.registered_runs_only:
            write_grants(
                runs, grants_for(tenant, request.session_id, task_id, options.get("chain") or ())
            )
        _submit(runs, request, settings.queue)
        # a chain's later steps are applied by a worker, whose own TETHER_TENANT is not the
        # caller's: they carry the caller's tenant in their messages
        for step in options.get("chain") or ():
            if isinstance(step, dict) and step.get("task") == CANVAS_RUN_TASK:
                step.setdefault("kwargs", {}).setdefault("tenant", tenant)
        return super().apply_async(args, kwargs, task_id, *rest, **options)


def _granted_request(
    runs: RedisRunQueue, asked: RunRequest, task_id: str, settings: Settings
) -> RunRequest:
    """The request of a chain's later step as its tenant granted it: the grant's options and
    input (or the previous step's recorded output), for the session the message names.

    Raises:
        ConfigurationError: the step was not granted (see :mod:`tether.worker.canvas_grants`).
        RunLost: the previous step left no output.
    """
    grant = granted_step(runs, asked.tenant, asked.session_id, task_id)
    kwargs = {**grant.options, "tenant": grant.tenant}
    return canvas_request((grant.session_id, granted_input(runs, grant)), kwargs, task_id, settings)


def _applying_tenant(kwargs: dict[str, Any], settings: Settings) -> str:
    """The tenant a signature runs for: its own ``tenant=``; inside a worker (a chain's later
    step) the tenant of the canvas task applying it; else the applying process's
    ``TETHER_TENANT``.

    Raises:
        InvalidInput: applied inside a worker task that names no tenant to inherit.
    """
    named = kwargs.get("tenant")
    if isinstance(named, str) and named:
        return named
    if not current_task:  # a proxy: false outside a task, i.e. in the applying process
        return settings.tenant
    inherited = (current_task.request.kwargs or {}).get("tenant")
    if isinstance(inherited, str) and inherited:
        return inherited
    raise InvalidInput(
        "a tether_run signature applied inside a worker task must name its tenant "
        "(tether_run.s(..., tenant=...)): the worker's own TETHER_TENANT is not the caller's"
    )


def masked_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], settings: Settings
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A signature's arguments with the credentials in its input and metadata masked, as the
    producer masks a run's (``TETHER_REDACT_INPUTS``): before the run is registered and before
    the task message, which the broker keeps until a worker takes it, is sent. Only the
    applying process masks: the worker builds its request from the masked message, so both
    sides register the same request."""
    if not settings.redact_inputs:
        return args, kwargs
    masked = list(args)
    at = 2 if masked and isinstance(masked[0], dict) else 1  # a chain's step: (previous, sid, …)
    if len(masked) > at:
        masked[at] = mask_input(masked[at])
    kwargs = dict(kwargs)
    for name, mask in (("input", mask_input), ("metadata", mask_metadata)):
        if name in kwargs:
            kwargs[name] = mask(kwargs[name])
    return tuple(masked), kwargs


def _wait_s(kwargs: dict[str, Any], settings: Settings) -> float:
    cap = settings.max_run_s + WAIT_MARGIN_S
    asked = kwargs.get("wait_s")
    return cap if asked is None else max(0.0, min(float(asked), cap))


def finish_own_run(services: EngineServices, request: RunRequest, wait_s: float) -> RunResult:
    """Drain the run's session until the run has a result; wait while another worker drains it.

    Raises:
        RunLost: the run's record vanished.
        RunTimeout: no result within ``wait_s`` seconds (the run goes on).
    """
    deadline = time.monotonic() + wait_s
    runs, t, s = services.runs, request.tenant, request.session_id
    shard = session_shard(t, s, runs.feed_shards())  # the session's: one key, one slot
    position = runs.done_last_id(shard=shard)
    while True:
        view = services.runs.get(request.ref)
        if view is None:
            raise RunLost(
                f"run {request.run_id}: its record vanished from Redis; apply the "
                "signature again (its request id makes it apply at most once)"
            )
        if view.result is not None:
            return view.result
        # 0 when another worker holds the lease: it applies the queue in order, ours included
        if drain(services, request.tenant, request.session_id) == 0:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise RunTimeout(
                    f"run {request.run_id} did not finish within {wait_s:.0f} s; it goes on "
                    f"(`tether wait {request.run_id}`); pass a larger wait_s=... to tether_run"
                )
            block_ms = max(1, int(min(1.0, remaining_s) * 1000))
            done = runs.read_done(position, block_ms, shard=shard)
            if done:
                position = done[-1][0]


@app.task(
    bind=True,
    base=CanvasRunTask,
    name=CANVAS_RUN_TASK,
    ignore_result=False,
    Strategy="tether.worker.strategy:guarded",
)
def tether_run(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Apply one run to its session (see the module docstring); its RunResult as a dict."""
    services = get_services()
    request = canvas_request(args, kwargs, self.request.id, services.settings)
    if "tenant" not in kwargs:
        # applied by a build before the applying process named its tenant: the worker's own
        # TETHER_TENANT would stand in for it, and run the input in another tenant's session
        raise InvalidInput(
            f"tether.canvas.run task {self.request.id} names no tenant; apply tether_run "
            "signatures with this version of Tether (it names the applying process's tenant)"
        )
    if services.settings.registered_runs_only:  # the caller registered it, or nobody may
        if not registered(services.runs, request.ref, request_id=request.request_id):
            raise RunLost(
                f"run {request.run_id}: no run of that id is registered for tenant "
                f"{request.tenant!r} (TETHER_REGISTERED_RUNS_ONLY); apply the signature "
                "from a process holding that tenant's credential"
            )
        refused = None
    else:
        refused = _submit(services.runs, request, services.settings.queue)
    result = refused or finish_own_run(services, request, _wait_s(kwargs, services.settings))
    return result.model_dump(mode="json")


@app.task(name=CANVAS_COLLECT_TASK, ignore_result=False)
def tether_collect(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate the results of a group of runs (a chord's body): counts by status, run ids,
    outputs and failures, in the group's order."""
    parsed = [RunResult.model_validate(r) for r in results]
    return {
        "count": len(parsed),
        "by_status": dict(collections.Counter(r.status.value for r in parsed)),
        "ok": all(r.ok for r in parsed),
        "run_ids": [r.run_id for r in parsed],
        "outputs": [r.output for r in parsed],
        "failed": [
            {"run_id": r.run_id, "error_type": r.error_type, "error": r.error_message}
            for r in parsed
            if not r.ok
        ],
    }


__all__ = ["CANVAS_COLLECT_TASK", "CANVAS_RUN_TASK", "tether_collect", "tether_run"]
