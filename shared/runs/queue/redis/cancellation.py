"""Stopping runs on Redis (the :class:`~tether.runs.queue.base.Cancellation` role): a cancel
flag beside the run's record, read at every step boundary."""

from __future__ import annotations

from tether.persistence.redis_conn import translate_errors
from tether.runs.contract import RunRef
from tether.runs.queue.base import CancelOutcome, StopMode
from tether.runs.queue.record import RunField, RunState
from tether.runs.queue.redis._common import CANCEL, cancel_call, text
from tether.runs.queue.redis._part import RedisQueuePart


class RedisCancellation(RedisQueuePart):
    """Ask runs to stop, and tell a running one how it was asked."""

    def request_cancel(self, ref: RunRef) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        keys, argv = cancel_call(self.keys, ref, self.result_ttl_s)
        with translate_errors(self._where):
            outcome = self._script(CANCEL)(keys=keys, args=argv)
        return CancelOutcome(text(outcome))

    def cancel_requested(self, ref: RunRef) -> bool:
        """True when someone asked the run to stop."""
        return self.stop_mode(ref) is not None

    def stop_mode(self, ref: RunRef) -> StopMode | None:
        """How the run was asked to stop, or None."""
        with translate_errors(self._where):
            raw = self.client.get(self.keys.cancel(*ref))
        if raw is None:
            return None
        # 0.1 wrote '1' for a cancel
        return StopMode.INTERRUPT if raw == b"interrupt" else StopMode.CANCEL

    def preempt(self, tenant: str, session_id: str, run_id: str, mode: StopMode) -> str | None:
        """Ask the session's running run (not ``run_id``) to stop in ``mode``."""
        k = self.keys
        with translate_errors(self._where):
            raw = self.client.lindex(k.pending(tenant, session_id), 0)
            head = text(raw) if raw is not None else None
            if head is None or head == run_id:
                return None
            running = RunState.RUNNING.value.encode()
            if self.client.hget(k.run(tenant, session_id, head), RunField.STATUS) != running:
                return None
            # NX: an interrupt never softens a cancel already asked for
            self.client.set(
                k.cancel(tenant, session_id, head), mode.value, nx=True, ex=self.result_ttl_s
            )
        return head
