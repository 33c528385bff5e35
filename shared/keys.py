"""The one place that builds Redis key names: the whole key schema of Tether.

Every key starts with a namespace prefix (default ``tether``) so that deployments and tests can
share a Redis without seeing each other. The prefix is 1-64 characters from ``[A-Za-z0-9_-.]``
(no ``:``, so the prefix of any key is everything before its first ``:``).

Per-session keys carry the Redis Cluster hash tag ``{<tenant>/<session>}``: every key of one
session hashes to the same slot, so one Lua script may touch all of them. The separator is ``/``
and not ``:`` because ids may contain ``:`` (see :mod:`tether.ids`) and ``/`` is refused in ids;
``{a:b/c}`` and ``{a/b:c}`` are therefore always different sessions.

Redis Cluster is **not supported yet**: the hash tags keep one session's keys in one slot, but the
submit and finish scripts also touch run-scoped and namespace-wide keys (other slots), and the
namespace-wide ``done`` stream and ``active`` zset are single keys.

Per-session keys (``T`` = ``{<tenant>/<session>}``):

- ``<p>:T:events`` (stream): the live event log; entry fields ``seq``, ``fence`` and ``event``
  (the event JSON from :mod:`tether.persistence.codec`).
- ``<p>:T:meta`` (hash): stream meta, ``last_seq`` and ``last_fence`` of the last append.
- ``<p>:T:fence`` (string): the fencing-token counter, INCR-ed on every lease grant and read by
  the stream's append script.
- ``<p>:T:lease`` (string): ``"<owner>|<fence>"`` with a PX expiry (the lease).
- ``<p>:T:released`` (string): the fence of the last grant that was released (not expired); a
  grant whose predecessor expired instead is a *takeover* (see ``tether.runs.leases.base.Lease``).
- ``<p>:T:pending`` (list): queued requests waiting for the session.
- ``<p>:T:req:<request_id>``: the request-id index (dedup of client requests).
- ``<p>:T:kick`` (string): the sweeper's claim, one re-enqueue per lease TTL.
- ``<p>:T:archived`` (string): archive hint, the highest seq known archived.
- ``<p>:T:ckpt`` (hash): step checkpoints of the session's running attempts, field = run id.

Global keys (run-scoped ones carry the hash tag ``{<run_id>}`` so one run's keys share a slot; a
script that mixes session keys and run keys therefore needs a non-cluster Redis):

- ``<p>:run:{<run_id>}`` (hash): the run record.
- ``<p>:cancel:{<run_id>}`` (string): the cancel flag of a run.
- ``<p>:attempts:{<run_id>}`` (string): the attempt counter of a run.
- ``<p>:done`` (stream): the completion stream, one entry per finished run.
- ``<p>:active`` (zset): active sessions, member ``<tenant>/<session>``, score a timestamp.
- ``<p>:worker:{<worker_id>}`` (string): a worker's presence record (JSON, see
  :mod:`tether.runs.presence`), rewritten every heartbeat with a PX expiry of a few heartbeats.
- ``<p>:workers`` (zset): the presence index, member worker id, score its last heartbeat (ms).

Ids are validated with :mod:`tether.ids` before any name is built, so no id can inject a brace,
a separator or whitespace into a key.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from tether.errors import ConfigurationError
from tether.ids import validate_id, validate_tenant

DEFAULT_PREFIX = "tether"
_PREFIX_RE = re.compile(r"[A-Za-z0-9_\-.]{1,64}")


class SessionKeys(NamedTuple):
    """All fixed per-session keys of one session (same cluster slot)."""

    events: str
    meta: str
    fence: str
    lease: str
    pending: str


class RedisKeys:
    """Builds every Redis key of one namespace.

    Args:
        prefix: the namespace; 1-64 characters from ``[A-Za-z0-9_-.]``.

    Raises:
        ConfigurationError: the prefix is malformed.
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
            raise ConfigurationError(
                f"Redis key prefix {prefix!r} is not allowed; use 1-64 characters from "
                "[A-Za-z0-9_-.] (no ':', braces or spaces), e.g. 'tether' or 'tether-test'"
            )
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"RedisKeys(prefix={self.prefix!r})"

    # --- per session --------------------------------------------------------------------------

    def session_tag(self, tenant: str, session_id: str) -> str:
        """The hash tag ``{<tenant>/<session>}`` shared by all keys of a session."""
        validate_tenant(tenant)
        validate_id(session_id)
        return "{" + tenant + "/" + session_id + "}"

    def _session_key(self, tenant: str, session_id: str, suffix: str) -> str:
        return f"{self.prefix}:{self.session_tag(tenant, session_id)}:{suffix}"

    def events(self, tenant: str, session_id: str) -> str:
        """The session's event stream."""
        return self._session_key(tenant, session_id, "events")

    def stream_meta(self, tenant: str, session_id: str) -> str:
        """The stream meta hash (``last_seq``, ``last_fence``)."""
        return self._session_key(tenant, session_id, "meta")

    def fence(self, tenant: str, session_id: str) -> str:
        """The fencing-token counter (INCR-ed per lease grant)."""
        return self._session_key(tenant, session_id, "fence")

    def lease(self, tenant: str, session_id: str) -> str:
        """The lease key (``"<owner>|<fence>"`` with a TTL)."""
        return self._session_key(tenant, session_id, "lease")

    def released(self, tenant: str, session_id: str) -> str:
        """The fence of the session's last released (not expired) lease grant."""
        return self._session_key(tenant, session_id, "released")

    def pending(self, tenant: str, session_id: str) -> str:
        """The list of pending requests of the session."""
        return self._session_key(tenant, session_id, "pending")

    def request(self, tenant: str, session_id: str, request_id: str) -> str:
        """The request-id index entry ``req:<request_id>`` of the session."""
        validate_id(request_id, kind="request id")
        return self._session_key(tenant, session_id, f"req:{request_id}")

    def session(self, tenant: str, session_id: str) -> SessionKeys:
        """All fixed per-session keys at once."""
        return SessionKeys(
            events=self.events(tenant, session_id),
            meta=self.stream_meta(tenant, session_id),
            fence=self.fence(tenant, session_id),
            lease=self.lease(tenant, session_id),
            pending=self.pending(tenant, session_id),
        )

    @staticmethod
    def active_member(tenant: str, session_id: str) -> str:
        """The member naming a session in the ``active`` zset: ``<tenant>/<session>``."""
        return f"{validate_tenant(tenant)}/{validate_id(session_id)}"

    # --- global ------------------------------------------------------------------------------

    def run(self, run_id: str) -> str:
        """The run record hash of ``run_id``."""
        return f"{self.prefix}:run:{{{validate_id(run_id, kind='run id')}}}"

    def cancel(self, run_id: str) -> str:
        """The cancel flag of ``run_id``."""
        return f"{self.prefix}:cancel:{{{validate_id(run_id, kind='run id')}}}"

    def attempts(self, run_id: str) -> str:
        """The attempt counter of ``run_id``."""
        return f"{self.prefix}:attempts:{{{validate_id(run_id, kind='run id')}}}"

    def done(self) -> str:
        """The completion stream."""
        return f"{self.prefix}:done"

    def active(self) -> str:
        """The active-sessions zset."""
        return f"{self.prefix}:active"

    def worker(self, worker_id: str) -> str:
        """The presence record of one worker process group (see :mod:`tether.runs.presence`)."""
        return f"{self.prefix}:worker:{{{validate_id(worker_id, kind='worker id')}}}"

    def workers(self) -> str:
        """The presence index: worker ids scored by their last heartbeat (ms)."""
        return f"{self.prefix}:workers"

    def archived(self, tenant: str, session_id: str) -> str:
        """The archive hint: the highest sequence number known archived (an optimisation)."""
        return self._session_key(tenant, session_id, "archived")

    def checkpoints(self, tenant: str, session_id: str) -> str:
        """The step checkpoints of the session's runs (hash, field = run id)."""
        return self._session_key(tenant, session_id, "ckpt")

    def kick(self, tenant: str, session_id: str) -> str:
        """The sweeper's short-lived claim on re-enqueueing a session (SET NX PX)."""
        return self._session_key(tenant, session_id, "kick")
