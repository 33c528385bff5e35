"""Step checkpoints in process memory, fenced by an in-memory lease manager (tests)."""

from __future__ import annotations

import threading

from tether.errors import FencedOut
from tether.ids import validate_id, validate_tenant
from tether.runs.leases.base import LeaseManager
from tether.worker.engine.checkpoints.base import Checkpoint


class InMemoryCheckpointStore:
    """:class:`~tether.worker.engine.checkpoints.base.CheckpointStore` in a dict."""

    def __init__(self, leases: LeaseManager) -> None:
        self._leases = leases
        self._saved: dict[tuple[str, str, str], Checkpoint] = {}
        self._lock = threading.Lock()

    def save(self, tenant: str, session_id: str, checkpoint: Checkpoint) -> None:
        """Record the checkpoint unless a newer lease was granted."""
        key = _key(tenant, session_id, checkpoint.run_id)
        with self._lock:
            current = self._leases.current_fence(tenant, session_id)
            if checkpoint.fence < current:
                raise fenced_out(tenant, session_id, checkpoint.fence, current)
            self._saved[key] = checkpoint

    def load(self, tenant: str, session_id: str, run_id: str) -> Checkpoint | None:
        """The run's newest checkpoint."""
        with self._lock:
            return self._saved.get(_key(tenant, session_id, run_id))

    def clear(self, tenant: str, session_id: str, run_id: str) -> None:
        """Forget the run's checkpoint."""
        with self._lock:
            self._saved.pop(_key(tenant, session_id, run_id), None)


def fenced_out(tenant: str, session_id: str, fence: int, current: int) -> FencedOut:
    """The error for a checkpoint of an attempt whose lease was taken over."""
    return FencedOut(
        f"checkpoint of {tenant}/{session_id} with fence {fence} refused: the session's current "
        f"fence is {current}, so another worker took the run over; abandon this attempt"
    )


def _key(tenant: str, session_id: str, run_id: str) -> tuple[str, str, str]:
    return validate_tenant(tenant), validate_id(session_id), validate_id(run_id, kind="run id")
