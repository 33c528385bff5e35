"""The batch board seam (the console's Batches page reads it): one contract suite on the
in-memory board and on Redis (a private redis-server), and the reporter a batch feeds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tether.keys import RedisKeys
from tether.producer.ops.batch.boards import (
    BatchBoard,
    BatchRecord,
    BatchState,
    MemoryBatchBoard,
    RedisBatchBoard,
)
from tether.producer.ops.batch.boards.reporter import BatchReporter
from tether.producer.ops.batch.results import CaseResult
from tether.producer.ops.batch.summary import SummaryStats


@pytest.fixture(params=["memory", "redis"])
def board(request: pytest.FixtureRequest) -> Iterator[BatchBoard]:
    if request.param == "memory":
        yield MemoryBatchBoard()
        return
    client: redis.Redis = request.getfixturevalue("redis_client")
    yield RedisBatchBoard(client, RedisKeys(f"t{time.monotonic_ns()}"), ttl_s=60)


def record(batch_id: str, tenant: str = "acme", **fields: object) -> BatchRecord:
    base: dict[str, object] = {
        "batch_id": batch_id,
        "tenant": tenant,
        "results_path": "/r",
        "total": 10,
        "started_at_ms": 1,
    }
    base.update(fields)
    return BatchRecord.model_validate(base)


def test_a_record_put_reads_back_and_is_replaced(board: BatchBoard) -> None:
    assert board.get("acme", "b-1") is None
    board.put(record("b-1", finished=3, updated_at_ms=100))
    board.put(
        record("b-1", finished=7, graded=5, passed=4, state=BatchState.FINISHED, updated_at_ms=200)
    )
    got = board.get("acme", "b-1")
    assert got is not None and got.finished == 7 and got.state is BatchState.FINISHED
    assert got.pass_rate == pytest.approx(0.8) and got.progress == pytest.approx(0.7)
    assert [r.batch_id for r in board.list("acme")] == ["b-1"]


def test_list_is_the_tenants_own_most_recent_first(board: BatchBoard) -> None:
    board.put(record("old", updated_at_ms=int(time.time() * 1000) - 5000))
    board.put(record("new", updated_at_ms=int(time.time() * 1000)))
    board.put(record("theirs", tenant="other"))
    assert [r.batch_id for r in board.list("acme")] == ["new", "old"]
    assert [r.batch_id for r in board.list("other")] == ["theirs"]
    assert [r.batch_id for r in board.list("acme", limit=1)] == ["new"]


def test_an_expired_redis_record_leaves_the_index(redis_client: redis.Redis) -> None:
    keys = RedisKeys(f"t{time.monotonic_ns()}")
    board = RedisBatchBoard(redis_client, keys, ttl_s=60)
    board.put(record("gone"))
    board.put(record("kept"))
    redis_client.delete(keys.batch("acme", "gone"))  # as its PX expiry would
    assert [r.batch_id for r in board.list("acme")] == ["kept"]
    assert redis_client.zrange(keys.batches("acme"), 0, -1) == [b"kept"]
    assert 0 < redis_client.pttl(keys.batch("acme", "kept")) <= 60_000


def line(case_id: str, passed: bool | None, status: str = "COMPLETED") -> CaseResult:
    return CaseResult(
        batch_id="b", id=case_id, line=1, session_id="s", agent="a", status=status, passed=passed
    )


def test_the_reporter_writes_start_progress_and_end(tmp_path: Path) -> None:
    board = MemoryBatchBoard()
    stats = SummaryStats()
    reporter = BatchReporter(
        board,
        tenant="acme",
        batch_id="b",
        results=tmp_path / "r.jsonl",
        total=3,
        stats=stats,
        interval_s=0.0,
    )
    reporter.start()
    first = board.get("acme", "b")
    assert first is not None and first.state is BatchState.RUNNING and first.finished == 0
    assert first.results_path == str((tmp_path / "r.jsonl").resolve())
    stats.add(line("c1", True))
    stats.add(line("c2", None, status="FAILED"))
    reporter.tick()
    mid = board.get("acme", "b")
    assert mid is not None and (mid.finished, mid.failed, mid.graded, mid.passed) == (2, 1, 1, 1)
    reporter.end(finished=False)
    last = board.get("acme", "b")
    assert last is not None and last.state is BatchState.STOPPED


def test_a_board_that_fails_never_stops_the_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a Redis board whose server is not there (port 1 refuses connections)
    away = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    board = RedisBatchBoard(away, RedisKeys("t"), ttl_s=60)
    reporter = BatchReporter(
        board,
        tenant="acme",
        batch_id="b",
        results=tmp_path / "r",
        total=1,
        stats=SummaryStats(),
        interval_s=0.0,
    )
    reporter.start()
    reporter.tick()
    reporter.end(finished=True)
    warnings = [r for r in caplog.records if "progress record" in r.getMessage()]
    assert len(warnings) == 1  # once, not once per case
