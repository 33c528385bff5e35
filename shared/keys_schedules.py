"""The keys of tenants' run schedules: :class:`ScheduleKeys`, the part of
:class:`~tether.keys.RedisKeys` the beat and ``tether schedule`` use. Each tenant's schedules
live in a slot of its own that only its credential (and the operator's) can write."""

from __future__ import annotations

from tether.ids import is_valid_id, validate_id, validate_tenant


class ScheduleKeys:
    """The schedule keys of one namespace (``prefix``, checked by ``RedisKeys``)."""

    prefix: str

    def schedules(self, tenant: str) -> str:
        """The run schedules of ``tenant``: a zset of schedule names scored by their next tick
        (Unix s). Its own slot per tenant, with every entry (:meth:`schedule`)."""
        return f"{self.prefix}:{{{validate_tenant(tenant)}/~sched}}"

    def schedule(self, tenant: str, name: str) -> str:
        """One run schedule of ``tenant`` (hash: ``definition``, ``meta``), in the slot of
        :meth:`schedules`."""
        return f"{self.schedules(tenant)}:{validate_id(name, kind='schedule name')}"

    def schedule_owners(self) -> str:
        """A SCAN glob matching the :meth:`schedules` zset of every tenant (and nothing else a
        tenant can name: see :meth:`schedule_owner`)."""
        return f"{self.prefix}:{{*/~sched}}"

    def schedule_owner(self, key: str) -> str | None:
        """The tenant whose :meth:`schedules` zset ``key`` is, or None when ``key`` is no such
        zset. A tenant can write only keys starting ``<p>:{<tenant>/``, so a key it made to
        match :meth:`schedule_owners` names that tenant or no valid one."""
        head, tail = f"{self.prefix}:{{", "/~sched}"
        if not (key.startswith(head) and key.endswith(tail)):
            return None
        tenant = key[len(head) : -len(tail)]
        return tenant if is_valid_id(tenant) else None
