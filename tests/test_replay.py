"""Deterministic replay in-process: identical replays, divergences, and bad input.

A run recorded by an in-process session is replayed with :func:`tether.runtime.replay.replay_run`:
the recorded model answers and tool results are played back (the tools count their executions,
and must not run again). The real-worker variants are in ``test_replay_workers.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.support import replay_agents
from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.events import EventType
from tether.core.items import ToolCall
from tether.errors import ConfigurationError, InvalidInput, RunNotFound, UnknownAgent
from tether.persistence.reader import SessionLogReader
from tether.persistence.stores.memory import InMemorySnapshotStore
from tether.producer.ops.replay import find_run, load_agent
from tether.producer.ops.rerun import boundary_before
from tether.runtime.options import AgentOptions
from tether.runtime.replay import replay_run
from tether.runtime.replay_recording import RecordedRun, recorded_run
from tether.runtime.session import AgentSession
from tether.runtime.tools import ToolContext

executions: list[str] = []


@tool(name="mark")
def local_mark(n: int, ctx: ToolContext) -> str:
    """``replay_agents.mark`` without Redis: counts executions in this process."""
    executions.append(f"{ctx.step}:{n}")
    return f"marked {n}"


def local_tally() -> Agent:
    """``tally`` with its tool counting in this process."""
    agent = replay_agents.tally()
    agent.tools = Agent(agent.model, tools=[local_mark]).tools
    return agent


def recorded_tally(runs: int = 2) -> tuple[AgentSession, RecordedRun]:
    """A session where ``tally`` ran ``runs`` times (its tool counting here); the last run."""
    session = local_tally().new_session("s-replay")
    result = None
    for index in range(runs):
        result = session.run(f"count {index}")
    assert result is not None
    return session, recorded_run(session.events, result.run_id, where="s-replay")


def test_a_recorded_multi_step_tool_run_replays_identically_without_running_a_tool() -> None:
    _, recorded = recorded_tally(runs=2)
    assert recorded.before  # the second run: its session state comes from the first
    assert recorded.last_step == replay_agents.STEPS
    assert len(executions) == 2 * replay_agents.STEPS
    executions.clear()

    report = replay_run(local_tally(), recorded)

    assert report.identical, report.summary()
    assert report.replayed_events == report.recorded_events == len(recorded.events)
    assert report.steps == replay_agents.STEPS + 1
    assert executions == []  # played back: no tool ran
    assert "identical" in report.summary()


def test_the_agents_own_model_replays_identically_when_it_decides_the_same() -> None:
    _, recorded = recorded_tally(runs=1)
    report = replay_run(replay_agents.tally(), recorded, model="agent")
    assert report.identical, report.summary()


def test_another_argument_is_the_first_divergence_with_the_expected_and_actual_call() -> None:
    _, recorded = recorded_tally(runs=1)

    report = replay_run(replay_agents.tally_shifted(), recorded, model="agent")

    d = report.divergence
    assert d is not None
    assert d.step == 0
    assert d.expected == 'model answer calling mark({"n": 1})'
    assert d.actual == 'model answer calling mark({"n": 2})'
    assert "diverged at step 0" in report.summary()


def test_a_renamed_tool_diverges_at_the_first_model_request() -> None:
    _, recorded = recorded_tally(runs=1)

    report = replay_run(replay_agents.tally_renamed(), recorded)

    d = report.divergence
    assert d is not None and d.step == 0
    assert "tools [mark]" in d.expected and "tools [stamp]" in d.actual


def test_a_changed_tool_schema_diverges_at_the_tool_result() -> None:
    _, recorded = recorded_tally(runs=1)

    report = replay_run(replay_agents.tally_strict(), recorded)

    d = report.divergence
    assert d is not None and d.step == 0
    assert d.expected == "result of mark: 'marked 1' (COMPLETED)"
    assert "InvalidArguments" in d.actual and "(FAILED)" in d.actual


def test_fewer_steps_allowed_diverge_where_the_replay_stops() -> None:
    _, recorded = recorded_tally(runs=1)
    agent = replay_agents.tally()
    agent.options = dataclasses.replace(agent.options, max_steps=2)

    report = replay_run(agent, recorded)

    d = report.divergence
    assert d is not None and d.step == 2
    assert d.expected == "STEP_START " + '{"kind": "text", "text": "react"}'
    assert d.actual == "the replay ended"


def test_a_failed_run_replays_identically_up_to_its_error() -> None:
    def boom(n: int) -> str:
        raise RuntimeError("tool broke")

    model = ScriptedModel([ModelResponse.call("c1", "boom", {"n": 1})], default_text=None)
    agent = Agent(model, tools=[tool(boom)], options=AgentOptions(max_steps=3))
    session = agent.new_session("s-fail")
    with pytest.raises(Exception, match="exhausted"):
        session.run("go")
    run_id = session.events[-1].run_id
    assert run_id is not None
    recorded = recorded_run(session.events, run_id, where="s-fail")
    assert recorded.events[-1].type is EventType.ERROR

    replayed = Agent(ScriptedModel(), tools=[tool(boom)], options=AgentOptions(max_steps=3))
    report = replay_run(replayed, recorded)

    assert report.identical, report.summary()


def test_an_unknown_run_or_a_bad_step_is_one_clear_error() -> None:
    session, recorded = recorded_tally(runs=1)
    with pytest.raises(RunNotFound, match="'run-nope'"):
        recorded_run(session.events, "run-nope", where="session default/s-replay")
    for step in (0, -1, replay_agents.STEPS + 1, True):
        with pytest.raises(InvalidInput, match=f"--from-step {step!r} is out of range"):
            boundary_before(recorded, step)
    at = boundary_before(recorded, 2)
    end = next(e for e in recorded.events if e.seq == at)
    assert (end.type, end.step) == (EventType.STEP_END, 1)


def test_a_purged_session_or_a_run_of_another_session_is_not_found() -> None:
    store = InMemorySnapshotStore()
    agent = Agent(ScriptedModel([ModelResponse.final("hi")]), store=store)
    session = agent.new_session("s-kept")
    run_id = session.run("hello").run_id
    session.save()
    reader = SessionLogReader(store)
    assert find_run(reader, run_id, tenant="default", session_id="s-kept").request is None
    with pytest.raises(RunNotFound, match="no run record names it"):
        find_run(reader, run_id, tenant="default")
    with pytest.raises(RunNotFound, match="s-gone is gone"):
        find_run(reader, run_id, tenant="default", session_id="s-gone")
    other = agent.new_session("s-other")
    other.run("hello")
    other.save()
    with pytest.raises(RunNotFound, match=f"run {run_id!r} has no events in session"):
        find_run(reader, run_id, tenant="default", session_id="s-other")


def test_an_agent_that_does_not_load_is_one_clear_error() -> None:
    with pytest.raises(ConfigurationError, match=r"module 'tests\.support\.nope' does not import"):
        load_agent("tests.support.nope:tally")
    with pytest.raises(ConfigurationError, match="has no agent named 'missing'"):
        load_agent("tests.support.replay_agents:missing")
    with pytest.raises(ConfigurationError, match="has no agent named 'STEPS'"):
        load_agent("tests.support.replay_agents:STEPS")
    with pytest.raises(UnknownAgent, match="'no-such-agent'"):
        load_agent("no-such-agent")
    assert load_agent("tests.support.replay_agents:tally_shifted").name == "tally"
    assert load_agent("echo").name == "echo"


def test_parallel_tool_calls_play_back_by_position() -> None:
    calls = (
        ToolCall(id="a", name="local", arguments='{"n": 1}'),
        ToolCall(id="b", name="local", arguments='{"n": 2}'),
    )

    def build() -> Agent:
        @tool(name="local")
        def local(n: int) -> str:
            executions.append(f"parallel:{n}")
            return f"got {n}"

        model = ScriptedModel([ModelResponse.calls(*calls), ModelResponse.final("both")])
        return Agent(model, tools=[local], options=AgentOptions(parallel_tool_calls=True))

    session = build().new_session("s-par")
    run_id = session.run("go").run_id
    executions.clear()

    report = replay_run(build(), recorded_run(session.events, run_id, where="s-par"))

    assert report.identical, report.summary()
    assert executions == []


def test_a_run_whose_earlier_events_are_gone_cannot_be_replayed() -> None:
    _, recorded = recorded_tally(runs=2)
    holed = dataclasses.replace(recorded, before=recorded.before[3:])  # seqs 1..3 purged

    with pytest.raises(InvalidInput, match=f"run {recorded.run_id!r} cannot be replayed"):
        replay_run(local_tally(), holed)
