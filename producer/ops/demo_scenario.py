"""The steps of ``tether demo`` (see :mod:`tether.producer.ops.demo`), each printing as it goes and
recording PASS/FAIL :class:`Check` results."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.core.results import RunStatus
from tether.persistence.reader import SessionLogReader
from tether.producer.client import Producer
from tether.producer.handle import RunHandle
from tether.producer.ops.live_tail import LiveTail
from tether.producer.ops.render import pass_fail, verify_line
from tether.runs.contract import RunResult

RUN_WAIT_S = 60.0
FACTS = (
    "the launch is on Tuesday",
    "Ada prefers tea",
    "staging runs on port 8080",
    "Bob owns the billing service",
    "the retro moved to Friday",
    "backups run at 02:00",
)
MAX_EXTRA_TURNS = 4
CALCULATIONS = (("(2 + 3) * 4", "20"), ("2 ** 10", "1024"), ("7 / 2", "3.5"))
BATCH_SESSIONS = ("batch-a", "batch-b", "batch-c")
BATCH_ITEMS = 3


@dataclass(frozen=True)
class Check:
    """One verified claim of the demo."""

    name: str
    ok: bool
    detail: str = ""


class Scenario:
    """The demo's steps, printing as they go and collecting :class:`Check` results."""

    def __init__(
        self,
        producer: Producer,
        reader: SessionLogReader,
        console: Console,
        label: Callable[[str | None], str],
        *,
        expect_workers: int,
        checkpoint: Callable[[], None] = lambda: None,
    ) -> None:
        """Args:
        checkpoint: called before each check (raises to stop the scenario, e.g. on a signal).
        """
        self.checkpoint = checkpoint
        self.producer = producer
        self.reader = reader
        self.console = console
        self.label = label
        self.expect_workers = expect_workers
        self.tenant = producer.settings.tenant
        self.tag = uuid.uuid4().hex[:8]
        self.sessions: list[str] = []
        self.checks: list[Check] = []

    def sid(self, name: str) -> str:
        """A session id unique to this demo run (reruns never collide)."""
        session_id = f"demo-{self.tag}-{name}"
        if session_id not in self.sessions:
            self.sessions.append(session_id)
        return session_id

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        """Record and print one check."""
        self.checkpoint()
        self.checks.append(Check(name, ok, detail))
        line = pass_fail(ok)
        line.append(f"  {name}" + (f" ({detail})" if detail else ""))
        self.console.print(line)
        return ok

    def run(self, session_id: str, text: str, agent: str) -> RunResult:
        """One run, waited for."""
        return self.producer.run(session_id, text, agent=agent, wait_s=RUN_WAIT_S)

    def play(self) -> None:
        """All steps in order."""
        try:
            self.notes()
            self.calculator()
            self.batch()
        except TimeoutError:
            raise TimeoutError(
                f"a run did not finish within {RUN_WAIT_S:.0f} s; is a worker consuming queue "
                f"{self.producer.settings.queue!r} (`tether worker`)?"
            ) from None
        self.verify_all()

    def notes(self) -> None:
        """Several turns of ``notes`` on one session, tailed live."""
        sid = self.sid("notes")
        self.console.rule(f"1. notes: several turns of session {sid}, tailed live")
        tail = LiveTail(self.producer.event_stream, self.tenant, sid, self.console)
        try:
            tail.start()  # inside the try: Ctrl-C right after it still stops the thread
            facts, labels = self._notes_turns(sid)
            recall = self.run(sid, "recall", "notes")
            self.console.print(
                f"[bold]recall[/] [cyan]\\[{self.label(recall.worker)}][/] -> "
                + escape(repr(recall.output))
            )
            head = self.reader.read(sid, tenant=self.tenant)
            last_seq = head.last_seq if head else 0
            tail.wait_for(last_seq, timeout_s=10.0)
        finally:
            tail.stop()
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(Counter(labels).items()))
        if self.expect_workers >= 2:
            self.check("notes: turns landed on both workers", len(set(labels)) >= 2, counts)
        wanted = list(facts)
        got = (recall.output or "").splitlines()
        self.check("notes: recall returns every fact in order", got == wanted, f"{len(got)} facts")
        missing = set(range(1, last_seq + 1)) - tail.seqs
        self.check(
            "tail: the live tail printed every committed event",
            last_seq > 0 and not missing and tail.error is None,
            f"{len(tail.seqs)} events up to seq {last_seq}"
            + (f", missing {sorted(missing)[:5]}" if missing else ""),
        )

    def _notes_turns(self, sid: str) -> tuple[list[str], list[str]]:
        facts = list(FACTS)
        labels: list[str] = []
        ok = True
        index = 0
        while index < len(facts):
            result = self.run(sid, f"remember {facts[index]}", "notes")
            labels.append(self.label(result.worker))
            ok &= result.output == f"noted: {facts[index]}"
            self.console.print(
                f"[bold]turn {index + 1}[/] [cyan]\\[{labels[-1]}][/] "
                + escape(f"remember {facts[index]!r} -> {result.output!r}")
            )
            index += 1
            one_worker = len(set(labels)) < 2 and self.expect_workers >= 2
            if index == len(facts) and one_worker and len(facts) < len(FACTS) + MAX_EXTRA_TURNS:
                facts.append(f"extra fact {len(facts) + 1}")  # give the other worker a chance
        self.check("notes: every turn answered", ok, f"{len(facts)} turns")
        return facts, labels

    def calculator(self) -> None:
        """Tool calls with the ``calculator`` agent."""
        sid = self.sid("calc")
        self.console.rule(f"2. calculator: tool calls on session {sid}")
        ok = True
        for expression, expected in CALCULATIONS:
            result = self.run(sid, expression, "calculator")
            ok &= result.output == expected
            self.console.print(
                f"[cyan]\\[{self.label(result.worker)}][/] "
                + escape(f"{expression} = {result.output}")
            )
        self.check("calculator: every answer is right", ok, f"{len(CALCULATIONS)} expressions")

    def batch(self) -> None:
        """A batch of ``run_async`` handles, awaited together."""
        self.console.rule("3. run_async: a batch of handles over three sessions, awaited together")
        sids = [self.sid(name) for name in BATCH_SESSIONS]
        handles = [
            self.producer.run_async(sid, f"remember item-{k}", agent="notes")
            for k in range(BATCH_ITEMS)
            for sid in sids
        ]
        self.console.print(f"submitted {len(handles)} runs; awaiting their handles with asyncio")

        results = _await_all(handles)
        table, completed = self._handles_table(handles, results)
        self.console.print(table)
        self.check(
            "run_async: every handle completed",
            completed == len(handles),
            f"{completed}/{len(handles)}",
        )
        in_order = all(
            (self.run(sid, "recall", "notes").output or "").splitlines()
            == [f"item-{k}" for k in range(BATCH_ITEMS)]
            for sid in sids
        )
        self.check("run_async: each session kept its submission order", in_order)

    def _handles_table(
        self, handles: list[RunHandle], results: list[RunResult | BaseException]
    ) -> tuple[Table, int]:
        """One row per handle, and how many of the runs completed."""
        table = Table("session", "run", "status", "worker", "queued ms", "ran ms")
        completed = 0
        for handle, result in zip(handles, results, strict=True):
            if isinstance(result, RunResult):
                completed += result.status is RunStatus.COMPLETED
                table.add_row(
                    handle.session_id,
                    handle.run_id[-12:],
                    result.status.value,
                    self.label(result.worker),
                    str(result.queue_ms),
                    str(result.run_ms),
                )
            else:
                table.add_row(
                    handle.session_id, handle.run_id[-12:], f"error: {result}", "", "", ""
                )
        return table, completed

    def verify_all(self) -> None:
        """``sessions verify`` on every session of the demo."""
        self.console.rule("4. sessions verify: gapless logs whose fold equals the stored memory")
        ok = True
        for sid in self.sessions:
            report = self.reader.verify(sid, tenant=self.tenant)
            ok &= report.ok
            self.console.print(verify_line(report))
        self.check("sessions verify: every session passes", ok, f"{len(self.sessions)} sessions")


def _await_all(handles: list[RunHandle]) -> list[RunResult | BaseException]:
    """Every handle's result, or the error it raised, within ``RUN_WAIT_S`` in all."""

    async def settle(handle: RunHandle) -> RunResult | BaseException:
        try:
            return await handle
        except Exception as exc:
            return exc

    async def await_all() -> list[RunResult | BaseException]:
        # The runs proceed in parallel on the workers; awaiting them in turn costs nothing,
        # and unlike asyncio.gather leaves no orphan future to log about on Ctrl-C.
        async with asyncio.timeout(RUN_WAIT_S):
            return [await settle(handle) for handle in handles]

    waiting = await_all()
    try:
        return asyncio.run(waiting)
    finally:
        waiting.close()  # no "never awaited" warning when Ctrl-C lands before it started
