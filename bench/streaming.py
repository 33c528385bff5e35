"""P10: live token streaming, side by side in one run.

- **P10** delta latency: a worker's model hands a piece to the run's sink (stamped with
  ``time.time_ns()`` then) -> a client's ``RunHandle.stream()`` yields it (same machine clock);
  it covers the publisher thread's batching, the script call, and the client's ``XREAD``.
- **P10r** publish rate: a model that hands out pieces as fast as its loop goes; pieces per
  second from the first piece handed out to the last one received by the client, all checked
  to arrive.
- **P10e** a streamed run's end-to-end time (submit -> result, 2 steps, 300 pieces) against the
  same run on a worker with streaming off (``TETHER_DELTA_MAX_LEN=0``): one single-process
  worker per side on its own queue, runs alternating between the sides.
- **P10f** commit -> ``RunResult`` at a reader that streams the 300-piece run (the run's end
  mark wakes the reader at the commit), against the same run read with ``result()`` alone.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.agents import P10_ANSWER
from bench.core import RESULT_TIMEOUT_S, Bench, BenchFailure, Measure, Stats, Target, check_result
from bench.stack import bench_settings
from tether.persistence.deltas import LiveDelta
from tether.persistence.redis_conn import redis_from_url
from tether.producer.client import Producer
from tether.runs.contract import RunResult

ON_QUEUE, OFF_QUEUE = "p10-on", "p10-off"


Received = list[tuple[int, LiveDelta]]


def _stream(bench: Bench, session_id: str, text: str) -> tuple[Received, RunResult]:
    """Run ``p10-stamped`` and read its stream: ``(receipt ns, piece)`` pairs and the result."""
    handle = bench.producer.run_async(session_id, text, agent="p10-stamped")
    got: Received = []
    result: RunResult | None = None
    for item in handle.stream(idle_timeout_s=RESULT_TIMEOUT_S):
        if isinstance(item, LiveDelta):
            got.append((time.time_ns(), item))
        elif isinstance(item, RunResult):
            result = item
    if result is None:
        raise BenchFailure(f"P10 run {handle.run_id} ended without a result in its stream")
    check_result(result, "".join(d.text for _t, d in got))
    return got, result


def _stamps(got: Received) -> list[tuple[int, int]]:
    """``(receipt ns, stamp ns)`` per piece: an entry may join pieces published together."""
    return [(received, int(stamp)) for received, d in got for stamp in d.text.split()]


def p10_delta_latency(bench: Bench) -> Measure:
    """Piece handed to the sink in a worker -> yielded by ``RunHandle.stream()``."""
    sz = bench.sizes
    got, _result = _stream(bench, bench.sid("p10", 0), f"{sz.p10_pieces} {sz.p10_interval_s}")
    stamps = _stamps(got)
    if len(stamps) != sz.p10_pieces:
        raise BenchFailure(f"P10 received {len(stamps)} of {sz.p10_pieces} pieces")
    latencies = [(received - sent) / 1e6 for received, sent in stamps[sz.p10_warmup :]]
    stats = Stats.of(latencies)
    return Measure(
        id="P10",
        name="live piece latency, worker's model -> RunHandle.stream() client",
        unit="ms",
        tether=stats,
        baseline=None,
        baseline_name="-",
        value=stats.p99,
        value_of="p99 (ms)",
        target=Target("<=", 5.0, "ms"),
        value_unit="ms",
        note=(
            f"{stats.n} pieces (after {sz.p10_warmup} warm-up) of one run whose model hands out "
            f"one every {sz.p10_interval_s * 1000:g} ms, each stamped with time.time_ns() as it "
            "goes to the run's sink; latency = time.time_ns() when RunHandle.stream() yields it "
            "minus the stamp (publisher thread, deltas_append.lua, XREAD on events + deltas)"
        ),
    )


def p10r_publish_rate(bench: Bench) -> Measure:
    """Pieces per second one worker publishes, from a model that does nothing else."""
    sz = bench.sizes
    got, _result = _stream(bench, bench.sid("p10r", 0), f"{sz.p10_burst} 0")
    stamps = _stamps(got)
    if len(stamps) != sz.p10_burst or got[0][1].index != 0:
        raise BenchFailure(f"P10r received {len(stamps)} of {sz.p10_burst} pieces")
    elapsed_s = (stamps[-1][0] - stamps[0][1]) / 1e9
    rate = len(stamps) / elapsed_s
    return Measure(
        id="P10r",
        name="live pieces one worker publishes per second",
        unit="pieces/s",
        tether=Stats.of([rate]),
        baseline=None,
        baseline_name="-",
        value=rate,
        value_of="pieces/s",
        target=Target(">=", 5000.0, "pieces/s"),
        value_unit="pieces/s",
        extra={"entries": len(got), "entries per second": round(len(got) / elapsed_s, 1)},
        note=(
            f"one run whose model hands out {sz.p10_burst} pieces back to back; from the first "
            f"piece handed out to the last received by a RunHandle.stream() client "
            f"({elapsed_s:.3f} s), every piece checked to arrive; the publisher joins pieces that "
            f"accumulate during a round trip, so they came as {len(got)} channel entries"
        ),
    )


def _timed(producer: Producer, session_id: str) -> float:
    start = time.perf_counter()
    result = producer.run(session_id, "go", agent="p10-answer", wait_s=RESULT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    check_result(result, P10_ANSWER)
    return elapsed


def p10e_streamed_run(bench: Bench) -> Measure:
    """The same 2-step run streamed and unstreamed, alternating, one worker per side."""
    sz, stack = bench.sizes, bench.stack
    workers = [
        stack.start_tether_worker("p10on", ON_QUEUE),
        stack.start_tether_worker("p10off", OFF_QUEUE, {"TETHER_DELTA_MAX_LEN": "0"}),
    ]
    producers = [
        Producer(bench_settings(stack.redis_url, stack.s3_endpoint, queue=q))
        for q in (ON_QUEUE, OFF_QUEUE)
    ]
    times: list[list[float]] = [[], []]
    try:
        for n in range(sz.p10_runs + sz.p1_warmup):
            sides = (0, 1) if n % 2 == 0 else (1, 0)  # which side goes first alternates
            for side in sides:
                elapsed = _timed(producers[side], bench.sid(f"p10e{side}", n % sz.p1_sessions))
                if n >= sz.p1_warmup:
                    times[side].append(elapsed * 1000)
    finally:
        for producer in producers:
            producer.close()
        for worker in workers:
            worker.stop()
            stack.extra_workers.remove(worker)
    streamed, plain = Stats.of(times[0]), Stats.of(times[1])
    return Measure(
        id="P10e",
        name="streamed run end-to-end vs the same run unstreamed",
        unit="ms",
        tether=streamed,
        baseline=plain,
        baseline_name="the same run on a worker with TETHER_DELTA_MAX_LEN=0",
        value=statistics.median(times[0]) / statistics.median(times[1]),
        value_of="median ratio",
        target=Target("<=", 1.1),
        note=(
            f"{sz.p10_runs} runs per side after {sz.p1_warmup} warm-up, alternating; a run is a "
            "tool step then a 300-word answer (one piece per word, 2 steps, ~320 pieces "
            "streamed); Producer.run latency; one single-process worker per side on its own queue"
        ),
    )


def _commit_ms(client: Any, done_key: str, run_id: str) -> float:
    """When the run's finish was committed: the id of its entry in the namespace's completion
    feed (Redis's clock in ms, the same machine's; the entry is written in the finish's round
    trip). Floored to the ms, so a latency from it reads up to 1 ms long, never short."""
    for entry_id, fields in client.xrevrange(done_key, count=200):
        if fields.get(b"run_id") == run_id.encode():
            return float(entry_id.split(b"-")[0])
    raise BenchFailure(f"P10f: run {run_id} has no entry in {done_key}")


def _done_key(bench: Bench, session_id: str) -> str:
    """The namespace completion feed's shard the run of ``session_id`` is announced in."""
    keys, tenant = bench.producer.keys, bench.producer.settings.tenant
    return keys.done(keys.feed_shard_of(None, tenant, session_id))


def _result_at_reader_ms(bench: Bench, session_id: str, streamed: bool) -> tuple[str, float, str]:
    """Run ``p10-answer``; the wall clock (ms) when the reader had its RunResult: from
    ``RunHandle.stream()`` while it streams, or ``RunHandle.result()`` with no reader; and
    the text the stream's pieces made (empty without a reader)."""
    handle = bench.producer.run_async(session_id, "go", agent="p10-answer")
    result: RunResult | None = None
    text: list[str] = []
    if streamed:
        for item in handle.stream(idle_timeout_s=RESULT_TIMEOUT_S):
            if isinstance(item, LiveDelta) and item.kind == "text" and item.step == 1:
                text.append(item.text)
            elif isinstance(item, RunResult):
                result = item
    else:
        result = handle.result(timeout=RESULT_TIMEOUT_S)
    at_ms = time.time_ns() / 1e6
    if result is None:
        raise BenchFailure(f"P10f run {handle.run_id} ended without a result in its stream")
    check_result(result, P10_ANSWER)
    return handle.run_id, at_ms, "".join(text)


def p10f_result_at_reader(bench: Bench) -> Measure:
    """Commit -> the RunResult at a reader streaming the 300-piece run, against the same run
    read with ``result()`` alone (alternating)."""
    sz = bench.sizes
    client = redis_from_url(bench.stack.redis_url)
    times: list[list[float]] = [[], []]
    short = 0  # streamed runs whose pieces did not make the whole answer (a piece lost)
    try:
        for n in range(sz.p10_runs + sz.p1_warmup):
            for side in (0, 1) if n % 2 == 0 else (1, 0):
                sid = bench.sid(f"p10f{side}", n)
                run_id, at_ms, text = _result_at_reader_ms(bench, sid, side == 0)
                short += side == 0 and text != P10_ANSWER
                if n >= sz.p1_warmup:
                    times[side].append(at_ms - _commit_ms(client, _done_key(bench, sid), run_id))
    finally:
        client.close()
    streamed, alone = Stats.of(times[0]), Stats.of(times[1])
    return Measure(
        id="P10f",
        name="commit -> RunResult at a RunHandle.stream() reader (300-piece run)",
        unit="ms",
        tether=streamed,
        baseline=alone,
        baseline_name="RunHandle.result() with no reader, the same run",
        value=streamed.median,
        value_of="p50 (ms)",
        target=Target("<=", 5.0, "ms"),
        value_unit="ms",
        extra={
            "p99 ms": round(streamed.p99, 2),
            "p99 target ms": 20.0,
            "streamed runs missing pieces": short,
        },
        note=(
            f"{sz.p10_runs} runs per side after {sz.p1_warmup} warm-up, alternating, each on a "
            "fresh session; a run is a tool step then a 300-word answer streamed word by word; "
            "commit = the ms id of the run's entry in the namespace's completion feed (written "
            "in the finish's round trip, Redis's clock, floored: up to 1 ms is added); reader = "
            "time.time_ns() when stream() yielded the RunResult (or result() returned); "
            f"{short} of {sz.p10_runs + sz.p1_warmup} streamed runs missed a piece of the answer"
        ),
    )
