"""Live token streaming on real workers (a streaming agent from tests/support/stream_agents.py):
pieces arrive before their step's MODEL_RESPONSE and join to its text, two steps' pieces never
interleave, a reader attaching mid-step sees the step from its first piece, a SIGKILL mid-stream
redoes the step once on the other worker and the reader shows it without duplicated text, a
cancel mid-stream ends the stream with the CANCELLED result, nothing of the pieces reaches the
head, the archive or the event stream, and the channel is bounded and expires."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from tests.support.stack import Stack, eventually, unique
from tests.support.stream_agents import FINAL_TEXT, HALF, STEP0_TEXT
from tests.support.stream_stack import MAX_LEN, TTL_S, Streaming
from tether.core.events import AgentEvent, EventType
from tether.core.results import RunStatus
from tether.dev.workers import WorkerProcess
from tether.persistence.deltas import LiveDelta
from tether.persistence.deltas.live import LiveText
from tether.producer.handle import RunHandle
from tether.runs.contract import RunResult
from tether.runs.queue.base import CancelOutcome

Item = AgentEvent | LiveDelta | RunResult


def collect(handle: RunHandle, out: list[Item]) -> threading.Thread:
    """Read ``handle.stream()`` into ``out`` on a thread."""

    def read() -> None:
        out.extend(handle.stream(idle_timeout_s=60))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def joined(items: list[Item], step: int, kind: str = "text") -> str:
    return "".join(
        i.text for i in items if isinstance(i, LiveDelta) and i.step == step and i.kind == kind
    )


def response(items: list[Item], step: int) -> AgentEvent:
    return next(
        i
        for i in items
        if isinstance(i, AgentEvent) and i.type is EventType.MODEL_RESPONSE and i.step == step
    )


def test_pieces_come_before_the_response_join_to_it_and_never_interleave(
    streaming: Streaming,
) -> None:
    token = uuid.uuid4().hex[:8]
    handle = streaming.producer.run_async(unique("st"), f"gate:{token}", agent="streamer")
    items: list[Item] = []
    reader = collect(handle, items)
    eventually(lambda: streaming.midway(token), timeout_s=30)
    eventually(lambda: any(isinstance(i, LiveDelta) for i in items), timeout_s=30)
    streaming.open(token)
    reader.join(60)
    result = items[-1]
    assert isinstance(result, RunResult) and result.status is RunStatus.COMPLETED
    assert result.output == FINAL_TEXT
    steps = [i.step for i in items if isinstance(i, LiveDelta)]
    assert steps == sorted(steps) and set(steps) == {0, 1}  # step 1's pieces after step 0's
    for step, text in ((0, STEP0_TEXT), (1, FINAL_TEXT)):
        events = [i for i in items if isinstance(i, AgentEvent) and i.step == step]
        request_at = items.index(next(e for e in events if e.type is EventType.MODEL_REQUEST))
        response_at = items.index(response(items, step))
        pieces = [n for n, i in enumerate(items) if isinstance(i, LiveDelta) and i.step == step]
        assert request_at < pieces[0] and pieces[-1] < response_at
        assert pieces == list(range(pieces[0], pieces[-1] + 1))  # nothing between them
        indexes = [items[n].index for n in pieces]  # type: ignore[union-attr]
        assert indexes[0] == 0 and indexes == sorted(set(indexes))
        payload = response(items, step).payload
        assert joined(items, step) == text == payload.text  # type: ignore[union-attr]
    call = response(items, 0).payload.tool_calls[0]  # type: ignore[union-attr]
    assert joined(items, 0, "tool_arguments") == call.arguments


def test_a_reader_attaching_mid_step_sees_the_step_from_its_first_piece(
    streaming: Streaming,
) -> None:
    token, sid = uuid.uuid4().hex[:8], unique("st-mid")
    handle = streaming.producer.run_async(sid, f"gate:{token}", agent="streamer")
    tenant = streaming.producer.settings.tenant
    half = "".join(w + " " for w in STEP0_TEXT.split()[:HALF])

    def step_so_far() -> str:
        return "".join(d.text for d in streaming.channel.current_step(tenant, sid)[0])

    eventually(lambda: step_so_far() == half, timeout_s=30)
    session_items: list[Item] = []
    run_items: list[Item] = []

    def follow_session() -> None:
        for item in streaming.producer.stream(sid, idle_timeout_s=30):
            session_items.append(item)
            if isinstance(item, AgentEvent) and item.type is EventType.STEP_END and item.step == 1:
                return

    readers = [threading.Thread(target=follow_session, daemon=True), collect(handle, run_items)]
    readers[0].start()
    for items in (session_items, run_items):  # both caught up with the pieces so far
        eventually(lambda items=items: joined(items, 0).count(" ") >= HALF, timeout_s=30)
    streaming.open(token)
    for reader in readers:
        reader.join(60)
    for items in (session_items, run_items):
        first = next(i for i in items if isinstance(i, LiveDelta))
        assert (first.step, first.index) == (0, 0)
        assert joined(items, 0) == STEP0_TEXT and joined(items, 1) == FINAL_TEXT


def _running_worker(streaming: Streaming, run_id: str) -> WorkerProcess | None:
    view = streaming.producer.record(run_id)
    if view is None or view.status != "RUNNING":
        return None
    worker_id = streaming.client.hget(streaming.producer.keys.run(*view.ref), "worker")
    if worker_id is None:
        return None
    pid = int(worker_id.decode().split(":")[1])
    for worker in streaming.fleet.workers:
        if worker.proc is not None and _parent(pid) == worker.proc.pid:
            return worker
    return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return None


def test_sigkill_mid_stream_redoes_the_step_once_and_the_reader_shows_it_cleanly(
    streaming: Streaming, stack: Stack
) -> None:
    token, sid = uuid.uuid4().hex[:8], unique("st-kill")
    handle = streaming.producer.run_async(sid, f"die:{token}", agent="streamer")
    items: list[Item] = []
    reader = collect(handle, items)
    eventually(lambda: streaming.midway(token), timeout_s=30)
    eventually(lambda: any(isinstance(i, LiveDelta) for i in items), timeout_s=30)
    victim = eventually(lambda: _running_worker(streaming, handle.run_id), timeout_s=30)
    victim.kill()
    try:
        reader.join(60)
        result = items[-1]
        assert isinstance(result, RunResult) and result.status is RunStatus.COMPLETED
        assert result.attempts == 2
        pieces = [i for i in items if isinstance(i, LiveDelta) and i.step == 0]
        fences = sorted({p.fence for p in pieces})
        assert len(fences) == 2  # the dead attempt's half, then the redo from its first piece
        redo = [p for p in pieces if p.fence == fences[1]]
        assert redo[0].index == 0 and [p.index for p in redo] == sorted({p.index for p in redo})
        # folded as a person sees it: the half is dropped at the redo, the text is there once
        text, changes = LiveText(), []
        for item in items[:-1]:
            change = text.add(item)  # type: ignore[arg-type]
            if change == "redo":
                changes.append(change)
            if change == "committed" and isinstance(item, AgentEvent) and item.step == 0:
                assert item.payload.text == STEP0_TEXT  # type: ignore[union-attr]
        assert changes == ["redo"]
        assert "".join(p.text for p in redo if p.kind == "text") == STEP0_TEXT
        history = stack.reader().events(sid)
        finals = [e for e in history if e.type is EventType.FINAL_OUTPUT]
        assert [e.payload.text for e in finals] == [FINAL_TEXT]  # type: ignore[union-attr]
        assert streaming.client.get(f"{streaming.prefix}:{token}:calls") == b"2"
        # the events as a client keeps them (where the seq goes back, what it had from there on
        # is replaced) are the committed log: the redo's restore of the head, which names no
        # run, takes the dead attempt's first event's place (the client kept that USER_INPUT)
        view: dict[int, AgentEvent] = {}
        for item in items:
            if isinstance(item, AgentEvent):
                view = {seq: e for seq, e in view.items() if seq < item.seq}
                view[item.seq] = item
        assert [(e.seq, e.type) for e in view.values()] == [(e.seq, e.type) for e in history]
    finally:
        victim.start()


def test_cancel_mid_stream_ends_the_stream_with_the_cancelled_result(
    streaming: Streaming,
) -> None:
    token = uuid.uuid4().hex[:8]
    handle = streaming.producer.run_async(unique("st-cancel"), f"gate:{token}", agent="streamer")
    items: list[Item] = []
    reader = collect(handle, items)
    eventually(lambda: streaming.midway(token), timeout_s=30)
    assert streaming.producer.cancel(handle.run_id) is CancelOutcome.REQUESTED
    streaming.open(token)
    reader.join(60)
    result = items[-1]
    assert isinstance(result, RunResult) and result.status is RunStatus.CANCELLED
    assert joined(items, 0) == STEP0_TEXT  # the step in flight finished streaming
    assert not any(isinstance(i, LiveDelta) and i.step > 0 for i in items)


def test_pieces_stay_out_of_the_head_the_archive_and_the_event_stream(
    streaming: Streaming, stack: Stack
) -> None:
    sid = unique("st-durable")
    tenant = streaming.producer.settings.tenant
    result = streaming.producer.run(sid, "plain", agent="streamer", wait_s=60)
    assert result.status is RunStatus.COMPLETED
    pieces = streaming.channel.read(tenant, sid)
    assert {d.step for _c, d in pieces} == {0, 1}
    live = streaming.producer.event_stream.read(tenant, sid)
    history = stack.reader().events(sid)
    assert [e.seq for e in live] == [e.seq for e in history]  # the log holds events only
    assert all(isinstance(e, AgentEvent) for e in history)
    head = stack.reader().read(sid)
    assert head is not None and len(head.events) == len(history)
    assert not [k for k in stack.s3_keys() if sid in k and "delta" in k]
    stream_key = streaming.producer.keys.events(tenant, sid)
    assert streaming.client.xlen(stream_key) == len(live)


def test_the_channel_is_bounded_and_expires(streaming: Streaming) -> None:
    sid = unique("st-long")
    tenant = streaming.producer.settings.tenant
    result = streaming.producer.run(sid, "long", agent="streamer", wait_s=60)
    assert result.status is RunStatus.COMPLETED
    length = streaming.channel.length(tenant, sid)
    assert MAX_LEN <= length <= MAX_LEN + 100  # MAXLEN ~ trims by whole stream nodes
    # The worker applies TETHER_DELTA_TTL_S (TTL_S, not the 30 s default) with each append; that
    # Redis then drops the idle channel is shown with short TTLs in test_delta_channel_contract.
    ttl_ms = streaming.channel.ttl_ms(tenant, sid)
    assert ttl_ms is not None and 0 < ttl_ms <= TTL_S * 1000


def test_the_asyncio_readers_give_the_same_stream(streaming: Streaming) -> None:
    import asyncio

    from tether.producer.client_aio import AsyncProducer

    token, sid = uuid.uuid4().hex[:8], unique("st-aio")

    async def main() -> tuple[list[Item], list[Item]]:
        async with AsyncProducer(streaming.producer.settings) as producer:
            handle = await producer.run_async(sid, f"gate:{token}", agent="streamer")
            run_items: list[Item] = []
            session_items: list[Item] = []

            async def follow_run() -> None:
                async for item in handle.stream(idle_timeout_s=60):
                    run_items.append(item)

            async def follow_session() -> None:
                async for item in producer.stream(sid, idle_timeout_s=60):
                    session_items.append(item)
                    if isinstance(item, AgentEvent) and (item.type, item.step) == (
                        EventType.STEP_END,
                        1,
                    ):
                        return

            async def release() -> None:
                while not (
                    streaming.midway(token)
                    and any(isinstance(i, LiveDelta) for i in run_items)
                    and any(isinstance(i, LiveDelta) for i in session_items)
                ):
                    await asyncio.sleep(0.02)  # poll: both readers have the first pieces
                streaming.open(token)

            await asyncio.wait_for(
                asyncio.gather(follow_run(), follow_session(), release()), timeout=60
            )
            return run_items, session_items

    run_items, session_items = asyncio.run(main())
    result = run_items[-1]
    assert isinstance(result, RunResult) and result.status is RunStatus.COMPLETED
    for items in (run_items, session_items):
        assert joined(items, 0) == STEP0_TEXT and joined(items, 1) == FINAL_TEXT
        assert items.index(response(items, 0)) > max(
            n for n, i in enumerate(items) if isinstance(i, LiveDelta) and i.step == 0
        )
