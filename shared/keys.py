"""The one place that builds Redis key names: the whole key schema of Tether.

Every key starts with a namespace prefix (default ``tether``) so that deployments and tests can
share a Redis without seeing each other. The prefix is 1-64 characters from ``[A-Za-z0-9_-.]``
(no ``:``, so the prefix of any key is everything before its first ``:``).

Per-session keys carry the Redis Cluster hash tag ``{<tenant>/<session>}``: every key of one
session hashes to the same slot, so one Lua script may touch all of them. The separator is ``/``
and not ``:`` because ids may contain ``:`` (see :mod:`tether.ids`) and ``/`` is refused in ids;
``{a:b/c}`` and ``{a/b:c}`` are therefore always different sessions.

Layout v2 (see ``docs/redis-key-layout-v2.md``): every key a Lua script touches is in one
session's slot, so Tether runs on Redis Cluster; every key of a tenant starts
``<p>:{<tenant>/`` (:meth:`RedisKeys.tenant_pattern`), so one ACL pattern scopes a tenant.

Per-session keys (``T`` = ``{<tenant>/<session>}``):

- ``<p>:T:events`` (stream): the live event log; entry fields ``seq``, ``fence`` and ``event``
  (the event JSON from :mod:`tether.persistence.codec`). With ``TETHER_STREAM_RETENTION_S`` it
  keeps that many seconds of events and expires when idle that long (``:meta`` stays). When a
  drain leaves the session idle, a worker rewrites a stream of at most 200 entries in place
  without the room Redis 7 keeps for appends (:meth:`RedisEventStream.compact`, same entries).
- ``<p>:T:deltas`` (stream): the live pieces of the model's answer while a worker streams it
  (ephemeral, never the durable log: see :mod:`tether.persistence.deltas`); entry fields ``r``
  run id, ``f`` the attempt's fence, ``s`` step, ``i`` the piece's index in its step, ``k`` kind
  (``t`` text, ``a`` tool arguments), ``c`` call index, ``t`` the text, and on a call's first
  piece ``id`` / ``n`` (call id, tool name). Every append trims it to about
  ``TETHER_DELTA_MAX_LEN`` entries (``XADD MAXLEN ~``) and sets it to expire
  ``TETHER_DELTA_TTL_S`` after the last one.
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
- ``<p>:T:waits`` (hash): parked calls, by call id (runs.waits); ``:signals``: the mailbox
  (stream); ``:family``: child runs and the parent link.
- ``<p>:T:grant:<task_id>`` (string, JSON, with a TTL): a chain's later step on this session,
  as the process that applied the chain granted it (see :mod:`tether.worker.canvas_grants`).
- ``<p>:T:head`` (string): the head cache, a compressed copy of the session's snapshot head
  left by its last lease holder (see :mod:`tether.persistence.headcache`), with a PX expiry.
- ``<p>:T:run:<run_id>`` (hash): the run record; ``:cancel:<run_id>`` its cancel flag;
  ``:attempts:<run_id>`` its attempt counter. In the session's slot, so the submit, begin,
  finish and cancel scripts touch one slot. The claim script learns the head run's id inside
  the script, so it is given the prefixes (:meth:`RedisKeys.run_prefix` and its siblings)
  instead of restating the names.

Per-tenant keys:

- ``<p>:{<tenant>/~runs:<k>}:<run_id>`` (string): the run-id index, run id to session id, so a
  bare run id (``tether wait RUN_ID``) finds its session; ``k`` spreads it over
  :data:`RUN_INDEX_SHARDS` slots. ``~`` is refused in ids, so this never names a session.
- ``<p>:{<tenant>/~batches}`` (zset): the tenant's batches a producer ran lately, member the
  batch id, score its record's last update (ms); ``<p>:{<tenant>/~batches}:<batch_id>``
  (string): that batch's progress record (JSON, see :mod:`tether.producer.ops.batch.boards`),
  rewritten at most once a second while it runs, expiring one result TTL after the last write.
- ``<p>:{<tenant>/~sched}`` (zset): the tenant's run schedules, member a schedule name, score
  its next tick (Unix s; ``+inf`` while paused); ``<p>:{<tenant>/~sched}:<name>`` (hash,
  fields ``definition`` and ``meta``, celery-redbeat's entry format, see
  :mod:`tether.producer.schedules.store`): one schedule. Under the tenant's pattern, so only
  its own credential (and the operator's) edits them; the beat finds the tenants that have
  schedules by scanning for :meth:`RedisKeys.schedule_owners`.

- ``<p>:{<tenant>/~queued:<n>}`` (zset, :data:`QUEUED_SHARDS` shards): the tenant's sessions
  with a run queued (member the session id, score when it was queued, ms), written by the
  tenant's producer at submit, read and cleared by workers (the sweeper finds a run whose
  message the broker lost there).

Per-tenant keys only workers write (the tenant's credential may read them):

- ``<p>:{~usage/<tenant>/<n>}:<YYYYMMDD>`` (hash: ``input``, ``output``, ``cached``,
  ``reasoning``, ``cost_nano``, ``runs``, ``unpriced``; :data:`USAGE_SHARDS` shards, a run in
  the shard of its run id): what the tenant's runs used that UTC day, the shards summed;
  ``:<YYYYMMDD>:runs`` (set) the run ids counted, so a run is counted once;
  ``:<YYYYMMDD>:inflight`` (hash) what the tenant's unfinished runs used so far that day, field
  a run id (value ``input,output,cached,reasoning,cost_nano,unpriced``, set at each step
  boundary) and, under ``~`` fields, their sums. One slot per shard (see
  :mod:`tether.runs.usage`), written beside the finish script, never inside it; layout v2 had
  one shard, ``<p>:{~usage/<tenant>}:<YYYYMMDD>``, no longer written.
  ``<p>:{~usage/<tenant>}:rate`` (string) its runs-per-minute GCRA state (one key: a rate is
  one counter, written only for a tenant with a ``runs_per_minute`` budget).

Namespace-wide keys (each in its own slot, written beside a script, never inside one):

No tenant's credential writes any namespace-wide key (docs/trust-model.md); workers do:

- ``<p>:{~done:<n>}`` (stream, :data:`DONE_SHARDS` shards): every completion, for observers
  (the console), in the shard of its session (:meth:`RedisKeys.done_shard_of`): no slot is
  written by every run. Readers of the whole feed merge the shards; a reader of one session's
  runs (a canvas wait) reads its one shard. Before layout v2.1 one stream ``<p>:{~done}`` held
  them all (no longer written or read: see docs/upgrading.md).
- ``<p>:{~p:<tenant>/<producer_id>:<n>}:done`` (stream, :data:`FEED_SHARDS` shards): the
  completions of one producer's runs, each with its result when small, in the shard of the
  run's session; the producer's listener reads every shard (before v2.1: one stream
  ``<p>:{~p:<tenant>/<producer_id>}:done``). Both feeds keep about one result TTL of entries.
- ``<p>:{~active:<n>}`` (zset, :data:`ACTIVE_SHARDS` shards): active sessions, member
  ``<tenant>/<session>``, score the last progress (ms), written by workers from their first
  claim of the session until its queue is empty; the sweeper reads every shard.
- ``<p>:{~tenants}`` (zset): the tenants workers have run for (:meth:`RedisKeys.tenants`).
- ``<p>:{~timers:<n>}`` (zset, :data:`TIMER_SHARDS` shards): parked calls the fleet wakes at a
  time, member ``<tenant>/<session>/<call id>``, score that time (ms; :mod:`tether.runs.waits`).
- ``<p>:{~workers}:<worker_id>`` (string): a worker's presence record (JSON, see
  :mod:`tether.runs.presence`), rewritten every heartbeat with a PX expiry of a few heartbeats.
- ``<p>:{~model:<name>}:budget`` (hash: ``tat_req``, ``tat_tok``), ``:inflight`` (zset, member a
  call's token, score its expiry in ms) and ``:pause`` (string, PX): one model's fleet-wide rate
  limit (see :mod:`tether.runs.limits`); ``:shares`` (hash: each tenant's virtual finish time,
  ``<tenant>@`` when its last call was admitted (ms), ``~v`` the system virtual time) and
  ``:waiting`` (zset, member ``<tenant> <token>``, score when the waiting call stops counting,
  ms): the tenants' fair share of it (:mod:`tether.runs.limits.shares`); one slot per model, so
  one script decides a call.
- ``<p>:{~waiting}`` (zset): runs waiting for a model's budget now (``tether status``).
- ``<p>:{~sched}::lock`` (string): the lock of the beat that fires the schedules now
  (celery-redbeat's, :meth:`RedisKeys.beat_prefix` is its key prefix). Before the schedules
  moved into their tenants' keyspaces (see *Per-tenant keys*), ``<p>:{~sched}:<name>`` and
  ``<p>:{~sched}::schedule`` held every tenant's schedules; ``tether schedule migrate`` moves
  such entries (:meth:`RedisKeys.legacy_schedules`).
- ``<p>:{~beats}:<beat_id>`` (string): a beat's presence record (JSON, see
  :mod:`tether.producer.schedules.presence`), rewritten every few seconds with a PX expiry;
  ``<p>:{~beats}`` (zset): beat ids scored by their last heartbeat (ms).
- ``<p>:{~webhooks}:d:<delivery id>`` (string, a delivery's JSON, with a TTL): a webhook
  delivery on its way, named by id in the ``tether.webhook`` task.
- ``<p>:{~webhooks}:dead`` (hash, field a delivery id, value its JSON) and
  ``<p>:{~webhooks}:dead:order`` (zset, delivery id scored by when it died): webhook deliveries
  that ran out of attempts, for ``tether webhooks dead | redeliver``.
- ``<p>:{~workers}`` (zset): the presence index, member worker id, score its last heartbeat
  (ms). One slot for all presence keys: listing workers is one MGET.

Ids are validated with :mod:`tether.ids` before any name is built, so no id can inject a brace,
a separator or whitespace into a key.
"""

from __future__ import annotations

import re
import zlib
from typing import NamedTuple

from tether.errors import ConfigurationError
from tether.ids import validate_id, validate_tenant
from tether.keys_fleet import FleetKeys
from tether.keys_schedules import ScheduleKeys

DEFAULT_PREFIX = "tether"
_PREFIX_RE = re.compile(r"[A-Za-z0-9_\-.]{1,64}")
#: Slots one tenant's run-id index is spread over.
RUN_INDEX_SHARDS = 16
#: Shards of the active-sessions index (each its own slot on a cluster).
ACTIVE_SHARDS = 64
#: Shards of each tenant's queued-sessions index (see :meth:`RedisKeys.tenant_queued`).
QUEUED_SHARDS = 32
#: Shards of the namespace's completion feed (each its own slot on a cluster).
DONE_SHARDS = 16
#: Shards of each producer's completion feed (its listener reads each with its own reader).
FEED_SHARDS = 8
#: Shards of each tenant's usage counters (see :meth:`RedisKeys.usage_shard`).
USAGE_SHARDS = 64
TIMER_SHARDS = 16  # of the timers index, each its own slot on a cluster


def usage_shard_of(run_id: str) -> int:
    """The shard of its tenant's usage a run is counted in (:meth:`RedisKeys.usage_shard`)."""
    return zlib.crc32(run_id.encode()) % USAGE_SHARDS


def session_shard(tenant: str, session_id: str, shards: int) -> int:
    """Which of ``shards`` shards a session's entries of a sharded structure go to (the same
    session always to the same shard, so its completions stay in order)."""
    return zlib.crc32(f"{tenant}/{session_id}".encode()) % shards


def _glob_escape(text: str) -> str:
    # ids allow none of these today; escaping keeps the pattern exact if that ever changes
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


class SessionKeys(NamedTuple):
    """All fixed per-session keys of one session (same cluster slot)."""

    events: str
    meta: str
    fence: str
    lease: str
    pending: str


class RedisKeys(FleetKeys, ScheduleKeys):
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

    def deltas(self, tenant: str, session_id: str) -> str:
        """The session's live delta channel (the model's answer in pieces, ephemeral)."""
        return self._session_key(tenant, session_id, "deltas")

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

    # --- runs (in their session's slot) --------------------------------------------------------

    def run_prefix(self, tenant: str, session_id: str) -> str:
        """What :meth:`run` puts before a run id: the claim script builds the head run's record
        key from it (the head's id is only known inside the script)."""
        return self._session_key(tenant, session_id, "run:")

    def cancel_prefix(self, tenant: str, session_id: str) -> str:
        """What :meth:`cancel` puts before a run id (see :meth:`run_prefix`)."""
        return self._session_key(tenant, session_id, "cancel:")

    def attempts_prefix(self, tenant: str, session_id: str) -> str:
        """What :meth:`attempts` puts before a run id (see :meth:`run_prefix`)."""
        return self._session_key(tenant, session_id, "attempts:")

    def run(self, tenant: str, session_id: str, run_id: str) -> str:
        """The run record hash of ``run_id`` (in its session's slot)."""
        return self.run_prefix(tenant, session_id) + validate_id(run_id, kind="run id")

    def cancel(self, tenant: str, session_id: str, run_id: str) -> str:
        """The cancel flag of ``run_id``."""
        return self.cancel_prefix(tenant, session_id) + validate_id(run_id, kind="run id")

    def attempts(self, tenant: str, session_id: str, run_id: str) -> str:
        """The attempt counter of ``run_id``."""
        return self.attempts_prefix(tenant, session_id) + validate_id(run_id, kind="run id")

    def run_index(self, tenant: str, run_id: str) -> str:
        """Where a bare run id of ``tenant`` finds its session: ``<p>:{<t>/~runs:<k>}:<run>``.

        ``~`` is refused in ids, so this tag never names a session; ``k`` spreads one tenant's
        index over :data:`RUN_INDEX_SHARDS` slots.
        """
        validate_tenant(tenant)
        validate_id(run_id, kind="run id")
        shard = zlib.crc32(run_id.encode()) % RUN_INDEX_SHARDS
        return f"{self.prefix}:{{{tenant}/~runs:{shard}}}:{run_id}"

    def tenant_usage(self, tenant: str, day: str) -> tuple[str, str, str]:
        """The keys of ``tenant``'s usage: the day's counters (hash), the run ids counted that
        day (set), and the runs-per-minute rate (string), in one slot.

        Outside the tenant's own pattern (``{~usage/<tenant>}``, not ``{<tenant>/...``): a
        tenant's credential may read them (:meth:`tenant_usage_pattern`) but never write them,
        so no tenant can reset its own budget; only workers count."""
        tag = self._usage_tag(tenant)
        if not (len(day) == 8 and day.isdigit()):
            raise ValueError(f"day {day!r} is not YYYYMMDD")
        return f"{tag}:{day}", f"{tag}:{day}:runs", f"{tag}:rate"

    def tenant_rate_taken(self, tenant: str, run_id: str) -> str:
        """The mark that run ``run_id`` took its place in ``tenant``'s per-minute rate (in the
        slot of :meth:`tenant_usage`): a retried attempt takes none again."""
        return f"{self._usage_tag(tenant)}:rated:{validate_id(run_id, kind='run id')}"

    def tenant_inflight(self, tenant: str, day: str) -> str:
        """What ``tenant``'s unfinished runs used so far in ``day`` (hash, field a run id): in
        the slot of :meth:`tenant_usage`, so one script moves a run from it into the day."""
        return self.tenant_usage(tenant, day)[0] + ":inflight"

    def usage_shard(self, tenant: str, day: str, shard: int) -> tuple[str, str, str]:
        """Shard ``shard`` (0 <= shard < :data:`USAGE_SHARDS`) of ``tenant``'s usage in
        ``day`` (layout v2.1): its counters (hash), its run ids counted (set) and its unfinished
        runs' in-flight record (hash), in one slot ``{~usage/<tenant>/<n>}`` (``/`` is refused
        in ids: no tenant's tag). A run is counted in the shard of its run id
        (:func:`usage_shard_of`); readers sum the shards. The day's keys of :meth:`tenant_usage`
        and :meth:`tenant_inflight` are layout v2's, no longer written; the rate stays there."""
        if not 0 <= shard < USAGE_SHARDS:
            raise ValueError(f"usage shard {shard} out of range 0..{USAGE_SHARDS - 1}")
        if not (len(day) == 8 and day.isdigit()):
            raise ValueError(f"day {day!r} is not YYYYMMDD")
        tag = f"{self.prefix}:{{~usage/{validate_tenant(tenant)}/{shard}}}"
        return f"{tag}:{day}", f"{tag}:{day}:runs", f"{tag}:{day}:inflight"

    def _usage_tag(self, tenant: str) -> str:
        return f"{self.prefix}:{{~usage/{validate_tenant(tenant)}}}"

    def tenant_usage_pattern(self, tenant: str) -> str:
        """An ACL glob matching every usage key of ``tenant`` (read-only for its credential):
        ``{~usage/<tenant>}`` (its rate) and every ``{~usage/<tenant>/<n>}`` shard."""
        validate_tenant(tenant)
        return f"{self.prefix}:{{~usage/{_glob_escape(tenant)}[}}/]*"

    def tenant_queued(self, tenant: str, session_id: str) -> str:
        """The shard of ``tenant``'s queued-sessions index holding ``session_id``: a zset in
        the tenant's own keyspace (member the session id, score when a run was queued, ms),
        where the tenant's producer announces a session it queued a run on. Workers read it
        (the recovery sweeper, for a run whose message was lost) and keep the namespace's
        active index themselves: no key a tenant writes is shared with another tenant."""
        validate_id(session_id)
        shard = zlib.crc32(session_id.encode()) % QUEUED_SHARDS
        return self.tenant_queued_shard(tenant, shard)

    def tenant_queued_shard(self, tenant: str, shard: int) -> str:
        """Shard ``shard`` (0 <= shard < :data:`QUEUED_SHARDS`) of ``tenant``'s queued index."""
        if not 0 <= shard < QUEUED_SHARDS:
            raise ValueError(f"queued shard {shard} out of range 0..{QUEUED_SHARDS - 1}")
        return f"{self.prefix}:{{{validate_tenant(tenant)}/~queued:{shard}}}"

    def tenants(self) -> str:
        """The tenants workers have run for (zset, member a tenant, score when a worker last
        noted it, ms): whose queued indexes the recovery sweeper reads. Workers only."""
        return f"{self.prefix}:{{~tenants}}"

    def tenant_acl_keys(self, tenant: str) -> list[str]:
        """The key rules of ``tenant``'s producer credential, as Redis ACL selectors
        (docs/trust-model.md): its own keyspace (sessions, runs, run-id index, queued index,
        batches), its producers' completion feeds, and its usage read-only. Nothing shared with
        another tenant, and nothing a budget is counted in, is writable."""
        return [
            f"~{self.tenant_pattern(tenant)}",
            f"~{self.prefix}:{{~p:{_glob_escape(validate_tenant(tenant))}/*",
            f"%R~{self.tenant_usage_pattern(tenant)}",
        ]

    def tenant_pattern(self, tenant: str) -> str:
        """A SCAN/ACL glob matching every key of ``tenant`` (sessions, runs, run index)."""
        validate_tenant(tenant)
        return f"{self.prefix}:{{{_glob_escape(tenant)}/*"

    # --- namespace-wide (sharded) ----------------------------------------------------------------

    def done(self, shard: int) -> str:
        """Shard ``shard`` (0 <= shard < :data:`DONE_SHARDS`) of the namespace's completion
        feed, for observers (the console); producers read their own :meth:`producer_done`
        instead. Each shard its own slot, written beside (never inside) a session script."""
        if not 0 <= shard < DONE_SHARDS:
            raise ValueError(f"done shard {shard} out of range 0..{DONE_SHARDS - 1}")
        return f"{self.prefix}:{{~done:{shard}}}"

    def legacy_done(self) -> str:
        """The one namespace completion stream of layout v2 (before the shards of v2.1)."""
        return f"{self.prefix}:{{~done}}"

    @staticmethod
    def feed(tenant: str, producer_id: str) -> str:
        """The name of producer ``producer_id``'s completion feed for ``tenant``'s runs."""
        return f"{validate_tenant(tenant)}/{validate_id(producer_id, kind='producer id')}"

    @staticmethod
    def feed_shards(feed: str | None) -> int:
        """How many shards completion feed ``feed`` has: a producer's (:meth:`feed`), or the
        namespace's (None)."""
        return DONE_SHARDS if feed is None else FEED_SHARDS

    @staticmethod
    def feed_shard_of(feed: str | None, tenant: str, session_id: str) -> int:
        """The shard of feed ``feed`` that the completions of a session's runs go to."""
        return session_shard(tenant, session_id, RedisKeys.feed_shards(feed))

    def feed_stream(self, feed: str | None, shard: int) -> str:
        """Shard ``shard`` of completion feed ``feed``: a producer's (:meth:`feed`), or the
        namespace's (None)."""
        return self.done(shard) if feed is None else self.producer_done(feed, shard)

    def producer_done(self, feed: str, shard: int) -> str:
        """Shard ``shard`` (0 <= shard < :data:`FEED_SHARDS`) of the completion stream of one
        producer (``feed`` from :meth:`feed`): only its runs, so its cost does not grow with
        other producers' traffic. Under the tenant's pattern ``<p>:{~p:<tenant>/*``, so an ACL
        can give a tenant its own feeds and no other's."""
        if not 0 <= shard < FEED_SHARDS:
            raise ValueError(f"feed shard {shard} out of range 0..{FEED_SHARDS - 1}")
        tenant, _, producer_id = feed.partition("/")
        return f"{self.prefix}:{{~p:{self.feed(tenant, producer_id)}:{shard}}}:done"

    def legacy_producer_done(self, feed: str) -> str:
        """One producer's one completion stream of layout v2 (before the shards of v2.1)."""
        tenant, _, producer_id = feed.partition("/")
        return f"{self.prefix}:{{~p:{self.feed(tenant, producer_id)}}}:done"

    def active(self, tenant: str, session_id: str) -> str:
        """The active-sessions zset shard holding ``<tenant>/<session>``."""
        member = self.active_member(tenant, session_id)
        return self.active_shard(zlib.crc32(member.encode()) % ACTIVE_SHARDS)

    def active_shard(self, shard: int) -> str:
        """Shard ``shard`` (0 <= shard < :data:`ACTIVE_SHARDS`) of the active-sessions index."""
        if not 0 <= shard < ACTIVE_SHARDS:
            raise ValueError(f"active shard {shard} out of range 0..{ACTIVE_SHARDS - 1}")
        return f"{self.prefix}:{{~active:{shard}}}"

    def active_shards(self) -> list[str]:
        """Every shard of the active-sessions index."""
        return [self.active_shard(n) for n in range(ACTIVE_SHARDS)]

    def batches(self, tenant: str) -> str:
        """The tenant's batch index: batch ids scored by their record's last update (ms)."""
        return f"{self.prefix}:{{{validate_tenant(tenant)}/~batches}}"

    def batch(self, tenant: str, batch_id: str) -> str:
        """The progress record of one batch of ``tenant`` (in its index's slot)."""
        return f"{self.batches(tenant)}:{validate_id(batch_id, kind='batch id')}"

    def archived(self, tenant: str, session_id: str) -> str:
        """The archive hint: the highest sequence number known archived (an optimisation)."""
        return self._session_key(tenant, session_id, "archived")

    def checkpoints(self, tenant: str, session_id: str) -> str:
        """The step checkpoints of the session's runs (hash, field = run id)."""
        return self._session_key(tenant, session_id, "ckpt")

    def session_waits(self, tenant: str, session_id: str, part: str = "waits") -> str:
        """Calls parked on the fleet (hash, by call id); ``signals``: the mailbox (a stream);
        ``family``: the child runs a parent may still wait on."""
        return self._session_key(tenant, session_id, part)

    def timers(self, tenant: str, session_id: str) -> str:
        """The shard of the timers index holding the session's parked calls."""
        member = self.active_member(tenant, session_id)
        return self.timer_shards()[zlib.crc32(member.encode()) % TIMER_SHARDS]

    def timer_shards(self) -> list[str]:  # every shard of the timers index
        return [f"{self.prefix}:{{~timers:{n}}}" for n in range(TIMER_SHARDS)]

    def canvas_grant(self, tenant: str, session_id: str, task_id: str) -> str:
        """The grant of a chain's later step ``task_id`` on this session, written by the process
        that applied the chain with its tenant's credential (see
        :mod:`tether.worker.canvas_grants`)."""
        return self._session_key(
            tenant, session_id, f"grant:{validate_id(task_id, kind='task id')}"
        )

    def head_cache(self, tenant: str, session_id: str) -> str:
        """The cached copy of the session's head (see :mod:`tether.persistence.headcache`)."""
        return self._session_key(tenant, session_id, "head")

    def kick(self, tenant: str, session_id: str) -> str:
        """The sweeper's short-lived claim on re-enqueueing a session (SET NX PX)."""
        return self._session_key(tenant, session_id, "kick")
