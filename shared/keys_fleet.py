"""The fleet's namespace-wide keys (presence, beats, webhooks, one model's budget, the runs
waiting now): :class:`FleetKeys`, the part of :class:`~tether.keys.RedisKeys` that names no
tenant's or session's key. Every name is documented in the schema of :mod:`tether.keys`; none
is written by every run (a heartbeat or a beat every few seconds, a webhook or a wait when one
happens)."""

from __future__ import annotations

from tether.ids import validate_id, validate_model_name


class FleetKeys:
    """The namespace-wide keys of one namespace (``prefix``, checked by ``RedisKeys``)."""

    prefix: str

    def model_budget(self, model: str) -> tuple[str, str, str]:
        """The keys of one model's fleet-wide budget: its GCRA state (hash), its calls in
        flight (zset) and its pause after a 429 (string), in one slot."""
        tag = f"{self.prefix}:{{~model:{validate_model_name(model)}}}"
        return f"{tag}:budget", f"{tag}:inflight", f"{tag}:pause"

    def model_shares(self, model: str) -> tuple[str, str]:
        """The keys of the tenants' fair share of one model's budget, in its budget's slot:
        the tenants' virtual finish times (hash) and the calls waiting (zset)."""
        tag = f"{self.prefix}:{{~model:{validate_model_name(model)}}}"
        return f"{tag}:shares", f"{tag}:waiting"

    def waiting(self) -> str:
        """The runs waiting for something (a model's budget) now: a zset, member
        ``<tenant>/<session>/<run_id>``, score when it began to wait (ms); what each waits for
        is its record's ``waiting`` field."""
        return f"{self.prefix}:{{~waiting}}"

    def worker(self, worker_id: str) -> str:
        """The presence record of one worker process group (see :mod:`tether.runs.presence`);
        every presence key shares one slot, so listing workers is one MGET on a cluster too
        (a heartbeat every few seconds per worker is no hot spot)."""
        return f"{self.prefix}:{{~workers}}:{validate_id(worker_id, kind='worker id')}"

    def workers(self) -> str:
        """The presence index: worker ids scored by their last heartbeat (ms)."""
        return f"{self.prefix}:{{~workers}}"

    def beat_prefix(self) -> str:
        """The beat's celery-redbeat key prefix: its lock is ``<p>:{~sched}::lock``."""
        return f"{self.prefix}:{{~sched}}:"

    def legacy_schedules(self) -> str:
        """Where every tenant's schedules were before they moved into the tenants' keyspaces: a
        zset of entry keys ``<p>:{~sched}:<name>`` (read only by ``tether schedule
        migrate`` and the beat's warning)."""
        return f"{self.beat_prefix()}:schedule"

    def beat(self, beat_id: str) -> str:
        """The presence record of one beat process (see
        :mod:`tether.producer.schedules.presence`)."""
        return f"{self.beats()}:{validate_id(beat_id, kind='beat id')}"

    def beats(self) -> str:
        """The beats' presence index: beat ids scored by their last heartbeat (ms)."""
        return f"{self.prefix}:{{~beats}}"

    def webhook_pending(self, delivery_id: str) -> str:
        """A webhook delivery on its way (its JSON, with its attempts so far), named by id in
        the ``tether.webhook`` task (see :mod:`tether.runs.webhooks.pending`)."""
        return f"{self.prefix}:{{~webhooks}}:d:{delivery_id}"

    def webhooks_dead(self) -> tuple[str, str]:
        """The webhook dead letters: a hash (delivery id to its JSON) and a zset (delivery id
        scored by when it died, ms), in one slot."""
        tag = f"{self.prefix}:{{~webhooks}}:dead"
        return tag, f"{tag}:order"
