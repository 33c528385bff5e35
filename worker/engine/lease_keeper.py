"""Keeps a session lease alive while a worker drains the session."""

from __future__ import annotations

import logging
import threading
import time

from tether.errors import TetherError
from tether.runs.leases.base import Lease, LeaseManager

log = logging.getLogger(__name__)


class LeaseKeeper:
    """A daemon thread renewing ``lease`` every third of its TTL.

    ``lost`` becomes True when a renewal is refused (someone else holds the lease now) or when
    renewals kept failing for a whole TTL; the run then stops at its next step boundary and
    commits nothing.
    """

    def __init__(self, leases: LeaseManager, lease: Lease, ttl_ms: int) -> None:
        self._leases = leases
        self.lease = lease
        self._ttl_ms = ttl_ms
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(
            target=self._loop, name=f"tether-lease-{lease.session_id}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        """Start renewing."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (does not release the lease)."""
        self._stop.set()
        self._thread.join(timeout=self._ttl_ms / 1000)

    def _loop(self) -> None:
        interval_s = self._ttl_ms / 3000
        last_ok = time.monotonic()
        while not self._stop.wait(interval_s):
            try:
                if not self._leases.renew(self.lease, self._ttl_ms):
                    log.warning("lease on %s/%s lost", self.lease.tenant, self.lease.session_id)
                    self.lost = True
                    return
                last_ok = time.monotonic()
            except TetherError as exc:
                if time.monotonic() - last_ok > self._ttl_ms / 1000:
                    log.warning("lease renewals failing for a whole TTL (%s); giving up", exc)
                    self.lost = True
                    return
