"""The chaos workload: runs of the ``notes`` agent while workers are SIGKILLed, then an audit.

:func:`run_chaos` drives ``sessions`` producer threads, each submitting its session's
``remember <fact>`` runs in bursts of 1-4 (so several runs of a session are queued at once and
their order matters), while a killer thread SIGKILLs a random ready worker at random moments and
restarts it. Then it audits: every handle resolved, each session recalls exactly its facts in
submission order (``lost`` and ``duplicated`` count the differences), ``verify`` passes for every
session, and the time from each kill to the completion of the runs it interrupted is measured.

Used by ``tests/test_chaos.py`` (CI-sized and full-size) and ``python -m tests.chaos_report``.
"""

from __future__ import annotations

import functools
import random
import secrets
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.support.chaos_faults import Freezer, Rewinder
from tests.support.chaos_stack import ChaosStack
from tether.core.results import RunStatus
from tether.dev.workers import WorkerProcess
from tether.errors import RunLost, TetherError
from tether.persistence.reader import SessionLogReader
from tether.producer.handle import RunHandle

#: A request is submitted at most this many times (each Redis rewind may lose it once).
MAX_SUBMISSIONS = 5


@dataclass
class ChaosFigures:
    """What one chaos run measured."""

    runs: int
    sessions: int
    workers: int
    lease_ttl_ms: int
    sweep_interval_ms: int
    kills: int = 0
    interrupted: int = 0
    retried: int = 0
    completed: int = 0
    failed: list[str] = field(default_factory=list)
    unresolved: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    verified: int = 0
    verify_problems: list[str] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)
    recovery_once_s: list[float] = field(default_factory=list)
    """Kill-to-completion of runs that only one kill interrupted (two attempts)."""
    duration_s: float = 0.0
    freezes: int = 0
    """Workers stopped right before a head PUT and thawed after their lease was taken over."""
    rewinds: int = 0
    """Times Redis was killed and started from a snapshot a few seconds older."""
    resubmitted: int = 0
    """Requests the client submitted again (same request id) after their run was lost."""
    status_mismatches: list[str] = field(default_factory=list)
    """Handles whose final status differs from what the session head recorded."""
    stream_repairs: int = 0
    """Live streams found behind their head (e.g. after a rewind) and refilled by a worker."""

    def recovery(self, which: str, *, once: bool = False) -> float:
        """``median``, ``p95`` or ``max`` of the kill-to-completion times (0 when none); with
        ``once``, of the runs a single kill interrupted."""
        values = sorted(self.recovery_once_s if once else self.recovery_s)
        if not values:
            return 0.0
        if which == "median":
            return float(statistics.median(values))
        if which == "p95":
            return values[min(len(values) - 1, max(0, round(0.95 * len(values)) - 1))]
        return values[-1]

    @property
    def ok(self) -> bool:
        """True when nothing was lost, duplicated, reordered, unresolved, failed or unverified."""
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.out_of_order == 0
            and self.unresolved == 0
            and not self.failed
            and not self.status_mismatches
            and self.verified == self.sessions
        )

    def rows(self) -> list[tuple[str, str]]:
        """The figures as (name, value) rows."""
        return [
            ("runs submitted", str(self.runs)),
            ("sessions", str(self.sessions)),
            ("worker processes", str(self.workers)),
            ("lease TTL / sweep interval", f"{self.lease_ttl_ms} ms / {self.sweep_interval_ms} ms"),
            ("SIGKILLs (worker restarted each time)", str(self.kills)),
            ("runs interrupted mid-run by a kill", str(self.interrupted)),
            ("runs that needed more than one attempt", str(self.retried)),
            ("handles resolved", f"{self.runs - self.unresolved} / {self.runs}"),
            ("runs completed", f"{self.completed} / {self.runs}"),
            ("requests lost", str(self.lost)),
            ("requests applied twice", str(self.duplicated)),
            ("sessions with facts out of order", str(self.out_of_order)),
            ("sessions passing verify", f"{self.verified} / {self.sessions}"),
            (
                "kill -> completion, runs interrupted once (median / p95 / max)",
                f"{self.recovery('median', once=True):.1f} s / "
                f"{self.recovery('p95', once=True):.1f} s / {self.recovery('max', once=True):.1f} s"
                f" ({len(self.recovery_once_s)} runs)",
            ),
            (
                "kill -> completion, all interrupted runs (median / p95 / max)",
                f"{self.recovery('median'):.1f} s / {self.recovery('p95'):.1f} s / "
                f"{self.recovery('max'):.1f} s ({len(self.recovery_s)} runs)",
            ),
            ("zombie freezes at a head PUT (thawed after a takeover)", str(self.freezes)),
            ("Redis restarts from an older snapshot", str(self.rewinds)),
            ("requests resubmitted after RunLost (same request id)", str(self.resubmitted)),
            ("handles whose status differs from the head", str(len(self.status_mismatches))),
            ("live streams repaired from the head (worker log lines)", str(self.stream_repairs)),
            ("wall time", f"{self.duration_s:.0f} s"),
        ]


@dataclass
class _Submitted:
    handle: RunHandle
    session_id: str
    fact: str
    done_at: float | None = None
    superseded: bool = False
    """Lost, and submitted again under the same request id."""


class _Killer(threading.Thread):
    """SIGKILLs a random ready worker every few seconds and restarts it in the background."""

    def __init__(
        self,
        stack: ChaosStack,
        rng: random.Random,
        kills: int,
        gap_s: tuple[float, float],
        inflight: _Inflight,
    ) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.stack = stack
        self.rng = rng
        self.kills_wanted = kills
        self.gap_s = gap_s
        self.inflight = inflight
        self.stop = threading.Event()
        self.finished = threading.Event()
        self.kills: list[tuple[float, list[str]]] = []  # (when, run ids interrupted)
        self._restarting: set[str] = set()
        self._lock = threading.Lock()
        self.restarters: list[threading.Thread] = []

    def run(self) -> None:
        try:
            while len(self.kills) < self.kills_wanted and not self.stop.wait(
                self.rng.uniform(*self.gap_s)
            ):
                ready = self._ready()
                if len(ready) < 2:  # keep one worker serving: recovery is measured, not restarts
                    continue
                self._kill(self.rng.choice(ready))
        finally:
            self.finished.set()

    def _ready(self) -> list[WorkerProcess]:
        with self._lock:
            return [w for w in self.stack.workers if w.alive() and w.name not in self._restarting]

    def _kill(self, victim: WorkerProcess) -> None:
        running = self.inflight.running_on(self.stack, victim)
        victim.kill()
        when = time.monotonic()
        self.kills.append((when, running))
        with self._lock:
            self._restarting.add(victim.name)
        thread = threading.Thread(target=self._restart, args=(victim,), daemon=True)
        thread.start()
        self.restarters.append(thread)

    def _restart(self, victim: WorkerProcess) -> None:
        try:
            victim.start(wait=True, timeout_s=120)
        finally:
            with self._lock:
                self._restarting.discard(victim.name)


class _Inflight:
    """The handles not resolved yet (the killer asks which run the victim is executing)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, _Submitted] = {}

    def add(self, item: _Submitted) -> None:
        with self._lock:
            self._runs[item.handle.run_id] = item

    def done(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def running_on(self, stack: ChaosStack, victim: WorkerProcess) -> list[str]:
        with self._lock:
            run_ids = list(self._runs)
            refs = [self._runs[r].handle for r in run_ids]
        if not run_ids or victim.pid is None:
            return []
        client = stack.redis_client()
        try:
            pipe = client.pipeline(transaction=False)
            for handle in refs:  # a submitted handle knows its session
                key = stack.producer.keys.run(
                    handle.tenant or "", handle.session_id or "", handle.run_id
                )
                pipe.hmget(key, ["status", "worker"])
            replies = pipe.execute()
        finally:
            client.close()
        out = []
        for run_id, (status, worker) in zip(run_ids, replies, strict=True):
            if status == b"RUNNING" and worker is not None:
                owner = stack.worker_of_pid(int(worker.decode().split(":")[1]))
                if owner is victim:
                    out.append(run_id)
        return out


@dataclass
class _Workload:
    """The producer side: one driver thread per session, resubmitting lost runs."""

    stack: ChaosStack
    figures: ChaosFigures
    expected: dict[str, list[str]]
    seeds: dict[str, int]
    think_s: float
    handle_timeout_s: float
    inflight: _Inflight = field(default_factory=lambda: _Inflight())
    submitted: list[_Submitted] = field(default_factory=list)
    faults: tuple[threading.Thread, ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def drive(self, sid: str) -> None:
        local = random.Random(self.seeds[sid])
        facts = self.expected[sid]
        i = 0
        while i < len(facts):
            burst = facts[i : i + local.randint(1, 4)]
            i += len(burst)
            if i >= len(facts):
                # a fast fleet would finish before the last faults: keep the last burst back
                # until every fault happened, so the fault count never depends on the machine
                for fault in self.faults:
                    fault.finished.wait(timeout=120)  # type: ignore[attr-defined]
            self._submit_burst(sid, burst)
            time.sleep(local.uniform(0, self.think_s))

    def _submit_burst(self, sid: str, burst: list[str]) -> None:
        pending = list(burst)
        for _ in range(MAX_SUBMISSIONS):
            items = [self._submit(sid, fact) for fact in pending]
            with self._lock:
                self.submitted.extend(items)
            # a run lost with Redis (rewound) is submitted again under its request id, in
            # order: the head's applied set makes that exactly-once
            pending = [item.fact for item in items if not self._settled(item)]
            if not pending:
                return
            with self._lock:
                self.figures.resubmitted += len(pending)

    def _submit(self, sid: str, fact: str) -> _Submitted:
        for _ in range(MAX_SUBMISSIONS * 10):
            try:
                handle = self.stack.producer.run_async(
                    sid, f"remember {fact}", agent="notes", request_id=f"req-{fact}"
                )
                break
            except TetherError:  # Redis restarting: the client retries
                time.sleep(0.5)
        else:
            raise AssertionError(f"could not submit {fact}")
        item = _Submitted(handle, sid, fact)
        self.inflight.add(item)
        handle.add_done_callback(functools.partial(self._on_done, item))
        return item

    def _settled(self, item: _Submitted) -> bool:
        """False when the run was lost and must be submitted again."""
        try:
            item.handle.run_result(timeout=self.handle_timeout_s)
        except RunLost:
            item.superseded = True
            return False
        except Exception:  # unresolved (timeout): counted by the audit
            return True
        return True

    def _on_done(self, item: _Submitted, _handle: RunHandle) -> None:
        item.done_at = time.monotonic()
        self.inflight.done(item.handle.run_id)


def run_chaos(
    stack: ChaosStack,
    *,
    runs: int,
    sessions: int,
    kills: int,
    seed: int = 9,
    gap_s: tuple[float, float] = (0.5, 2.0),
    think_s: float = 0.05,
    handle_timeout_s: float = 180.0,
    freezes: int = 0,
    rewinds: int = 0,
) -> ChaosFigures:
    """Run the workload under kills (and freezes, rewinds) and audit it (see the module
    docstring)."""
    rng = random.Random(seed)
    per_session = runs // sessions
    prefix = f"chaos-{secrets.token_hex(4)}"
    session_ids = [f"{prefix}-{n:03d}" for n in range(sessions)]
    expected = {sid: [f"{sid}-f{i:03d}" for i in range(per_session)] for sid in session_ids}
    figures = ChaosFigures(
        runs=per_session * sessions,
        sessions=sessions,
        workers=len(stack.workers),
        lease_ttl_ms=stack.settings.lease_ttl_ms,
        sweep_interval_ms=stack.settings.sweep_interval_ms,
    )
    seeds = {sid: rng.randrange(2**32) for sid in session_ids}
    work = _Workload(stack, figures, expected, seeds, think_s, handle_timeout_s)
    started = time.monotonic()
    killer = _Killer(stack, rng, kills, gap_s, work.inflight)
    freezer = Freezer(stack, random.Random(seed + 1), freezes, gap_s)
    rewinder = Rewinder(stack, random.Random(seed + 2), rewinds, (gap_s[0] * 2, gap_s[1] * 2))
    work.faults = (killer, freezer, rewinder)
    drivers = [threading.Thread(target=work.drive, args=(sid,), daemon=True) for sid in session_ids]
    for thread in drivers:
        thread.start()
    for fault in work.faults:
        fault.start()
    for thread in drivers:
        thread.join()
    for fault in (killer, freezer, rewinder):
        fault.stop.set()
        fault.join()
    figures.freezes = len(freezer.frozen)
    figures.rewinds = len(rewinder.rewinds)
    figures.stream_repairs = stack.worker_logs().count("repairing the live stream")
    for thread in killer.restarters:
        thread.join()
    figures.duration_s = time.monotonic() - started
    figures.kills = len(killer.kills)
    _audit(stack, figures, work.submitted, expected, killer.kills)
    return figures


def _audit(
    stack: ChaosStack,
    figures: ChaosFigures,
    submitted: list[_Submitted],
    expected: dict[str, list[str]],
    kills: list[tuple[float, list[str]]],
) -> None:
    by_run = {item.handle.run_id: item for item in submitted}
    submitted = [item for item in submitted if not item.superseded]
    for item in submitted:
        if not item.handle.done():
            figures.unresolved += 1
            continue
        result = item.handle.run_result(timeout=0)
        if result.status is RunStatus.COMPLETED:
            figures.completed += 1
        else:
            figures.failed.append(f"{item.fact}: {result.error_type}: {result.error_message}")
        if result.attempts > 1:
            figures.retried += 1
    for when, run_ids in kills:
        for run_id in run_ids:
            done_at = by_run[run_id].done_at
            figures.interrupted += 1
            if done_at is not None:
                figures.recovery_s.append(done_at - when)
                result = by_run[run_id].handle.run_result(timeout=0)
                if result.attempts == 2:  # one interrupted attempt, then the one that committed
                    figures.recovery_once_s.append(done_at - when)
    stack.heal()
    reader = stack.reader()
    recalls = {sid: stack.producer.run_async(sid, "recall", agent="notes") for sid in expected}
    for sid, facts in expected.items():
        output = recalls[sid].result(timeout=120).output or ""
        recalled = output.splitlines()
        want, got = Counter(facts), Counter(recalled)
        figures.lost += sum((want - got).values())
        figures.duplicated += sum((got - want).values())
        if recalled != facts and not (want - got) and not (got - want):
            figures.out_of_order += 1
        _audit_statuses(figures, reader, sid, [i for i in submitted if i.session_id == sid])
        report = reader.verify(sid)
        if report.ok:
            figures.verified += 1
        else:
            figures.verify_problems.append(f"{sid}: {'; '.join(report.problems)}")


def _audit_statuses(
    figures: ChaosFigures, reader: SessionLogReader, sid: str, items: list[_Submitted]
) -> None:
    """Every resolved handle says what the session head recorded for its request."""
    head = reader.read(sid)
    for item in items:
        if not item.handle.done():
            continue
        result = item.handle.run_result(timeout=0)
        record = head.find_applied(result.request_id or "") if head is not None else None
        recorded = record.status if record is not None else None
        if recorded != result.status:
            figures.status_mismatches.append(
                f"{item.fact}: handle {result.status}, head {recorded}"
            )


def format_table(figures: ChaosFigures, title: str) -> str:
    """A Markdown table of the figures."""
    lines = [f"| {title} | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in figures.rows()]
    return "\n".join(lines)
