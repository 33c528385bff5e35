"""Re-run a recorded run from one of its steps on a fork (``tether rerun``).

:func:`rerun` forks the run's session at the boundary before step K (right after the ``STEP_END``
of step K-1: the fork holds everything before the run and the run's steps 0..K-1 exactly as
recorded), marks the fork with a :class:`~tether.runs.rerun.RerunMark`, and enqueues a run on it
with the original request's agent, input and options. The worker that takes the run goes on at
step K from the recorded steps (``tether.worker.engine.resume.rerun_point``): no model call and no
tool call of steps 0..K-1 happens again. The source session is not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.core.events import EventType
from tether.errors import InvalidInput, UsageError
from tether.ids import new_id, validate_id
from tether.persistence.reader import SessionLogReader
from tether.producer.client import Producer
from tether.producer.handle import RunHandle
from tether.producer.ops.replay import find_run
from tether.runs.rerun import RERUN_ATTRIBUTE, RerunMark
from tether.runtime.replay_recording import RecordedRun

if TYPE_CHECKING:
    from tether.runs.contract import RunRequest


@dataclass(frozen=True)
class Rerun:
    """A rerun under way: its fork, where the fork was cut, and the run's handle."""

    session_id: str
    at_seq: int
    mark: RerunMark
    handle: RunHandle


def boundary_before(recorded: RecordedRun, from_step: int) -> int:
    """The sequence number of the last event of step ``from_step - 1`` (its ``STEP_END``).

    Raises:
        InvalidInput: ``from_step`` is not a step the run can go on from (1 to its last step).
    """
    last = recorded.last_step
    if isinstance(from_step, bool) or not isinstance(from_step, int) or not 1 <= from_step <= last:
        allowed = f"1 to {last}" if last >= 1 else "none: it ended in its first step (step 0)"
        raise InvalidInput(
            f"--from-step {from_step!r} is out of range for run {recorded.run_id!r}, whose steps "
            f"are 0 to {last}: steps it can go on from are {allowed} (to run it whole again, "
            "submit its input)"
        )
    ends = [
        e.seq for e in recorded.events if e.type is EventType.STEP_END and e.step == from_step - 1
    ]
    if not ends:
        raise InvalidInput(
            f"run {recorded.run_id!r}: step {from_step - 1} has no recorded end, so the run "
            f"cannot go on from step {from_step}; pick an earlier step"
        )
    return ends[-1]


def rerun(
    producer: Producer,
    reader: SessionLogReader,
    run_id: str,
    *,
    from_step: int,
    new_session_id: str | None = None,
    tenant: str | None = None,
) -> Rerun:
    """Fork run ``run_id``'s session before step ``from_step`` and go on from there on a worker.

    Everything is checked before anything is written: the run and its events, the step, the new
    session id (which must not exist).

    Raises:
        RunNotFound: the run or its events cannot be found, or its record (naming its agent and
            options) expired.
        InvalidInput: ``from_step`` out of range, a malformed new session id.
        SessionExists: ``new_session_id`` exists.
    """
    scope = tenant or producer.settings.tenant
    found = find_run(reader, run_id, tenant=scope, producer=producer)
    request = found.request
    if request is None:
        raise UsageError(
            f"run {run_id!r}: its record (its agent and options) expired; a rerun needs them"
        )
    at_seq = boundary_before(found.recorded, from_step)
    target = validate_id(new_session_id) if new_session_id is not None else new_id("s")
    mark = RerunMark(
        source_session_id=request.session_id,
        source_run_id=run_id,
        from_step=from_step,
        request_id=new_id("rerun"),
    )
    reader.fork(
        request.session_id,
        target,
        tenant=scope,
        at_seq=at_seq,
        attributes={RERUN_ATTRIBUTE: mark.model_dump(mode="json")},
    )
    return Rerun(target, at_seq, mark, _continue(producer, request, target, scope, mark))


def _continue(
    producer: Producer, request: RunRequest, target: str, tenant: str, mark: RerunMark
) -> RunHandle:
    """Submit the recorded run's input again, on the fork, as the run it recorded (agent,
    metadata, timeout, durability), under the mark's request id."""
    return producer.run_async(
        target,
        request.input,
        agent=request.agent,
        tenant=tenant,
        request_id=mark.request_id,
        metadata=request.metadata,
        timeout_s=request.timeout_s,
        durability=request.durability,
    )
