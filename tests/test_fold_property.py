"""Property: whatever a session does (runs, patches, restores, forks, compaction, projection),
folding its events through JSON gives its memory."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import (
    Agent,
    AgentOptions,
    ContextBudget,
    ModelResponse,
    ScriptedModel,
    SessionLogReader,
    project_events,
    tool,
)
from tether.core.items import ToolCall, ToolOutput
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.codec import dumps_event, loads_event
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.runtime.compaction import KeepLastPolicy, StructuredSummaryPolicy
from tether.runtime.projection import TypeAwareContextProjector


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


call_ids = st.text(alphabet="abcdef0123456789", min_size=1, max_size=6)
responses = st.lists(
    st.one_of(
        st.builds(
            lambda ids, key: ModelResponse.calls(
                *[ToolCall(id=i, name="lookup", arguments=f'{{"key": "{key}"}}') for i in ids]
            ),
            st.lists(call_ids, min_size=1, max_size=3),
            st.text(alphabet="xyz", min_size=1, max_size=3),
        ),
        st.builds(ModelResponse.call, call_ids, st.just("missing-tool")),
    ),
    max_size=3,
).map(lambda calls: [*calls, ModelResponse.final("done")])

operations = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.text(max_size=20), responses),
        st.tuples(st.just("replace"), st.text(max_size=10)),
        st.tuples(st.just("restore"), st.booleans()),
        st.tuples(st.just("fork")),
        st.tuples(st.just("compact"), st.integers(min_value=0, max_value=4)),
    ),
    min_size=1,
    max_size=8,
)


def check(session: Any) -> None:
    events = [loads_event(dumps_event(e)) for e in session.events]
    assert project_events(events) == session.memory_snapshot()
    assert [e.seq for e in session.events] == list(range(1, len(session.events) + 1))


budgets = st.one_of(
    st.none(),
    st.builds(
        ContextBudget,
        max_items=st.one_of(st.none(), st.integers(min_value=0, max_value=6)),
        pinned_prefix_items=st.integers(min_value=0, max_value=2),
        keep_recent_tool_results=st.one_of(st.none(), st.integers(min_value=0, max_value=2)),
    ),
)
auto_policies = st.one_of(
    st.none(),
    st.integers(min_value=2, max_value=8).map(
        lambda n: StructuredSummaryPolicy(ContextBudget(max_items=n, pinned_prefix_items=1))
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, budgets, auto_policies)
def test_fold_equals_memory_for_any_history(
    ops: list[tuple[Any, ...]], budget: ContextBudget | None, policy: Any
) -> None:
    store = InMemorySnapshotStore()
    model = ScriptedModel()
    options = AgentOptions(
        context_budget=budget, projector=TypeAwareContextProjector(), compact_policy=policy
    )
    archive = InMemoryEventArchive()
    agent = Agent(model, tools=[lookup], store=store, archive=archive, options=options)
    session = agent.new_session("prop")
    forks = 0
    for op in ops:
        if op[0] == "run":
            model._queue.extend(op[2])
            session.run(op[1])
        elif op[0] == "replace":
            outputs = [i for i in session.memory_snapshot().items if isinstance(i, ToolOutput)]
            if outputs:
                session.replace_tool_output(outputs[len(op[1]) % len(outputs)].call_id, op[1])
        elif op[0] == "restore":
            session = agent.session_from_snapshot(
                session.snapshot(), version=session.version, by_reference=op[1]
            )
        elif op[0] == "compact":
            session.compact(KeepLastPolicy(keep=op[1], summary=f"kept {op[1]}"))
        else:
            session.save()
            reader = SessionLogReader(store, archive)
            assert reader.verify(session.session_id).ok
            forks += 1
            new_id = f"fork-{forks}"
            reader.fork(session.session_id, new_id)
            session = agent.resume_session(new_id)
        check(session)
