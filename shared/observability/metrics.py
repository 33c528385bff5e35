"""Every Prometheus metric of Tether, defined once, and the one-line calls that record them.

Recorded where things happen: :func:`run_finished` at a run's ``finish`` step,
:func:`attempt_aborted` when an attempt is abandoned, :func:`lease_granted` when a drain takes
a session's lease, :func:`session_recovered` when the sweeper wakes a session. Queue depth is
not recorded here: it is read from Redis at scrape time (:mod:`tether.observability.queue_depth`).

In a Celery prefork worker each pool process records into its own files under
``PROMETHEUS_MULTIPROC_DIR`` (set before the worker starts: ``tether worker --metrics-port``
does it), and the main process serves their sum (:mod:`tether.observability.exposition`).
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import Counter, Histogram

from tether.core.events import Usage
from tether.errors import ConflictError

#: Runs last from milliseconds (an echo) to hours (a long tool-using run).
RUN_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
QUEUE_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

RUNS_FINISHED = Counter(
    "tether_runs_finished",
    "Runs finished, by final status (a run finished again after a crash may count twice).",
    ["status"],
)
RUN_DURATION = Histogram(
    "tether_run_duration_seconds",
    "Wall time of executed runs, from the agent loop's start to its end (commit excluded).",
    buckets=RUN_SECONDS_BUCKETS,
)
QUEUE_WAIT = Histogram(
    "tether_queue_wait_seconds",
    "Time executed runs waited from submission to the start of the attempt that finished them.",
    buckets=QUEUE_SECONDS_BUCKETS,
)
COMMIT_CONFLICTS = Counter(
    "tether_commit_conflicts",
    "Attempts abandoned because the lease, the stream fence or the head's compare-and-set "
    "refused them (the run is retried), by error class.",
    ["error"],
)
LEASE_TAKEOVERS = Counter(
    "tether_lease_takeovers",
    "Session leases granted after the previous grant expired unreleased (a dead or frozen worker).",
)
RECOVERIES = Counter(
    "tether_recoveries",
    "Sessions the crash-recovery sweeper woke (a lease expired with runs queued).",
)


class FinishedRun(Protocol):
    """What :func:`run_finished` reads of a run result."""

    @property
    def status(self) -> str: ...
    @property
    def duplicate(self) -> bool: ...
    @property
    def worker(self) -> str | None: ...
    @property
    def run_ms(self) -> int: ...
    @property
    def queue_ms(self) -> int: ...


def run_finished(result: FinishedRun) -> None:
    """Count a finished run; time it when this worker executed it (not a duplicate, not a run
    that ended before it started)."""
    RUNS_FINISHED.labels(status=str(result.status)).inc()
    if result.worker is not None and not result.duplicate:
        RUN_DURATION.observe(result.run_ms / 1000)
        QUEUE_WAIT.observe(result.queue_ms / 1000)


def attempt_aborted(exc: BaseException) -> None:
    """Count an abandoned attempt when a conflict (not an infrastructure failure) ended it."""
    if isinstance(exc, ConflictError):
        COMMIT_CONFLICTS.labels(error=type(exc).__name__).inc()


MODEL_BUDGET_WAITS = Counter(
    "tether_model_budget_waits",
    "Model calls that had to wait for their model's fleet-wide budget, by why.",
    ["reason"],
)


def model_budget_wait(reason: str) -> None:
    """A model call began to wait for its budget (``paused``, ``concurrency``, ``requests``,
    ``tokens``)."""
    MODEL_BUDGET_WAITS.labels(reason=reason).inc()


WAITS_PARKED = Counter(
    "tether_waits_parked",
    "Tool calls parked on the fleet (a run ended WAITING without a worker), by what they wait "
    "for (timer, signal, children).",
    ["reason"],
)
WAITS_WOKEN = Counter(
    "tether_waits_woken",
    "Parked calls whose wake a sweeper or a waker submitted (once per call), by reason.",
    ["reason"],
)


def wait_parked(reason: str) -> None:
    """A call was parked on the fleet waiting for ``reason`` (``timer``, ``signal``...)."""
    WAITS_PARKED.labels(reason=reason).inc()


def wait_woken(reason: str) -> None:
    """The wake of a call parked for ``reason`` was submitted."""
    WAITS_WOKEN.labels(reason=reason).inc()


def lease_granted(takeover: bool) -> None:
    """Count a lease taken over from an expired holder."""
    if takeover:
        LEASE_TAKEOVERS.inc()


def session_recovered() -> None:
    """Count a session woken by the crash-recovery sweeper."""
    RECOVERIES.inc()


DELTAS_PUBLISHED = Counter(
    "tether_deltas_published", "Pieces of streamed model answers published to delta channels."
)
DELTA_PUBLISH_FAILURES = Counter(
    "tether_delta_publish_failures",
    "Pieces of streamed model answers dropped because publishing them failed (runs go on).",
)
DELTA_FLUSH_TIMEOUTS = Counter(
    "tether_delta_flush_timeouts",
    "Steps whose streamed pieces were not all published when the step's model call ended.",
)


def deltas_published(count: int) -> None:
    """Count pieces a worker published."""
    DELTAS_PUBLISHED.inc(count)


def delta_publish_failed(count: int) -> None:
    """Count pieces dropped by a failed publish."""
    DELTA_PUBLISH_FAILURES.inc(count)


def delta_flush_timed_out() -> None:
    """Count a step that went on before its pieces were all out."""
    DELTA_FLUSH_TIMEOUTS.inc()


MODEL_TOKENS = Counter(
    "tether_model_tokens",
    "Tokens of committed model calls, by model, kind (input, output, cached, reasoning: cached "
    "are part of input, reasoning part of output) and tenant; counted once per run, after its "
    "commit.",
    ["model", "kind", "tenant"],
)
MODEL_COST = Counter(
    "tether_model_cost_usd",
    "Cost in USD of committed model calls at TETHER_MODEL_PRICES, by model and tenant (models "
    "without a price are not counted).",
    ["model", "tenant"],
)


def model_usage(model: str, tenant: str, usage: Usage, cost_usd: float | None) -> None:
    """Count the tokens (and cost, when priced) of a committed run's model calls."""
    for kind, tokens in (
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cached", usage.cached_tokens),
        ("reasoning", usage.reasoning_tokens),
    ):
        MODEL_TOKENS.labels(model=model, kind=kind, tenant=tenant).inc(tokens)
    if cost_usd is not None:
        MODEL_COST.labels(model=model, tenant=tenant).inc(cost_usd)


MESSAGES_REFUSED = Counter(
    "tether_messages_refused",
    "Run messages a worker refused without writing anything, by why (``unregistered``: no run "
    "of that id was registered by its tenant, with TETHER_REGISTERED_RUNS_ONLY).",
    ["reason"],
)


def message_refused(reason: str) -> None:
    """Count a run message refused before anything was written."""
    MESSAGES_REFUSED.labels(reason=reason).inc()


RUNS_DEFERRED = Counter(
    "tether_runs_deferred",
    "Runs a worker put back in their queue before starting them, by why (their tenant's "
    "runs_per_minute: the rate is taken when a run starts, whatever its producer checked; "
    "model_share: another tenant is owed the next turn of the run's model).",
    ["reason"],
)


def run_deferred(reason: str) -> None:
    """Count a run put back in its queue, unstarted, until it may start."""
    RUNS_DEFERRED.labels(reason=reason).inc()


#: An MCP call takes from a millisecond (a warm stdio server) to minutes (a slow tool).
MCP_CALL_SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
MCP_CALLS = Histogram(
    "tether_mcp_call_seconds",
    "MCP tool calls by server, tool and status (ok, error: the tool's own error, refused: not "
    "allowed for the tenant, timeout, lost: the connection ended, unavailable, too_large, "
    "malformed, protocol), with their latency.",
    ["server", "tool", "status"],
    buckets=MCP_CALL_SECONDS_BUCKETS,
)
MCP_CONNECTIONS = Counter(
    "tether_mcp_connections_opened",
    "Connections to MCP servers opened by this process's pool, by server (more than one per "
    "process: restarts after a crash or a failed health check).",
    ["server"],
)


def mcp_call(server: str, tool: str, status: str, seconds: float) -> None:
    """Count and time one MCP tool call."""
    MCP_CALLS.labels(server=server, tool=tool, status=status).observe(seconds)


def mcp_connection_opened(server: str) -> None:
    """Count a connection opened to ``server``."""
    MCP_CONNECTIONS.labels(server=server).inc()
