"""The submit/complete loop of one batch invocation (see :mod:`tether.producer.ops.batch`)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tether.errors import InfrastructureError, RunLost, UsageError
from tether.producer.client import Producer
from tether.producer.handle import RunHandle
from tether.producer.ops.batch.cases import BatchCase, NumberedCase
from tether.producer.ops.batch.ids import case_request_id, case_session_id
from tether.producer.ops.batch.options import BatchOptions
from tether.producer.ops.batch.progress import BatchProgress
from tether.producer.ops.batch.records import CaseOutcome, EventsLoader, build_record
from tether.producer.ops.batch.results import CaseResult, ResultsFile
from tether.producer.ops.batch.scoring.base import Scorer
from tether.producer.ops.batch.summary import SummaryStats
from tether.producer.submission import RunSpec
from tether.runs.contract import RunRef, RunResult

#: Back-off between attempts to submit while Redis or the broker is unreachable.
SUBMIT_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
#: How often a case's run reported lost is submitted again before the case fails.
MAX_LOST_RESUBMITS = 3
#: Most requests submitted in one round trip.
SUBMIT_CHUNK = 500
#: How often the loop wakes up without a completion.
IDLE_WAKE_S = 0.25
#: Threads that run slow scorers (a judge's model calls, custom code) beside the loop.
MAX_SCORING_THREADS = 8


@dataclass(frozen=True)
class Unit:
    """One run of a case: its epoch, and its retry attempt (0: the first run)."""

    numbered: NumberedCase
    epoch: int = 0
    attempt: int = 0


@dataclass(frozen=True)
class _Scored:
    """A case scored on a scoring thread: its results line, or what went wrong building it."""

    record: CaseResult | None
    failure: BaseException | None = None


@dataclass
class _CaseRun(CaseOutcome):
    """A case (epoch) in flight: its turn and what its finished turns produced."""

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
        scorers: the batch's scorers (``--scorer``); a case's own grader is added to them.
        events: reads a finished case's events, for scorers that ask.
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
        scorers: list[Scorer] | None = None,
        events: EventsLoader | None = None,
    ) -> None:
        self.producer = producer
        # lines are masked as the producer masks a run's input (TETHER_REDACT_INPUTS)
        self.redact = producer.settings.redact_inputs
        self.scorers = scorers or []
        self.events = events
        self.batch_id = batch_id
        self.default_agent = options.agent
        self.tenant = options.tenant
        self.concurrency = options.concurrency
        self.results = results
        self.stats = stats
        self.progress = progress
        self.completions: queue.SimpleQueue[tuple[_CaseRun, RunResult] | _Scored] = (
            queue.SimpleQueue()
        )
        # slow scorers run on threads, so a judge's latency does not stall submitting and
        # collecting; a case keeps its slot until its line is written (bounded memory)
        slow = any(s.slow for s in self.scorers)
        self.pool = (
            ThreadPoolExecutor(min(self.concurrency, MAX_SCORING_THREADS), "tether-scoring")
            if slow
            else None
        )
        self.in_flight = 0
        self.max_in_flight = 0
        self.runs = 0

    def run(self, units: Iterator[Unit]) -> None:
        """Submit every case (epoch) not in the results file, at most ``concurrency`` at once.

        Each pass starts cases into free slots, submits every turn that is due in one round trip
        (:meth:`Producer.submit_many`), then waits for completions and processes all that came.
        """
        todo = (u for u in units if not self.results.holds(u.numbered.case.id, u.epoch))
        try:
            self._loop(todo)
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)

    def _loop(self, todo: Iterator[Unit]) -> None:
        exhausted = False
        due: list[_CaseRun] = []
        while True:
            while not exhausted and self.in_flight < self.concurrency:
                unit = next(todo, None)
                if unit is None:
                    exhausted = True
                else:
                    due.append(self._start(unit))
            for start in range(0, len(due), SUBMIT_CHUNK):
                self._submit(due[start : start + SUBMIT_CHUNK])
            due = []
            if exhausted and self.in_flight == 0:
                return
            try:
                item = self.completions.get(timeout=IDLE_WAKE_S)
            except queue.Empty:
                continue
            while True:
                if isinstance(item, _Scored):
                    self._write(item)
                else:
                    self._turn_done(item[0], item[1], due)
                try:
                    item = self.completions.get_nowait()
                except queue.Empty:
                    break

    # --- submitting ----------------------------------------------------------------------------

    def _start(self, unit: Unit) -> _CaseRun:
        case = unit.numbered.case
        agent = case.agent or self.default_agent
        assert agent is not None  # validated by parse_case_line
        session_id = case_session_id(self.batch_id, case, unit.epoch, unit.attempt)
        state = _CaseRun(
            unit.numbered, session_id, agent, time.monotonic(), unit.epoch, unit.attempt
        )
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
            request_id=case_request_id(self.batch_id, case, turn, state.epoch, state.attempt),
            metadata={
                "batch_id": self.batch_id,
                "case_id": case.id,
                "turn": turn,
                **({"epoch": state.epoch} if state.epoch else {}),
            },
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
        state.usage += result.usage
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
        if self.pool is None:
            self._write(_Scored(self._record(state, result, error)))
            return
        completions = self.completions

        def score() -> None:
            try:
                completions.put(_Scored(self._record(state, result, error)))
            except BaseException as exc:  # a bug, not a scorer's error: end the batch with it
                completions.put(_Scored(None, exc))

        self.pool.submit(score)

    def _record(
        self, state: _CaseRun, result: RunResult | None, error: tuple[str, str] | None
    ) -> CaseResult:
        return build_record(
            state,
            result,
            error,
            batch_id=self.batch_id,
            scorers=self.scorers,
            events=self.events,
            redact=self.redact,
            tenant=self.tenant,
        )

    def _write(self, scored: _Scored) -> None:
        if scored.record is None:
            raise RuntimeError("scoring a case failed") from scored.failure
        record = scored.record
        self.results.append(record)
        self.stats.add(record)
        self.in_flight -= 1
        self.progress.case_done(failed=record.status in ("FAILED", "CANCELLED"))


__all__ = ["BatchRunner", "Unit"]


def _ref_of(handle: RunHandle) -> RunRef:
    """Where a submitted run lives (a handle from a submit knows its session and tenant)."""
    return RunRef(handle.tenant or "", handle.session_id or "", handle.run_id)
