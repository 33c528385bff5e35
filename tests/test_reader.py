"""SessionLogReader over a store: list, read, events, search, project, verify, fork."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import Agent, EventType, ModelResponse, ScriptedModel, SessionLogReader, tool
from tether.core.events import AgentEvent
from tether.errors import InvalidId, SessionExists, SessionNotFound
from tether.persistence.saving import save_session
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.memory import InMemorySnapshotStore


@tool
def echo() -> str:
    """Echo."""
    return "echo-output"


def stored_session(
    store: InMemorySnapshotStore, session_id: str = "s-1", tenant: str = "default"
) -> Agent:
    model = ScriptedModel([ModelResponse.call("call_1", "echo"), ModelResponse.final("done")])
    agent = Agent(model, tools=[echo], store=store)
    session = agent.new_session(session_id, tenant=tenant)
    session.put_metadata("k", "v")
    session.run("hello")
    session.save()
    return agent


def test_list_read_events_search_project_verify() -> None:
    store = InMemorySnapshotStore()
    stored_session(store, "s-1")
    stored_session(store, "s-2")
    stored_session(store, "s-9", tenant="other")
    reader = SessionLogReader(store)
    assert reader.list_session_ids() == ["s-1", "s-2"]
    assert reader.list_session_ids("other") == ["s-9"]
    assert reader.read("missing") is None
    head = reader.read("s-1")
    assert head is not None and head.metadata.attributes == {"k": "v"}
    events = reader.events("s-1")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    tool_events = reader.search("s-1", types=[EventType.TOOL_CALL, EventType.TOOL_RESULT])
    assert [e.type for e in tool_events] == [EventType.TOOL_CALL, EventType.TOOL_RESULT]
    assert reader.search("s-1") == []
    finals = reader.search("s-1", predicate=lambda e: e.type is EventType.FINAL_OUTPUT)
    assert len(finals) == 1
    assert reader.project("s-1") == head.memory
    report = reader.verify("s-1")
    assert report.ok and report.event_count == len(events)


def test_missing_session_errors_name_the_session() -> None:
    reader = SessionLogReader(InMemorySnapshotStore())
    for call in (reader.events, reader.project, reader.verify):
        with pytest.raises(SessionNotFound, match="default/ghost"):
            call("ghost")
    with pytest.raises(InvalidId):
        reader.read("../etc")


def test_verify_detects_tampered_memory() -> None:
    store = InMemorySnapshotStore()
    stored_session(store)
    stored = store.load("default", "s-1")
    assert stored is not None
    tampered = stored.snapshot.model_copy(
        update={"memory": stored.snapshot.memory.model_copy(update={"summary": "forged"})}
    )
    store.save(tampered, stored.version)
    report = SessionLogReader(store).verify("s-1")
    assert not report.ok
    assert "fold" in report.problems[0]


def test_fork_copies_and_leaves_source_untouched() -> None:
    store = InMemorySnapshotStore()
    agent = stored_session(store)
    reader = SessionLogReader(store)
    before = store.load("default", "s-1")
    fork = reader.fork("s-1", "s-1-fork")
    after = store.load("default", "s-1")
    assert before == after
    assert fork.metadata.parent_session_id == "s-1"
    assert fork.metadata.attributes == {"k": "v"}
    assert fork.memory == before.snapshot.memory  # type: ignore[union-attr]
    assert all(e.session_id == "s-1-fork" for e in reader.events("s-1-fork"))
    assert reader.verify("s-1-fork").ok
    resumed = agent.resume_session("s-1-fork")
    assert resumed.memory_snapshot() == fork.memory
    with pytest.raises(SessionExists, match="s-1-fork"):
        reader.fork("s-1", "s-1-fork")
    with pytest.raises(SessionNotFound):
        reader.fork("ghost", "new")


def test_a_misplaced_positional_argument_is_a_type_error_not_an_empty_answer() -> None:
    """``reader.search(sid, EventType.TOOL_RESULT)`` once bound the event type to ``tenant`` and
    silently returned []: every argument after the session id is keyword-only now."""
    reader = SessionLogReader(InMemorySnapshotStore())
    for call in (
        lambda: reader.search("s-1", EventType.TOOL_RESULT),  # type: ignore[misc]
        lambda: reader.events("s-1", "acme"),  # type: ignore[misc]
        lambda: reader.read("s-1", "acme"),  # type: ignore[misc]
        lambda: reader.verify("s-1", "acme"),  # type: ignore[misc]
        lambda: reader.fork("s-1", "s-2", "acme"),  # type: ignore[misc]
    ):
        with pytest.raises(TypeError):
            call()


def test_runs_committed_while_the_reader_reads_stay_out_of_the_head_it_loaded(
    tmp_path: Path,
) -> None:
    """The reader loads the head, then the archive. A writer that commits (and archives) runs
    in between put events newer than that head into its history: ``verify`` failed a healthy
    session ("history ends at seq 233 but the head says last_seq=199"), and ``fork`` saved a
    fork whose outbox ran past its origin, with memory that was not the fold of its events. The
    history of a head stops at its ``last_seq``."""
    store, archive = open_storage(f"file://{tmp_path / 'store'}")
    assert archive is not None
    agent = Agent(ScriptedModel(responder=lambda _: ModelResponse.final("ok")), store=store)
    session = agent.new_session("busy")

    def commit(text: str) -> None:
        session.run(text)
        save_session(session, store, archive, archive_batch_events=1)  # archived at once

    for n in range(3):
        commit(f"run {n}")
    reader = SessionLogReader(store, archive)
    loaded_at = reader.verify("busy").last_seq
    read_archive = archive.read
    interleaved: list[int] = []

    def read_while_a_writer_commits(tenant: str, session_id: str) -> list[AgentEvent]:
        if len(interleaved) < 2:  # one for verify, one for fork
            commit(f"meanwhile {len(interleaved)}")
            interleaved.append(session.last_seq)
        return read_archive(tenant, session_id)

    archive.read = read_while_a_writer_commits  # type: ignore[method-assign]
    report = reader.verify("busy")
    assert report.ok, report.problems
    assert report.last_seq == loaded_at and interleaved[0] > loaded_at

    fork = reader.fork("busy", "busy-fork")
    assert fork.last_seq == interleaved[0] + 1  # the head it loaded, and its SESSION_FORKED
    archive.read = read_archive  # type: ignore[method-assign]
    assert SessionLogReader(store, archive).verify("busy-fork").ok
    assert [e.seq for e in fork.events] == list(range(1, fork.last_seq + 1))
