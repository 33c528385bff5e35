"""Keeps session leases alive while a worker drains the sessions: one renewal thread per process.

Each drain registers a :class:`LeaseKeeper` with the process's :class:`LeaseRenewer`, whose one
daemon thread renews every registered lease each third of its TTL. A thread per drain cost a
thread start and a join per run on the run's own path (the join woke the keeper and waited for
it to exit); a registration is a dict insert under a lock.

Fork-safe: a forked child (a Celery pool child) starts with no renewer (``os.register_at_fork``)
and builds its own on first use, so it never renews its parent's leases nor waits on a thread
that fork did not copy.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from tether.runs.leases.base import Lease, LeaseManager

log = logging.getLogger(__name__)


class LeaseKeeper:
    """One lease kept alive by the process's renewer, from :meth:`start` until :meth:`stop`.

    ``lost`` becomes True when a renewal is refused (someone else holds the lease now) or when
    renewals kept failing for a whole TTL; the run then stops at its next step boundary and
    commits nothing.

    Args:
        leases: the lease manager that granted ``lease``.
        lease: the lease to keep.
        ttl_ms: the TTL each renewal sets; renewals come every third of it.
        renewer: the renewer to register with (default: this process's, :func:`renewer`).
    """

    def __init__(
        self,
        leases: LeaseManager,
        lease: Lease,
        ttl_ms: int,
        *,
        renewer: LeaseRenewer | None = None,
    ) -> None:
        self.leases = leases
        self.lease = lease
        self.ttl_ms = ttl_ms
        self.lost = False
        self._renewer = renewer
        #: When the renewer renews it next, and when a renewal last succeeded (monotonic s).
        self.next_due_s = 0.0
        self.last_ok_s = 0.0

    @property
    def interval_s(self) -> float:
        return self.ttl_ms / 3000

    def start(self) -> LeaseKeeper:
        """Start renewing (the first renewal a third of the TTL from now)."""
        if self._renewer is None:
            self._renewer = renewer()
        self._renewer.add(self)
        return self

    def stop(self) -> None:
        """Stop renewing (does not release the lease); never waits for a thread."""
        if self._renewer is not None:
            self._renewer.remove(self)


class LeaseRenewer:
    """Renews every registered :class:`LeaseKeeper` from one daemon thread (started on the first
    registration).

    Renewals are sequential: a slow renewal (Redis stalling) delays the next lease's by as long,
    which a TTL three renewal intervals long absorbs, as it absorbed one keeper's own stall.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._keepers: dict[int, LeaseKeeper] = {}
        self._thread: threading.Thread | None = None
        self.renewals = 0

    def add(self, keeper: LeaseKeeper) -> None:
        now = time.monotonic()
        keeper.next_due_s, keeper.last_ok_s = now + keeper.interval_s, now
        with self._cond:
            self._keepers[id(keeper)] = keeper
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="tether-lease-renewer", daemon=True
                )
                self._thread.start()
            self._cond.notify()  # it may be sleeping until a later lease's renewal

    def remove(self, keeper: LeaseKeeper) -> None:
        with self._cond:
            self._keepers.pop(id(keeper), None)

    def holds(self, keeper: LeaseKeeper) -> bool:
        """Whether ``keeper`` is still renewed."""
        with self._cond:
            return self._keepers.get(id(keeper)) is keeper

    def __len__(self) -> int:
        with self._cond:
            return len(self._keepers)

    def _loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [k for k in self._keepers.values() if k.next_due_s <= now]
                if not due:
                    wake = min((k.next_due_s for k in self._keepers.values()), default=None)
                    self._cond.wait(None if wake is None else wake - now)
                    continue
            for keeper in due:  # outside the lock: a registration never waits for Redis
                self._renew(keeper)

    def _renew(self, keeper: LeaseKeeper) -> None:
        lease = keeper.lease
        try:
            ok = keeper.leases.renew(lease, keeper.ttl_ms)
        except Exception as exc:  # one lease's failure must not end the thread the others need
            now = time.monotonic()
            if now - keeper.last_ok_s > keeper.ttl_ms / 1000:
                self._lose(keeper, f"renewals failing for a whole TTL ({exc}); giving up")
            else:
                keeper.next_due_s = now + keeper.interval_s
            return
        if not ok:
            self._lose(keeper, "lost")
            return
        self.renewals += 1
        now = time.monotonic()
        keeper.last_ok_s, keeper.next_due_s = now, now + keeper.interval_s

    def _lose(self, keeper: LeaseKeeper, why: str) -> None:
        keeper.lost = True
        with self._cond:
            held = self._keepers.pop(id(keeper), None) is keeper
        if held:  # a lease stopped (and released) meanwhile is no news
            log.warning("lease on %s/%s %s", keeper.lease.tenant, keeper.lease.session_id, why)


_renewer: LeaseRenewer | None = None
_renewer_lock = threading.Lock()


def renewer() -> LeaseRenewer:
    """This process's renewer (built on first use)."""
    global _renewer
    with _renewer_lock:
        if _renewer is None:
            _renewer = LeaseRenewer()
        return _renewer


def _forget_after_fork() -> None:
    # the child has the parent's renewer without its thread, and the parent's leases: it must
    # neither renew those nor wait for a thread that is not there; a lock held by a parent
    # thread at the fork would stay held forever, so it is replaced too
    global _renewer, _renewer_lock
    _renewer, _renewer_lock = None, threading.Lock()


# at import, like the stdlib's own fork hooks (logging, random): a fork can come at any time
os.register_at_fork(after_in_child=_forget_after_fork)
