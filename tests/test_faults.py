"""Infrastructure faults on the real stack: Redis restarted mid-stream, S3 failing or slow.

Expected outcomes (the contract these tests pin down):

- Redis restarted without persistence loses the task queue, the run records and the live
  streams, never committed sessions (their heads and archive are in S3). A handle whose run
  record vanished resolves with :class:`~tether.errors.RunLost` (it never hangs); a run that a
  worker was executing across the restart may still commit and then resolves normally. Whether a
  lost run was applied is answered by the session head: submitting it again with the same
  request id is applied at most once. New runs work as soon as Redis is back.
- S3 failing (500s), refusing connections, answering slowly, or losing replies to writes that
  did happen: a run is retried (botocore retries, then whole attempts via the sweeper) or fails
  with a clear error; a head is never half-written and never lost: every session verifies, and
  recalls exactly the facts of its completed runs, in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.chaos_stack import ChaosStack, wait_broker_idle
from tests.support.stack import eventually, unique
from tether.core.items import UserMessage
from tether.core.results import RunStatus
from tether.errors import RetriesExhausted, RunLost, TetherError
from tether.keys import RedisKeys
from tether.persistence.headcache.redis import RedisHeadCache
from tether.producer.client import Producer
from tether.producer.handle import RunHandle
from tether.runs.contract import RunRef

pytest_plugins = ["tests.support.chaos_fixtures"]  # the chaos_stack and chaos fixtures

#: A handle must resolve within this long after a fault ends (short leases: 2 s).
RESOLVE_S = 60.0


def _outcome(handle: RunHandle) -> str:
    """``COMPLETED``, or the recorded error type of a failed run."""
    result = handle.run_result(timeout=RESOLVE_S)
    if result.status is RunStatus.COMPLETED:
        return "COMPLETED"
    assert result.error_type and result.error_message, result
    return result.error_type


# --- Redis restarted mid-stream -----------------------------------------------------------------


def test_redis_restart_mid_stream(chaos: ChaosStack) -> None:
    producer = chaos.producer
    committed = unique("kept")
    for fact in ("a1", "a2"):
        producer.run(committed, f"remember {fact}", agent="notes", wait_s=60)
    slow = [producer.run_async(unique("slow"), "sleep 1.5", agent="sleepy") for _ in range(3)]
    behind = producer.run_async(committed, "remember a3", agent="notes")
    handles = [*slow, behind]
    for handle in handles:
        assert not handle.done()  # registered with the listener before the restart
    eventually(lambda: any(h.running() for h in slow), timeout_s=30)
    started = time.monotonic()
    chaos.redis.restart()  # no persistence: queue, run records and streams are gone
    outcomes = {h.run_id: _outcome(h) for h in handles}
    resolve_s = time.monotonic() - started
    print(f"\nredis restart: outcomes {sorted(outcomes.values())}, resolved in {resolve_s:.1f} s")
    assert set(outcomes.values()) <= {"COMPLETED", "RunLost"}
    lost = [h for h in handles if outcomes[h.run_id] == "RunLost"]
    for handle in lost:
        with pytest.raises(RunLost, match="record"):
            handle.result(timeout=0)
    # committed sessions are intact and readable from S3 alone
    reader = chaos.reader()
    assert reader.verify(committed).ok
    facts = [
        item.content.removeprefix("remember ")
        for item in reader.project(committed).items
        if isinstance(item, UserMessage) and item.content.startswith("remember ")
    ]
    assert facts[:2] == ["a1", "a2"]
    # new runs work once Redis is back, on new and existing sessions
    fresh = unique("fresh")
    assert producer.run(fresh, "remember new", agent="notes", wait_s=60).output == "noted: new"
    again = producer.run(
        committed, "remember a3", agent="notes", request_id=behind.request_id, wait_s=60
    )
    assert again.status is RunStatus.COMPLETED
    recalled = producer.run(committed, "recall", agent="notes", wait_s=60).output
    assert recalled == "a1\na2\na3"  # a3 applied once, whether or not it ran before the restart
    assert reader.verify(committed).ok


# --- S3 faults through the proxy ----------------------------------------------------------------

#: Error types a run may end with while S3 misbehaves (anything else is a bug).
S3_FAILURES = {"RetriesExhausted", "StoreUnavailable"}


def _s3_workload(
    chaos: ChaosStack,
    fault: Callable[[], None],
    heal: Callable[[], None] | None = None,
    *,
    sessions: int = 4,
    per_session: int = 3,
) -> tuple[dict[str, str], float]:
    """Apply ``fault``, submit runs, ``heal`` (it may wait while they are in flight), and audit
    every session.

    The fault starts before the runs are submitted: started after, it was missed by runs that
    had all committed while the producer of the test was still submitting (a loaded machine).

    Returns the outcome counts and the seconds until every handle resolved.
    """
    producer = chaos.producer
    plan = {unique("s3"): [f"f{i}" for i in range(per_session)] for _ in range(sessions)}
    for sid in plan:  # every session exists before the fault: a lost head would show
        producer.run(sid, "remember base", agent="notes", wait_s=60)
    started = time.monotonic()
    fault()
    handles = {
        (sid, fact): producer.run_async(sid, f"remember {fact}", agent="notes")
        for sid, facts in plan.items()
        for fact in facts
    }
    if heal is not None:
        heal()
    outcomes = {key: _outcome(h) for key, h in handles.items()}
    resolve_s = time.monotonic() - started
    chaos.proxy.passthrough()
    assert set(outcomes.values()) <= {"COMPLETED"} | S3_FAILURES, outcomes
    reader = chaos.reader()
    for sid, facts in plan.items():
        done = [f for f in facts if outcomes[(sid, f)] == "COMPLETED"]
        recalled = producer.run(sid, "recall", agent="notes", wait_s=60).output
        assert recalled == "\n".join(["base", *done]), (sid, outcomes)
        report = reader.verify(sid)
        assert report.ok, report.problems
    counts: dict[str, str] = {}
    for value in outcomes.values():
        counts[value] = str(int(counts.get(value, "0")) + 1)
    return counts, resolve_s


def test_s3_brief_500s_are_retried_transparently(chaos: ChaosStack) -> None:
    counts, seconds = _s3_workload(chaos, lambda: chaos.proxy.set_mode("error", count=3))
    assert counts == {"COMPLETED": "12"}
    assert chaos.proxy.stats["error"] == 3
    print(f"\nS3 500 x3: {counts} in {seconds:.1f} s")


def test_s3_500s_for_a_while_retry_or_fail_clearly(chaos: ChaosStack) -> None:
    before = chaos.proxy.stats["error"]

    def outage() -> None:
        time.sleep(3.0)
        # on a loaded machine the retries back off past 3 s: the outage lasts until it was hit
        deadline = time.monotonic() + 30
        while chaos.proxy.stats["error"] - before <= 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        chaos.proxy.passthrough()

    counts, seconds = _s3_workload(chaos, lambda: chaos.proxy.set_mode("error"), outage)
    assert chaos.proxy.stats["error"] - before > 5  # the outage was really hit
    print(f"\nS3 500s for 3 s: {counts} in {seconds:.1f} s")


def test_s3_stopped_endpoint_retry_or_fail_clearly(chaos: ChaosStack) -> None:
    before = chaos.proxy.stats["refuse"]

    def stopped() -> None:
        time.sleep(3.0)
        chaos.proxy.passthrough()

    # _s3_workload asserts each run COMPLETED or failed with a clear S3 error, and that every
    # session recalls exactly its completed runs and verifies
    counts, seconds = _s3_workload(chaos, lambda: chaos.proxy.set_mode("refuse"), stopped)
    assert chaos.proxy.stats["refuse"] - before > 0  # connections were really refused
    assert sum(int(n) for n in counts.values()) == 4 * 3  # every handle resolved
    print(f"\nS3 refusing connections for 3 s: {counts} in {seconds:.1f} s")


def test_s3_slow_endpoint_completes(chaos: ChaosStack) -> None:
    def slow() -> None:
        time.sleep(2.0)
        chaos.proxy.passthrough()

    counts, seconds = _s3_workload(
        chaos, lambda: chaos.proxy.set_mode("delay", delay_s=0.3), slow, sessions=3, per_session=2
    )
    assert counts == {"COMPLETED": "6"}
    assert chaos.proxy.stats["delay"] > 0
    print(f"\nS3 +0.3 s per request for 2 s: {counts} in {seconds:.1f} s")


def test_s3_lost_replies_to_writes_apply_once(chaos: ChaosStack) -> None:
    """The write lands but the worker sees a 500: the retry must find it, not apply it again."""
    before = chaos.proxy.stats["lose_reply"]
    counts, seconds = _s3_workload(chaos, lambda: chaos.proxy.set_mode("lose_reply", count=12))
    assert chaos.proxy.stats["lose_reply"] - before == 12
    print(f"\nS3 12 lost replies: {counts} in {seconds:.1f} s")


def _drop_cached_head(chaos: ChaosStack, session_id: str) -> None:
    client = chaos.redis_client()
    try:
        cache = RedisHeadCache(
            client, RedisKeys(chaos.settings.namespace), ttl_ms=60_000, max_bytes=1 << 20
        )
        cache.drop(chaos.settings.tenant, session_id)
    finally:
        client.close()


@pytest.mark.slow  # three whole attempts, each with botocore's five backed-off retries: ~40 s
def test_retries_exhausted_is_a_clear_error(chaos: ChaosStack) -> None:
    """Every attempt fails reading the head: the run provably never committed, and the budget
    ends it. The cached head is dropped first (as ``tether sessions drop-cache`` does): with it,
    the first attempt restores from Redis and fails at its head PUT, whose effect S3's 500
    leaves in doubt, so no attempt budget may end the run while S3 is down (it was seen
    attempted 6 times in 120 s, the test timing out)."""
    sid = unique("s3down")
    chaos.producer.run(sid, "remember base", agent="notes", wait_s=60)
    _drop_cached_head(chaos, sid)
    chaos.proxy.set_mode("error")
    try:
        handle = chaos.producer.run_async(sid, "remember never", agent="notes")
        with pytest.raises(RetriesExhausted, match=r"attempted 3 times.*StoreUnavailable"):
            handle.result(timeout=120)
    finally:
        chaos.proxy.passthrough()
    result = handle.run_result(timeout=0)
    assert result.error_type == "RetriesExhausted"
    assert result.attempts == 3  # the attempts made (#29 item 7: it said 0)
    assert "remember never" not in (chaos.producer.run(sid, "recall", agent="notes").output or "")
    assert chaos.reader().verify(sid).ok
    assert isinstance(handle.exception(timeout=0), TetherError)


@pytest.mark.slow  # waits out the sweeper's backlog patience (5 lease TTLs): ~13 s
def test_recovery_is_sent_to_the_queue_that_knows_the_agent(chaos: ChaosStack) -> None:
    """Runs remember their queue: the fleet's sweepers (queue ``tether``, no ``shout`` agent)
    re-enqueue a stale session to the run's own queue, never to themselves."""
    env = dict(chaos.env, TETHER_AGENT_MODULES="tests.support.custom_agents", TETHER_QUEUE="shouty")
    producer = Producer(chaos.settings.model_copy(update={"queue": "shouty"}))
    sid = unique("route")
    try:
        handle = producer.run_async(sid, "hello", agent="shout")  # no worker serves it yet

        def kicked() -> bool:
            return any(
                "sweeper re-enqueued" in line and sid in line
                for w in chaos.workers
                for line in w.log_text().splitlines()
            )

        eventually(kicked, timeout_s=30)
        wait_broker_idle(chaos)  # a drain sent to the fleet's queue would have run (and failed)
        view = producer.runs.get(RunRef(producer.settings.tenant, sid, handle.run_id))
        assert view is not None and view.result is None, view
        worker = chaos.start_worker(unique("shouty"), env, queue="shouty")
        try:
            assert handle.result(timeout=60).output == "HELLO"
        finally:
            worker.stop()
            chaos.extra_workers.remove(worker)
    finally:
        producer.close()
