"""Celery tasks: ``tether.run`` (a run request) and ``tether.drain`` (a session's queue).

Both are safe to deliver more than once: ``tether.run`` registers its request idempotently (by
request id) before draining, and a drain of a session whose lease is held, or whose queue is
empty, does nothing. With ``TETHER_REGISTERED_RUNS_ONLY`` ``tether.run`` registers nothing: it
drains the session only when its tenant registered the run (:mod:`tether.worker.engine.admission`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from typing import Any

from celery.signals import (
    after_setup_logger,
    task_postrun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from tether.core.results import RunStatus
from tether.errors import InvalidInput, SessionBusy, TetherError, UnknownAgent
from tether.ids import validate_id, validate_tenant
from tether.runs.contract import (
    DRAIN_TASK,
    RUN_TASK,
    RunRef,
    RunRequest,
    RunResult,
    describe_drain,
    parse_wire,
    wake_ref,
)
from tether.runs.queue.base import SubmitOutcome, SubmitState, preempt_for
from tether.worker.app import app
from tether.worker.engine.admission import MALFORMED, UNREGISTERED, refuse, refuse_unregistered
from tether.worker.engine.claim import Carried
from tether.worker.engine.cycle import claim_session, drain, drain_claimed
from tether.worker.engine.services import EngineServices, build_services
from tether.worker.guardian import guard_for_this_process, start_guardian

log = logging.getLogger(__name__)


def _reject(services: EngineServices, request: RunRequest, exc: TetherError) -> dict[str, Any]:
    result = RunResult.failure(request, RunStatus.FAILED, exc.error_type, str(exc))
    if not services.runs.record_rejected(result, reply_to=request.reply_to):
        log.warning(
            "run %s rejected (%s) but not recorded: that run id already has a record",
            request.run_id,
            exc.error_type,
        )
        return {"run_id": request.run_id, "state": "dropped", "error": exc.error_type}
    log.warning("run %s rejected: %s", request.run_id, exc)
    return {"run_id": request.run_id, "state": "rejected", "error": exc.error_type}


def _salvage_ids(doc: Any) -> RunRequest | None:
    """Enough of an invalid request to record its failure under its run id, if possible."""
    if isinstance(doc, str):  # the request's JSON text: its ids may still be readable
        try:
            doc = json.loads(doc)
        except (ValueError, RecursionError):
            return None
    if not isinstance(doc, dict):
        return None
    try:
        return RunRequest(
            run_id=doc.get("run_id"),
            request_id=doc.get("request_id") or doc.get("run_id"),
            tenant=doc.get("tenant") or "default",
            session_id=doc.get("session_id"),
            agent="invalid",
            input=None,
        )
    except Exception:
        return None


@app.task(name=RUN_TASK, bind=True, ignore_result=True, Strategy="tether.worker.strategy:guarded")
def run_task(self: Any, request: Any = None) -> dict[str, Any]:
    """Register one run request (idempotently) and drain its session.

    ``request`` is validated here, once: the claim reuses it when the registered copy in Redis
    holds the same text, and runs the registered copy otherwise (see
    :mod:`tether.runs.contract`).
    """
    services = get_services()
    if services.settings.registered_runs_only:
        return _wake(services, request)
    try:
        wire = parse_wire(request)
        wire.request.check_input_size(services.settings.max_input_bytes)
    except InvalidInput as exc:
        return _malformed(services, request, exc)
    req = wire.request
    refused = _orphan_wake_up(services, req) or _unknown_agent(services, req)
    if refused is not None:
        return refused
    carried = Carried(req, services.settings.queue, wire.text)
    claim = claim_session(services, req.tenant, req.session_id, carried=carried)
    # acted on before the drain runs anything: a preemption must reach the run the claim just
    # began, and a busy refusal must not wait for the session's other runs
    reply = {} if claim.submitted is None else _registration(services, req, claim.submitted)
    return {**reply, "processed": drain_claimed(services, claim)}


def _wake(services: EngineServices, message: Any) -> dict[str, Any]:
    """A run message as a wake-up (TETHER_REGISTERED_RUNS_ONLY): only its ids are read, and
    the drain runs what the tenant registered, and only that; the claim checks the
    registration in its own round trip."""
    try:
        ref = wake_ref(message)
    except InvalidInput as exc:
        return _malformed(services, message, exc)
    claim = claim_session(services, ref.tenant, ref.session_id, expect=ref.run_id)
    if claim.unregistered:
        refuse_unregistered(ref)
        return {"run_id": ref.run_id, "state": "refused", "error": UNREGISTERED}
    return {"processed": drain_claimed(services, claim)}


def _malformed(services: EngineServices, message: Any, exc: InvalidInput) -> dict[str, Any]:
    """A run message that is no valid request: recorded as failed under its ids when they can
    be read, else dropped (refused, unrecorded, with ``TETHER_REGISTERED_RUNS_ONLY``)."""
    if services.settings.registered_runs_only:  # recording it would write for an unproven tenant
        refuse(MALFORMED, f"refused malformed run message: {exc}")
        return {"state": "refused", "error": exc.error_type}
    salvaged = _salvage_ids(message)
    if salvaged is None:
        log.error("dropping malformed run message (no usable ids): %s", exc)
        return {"state": "dropped", "error": exc.error_type}
    return _reject(services, salvaged, exc)


def _orphan_wake_up(services: EngineServices, req: RunRequest) -> dict[str, Any] | None:
    """The refusal of a wake-up a registered-only producer sent (ids only) whose record is
    gone: registering it here would run an empty request in place of the one its producer
    registered. Checked only for messages without input (one read): producers register every
    run."""
    if req.input is not None or req.resolutions or services.runs.get(req.ref) is not None:
        return None
    refuse(
        UNREGISTERED,
        f"refused run message {req.run_id} for tenant {req.tenant!r}, session "
        f"{req.session_id!r}: it carries no input and no run of that id is registered (a "
        "registered-only producer's wake-up whose record is gone); nothing was run. Set "
        "TETHER_REGISTERED_RUNS_ONLY on the workers too, and submit the run again",
    )
    return {"run_id": req.run_id, "state": "refused", "error": UNREGISTERED}


def _unknown_agent(services: EngineServices, req: RunRequest) -> dict[str, Any] | None:
    """The rejection of a run for an agent this worker does not know that nobody registered.

    A registered one is left to the drain, which fails it in queue order, at once (or hands
    the session to the queue that knows the agent); refusing it here would leave it queued
    until the sweeper's backlog patience ran out."""
    try:
        services.registry.get(req.agent)
    except UnknownAgent as exc:
        if services.runs.get(req.ref) is None:
            return _reject(services, req, exc)
    return None


def _registration(
    services: EngineServices, req: RunRequest, outcome: SubmitOutcome
) -> dict[str, Any]:
    """The reply for how the claim registered the carried request; whatever became of it, the
    session's queue is drained (a refused message refuses nothing else)."""
    reply: dict[str, Any] = {"run_id": outcome.run_id, "state": outcome.state.value}
    if outcome.state is SubmitState.TAKEN:
        log.warning("dropping run message %s: that run id belongs to another request", req.run_id)
        reply.update(run_id=req.run_id, state="dropped")
    elif outcome.state is SubmitState.QUEUED:  # sent without a producer registering it
        preempt_for(services.runs, req)
    elif outcome.state is SubmitState.BUSY:
        busy = SessionBusy(
            f"session {req.tenant}/{req.session_id} is busy and run {req.run_id} asked to "
            "be rejected then (on_busy='reject'); retry later or use on_busy='enqueue'"
        )
        reply.update(_reject(services, req, busy))
    return reply


@app.task(name=DRAIN_TASK, ignore_result=True, Strategy="tether.worker.strategy:guarded")
def drain_task(tenant: Any = None, session_id: Any = None) -> dict[str, Any]:
    """Apply a session's queued runs (sent by the sweeper and by long drains handing over)."""
    try:
        validate_tenant(tenant)
        validate_id(session_id)
    except InvalidInput as exc:
        log.error("dropping malformed drain message: %s", exc)
        return {"state": "dropped"}
    return {"processed": drain(get_services(), tenant, session_id)}


def enqueue_drain(tenant: str, session_id: str) -> None:
    """Send a drain task for the session to the queue serving its next run.

    Runs remember the queue they were submitted to (workers of different queues may know
    different agents), so a sweeper or a hand-over never sends a session to workers that
    cannot run its next request; without a record, this worker's own queue.
    """
    services = get_services()
    queue = services.settings.queue
    head = services.runs.head(tenant, session_id)
    view = services.runs.get(RunRef(tenant, session_id, head)) if head is not None else None
    if view is not None and view.queue:
        queue = view.queue
    app.send_task(
        DRAIN_TASK,
        kwargs={"tenant": tenant, "session_id": session_id},
        queue=queue,
        kwargsrepr=describe_drain(tenant, session_id, head),
    )


def enqueue_drains(sessions: Sequence[tuple[str, str]], queue: str) -> None:
    """Send a drain task for each session to ``queue`` (runs just registered there, by this
    worker: their queue is known), on one connection, pipelined."""
    with app.producer_or_acquire() as publisher:
        batch = getattr(publisher, "batch", None)
        # kombu >= 5.7 pipelines a batch's pushes into one round trip
        with batch() if batch is not None and len(sessions) > 1 else contextlib.nullcontext():
            for tenant, session_id in sessions:
                app.send_task(
                    DRAIN_TASK,
                    kwargs={"tenant": tenant, "session_id": session_id},
                    queue=queue,
                    kwargsrepr=describe_drain(tenant, session_id, None),
                    producer=publisher,
                )


#: This process's engine services (see :func:`get_services`), and the process that built them.
_services: EngineServices | None = None
_services_pid: int | None = None
_services_lock = threading.Lock()


def get_services() -> EngineServices:
    """This process's engine services: built on first use, rebuilt in a forked pool child
    (children must not share the parent's sockets), so importing this module opens no
    connection."""
    global _services, _services_pid
    with _services_lock:
        if _services is None or _services_pid != os.getpid():
            services = build_services(enqueue_drain)
            services.wake_many = enqueue_drains
            services.draining = _is_draining
            services.guard = guard_for_this_process()
            services.on_finished = _webhook_notifier(services.settings)
            _services, _services_pid = services, os.getpid()
            gc.freeze()  # the services live as long as the process: see _freeze_heap
        return _services


def _webhook_notifier(settings: Any) -> Any:
    """The engine's ``on_finished``: a run's webhook, queued once its result is committed."""
    from tether.worker.webhooks import notify_finished

    return lambda request, result: notify_finished(settings, request, result)


_sweeper: Any = None

#: What a worker logs at every start with ``TETHER_REGISTERED_RUNS_ONLY=false``.
TRUSTING_WARNING = (
    "TETHER_REGISTERED_RUNS_ONLY is false: this worker registers and runs whatever run, "
    "approval or canvas task a broker message names, so any process that can publish to the "
    "broker can act for any tenant (write its sessions' memory, approve its pending calls). "
    "Unset it (the default is true) unless every producer of this deployment is trusted"
)


@after_setup_logger.connect
@worker_process_init.connect
def _redact_logs(**_: Any) -> None:
    """Mask the configured secrets, and URLs' credentials, in every log line of the worker and
    its pool children."""
    from tether.observability.url_masking import install_url_masking
    from tether.runtime.redaction import install_log_redaction, settings_redactor
    from tether.settings import load_settings

    install_url_masking(root_handlers=True)
    try:
        install_log_redaction(settings_redactor(load_settings()))
    except TetherError as exc:
        log.error("log redaction not installed: %s", exc)


# Set by the main process when a warm shutdown starts, read by the pool children (created here,
# before the pool forks them, so they share it): a run with step checkpoints is handed back at
# its next step boundary instead of holding the shutdown until it ends (or being killed).
_draining: Any = None


@worker_init.connect
@worker_ready.connect
def _collect_and_freeze(**_: Any) -> None:
    """Move the main process's heap (imports, app, settings) out of the collector's reach,
    before it forks pool children.

    A full collection scans every tracked object: in a pool child that is the whole inherited
    heap (hundreds of thousands of objects, ~100 ms), paid by whichever run triggers it: the
    slowest 1% of P1's runs were such pauses. Frozen objects are never scanned again; being
    frozen before the fork, they are not written to either, so the children keep sharing their
    pages (copy-on-write) instead of each touching its own copy. Collecting first leaves no
    garbage frozen with them.
    """
    gc.collect()
    gc.freeze()


@worker_process_init.connect
def _freeze_heap(**_: Any) -> None:
    """Freeze what a pool child holds at birth (and, in :func:`get_services`, its services):
    long-lived objects that no collection would free, whose rescans were the runs' tail."""
    gc.freeze()


_warm_pid: int | None = None


@task_postrun.connect
def _freeze_after_first_task(**_: Any) -> None:
    """Freeze, once per process, what its first task loaded on first use: botocore's S3
    service model alone is ~36,000 containers (OrderedDicts, lists), and left unfrozen it made
    every later full collection of a pool child cost 8-18 ms idle, 40-75 ms beside other load,
    inside whichever run it hit. After the first task a child's heap barely grows (measured
    over 800 runs: a few hundred objects), so one freeze is enough."""
    global _warm_pid
    if _warm_pid != os.getpid():
        _warm_pid = os.getpid()
        gc.collect()  # the first task's garbage, so none of it is frozen for good
        gc.freeze()


@worker_init.connect
def _make_drain_flag(**_: Any) -> None:
    global _draining
    _draining = multiprocessing.get_context("fork").Event()


@worker_shutting_down.connect
def _start_draining(**_: Any) -> None:
    if _draining is not None:
        _draining.set()


def _is_draining() -> bool:
    return _draining is not None and bool(_draining.is_set())


@worker_ready.connect
def _warn_when_trusting(**_: Any) -> None:
    """Say at every start that this worker acts on any message's word, when it does."""
    from tether.settings import load_settings

    try:
        trusting = not load_settings().registered_runs_only
    except TetherError:
        return  # the settings' own error is reported where the worker reads them
    if trusting:
        log.warning(TRUSTING_WARNING)


@worker_ready.connect
def _start_guardian(**_: Any) -> None:
    start_guardian(get_services)


@worker_ready.connect
def _start_sweeper(**_: Any) -> None:
    global _sweeper
    from tether.worker.fork_safety import warm_main_process
    from tether.worker.sweeper import Sweeper

    try:
        services = get_services()
        warm_main_process(services)  # before the threads: see tether.worker.fork_safety
        _sweeper = Sweeper(services).start()
    except TetherError as exc:
        log.error("sweeper not started: %s", exc)


@worker_process_shutdown.connect
@worker_shutdown.connect
def _close_mcp(**_: Any) -> None:
    """Close this process's MCP connections (their stdio servers exit) on warm shutdown."""
    import sys

    if "tether.integrations.mcp.pool" in sys.modules:  # else none was opened: import nothing
        from tether.integrations.mcp.pool import close_process_pool

        close_process_pool()


@worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    if _sweeper is not None:
        _sweeper.stop()


_metrics: Any = None


@worker_init.connect
def _serve_metrics(sender: Any = None, **_: Any) -> None:
    """Serve ``/metrics`` from the main process when ``TETHER_METRICS_PORT`` is set."""
    global _metrics
    from tether.observability.worker_metrics import start_worker_metrics
    from tether.runs.fleet import fleet_collector
    from tether.settings import load_settings

    try:
        prefork = "prefork" in str(getattr(sender, "pool_cls", "")).lower()
        settings = load_settings()
        fleet = [fleet_collector(settings)] if settings.metrics_port is not None else []
        _metrics = start_worker_metrics(settings, prefork=prefork, collectors=fleet)
    except TetherError as exc:
        log.error("metrics not served: %s", exc)


@worker_shutdown.connect
def _stop_metrics(**_: Any) -> None:
    from tether.observability.worker_metrics import remove_owned_multiprocess_dir

    if _metrics is not None:
        _metrics.close()
    remove_owned_multiprocess_dir()
