"""#49 on real prefork workers, redis-server and S3 over HTTP, with the test MCP server
(:mod:`tests.support.mcp_server`, stdio) in ``TETHER_MCP_SERVERS``.

- One connection per worker process serves every run (the servers count their starts).
- A worker SIGKILLed during an MCP call: the run resumes on the other worker, which calls the
  tool once more with the same idempotency key (the server counts the key twice), and never
  again once the result is recorded; the servers do not outlive a warm shutdown.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.mcp_agents import servers_env
from tests.support.stack import Stack, eventually, unique
from tests.test_durable_workers import _holder
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer import Producer

QUEUE = "mcpq"


@dataclass
class Fleet:
    workers: WorkerFleet
    producer: Producer
    records: Path


@pytest.fixture(scope="module")
def fleet(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    records = tmp_path_factory.mktemp("mcp-records")
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.mcp_agents",
        TETHER_QUEUE=QUEUE,
        TETHER_MCP_SERVERS=servers_env(records),
    )
    workers = WorkerFleet(
        env, tmp_path_factory.mktemp("mcp-logs"), count=2, queue=QUEUE, prefix="mcp"
    )
    producer = Producer(stack.settings.model_copy(update={"queue": QUEUE}))
    try:
        workers.start()
        yield Fleet(workers, producer, records)
    finally:
        workers.stop()
        producer.close()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_one_connection_per_worker_process_serves_every_run(fleet: Fleet) -> None:
    handles = [
        fleet.producer.run_async(unique("reuse"), f'add {{"a": {n}, "b": 1}}', agent="mcp")
        for n in range(20)
    ]
    results = [h.result(timeout=120) for h in handles]
    assert [r.output for r in results] == [str(n + 1) for n in range(20)]
    assert 1 <= len(lines(fleet.records / "starts.log")) <= 2  # counted by the servers


def test_a_call_cut_off_by_a_sigkill_is_repeated_once_with_the_same_key(
    fleet: Fleet, stack: Stack
) -> None:
    calls = fleet.records / "calls.log"
    sid = unique("killed")
    handle = fleet.producer.run_async(sid, 'block_once {"name": "killed"}', agent="mcp")
    eventually(lambda: any(line.startswith("killed ") for line in lines(calls)), timeout_s=60)
    victim = eventually(lambda: _holder(fleet.workers, stack, handle.run_id), timeout_s=10)
    victim.kill()
    result = handle.result(timeout=120)
    assert result.status is RunStatus.COMPLETED, result
    assert result.output == "killed: done on call 2"  # the second call with the key answered
    assert result.attempts == 2
    keys = [line.split(" ", 1)[1] for line in lines(calls) if line.startswith("killed ")]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("tk-")
    history = stack.reader().events(sid)
    results = [e for e in history if e.type is EventType.TOOL_RESULT]
    assert len(results) == 1  # one recorded result: never called again
    pids = [int(p) for p in lines(fleet.records / "starts.log")]
    fleet.workers.stop()  # a warm shutdown of the survivor
    eventually(lambda: not any(alive(p) for p in pids), timeout_s=30)
