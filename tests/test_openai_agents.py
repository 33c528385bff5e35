"""The OpenAI Agents SDK on Tether: ``TetherSession`` under the SDK's ``Runner`` (offline, a
model stub on the SDK's own ``Model`` interface), the Session protocol's edge cases, concurrent
writers, two processes in turn, and an SDK agent on a real Tether worker.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import Stack, unique
from tether import SessionLogReader
from tether.core.events import EventType
from tether.core.fold import project_events
from tether.core.items import ExternalItem, UserMessage
from tether.dev.workers import WorkerFleet
from tether.errors import InvalidInput
from tether.integrations.openai_agents import TetherSession
from tether.persistence.storage_url import open_storage
from tether.producer.client import Producer

# The SDK (about 2 s to import) is imported by the tests that use it, not when pytest collects
# this file in every test process.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("agents") is None,
    reason="needs the optional extra: pip install 'tether[agents]'",
)

#: Items of the shapes the SDK stores, with nesting and non-ASCII text.
SAMPLE_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Grüße 👋"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "typed"}]},
    {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "f",
        "arguments": '{"a": [1, 2.5]}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "out"},
    {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "done", "annotations": [], "logprobs": []}],
    },
]


def file_session(root: Path, session_id: str = "sdk-1") -> TetherSession:
    store, archive = open_storage(f"file://{root}")
    return TetherSession(session_id, store=store, archive=archive)


def reader_of(root: Path) -> SessionLogReader:
    return SessionLogReader(*open_storage(f"file://{root}"))


def test_runner_multi_turn_conversation_on_a_tether_session(tmp_path: Path) -> None:
    from agents import Runner
    from agents.memory import Session

    from tests.support.sdk_agents import shouter

    session = file_session(tmp_path)
    assert isinstance(session, Session)  # the SDK's own protocol check
    agent = shouter()

    async def converse() -> list[str]:
        outputs = []
        for text in ("hello", "again", "once more"):
            result = await Runner.run(agent, text, session=session)
            outputs.append(str(result.final_output))
        return outputs

    outputs = asyncio.run(converse())

    assert outputs == [
        "heard HELLO after 1 user turns",
        "heard AGAIN after 2 user turns",
        "heard ONCE MORE after 3 user turns",
    ]
    items = asyncio.run(session.get_items())
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ] * 3
    reader = reader_of(tmp_path)
    report = reader.verify("sdk-1")
    assert report.ok, report.problems
    events = reader.events("sdk-1")
    assert {e.type for e in events} == {EventType.MEMORY_ITEMS_APPENDED}
    head = reader.read("sdk-1")
    assert head is not None and project_events(events) == head.memory
    # the user turns are Tether user messages; the rest is kept verbatim
    assert [type(i) for i in head.memory.items[:2]] == [UserMessage, ExternalItem]


def test_items_round_trip_losslessly_and_get_items_limit(tmp_path: Path) -> None:
    session = file_session(tmp_path)
    asyncio.run(session.add_items(SAMPLE_ITEMS[:3]))
    asyncio.run(session.add_items(SAMPLE_ITEMS[3:]))
    asyncio.run(session.add_items([]))  # nothing to write: no event

    assert asyncio.run(session.get_items()) == SAMPLE_ITEMS
    assert asyncio.run(session.get_items(limit=2)) == SAMPLE_ITEMS[-2:]
    assert asyncio.run(session.get_items(limit=0)) == []
    assert asyncio.run(session.get_items(limit=100)) == SAMPLE_ITEMS
    assert asyncio.run(session.get_items(limit=-1)) == SAMPLE_ITEMS  # as SQLite's LIMIT -1
    with pytest.raises(InvalidInput, match="limit"):
        asyncio.run(session.get_items(limit="2"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="JSON"):
        asyncio.run(session.add_items([{"role": "user", "content": object()}]))
    returned = asyncio.run(session.get_items())
    returned[0]["content"] = "mutated"  # callers get copies
    returned[-1]["content"][0]["annotations"].append("mutated")  # deep ones
    assert asyncio.run(session.get_items()) == SAMPLE_ITEMS
    assert [e.seq for e in reader_of(tmp_path).events("sdk-1")] == [1, 2]


#: A credential a user pastes into a conversation (the shape of an OpenAI project key).
PASTED = "sk-proj-" + "Q7" * 16


def _every_file_text(root: Path) -> str:
    return "".join(
        p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file()
    )


def test_a_pasted_secret_is_redacted_before_the_session_stores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = f"my key is {PASTED}, keep it"
    items = [
        {"role": "user", "content": said},  # stored as a Tether user message
        {"type": "function_call_output", "call_id": "c1", "output": said},  # as the SDK's JSON
    ]
    session = file_session(tmp_path / "default")
    asyncio.run(session.add_items(items))
    asyncio.run(session.add_items(items[:1]))  # an append stored as a journal patch
    stored = asyncio.run(session.get_items())
    assert [item.get("content", item.get("output")) for item in stored] == [
        "my key is ***, keep it"
    ] * 3
    assert PASTED not in _every_file_text(tmp_path / "default")
    assert all(
        PASTED not in json.dumps(e.model_dump(mode="json"))
        for e in reader_of(tmp_path / "default").events("sdk-1")
    )

    # from_settings also masks the deployment's own secrets, as a worker does
    api_key = "not-a-pattern-but-the-configured-key-123"
    monkeypatch.setenv("TETHER_STORE_URL", f"file://{tmp_path / 'settings'}")
    monkeypatch.setenv("TETHER_OPENAI_API_KEY", api_key)
    configured = TetherSession.from_settings("sdk-2")
    asyncio.run(configured.add_items([{"role": "user", "content": f"{api_key} and {PASTED}"}]))
    assert asyncio.run(configured.get_items()) == [{"role": "user", "content": "*** and ***"}]
    assert api_key not in _every_file_text(tmp_path / "settings")

    # redact=None is the documented way to store every text as given
    store, archive = open_storage(f"file://{tmp_path / 'verbatim'}")
    verbatim = TetherSession("sdk-3", store=store, archive=archive, redact=None)
    asyncio.run(verbatim.add_items(items[:1]))
    assert asyncio.run(verbatim.get_items()) == items[:1]


def test_pop_on_empty_pop_and_clear(tmp_path: Path) -> None:
    session = file_session(tmp_path)
    assert asyncio.run(session.pop_item()) is None  # empty, and never stored
    asyncio.run(session.clear_session())
    assert reader_of(tmp_path).read("sdk-1") is None  # neither wrote anything

    asyncio.run(session.add_items(SAMPLE_ITEMS))
    assert asyncio.run(session.pop_item()) == SAMPLE_ITEMS[-1]
    assert asyncio.run(session.pop_item()) == SAMPLE_ITEMS[-2]
    assert asyncio.run(session.get_items()) == SAMPLE_ITEMS[:-2]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None

    reader = reader_of(tmp_path)
    events = reader.events("sdk-1")
    assert [e.type for e in events] == [
        EventType.MEMORY_ITEMS_APPENDED,
        EventType.MEMORY_ITEMS_REMOVED,
        EventType.MEMORY_ITEMS_REMOVED,
        EventType.MEMORY_ITEMS_REMOVED,
    ]
    assert reader.verify("sdk-1").ok


def test_concurrent_writers_lose_no_item(tmp_path: Path) -> None:
    writers, per_writer = 8, 10  # 80 writes: the archive is flushed twice (every 32 events)

    def write(n: int) -> None:
        session = file_session(tmp_path, "sdk-race")  # one object per writer, like processes
        for i in range(per_writer):
            session.append_items([{"role": "user", "content": f"w{n}-{i}"}])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    items = file_session(tmp_path, "sdk-race").read_items()
    texts = [str(item["content"]) for item in items]
    assert sorted(texts) == sorted(f"w{n}-{i}" for n in range(writers) for i in range(per_writer))
    for n in range(writers):  # each writer's items in its own order
        mine = [t for t in texts if t.startswith(f"w{n}-")]
        assert mine == [f"w{n}-{i}" for i in range(per_writer)]
    reader = reader_of(tmp_path)
    assert len(reader.events("sdk-race")) == writers * per_writer  # one event per write
    assert reader.verify("sdk-race").ok
    assert reader.archive is not None and reader.archive.last_seq("default", "sdk-race") >= 64


TURN = """
import sys
from agents import Runner
from tests.support.sdk_agents import shouter
from tether.integrations.openai_agents import TetherSession

session = TetherSession.from_settings(sys.argv[1])
print(Runner.run_sync(shouter(), sys.argv[2], session=session).final_output)
"""


@pytest.mark.slow  # two interpreter starts: ~7 s
def test_two_processes_in_turn_then_sessions_verify(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "TETHER_STORE_URL": f"file://{tmp_path / 'store'}",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
    }

    def python(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert python("-c", TURN, "sdk-2p", "first") == "heard FIRST after 1 user turns"
    assert python("-c", TURN, "sdk-2p", "second") == "heard SECOND after 2 user turns"

    verified = json.loads(
        python("-m", "tether.producer.ops.cli", "sessions", "verify", "sdk-2p", "--json")
    )
    assert [(r["session_id"], r["ok"]) for r in verified] == [("sdk-2p", True)]
    items = file_session(tmp_path / "store", "sdk-2p").read_items()
    assert [i["content"] for i in items if i.get("role") == "user"] == ["first", "second"]


def test_an_sdk_agent_runs_on_a_real_tether_worker(live_stack: Stack, tmp_path: Path) -> None:
    from agents import Runner

    from tests.support.sdk_agents import shouter

    queue = "sdkq"
    env = dict(
        live_stack.env,
        TETHER_AGENT_MODULES="tests.support.sdk_agents",
        TETHER_QUEUE=queue,
        OPENAI_AGENTS_DISABLE_TRACING="1",
    )
    settings = live_stack.settings.model_copy(update={"queue": queue})
    sid = unique("sdk")
    fleet = WorkerFleet(env, tmp_path, count=1, queue=queue, prefix="sdk")
    try:
        fleet.start()
        with Producer(settings) as producer:
            first = producer.run(sid, "hello", agent="shouter", wait_s=60)
            second = producer.run(sid, "again", agent="shouter", wait_s=60)
    finally:
        fleet.stop()

    assert (first.status, first.output) == ("COMPLETED", "heard HELLO after 1 user turns")
    assert second.output == "heard AGAIN after 2 user turns"  # the worker gave it the history
    reader = live_stack.reader()
    assert reader.verify(sid).ok
    # the same conversation, read and continued in-process through the SDK's Session
    session = TetherSession(sid, store=reader.store, archive=reader.archive)
    items = session.read_items()
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ] * 2
    result = Runner.run_sync(shouter(), "locally", session=session)
    assert result.final_output == "heard LOCALLY after 3 user turns"
    assert reader.verify(sid).ok
