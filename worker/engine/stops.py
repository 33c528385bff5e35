"""The agent loop's stop check for one run: lost lease, lost stream or checkpoint, a stop asked
for, a warm shutdown that hands the run back at a checkpoint, or the tenant's budget spent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tether.errors import RunHandedBack, RunInterrupted
from tether.runs.contract import RunRequest
from tether.runs.queue.base import StopMode
from tether.worker.engine.drain_state import DrainState
from tether.worker.engine.resume import Checkpointer


@dataclass
class RunStops:
    """The loop's cancel check for one run: stop when the lease, the stream or a checkpoint
    was lost, or when someone asked (an interrupt raises, to keep the finished steps)."""

    d: DrainState
    request: RunRequest
    checkpointer: Checkpointer | None
    asked: bool = False
    """The stop flag was read moments ago (by the claim): the first boundary skips the read."""
    spend: Callable[[], None] | None = None
    """The tenant's budget check (:class:`~tether.worker.engine.spend.SpendCheck`): raises
    ``BudgetExceeded``, which ends the run here keeping its finished steps."""

    def lost(self) -> bool:
        d, checkpointer = self.d, self.checkpointer
        return (
            d.keeper.lost
            or d.publisher.failed is not None
            or (checkpointer is not None and checkpointer.failed is not None)
        )

    def __call__(self) -> bool:
        if self.lost():
            return True
        request = self.request
        services = self.d.services
        checkpointer = self.checkpointer
        if checkpointer is not None and services.draining():
            checkpointer.write_pending()
        if checkpointer is not None and checkpointer.saved and services.draining():
            # at a step boundary right after a checkpoint: another worker resumes from here
            raise RunHandedBack(
                f"run {request.run_id} handed back: worker {services.worker_id} is shutting down"
            )
        if self.spend is not None:
            self.spend()
        if self.asked:
            self.asked = False
            return False
        mode = services.runs.stop_mode(request.ref)
        if mode is StopMode.INTERRUPT:
            raise RunInterrupted(
                f"run {request.run_id} was interrupted at a step boundary for a newer run of "
                f"{request.tenant}/{request.session_id} (on_busy='interrupt')"
            )
        return mode is not None
