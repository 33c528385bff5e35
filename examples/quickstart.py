"""In-process quickstart: an agent with a tool, a session, the event contract, save and resume.

Run: .venv/bin/python examples/quickstart.py
"""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, SessionLogReader, project_events, tool
from tether.persistence.archives.memory import InMemoryEventArchive
from tether.persistence.stores.memory import InMemorySnapshotStore


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


def main() -> None:
    model = ScriptedModel(
        [
            ModelResponse.call("call_1", "lookup", {"key": "a"}),
            ModelResponse.final("a is value-of-a"),
        ]
    )
    store, archive = InMemorySnapshotStore(), InMemoryEventArchive()
    agent = Agent(model, tools=[lookup], store=store, archive=archive)
    session = agent.new_session("demo-1")
    result = session.run("what is a?")
    print(f"{result.status}: {result.output} in {result.steps} steps")
    for event in session.events:
        print(f"  #{event.seq:<2} {event.type}")
    assert project_events(session.events) == session.memory_snapshot()
    session.save()
    resumed = agent.resume_session("demo-1")
    print("resumed with", len(resumed.memory_snapshot().items), "memory items")
    print("verify:", SessionLogReader(store, archive).verify("demo-1"))


if __name__ == "__main__":
    main()
