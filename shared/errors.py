"""One exception tree for all of Tether.

The tree is split by *who must act*, and retry policies read the class, never the message:

- :class:`UsageError`: the caller or the configuration is wrong. Never retried.
- :class:`ConflictError`: another writer won (stale version, lost lease, busy session). The
  attempt is abandoned; the caller may retry from fresh state.
- :class:`InfrastructureError`: a store, stream or broker failed transiently. Retried with backoff.
- :class:`AgentError`: the model, a tool or the run's own limits failed. Fails the run once.
- :class:`DataError`: persisted data is unreadable (corrupt, unknown version). Never retried.

Every message names the offending value and says how to fix it.
"""

from __future__ import annotations

from typing import ClassVar


class TetherError(Exception):
    """Base class of every error Tether raises on purpose."""

    retryable: ClassVar[bool] = False

    @property
    def error_type(self) -> str:
        """The class name, as recorded in results and ``ERROR`` events."""
        return type(self).__name__


# --- caller misuse and configuration -------------------------------------------------------


class UsageError(TetherError):
    """The caller passed something invalid or the configuration is wrong."""


class InvalidInput(UsageError):
    """A request, id or argument failed validation."""


class InvalidId(InvalidInput):
    """A tenant or session id is not in the allowed form."""


class ConfigurationError(UsageError):
    """A setting is missing or malformed."""


class PermissionDenied(ConfigurationError):
    """Redis refused a command to this credential: its ACL user may not run it, or may not
    touch that key (with per-tenant users: another tenant's; see docs/trust-model.md)."""


class SettingsError(ConfigurationError):
    """A ``TETHER_*`` setting (environment, ``.env`` or ``.tether/env``) is invalid or unknown.

    Raised once, by :func:`tether.settings.load_settings`, before any service is touched. The
    one-line message names each variable, its value with secrets masked, and the fix;
    ``variables`` lists the variables at fault.
    """

    def __init__(self, message: str, *, variables: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.variables = variables


class StoreNotConfigured(UsageError):
    """An operation needs a snapshot store but the agent has none."""


class SessionNotFound(UsageError):
    """No session with that id exists in the store."""


class RunNotFound(UsageError):
    """No run with that id exists for the caller's tenant (another tenant's run is "not found"
    too, so an id never reveals that it exists)."""


class SessionExists(UsageError):
    """A session with that id already exists (fork or create refused)."""


class UnknownAgent(UsageError):
    """A request names an agent that no registry knows."""


class ScheduleNotFound(UsageError):
    """No run schedule with that name exists."""


class ScheduleExists(UsageError):
    """A run schedule with that name already exists (``add`` refused; remove it first)."""


class AddressInUse(UsageError):
    """An address a command would listen on (``tether console --port``) is taken: pick another."""


class InvalidSignature(InvalidInput):
    """A webhook's signature or timestamp does not verify (receivers: refuse the delivery)."""


class InputTooLarge(InvalidInput):
    """A run input exceeds the configured size limit."""


# --- persisted data -------------------------------------------------------------------------


class DataError(TetherError):
    """Persisted data cannot be read."""


class UnsupportedSchemaVersion(DataError):
    """A snapshot or event carries a schema version this build does not know."""


class SnapshotCorrupt(DataError):
    """A stored snapshot failed its checksum or does not parse."""


# --- conflicts --------------------------------------------------------------------------------


class ConflictError(TetherError):
    """Another writer changed the state first."""


class VersionConflict(ConflictError):
    """A compare-and-set write saw a different version than expected; nothing was written."""


class FencedOut(ConflictError):
    """A writer's fencing token is older than the current lease holder's; nothing was written."""


class StreamGap(ConflictError):
    """An append would leave a hole in the live stream (it ends before the batch starts);
    nothing was written. ``last_seq`` is where the stream ends."""

    def __init__(self, message: str, *, last_seq: int = 0) -> None:
        super().__init__(message)
        self.last_seq = last_seq


class RunHandedBack(ConflictError):
    """The worker is shutting down: the run stopped at a step boundary after its checkpoint,
    uncommitted, for another worker to resume."""


class SessionBusy(ConflictError):
    """The session is running another request and the busy policy is ``reject``."""


# --- infrastructure ---------------------------------------------------------------------------


class InfrastructureError(TetherError):
    """A backing service failed in a way that may pass."""

    retryable: ClassVar[bool] = True


class StoreUnavailable(InfrastructureError):
    """The snapshot store or event archive could not be reached."""


class StreamUnavailable(InfrastructureError):
    """The event stream (Redis) could not be reached."""


class BrokerUnavailable(InfrastructureError):
    """The Celery broker (``TETHER_BROKER_URL``) could not be reached."""


class RunLost(InfrastructureError):
    """A run's record vanished from Redis (restarted without persistence, or expired).

    Whether the run was applied is recorded in the session head; submitting it again with the
    same request id applies it at most once.
    """


# --- agent and model ---------------------------------------------------------------------------


class AgentError(TetherError):
    """The agent run itself failed."""


class ModelError(AgentError):
    """The model client failed or returned something unusable.

    Attributes:
        status: the HTTP status the provider answered (None: no answer, or not an HTTP error).
        request_id: the provider's id of the request (``x-request-id``), to quote to its support.
        excerpt: a short excerpt of what the provider answered, secrets scrubbed ("" if none).
        retry_after_s: how long the provider asked to wait (``Retry-After`` / ``retry-after-ms``
            of a 429 or 503), None when it did not say; a fleet-wide model limit pauses the
            model for everyone that long.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        excerpt: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.request_id = request_id
        self.excerpt = excerpt
        self.retry_after_s = retry_after_s


class ToolError(AgentError):
    """A tool definition is invalid (tool *calls* that fail become tool results instead)."""


class RunTimeout(AgentError):
    """The run exceeded its wall-clock timeout."""


class TokenBudgetExceeded(AgentError):
    """The run used more tokens than its budget allows."""


class RunCancelled(AgentError):
    """The run was cancelled; nothing of it was committed."""


class RunInterrupted(RunCancelled):
    """The run was stopped at a step boundary for a newer run (``on_busy='interrupt'``); the
    steps it finished are kept."""


class RetriesExhausted(AgentError):
    """A run was attempted the maximum number of times and never committed."""


class BudgetExceeded(TetherError):
    """A tenant reached its budget (``TETHER_TENANT_BUDGETS``: tokens or USD per day, runs per
    minute): a submission is refused, or a run ends after the step it was in, keeping its
    finished steps. Never retried: wait for the reset or raise the budget."""


class ReplayDiverged(AgentError):
    """A replayed run asked for something its recording does not hold (a model request unlike
    the recorded one, a step past the recording's end): the replay stops there and reports the
    first divergence (see :mod:`tether.runtime.replay`)."""


def error_from_record(error_type: str, message: str) -> TetherError:
    """Rebuild an exception from a recorded ``(error_type, message)`` pair.

    Used by handles to raise the same class a worker recorded; unknown names fall back to
    :class:`TetherError` so a newer worker never crashes an older client.
    """
    cls = _BY_NAME.get(error_type, TetherError)
    return cls(message)


def _all_subclasses(cls: type[TetherError]) -> list[type[TetherError]]:
    out: list[type[TetherError]] = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out


_BY_NAME: dict[str, type[TetherError]] = {c.__name__: c for c in _all_subclasses(TetherError)}
