"""Batched archiving through the library API (``save_session``): heads carry the outbox,
segments never overlap, a failed segment write loses nothing."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence

import pytest

from tests.support.crash import DictHint
from tether import Agent, ScriptedModel, SessionLogReader
from tether.core.events import AgentEvent
from tether.errors import StoreUnavailable
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.saving import archive_outbox, put_head, save_session
from tether.persistence.stores.memory import InMemorySnapshotStore


class FlakyArchive(InMemoryEventArchive):
    """Fails the next ``failures`` segment writes, as a crash right after the head write would."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.writes: list[tuple[int, int]] = []

    def write_segment(self, tenant: str, session_id: str, events: Sequence[AgentEvent]) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("injected: archive unreachable")
        self.writes.append((events[0].seq, events[-1].seq))
        super().write_segment(tenant, session_id, events)


def library_turn(
    agent: Agent, store: InMemorySnapshotStore, archive: FlakyArchive, text: str, batch: int
) -> None:
    """One turn of the in-process library API: resume from the head, run, save.

    (The worker's cycle is tested itself, crash at every commit step, in test_crash_steps.py.)
    """
    try:
        session = agent.resume_session("s")
    except Exception:
        session = agent.new_session("s")
    session.run(text)
    save_session(session, store, archive, archive_batch_events=batch)


@pytest.mark.parametrize("batch", [1, 5, 32])
def test_crash_between_head_and_archive_loses_nothing(batch: int) -> None:
    store, archive = InMemorySnapshotStore(), FlakyArchive()
    agent = Agent(ScriptedModel(default_text="ok"), store=store, archive=archive)
    for n in range(40):
        if n % 7 == 3:
            archive.failures = 1
        # on failure the head committed; its outbox waits for the next writer
        with contextlib.suppress(StoreUnavailable):
            library_turn(agent, store, archive, f"turn {n}", batch)
    reader = SessionLogReader(store, archive)
    report = reader.verify("s")
    assert report.ok, report.problems
    events = reader.events("s")
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
    distinct = sorted(set(archive.writes))
    for (_, last), (next_first, _) in itertools.pairwise(distinct):
        assert next_first == last + 1, distinct
    stored = store.load("default", "s")
    assert stored is not None
    # bounded: below one batch, plus this run (8 events) and one run whose archiving failed
    assert len(stored.snapshot.events) <= batch - 1 + 2 * 8


@pytest.mark.parametrize("with_hint", [False, True])
def test_batches_save_requests(with_hint: bool) -> None:
    store, archive = InMemorySnapshotStore(), FlakyArchive()
    agent = Agent(ScriptedModel(default_text="ok"), store=store, archive=archive)
    hint = DictHint() if with_hint else None
    for n in range(20):
        session = agent.resume_session("s") if n else agent.new_session("s")
        session.run(f"turn {n}")
        save_session(session, store, archive, archive_batch_events=32, hint=hint)
    assert len(archive.writes) <= 5  # 20 runs x 7 events / 32 per segment, not 20 writes
    assert len(set(archive.writes)) == len(archive.writes)  # nothing written twice
    assert SessionLogReader(store, archive).verify("s").ok


def test_segments_never_overlap() -> None:
    store, archive = InMemorySnapshotStore(), FlakyArchive()
    agent = Agent(ScriptedModel(default_text="ok"), store=store, archive=archive)
    for n in range(30):
        archive.failures = 1 if n % 4 == 0 else 0
        with contextlib.suppress(StoreUnavailable):
            library_turn(agent, store, archive, f"turn {n}", 10)
    distinct = sorted(set(archive.writes))
    for (_, last), (next_first, _) in itertools.pairwise(distinct):
        assert next_first == last + 1, distinct


@pytest.mark.parametrize("with_hint", [False, True])
def test_the_previous_writers_late_segment_never_overlaps_the_next_ones(with_hint: bool) -> None:
    """A worker writes its segment after it finished the run and released the session: on a busy
    machine the next holder loads that head, runs and archives first (tests/test_demo.py saw
    ``overlap between segments 1-39 and 1-47``). The late segment must be an identical rewrite."""
    store, archive = InMemorySnapshotStore(), FlakyArchive()
    agent = Agent(ScriptedModel(default_text="ok"), store=store, archive=archive)
    hint = DictHint() if with_hint else None
    first = agent.new_session("s")
    late: list[AgentEvent] = []
    while not late:  # commit heads until one's outbox is due for the archive; hold it back
        first.run("turn")
        late = put_head(first, store, archive, archive_batch_events=10, hint=hint)
    for n in range(3):  # the next holder goes on while the first worker is descheduled
        session = agent.resume_session("s")
        session.run(f"next {n}")
        save_session(session, store, archive, archive_batch_events=10, hint=hint)
    archive_outbox(first, archive, late)  # the first worker wakes up and writes its segment
    distinct = sorted(set(archive.writes))
    for (_, last), (next_first, _) in itertools.pairwise(distinct):
        assert next_first == last + 1, distinct
    reader = SessionLogReader(store, archive)
    assert reader.verify("s").ok
    events = reader.events("s")
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
