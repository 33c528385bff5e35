"""The submit/complete loop of one batch invocation (see :mod:`tether.producer.ops.batch`)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tether.core.results import RunStatus
from tether.errors import InfrastructureError, RunLost, UsageError
from tether.producer.client import Producer, RunSpec
from tether.producer.handle import RunHandle
from tether.producer.ops.batch.cases import BatchCase, NumberedCase
from tether.producer.ops.batch.grading import grade
from tether.producer.ops.batch.ids import case_request_id, case_session_id
from tether.producer.ops.batch.options import BatchOptions
from tether.producer.ops.batch.progress import BatchProgress
from tether.producer.ops.batch.results import CaseResult, ResultsFile
from tether.producer.ops.batch.summary import SummaryStats
from tether.runs.contract import RunRef, RunResult

#: Back-off between attempts to submit while Redis or the broker is unreachable.
SUBMIT_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
#: How often a case's run reported lost is submitted again before the case fails.
MAX_LOST_RESUBMITS = 3
#: Most requests submitted in one round trip.
SUBMIT_CHUNK = 500
#: How often the loop wakes up without a completion.
IDLE_WAKE_S = 0.25


@dataclass
class _CaseRun:
    """A case in flight: its turn and what its finished turns produced."""

    numbered: NumberedCase
    session_id: str
    agent: str
    started: float
    turn: int = 0
    outputs: list[str | None] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    lost: int = 0

    @property
    def case(self) -> BatchCase:
        return self.numbered.case


class BatchRunner:
    """The submit/complete loop of one batch invocation.

    Args:
        producer: the producer to submit with.
        options: checked options (:meth:`BatchOptions.checked`): agent, tenant, concurrency.
        batch_id: the batch id, given or derived.
        results: the open results file; finished cases are appended to it.
        stats: the running statistics, fed with every finished case.
        progress: the progress bar.
    """

    def __init__(
        self,
        producer: Producer,
        options: BatchOptions,
        *,
        batch_id: str,
        results: ResultsFile,
        stats: SummaryStats,
        progress: BatchProgress,
    ) -> None:
        self.producer = producer
        self.batch_id = batch_id
        self.default_agent = options.agent
        self.tenant = options.tenant
        self.concurrency = options.concurrency
        self.results = results
        self.stats = stats
        self.progress = progress
        self.completions: queue.SimpleQueue[tuple[_CaseRun, RunResult]] = queue.SimpleQueue()
        self.in_flight = 0
        self.max_in_flight = 0
        self.runs = 0

    def run(self, cases: Iterator[NumberedCase]) -> None:
        """Submit every case not in the results file, keeping at most ``concurrency`` in flight.

        Each pass starts cases into free slots, submits every turn that is due in one round trip
        (:meth:`Producer.submit_many`), then waits for completions and processes all that came.
        """
        todo = (c for c in cases if not self.results.holds(c.case.id))
        exhausted = False
        due: list[_CaseRun] = []
        while True:
            while not exhausted and self.in_flight < self.concurrency:
                numbered = next(todo, None)
                if numbered is None:
                    exhausted = True
                else:
                    due.append(self._start(numbered))
            for start in range(0, len(due), SUBMIT_CHUNK):
                self._submit(due[start : start + SUBMIT_CHUNK])
            due = []
            if exhausted and self.in_flight == 0:
                return
            try:
                state, result = self.completions.get(timeout=IDLE_WAKE_S)
            except queue.Empty:
                continue
            while True:
                self._turn_done(state, result, due)
                try:
                    state, result = self.completions.get_nowait()
                except queue.Empty:
                    break

    # --- submitting ----------------------------------------------------------------------------

    def _start(self, numbered: NumberedCase) -> _CaseRun:
        case = numbered.case
        agent = case.agent or self.default_agent
        assert agent is not None  # validated by parse_case_line
        state = _CaseRun(numbered, case_session_id(self.batch_id, case), agent, time.monotonic())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return state

    def _spec(self, state: _CaseRun) -> RunSpec:
        case, turn = state.case, state.turn
        return RunSpec(
            session_id=state.session_id,
            input=case.turns[turn],
            agent=state.agent,
            tenant=self.tenant,
            request_id=case_request_id(self.batch_id, case, turn),
            metadata={"batch_id": self.batch_id, "case_id": case.id, "turn": turn},
        )

    def _submit(self, states: list[_CaseRun]) -> None:
        """Submit the current turn of each case; a request the producer refuses fails its case."""
        if not states:
            return
        try:
            handles = self._submit_with_retry([self._spec(s) for s in states])
        except UsageError as exc:
            if len(states) > 1:  # find the refused one(s); the others go through
                for state in states:
                    self._submit([state])
            else:
                self._finish(states[0], None, error=(exc.error_type, str(exc)))
            return
        for state, handle in zip(states, handles, strict=True):
            if not state.run_ids or state.run_ids[-1] != handle.run_id:
                state.run_ids.append(handle.run_id)
            ref = _ref_of(handle)
            self.producer.listener_for(ref.tenant).register(ref, self._enqueue_for(state))

    def _enqueue_for(self, state: _CaseRun) -> Callable[[RunResult], None]:
        """The completion callback of a turn: runs on the listener thread, so it only enqueues."""
        completions = self.completions

        def enqueue(result: RunResult) -> None:
            completions.put((state, result))

        return enqueue

    def _submit_with_retry(self, specs: list[RunSpec]) -> list[RunHandle]:
        for pause_s in (*SUBMIT_BACKOFF_S, None):
            try:
                return self.producer.submit_many(specs)
            except InfrastructureError:
                # idempotent by request id, so a retry after an unclear failure is safe
                if pause_s is None:
                    raise
                time.sleep(pause_s)
        raise AssertionError("unreachable")

    # --- completing ----------------------------------------------------------------------------

    def _turn_done(self, state: _CaseRun, result: RunResult, due: list[_CaseRun]) -> None:
        self.runs += 1
        self.progress.run_done()
        if result.error_type == RunLost.__name__ and state.lost < MAX_LOST_RESUBMITS:
            state.lost += 1  # same request id: applied at most once, whatever happened to it
            due.append(state)
            return
        state.outputs.append(result.output)
        state.steps += result.steps
        state.tokens += result.usage.total_tokens
        if result.cost_usd is not None:
            state.cost_usd = (state.cost_usd or 0.0) + result.cost_usd
        if result.ok and state.turn + 1 < len(state.case.turns):
            state.turn += 1
            due.append(state)
            return
        error = None
        if result.error_type is not None:
            error = (result.error_type, result.error_message or "")
        self._finish(state, result, error=error)

    def _finish(
        self, state: _CaseRun, result: RunResult | None, *, error: tuple[str, str] | None
    ) -> None:
        case = state.case
        status = result.status.value if result is not None else RunStatus.FAILED.value
        output = result.output if result is not None else None
        passed = None
        if case.expected is not None:
            ok = result is not None and result.ok
            passed = ok and grade(case.grader, case.expected, output)
        message = None
        if error is not None:
            message = error[1]
            if len(case.turns) > 1:
                message = f"turn {state.turn} of {len(case.turns)}: {message}"
        record = CaseResult(
            batch_id=self.batch_id,
            id=case.id,
            line=state.numbered.line,
            session_id=state.session_id,
            agent=state.agent,
            status=status,
            output=output,
            outputs=state.outputs if len(case.turns) > 1 else None,
            passed=passed,
            grader=case.grader.value if case.expected is not None else None,
            latency_ms=int((time.monotonic() - state.started) * 1000),
            steps=state.steps,
            tokens=state.tokens,
            cost_usd=state.cost_usd,
            turns=len(state.outputs),
            error_type=error[0] if error else None,
            error=message,
            run_ids=state.run_ids,
            metadata=case.metadata or None,
        )
        self.results.append(record)
        self.stats.add(record)
        self.in_flight -= 1
        self.progress.case_done(failed=status in ("FAILED", "CANCELLED"))


__all__ = ["BatchRunner"]


def _ref_of(handle: RunHandle) -> RunRef:
    """Where a submitted run lives (a handle from a submit knows its session and tenant)."""
    return RunRef(handle.tenant or "", handle.session_id or "", handle.run_id)
