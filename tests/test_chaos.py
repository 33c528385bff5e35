"""Chaos on real worker processes: SIGKILLs under load, and a zombie worker (SIGSTOP/SIGCONT).

The CI-sized variant uses short leases (2 s TTL, 0.2 s sweep); the full-size one (``-m slow``,
also ``python -m tests.chaos_report``) uses Tether's defaults (10 s TTL, 1 s sweep).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.support.chaos_engine import format_table, run_chaos
from tests.support.chaos_stack import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_SWEEP_INTERVAL_MS,
    ChaosStack,
    open_chaos_stack,
)
from tests.support.stack import eventually, unique
from tether.core.events import EventType
from tether.core.results import RunStatus

pytest_plugins = ["tests.support.chaos_fixtures"]  # the chaos_stack and chaos fixtures


def test_sigkill_chaos_ci_sized(chaos: ChaosStack) -> None:
    figures = run_chaos(chaos, runs=120, sessions=12, kills=4, seed=9, gap_s=(0.4, 1.2))
    print("\n" + format_table(figures, "chaos (CI size, short leases)"))
    assert figures.kills == 4
    assert figures.unresolved == 0
    assert figures.failed == []
    assert (figures.lost, figures.duplicated, figures.out_of_order) == (0, 0, 0)
    assert figures.verified == figures.sessions, figures.verify_problems
    assert figures.completed == figures.runs
    # short leases: an interrupted run completes within TTL + sweep + a run, with slack
    assert figures.recovery("max") < 15.0


@pytest.mark.slow
def test_chaos_with_zombie_freezes_and_a_redis_rewind(chaos: ChaosStack) -> None:
    """#18: SIGKILLs, workers frozen right before a head PUT (SIGSTOP, thawed after a takeover)
    and Redis restarted from a snapshot a few seconds older, in one workload."""
    figures = run_chaos(
        chaos, runs=60, sessions=6, kills=2, freezes=2, rewinds=1, seed=18, gap_s=(0.4, 1.2)
    )
    print("\n" + format_table(figures, "chaos with freezes and a Redis rewind"))
    assert (figures.kills, figures.freezes, figures.rewinds) == (2, 2, 1)
    assert figures.unresolved == 0
    assert figures.failed == []
    assert (figures.lost, figures.duplicated, figures.out_of_order) == (0, 0, 0)
    assert figures.status_mismatches == []  # every handle says what the head says
    assert figures.verified == figures.sessions, figures.verify_problems  # none bricked


@pytest.mark.slow
def test_sigkill_chaos_full_size_default_leases(tmp_path: Path) -> None:
    with open_chaos_stack(
        tmp_path,
        lease_ttl_ms=DEFAULT_LEASE_TTL_MS,
        sweep_interval_ms=DEFAULT_SWEEP_INTERVAL_MS,
    ) as stack:
        figures = run_chaos(stack, runs=500, sessions=50, kills=20, seed=9, gap_s=(0.5, 2.0))
    print("\n" + format_table(figures, "chaos (full size, default leases)"))
    assert figures.kills == 20
    assert figures.ok, (figures.failed, figures.verify_problems)
    # the target at default settings: an interrupted run completes within 20 s of the kill
    assert figures.recovery("p95", once=True) <= 20.0


def _stream_entries(stack: ChaosStack, session_id: str) -> list[tuple[int, int, str | None]]:
    """``(seq, fence, run_id)`` of every entry of the session's live stream, oldest first."""
    client = stack.redis_client()
    try:
        raw = client.xrange(stack.producer.keys.events("default", session_id))
    finally:
        client.close()
    out = []
    for _entry_id, fields in raw:
        event = json.loads(fields[b"event"])
        out.append((int(fields[b"seq"]), int(fields[b"fence"]), event.get("run_id")))
    return out


def test_zombie_worker_makes_zero_stale_writes(chaos: ChaosStack) -> None:
    sid = unique("zombie")
    producer = chaos.producer
    producer.run(sid, "remember base", agent="notes", wait_s=60)
    handle = producer.run_async(sid, "sleep 3", agent="sleepy")
    zombie = eventually(lambda: chaos.running_worker(handle.run_id), timeout_s=30)
    assert zombie is not None
    lease = chaos.lease_of("default", sid)
    assert lease is not None
    zombie_fence = lease[1]
    zombie.signal(signal.SIGSTOP)
    try:
        # the lease expires while the zombie is frozen; another worker runs it again, commits
        result = handle.result(timeout=60)
        assert result.status is RunStatus.COMPLETED and result.attempts == 2
        follow = producer.run(sid, "remember after", agent="notes", wait_s=60)
        assert follow.status is RunStatus.COMPLETED
        reader = chaos.reader()
        head_before = reader.read(sid)
        segments_before = set(chaos.s3_objects(f"tether/v1/default/{sid}/"))
        stream_before = _stream_entries(chaos, sid)
    finally:
        zombie.signal(signal.SIGCONT)
    # the zombie wakes up mid-tool with a dead lease: it must notice and write nothing
    eventually(lambda: "aborted" in zombie.log_text() and "lost" in zombie.log_text(), 30)
    head_after = reader.read(sid)
    assert head_before is not None and head_after is not None
    assert head_after == head_before  # the head was not rewritten by the zombie
    assert set(chaos.s3_objects(f"tether/v1/default/{sid}/")) == segments_before
    stream_after = _stream_entries(chaos, sid)
    stale = [e for e in stream_after[len(stream_before) :] if e[1] <= zombie_fence]
    assert stale == [], f"zombie (fence {zombie_fence}) appended {len(stale)} stream entries"
    assert stream_after == stream_before
    applied = [r.run_id for r in head_after.applied]
    assert applied.count(handle.run_id) == 1
    history = reader.events(sid)
    finals = [e for e in history if e.type is EventType.FINAL_OUTPUT and e.run_id == handle.run_id]
    assert len(finals) == 1
    assert reader.verify(sid).ok
    recalled = producer.run(sid, "recall", agent="notes", wait_s=60).output
    assert recalled == "base\nafter"
    print(
        f"\nzombie: fence {zombie_fence}; stale head writes 0, stale segments 0, "
        f"stale stream entries {len(stale)}"
    )
