"""History and time travel: the whole history from ``read()``, fork points, fork at an earlier
``at_seq`` with its origin recorded as an event, and ``get_items`` / ``pop_item`` on sessions.

In-process through the worker's run cycle (on in-memory backends and on redis-server + S3 over
HTTP), and through real workers and the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pydantic
import pytest

from tests.support.crash import TENANT, Backends, request_for, worker_runtime
from tests.support.stack import Stack, unique
from tether import Agent, ModelResponse, ScriptedModel, SessionLogReader
from tether.core.events import (
    AgentEvent,
    EventType,
    ForkedPayload,
    RestoredPayload,
    UserInputPayload,
)
from tether.core.fold import project_events
from tether.core.history import history_points, replayable_seqs
from tether.core.items import AssistantMessage, UserMessage
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import SessionMetadata, SessionSnapshot
from tether.errors import InvalidInput, UnsupportedSchemaVersion
from tether.persistence import codec
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.codec import dumps_event, loads_event
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.runs.queue.base import submit
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices


def run_in_process(rt: EngineServices, session_id: str, text: str) -> str:
    """Submit ``text`` to the calculator on ``session_id`` and drain it like a worker would."""
    request = request_for(session_id, text)
    submit(rt.runs, request)
    drain(rt, TENANT, session_id)
    view = rt.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.output is not None, view.result
    return view.result.output


def user_inputs(events: list[AgentEvent]) -> list[str]:
    return [e.payload.item.content for e in events if isinstance(e.payload, UserInputPayload)]


def test_read_events_is_the_whole_history_after_an_archive_flush(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = worker_runtime(backends, "w1", archive_batch_events=8)
    for text in ("1 + 1", "2 * 3", "10 - 4"):
        run_in_process(rt, "s-hist", text)
    reader = SessionLogReader(backends.store, backends.archive)
    stored = backends.store.load(TENANT, "s-hist")
    assert stored is not None and stored.snapshot.archived_seq > 0  # the archive was flushed
    assert len(stored.snapshot.events) < stored.snapshot.last_seq  # the head holds the outbox

    head = reader.read("s-hist", tenant=TENANT)

    assert head is not None
    assert [e.seq for e in head.events] == list(range(1, head.last_seq + 1))
    assert head.events == reader.events("s-hist", tenant=TENANT)
    assert user_inputs(head.events) == ["1 + 1", "2 * 3", "10 - 4"]
    assert project_events(head.events) == head.memory


def test_fork_at_seq_then_both_branches_run_independently(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    rt = worker_runtime(backends, "w1", archive_batch_events=8)
    for text in ("1 + 1", "2 * 3", "10 - 4"):
        run_in_process(rt, "s-src", text)
    reader = SessionLogReader(backends.store, backends.archive)
    source_before = reader.events("s-src", tenant=TENANT)
    points = reader.history("s-src", tenant=TENANT)
    assert [p.kind for p in points] == ["input", "run_end"] * 3
    assert [p.text for p in points if p.kind == "input"] == ["1 + 1", "2 * 3", "10 - 4"]
    first_end = points[1]
    assert first_end.text == "answered: 2"

    fork = reader.fork("s-src", "s-fork", tenant=TENANT, at_seq=first_end.seq)

    kept = [e for e in source_before if e.seq <= first_end.seq]
    assert fork.memory == project_events(kept)
    fork_events = reader.events("s-fork", tenant=TENANT)
    assert [e.model_copy(update={"session_id": "s-src"}) for e in fork_events[:-1]] == kept
    origin = fork_events[-1]
    assert origin.type is EventType.SESSION_FORKED and origin.seq == first_end.seq + 1
    assert origin.payload == ForkedPayload(
        source_tenant=TENANT,
        source_session_id="s-src",
        at_seq=first_end.seq,
        source_last_seq=source_before[-1].seq,
    )
    assert reader.verify("s-fork", tenant=TENANT).ok

    # both branches go on, each from its own past
    assert run_in_process(rt, "s-fork", "10 * 10") == "100"
    assert run_in_process(rt, "s-src", "4 + 4") == "8"
    source, forked = (reader.events(s, tenant=TENANT) for s in ("s-src", "s-fork"))
    assert user_inputs(source) == ["1 + 1", "2 * 3", "10 - 4", "4 + 4"]
    assert user_inputs(forked) == ["1 + 1", "10 * 10"]
    assert source[: len(source_before)] == source_before  # the source was not touched
    after_fork = {e.run_id for e in forked if e.seq > origin.seq} - {None}
    assert after_fork and not after_fork & {e.run_id for e in source}
    for session_id in ("s-src", "s-fork"):
        report = reader.verify(session_id, tenant=TENANT)
        assert report.ok, report.problems
    fork_head = reader.read("s-fork", tenant=TENANT)
    assert fork_head is not None and fork_head.metadata.parent_session_id == "s-src"
    contents = [getattr(item, "content", None) for item in fork_head.memory.items]
    assert "100" in contents and "6" not in contents and "8" not in contents


def test_fork_refuses_points_past_the_end_or_before_the_first_replayable_one() -> None:
    store = InMemorySnapshotStore()
    agent = Agent(ScriptedModel([ModelResponse.final("ok")]), store=store)
    session = agent.new_session("s-1", tenant=TENANT)
    session.run("hello")
    session.save()
    reader = SessionLogReader(store)
    last = session.last_seq

    with pytest.raises(InvalidInput, match=f"history ends at seq {last}"):
        reader.fork("s-1", "s-2", tenant=TENANT, at_seq=last + 1)
    with pytest.raises(InvalidInput, match="first replayable point is seq 1"):
        reader.fork("s-1", "s-2", tenant=TENANT, at_seq=0)
    assert store.load(TENANT, "s-2") is None  # nothing was written
    with pytest.raises(TypeError):  # everything after the session id is keyword-only
        reader.history("s-1", TENANT)  # type: ignore[misc]
    with pytest.raises(TypeError):
        reader.fork("s-1", "s-2", TENANT, 3)  # type: ignore[misc]


def _event(seq: int, **kwargs: object) -> AgentEvent:
    return AgentEvent(
        type=kwargs.pop("type_", EventType.STEP_START),
        tenant=TENANT,  # type: ignore[arg-type]
        session_id="s-cut",
        seq=seq,
        **kwargs,
    )  # type: ignore[arg-type]


def test_a_history_missing_its_start_is_replayable_only_from_a_full_restore() -> None:
    """Events 1-4 are lost (say, an archive segment); 5 and 6 cannot be folded, 7 resets the
    whole memory, so forking works from 7 on."""
    baseline = MemorySnapshot(items=(UserMessage(content="kept"),))
    events = [
        _event(5, run_id="r1"),
        _event(6, run_id="r1"),
        _event(7, type_=EventType.SESSION_RESTORED, payload=RestoredPayload(memory=baseline)),
        _event(
            8,
            type_=EventType.USER_INPUT,
            run_id="r2",
            payload=UserInputPayload(item=UserMessage(content="next")),
        ),
    ]
    assert replayable_seqs(events) == {7, 8}
    assert [(p.seq, p.kind) for p in history_points(events)] == [
        (7, "write"),
        (8, "input"),
        (8, "run_end"),
    ]
    store = InMemorySnapshotStore()
    metadata = SessionMetadata(session_id="s-cut", tenant=TENANT, created_at_ms=1, updated_at_ms=1)
    memory = project_events(events)
    store.save(SessionSnapshot(metadata=metadata, memory=memory, events=events, last_seq=8), None)
    reader = SessionLogReader(store)

    with pytest.raises(InvalidInput, match="first replayable point is seq 7"):
        reader.fork("s-cut", "s-a", tenant=TENANT, at_seq=6)
    fork = reader.fork("s-cut", "s-b", tenant=TENANT, at_seq=7)
    assert fork.memory == baseline


def test_get_items_and_pop_item_keep_fold_equal_to_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    store, archive = InMemorySnapshotStore(), InMemoryEventArchive()
    model = ScriptedModel([ModelResponse.final("one"), ModelResponse.final("two")])
    agent = Agent(model, store=store, archive=archive)
    session = agent.new_session("s-items", tenant=TENANT)
    session.run("first")
    session.run("second")
    items = session.memory_snapshot().items
    assert len(items) == 4
    assert session.get_items() == list(items)
    assert session.get_items(limit=2) == list(items[-2:])
    assert session.get_items(limit=0) == []
    assert session.get_items(limit=10) == list(items)
    with pytest.raises(InvalidInput, match="limit"):
        session.get_items(limit=-1)

    before = session.last_seq
    popped = session.pop_item()

    assert popped == AssistantMessage(content="two")
    assert session.last_seq == before + 1  # exactly one event
    removal = session.events[-1]
    assert removal.type is EventType.MEMORY_ITEMS_REMOVED
    assert session.get_items() == list(items[:-1])
    assert project_events(session.events) == session.memory_snapshot()
    # the new event type is schema v2 on the wire; older event types keep their v1 bytes
    assert json.loads(dumps_event(removal))["v"] == 2
    assert loads_event(dumps_event(removal)) == removal
    assert json.loads(dumps_event(session.events[0]))["v"] == 1
    with pytest.raises(pydantic.ValidationError, match="needs event schema v2"):
        AgentEvent(v=1, type=EventType.MEMORY_ITEMS_REMOVED, payload=removal.payload)
    with monkeypatch.context() as old_build:  # a build that reads only v1 says to upgrade
        old_build.setattr(codec, "SUPPORTED_EVENT_VERSIONS", (1,))
        with pytest.raises(UnsupportedSchemaVersion, match="Upgrade Tether"):
            loads_event(dumps_event(removal))

    assert session.clear_items() == 3
    assert session.pop_item() is None and session.clear_items() == 0
    assert session.last_seq == before + 2  # nothing to remove: no event
    session.save()
    reader = SessionLogReader(store, archive)
    report = reader.verify("s-items", tenant=TENANT)
    assert report.ok, report.problems
    assert reader.project("s-items", tenant=TENANT).items == ()
    resumed = agent.resume_session("s-items", tenant=TENANT)
    assert resumed.get_items() == []


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done


def test_workers_history_cli_fork_at_seq_and_both_branches(live_stack: Stack) -> None:
    producer, reader = live_stack.producer, live_stack.reader()
    sid, fork_id = unique("tt"), unique("tt-fork")
    texts = ["1 + 2", "3 * 4", "2 ** 5", "9 - 1"]
    for text in texts:
        assert producer.run(sid, text, agent="calculator", wait_s=60).ok
    stored = reader.store.load("default", sid)
    assert stored and stored.snapshot.archived_seq > 0  # the workers flushed the archive
    head = reader.read(sid)
    assert head is not None and [e.seq for e in head.events] == list(range(1, head.last_seq + 1))
    assert user_inputs(head.events) == texts

    points = json.loads(_cli(live_stack.env, "sessions", "history", sid, "--json").stdout)
    ends = [p for p in points if p["kind"] == "run_end"]
    assert [p["text"] for p in ends] == [
        "answered: 3",
        "answered: 12",
        "answered: 32",
        "answered: 8",
    ]
    at = ends[1]["seq"]
    _cli(live_stack.env, "sessions", "fork", sid, fork_id, "--at-seq", str(at))

    assert producer.run(fork_id, "7 * 6", agent="calculator", wait_s=60).output == "42"
    assert producer.run(sid, "5 + 5", agent="calculator", wait_s=60).output == "10"
    assert user_inputs(reader.events(fork_id)) == ["1 + 2", "3 * 4", "7 * 6"]
    assert user_inputs(reader.events(sid)) == [*texts, "5 + 5"]
    forked = [e for e in reader.events(fork_id) if e.type is EventType.SESSION_FORKED]
    assert len(forked) == 1 and forked[0].payload == ForkedPayload(
        source_tenant="default", source_session_id=sid, at_seq=at, source_last_seq=head.last_seq
    )
    verify = _cli(live_stack.env, "sessions", "verify", sid, fork_id, "--json")
    assert all(report["ok"] for report in json.loads(verify.stdout))
