"""Compaction and projection wired into sessions and the loop (the reference scenarios)."""

from __future__ import annotations

from tether import (
    Agent,
    AgentOptions,
    AssistantMessage,
    ContextBudget,
    EventType,
    MemorySnapshot,
    ModelResponse,
    ScriptedModel,
    UserMessage,
    project_events,
)
from tether.core.context import CompactResult
from tether.core.events import CompactPayload, ErrorPayload, ProjectionPayload
from tether.core.snapshot import SessionMetadata, SessionSnapshot
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.codec import dumps_snapshot
from tether.persistence.reader import SessionLogReader
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.runtime.compaction import KeepLastPolicy, StructuredSummaryPolicy
from tether.runtime.demo_agents import notes_agent


def seeded(agent: Agent, items: tuple) -> object:  # type: ignore[type-arg]
    snapshot = SessionSnapshot(
        metadata=SessionMetadata(session_id="seeded", created_at_ms=1, updated_at_ms=1),
        memory=MemorySnapshot(items=items),
    )
    return agent.session_from_snapshot(snapshot)


def test_two_item_budget_sends_last_old_item_and_input() -> None:
    model = ScriptedModel([ModelResponse.final("ok")])
    options = AgentOptions(context_budget=ContextBudget(max_items=2))
    agent = Agent(model, options=options)
    old = (
        UserMessage(content="old-1"),
        AssistantMessage(content="old-2"),
        UserMessage(content="old-3"),
    )
    session = seeded(agent, old)
    session.run("current")  # type: ignore[attr-defined]
    assert model.requests[0].items == (UserMessage(content="old-3"), UserMessage(content="current"))
    reports = [
        e.payload.report
        for e in session.events  # type: ignore[attr-defined]
        if isinstance(e.payload, ProjectionPayload)
    ]
    assert len(reports) == 1
    assert reports[0].projected_item_count == 2
    assert reports[0].source_item_count == 4
    # projection shapes the prompt only: memory keeps everything, and the fold ignores the report
    memory = session.memory_snapshot()  # type: ignore[attr-defined]
    assert len(memory.items) == 5
    assert project_events(session.events) == memory  # type: ignore[attr-defined]


def test_summary_is_sent_as_leading_system_context() -> None:
    model = ScriptedModel([ModelResponse.final("ok")])
    agent = Agent(model)
    session = agent.new_session()
    session.run("a")
    session.compact(KeepLastPolicy(keep=1, summary="the user said a"))
    session.run("b")
    request = model.requests[-1]
    assert request.summary == "the user said a"
    assert request.items[-1] == UserMessage(content="b")


def test_auto_compaction_runs_before_steps_and_is_recorded() -> None:
    policy = StructuredSummaryPolicy(ContextBudget(max_items=3, pinned_prefix_items=1))
    agent = Agent(ScriptedModel(default_text="ok"), options=AgentOptions(compact_policy=policy))
    session = agent.new_session()
    for n in range(5):
        session.run(f"turn {n}")
    compactions = [e for e in session.events if isinstance(e.payload, CompactPayload)]
    assert compactions, "the policy never fired"
    assert session.last_compact == compactions[-1].payload.result  # type: ignore[union-attr]
    assert session.snapshot().last_compact == session.last_compact
    assert project_events(session.events) == session.memory_snapshot()
    assert len(session.memory_snapshot().items) <= 4


def test_policy_that_raises_never_breaks_the_run() -> None:
    class Broken:
        def should_compact(self, snapshot: MemorySnapshot) -> bool:
            return True

        def compact(self, snapshot: MemorySnapshot) -> CompactResult:
            raise RuntimeError("summariser down")

    agent = Agent(
        ScriptedModel([ModelResponse.final("fine")]), options=AgentOptions(compact_policy=Broken())
    )
    session = agent.new_session()
    result = session.run("hello")
    assert result.output == "fine"
    errors = [e for e in session.events if e.type is EventType.ERROR]
    assert len(errors) == 1
    assert isinstance(errors[0].payload, ErrorPayload)
    assert "summariser down" in errors[0].payload.message
    assert session.memory_snapshot().items[0] == UserMessage(content="hello")
    assert session.last_compact is None
    assert project_events(session.events) == session.memory_snapshot()


def test_thousand_runs_keep_the_stored_head_bounded() -> None:
    """1,000 notes runs with auto-compaction: the stored head stops growing.

    Bound: memory holds at most max_items + 2 items (the policy fires above 20 and one run adds
    two), each under ~250 bytes of JSON (5.5 KB), and the summary keeps at most 4,000 characters
    of history plus its fixed lines (4.3 KB): about 10 KB. The head stores that state up to three
    times: as memory, as the last compact result (which also repeats the summary), and inside the
    outbox's MEMORY_COMPRESS event when the last run compacted; the other outbox events are under
    2 KB. 3 x 10 KB + 2 KB = 32 KB, so 36 KB is the bound, while a head that kept all history
    (2,000 items, ~8,000 events) would be megabytes.
    """
    base = notes_agent()
    policy = StructuredSummaryPolicy(ContextBudget(max_items=20, pinned_prefix_items=1))
    store, archive = InMemorySnapshotStore(), InMemoryEventArchive()
    agent = Agent(
        base.model,
        base.model_name,
        options=AgentOptions(compact_policy=policy),
        store=store,
        archive=archive,
    )
    session = agent.new_session("long")
    sizes = []
    for n in range(1000):
        session.run(f"remember fact-{n}")
        session.save()
        session.prune_events(session.archived_seq)
        stored = store.load("default", "long")
        assert stored is not None
        sizes.append(len(dumps_snapshot(stored.snapshot)))
    assert max(sizes) < 36_000, max(sizes)
    assert max(sizes[900:]) <= max(sizes[100:200]) * 1.1
    history = SessionLogReader(store, archive).events("long")
    assert [e.seq for e in history] == list(range(1, session.last_seq + 1))
    assert project_events(history) == session.memory_snapshot()
