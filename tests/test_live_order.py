"""The order a live follower gives committed events and live pieces (the sans-IO core both the
sync and asyncio followers use): a step's pieces right after its MODEL_REQUEST and before its
MODEL_RESPONSE, whichever batch each arrives in; an older attempt's late pieces and pieces of a
step already committed are dropped; the catch-up shows a step's pieces only while it is under
way (a handle's catch-up, of whole runs: every step's, #51); LiveText resets a step redone by a
newer attempt."""

from __future__ import annotations

from tether.core.events import AgentEvent, EventType, ModelResponsePayload, TextPayload
from tether.persistence.deltas import LiveDelta
from tether.persistence.deltas.live import Fenced, LiveItem, LiveOrder, LiveText

T, S, R = "acme", "s-1", "run-1"


def ev(seq: int, type_: EventType, step: int, fence: int = 1, run: str = R) -> Fenced:
    payload = (
        ModelResponsePayload(text="x")
        if type_ is EventType.MODEL_RESPONSE
        else TextPayload(text=type_.value)
    )
    event = AgentEvent(
        type=type_, tenant=T, session_id=S, seq=seq, run_id=run, step=step, payload=payload
    )
    return fence, event


def pieces(step: int, n: int, fence: int = 1, start: int = 0, run: str = R) -> list[LiveDelta]:
    return [LiveDelta(run, fence, step, i, "text", f"p{step}.{i} ") for i in range(start, n)]


def shape(items: list[LiveItem]) -> list[str]:
    return [
        f"d{i.step}.{i.index}" if isinstance(i, LiveDelta) else f"{i.type.name}{i.step}"
        for i in items
    ]


def test_pieces_follow_their_request_in_the_same_batch() -> None:
    order = LiveOrder()
    events = [ev(1, EventType.STEP_START, 0), ev(2, EventType.MODEL_REQUEST, 0)]
    got = order.batch(events, pieces(0, 2))
    assert shape(got) == ["STEP_START0", "MODEL_REQUEST0", "d0.0", "d0.1"]


def test_pieces_of_a_step_under_way_come_before_the_batchs_events() -> None:
    order = LiveOrder()
    order.batch([ev(1, EventType.MODEL_REQUEST, 0)], pieces(0, 1))
    events = [
        ev(2, EventType.MODEL_RESPONSE, 0),
        ev(3, EventType.STEP_END, 0),
        ev(4, EventType.STEP_START, 1),
        ev(5, EventType.MODEL_REQUEST, 1),
    ]
    got = order.batch(events, [*pieces(0, 3, start=1), *pieces(1, 2)])
    assert shape(got) == [
        "d0.1", "d0.2", "MODEL_RESPONSE0", "STEP_END0", "STEP_START1", "MODEL_REQUEST1",
        "d1.0", "d1.1",
    ]  # fmt: skip


def test_pieces_of_a_committed_step_are_dropped() -> None:
    order = LiveOrder()
    order.batch([ev(1, EventType.MODEL_REQUEST, 0), ev(2, EventType.MODEL_RESPONSE, 0)], [])
    assert order.batch([], pieces(0, 2)) == []


def test_a_redo_drops_the_older_attempts_late_pieces() -> None:
    order = LiveOrder()
    order.batch([ev(1, EventType.MODEL_REQUEST, 0, fence=3)], pieces(0, 2, fence=3))
    redo = [ev(1, EventType.MODEL_REQUEST, 0, fence=4)]
    got = order.batch(redo, [*pieces(0, 3, fence=3, start=2), *pieces(0, 2, fence=4)])
    assert shape(got) == ["MODEL_REQUEST0", "d0.0", "d0.1"]
    assert all(i.fence == 4 for i in got if isinstance(i, LiveDelta))
    assert order.batch([], pieces(0, 5, fence=3, start=3)) == []  # a paused worker's, later


def test_the_catch_up_shows_a_step_only_while_it_is_under_way() -> None:
    request = ev(2, EventType.MODEL_REQUEST, 0)
    under_way = LiveOrder().start([ev(1, EventType.STEP_START, 0), request], request, pieces(0, 2))
    assert shape(under_way) == ["STEP_START0", "MODEL_REQUEST0", "d0.0", "d0.1"]
    # attached past the request: the pieces come first
    assert shape(LiveOrder().start([], request, pieces(0, 2))) == ["d0.0", "d0.1"]
    done = ev(3, EventType.MODEL_RESPONSE, 0)
    assert shape(LiveOrder().start([request, done], done, pieces(0, 2))) == [
        "MODEL_REQUEST0",
        "MODEL_RESPONSE0",
    ]
    other_attempt = ev(2, EventType.MODEL_REQUEST, 0, fence=2)
    assert LiveOrder().start([], other_attempt, pieces(0, 2)) == []


def test_live_text_grows_resets_on_a_redo_and_ends_at_the_response() -> None:
    text = LiveText()
    changes = [text.add(p) for p in pieces(0, 2, fence=3)]
    assert changes == ["piece", "piece"]
    assert text.current is not None and text.current.text == "p0.0 p0.1 "
    assert text.add(pieces(0, 1, fence=4)[0]) == "redo"
    assert text.current is not None and text.current.text == "p0.0 "
    assert text.add(ev(9, EventType.MODEL_RESPONSE, 0)[1]) == "committed"
    assert text.current is None


def test_live_text_collects_tool_arguments_per_call() -> None:
    text = LiveText()
    text.add(LiveDelta(R, 1, 0, 0, "tool_arguments", '{"k"', 0, "c1", "lookup"))
    text.add(LiveDelta(R, 1, 0, 1, "tool_arguments", ': "v"}', 0))
    assert text.current is not None
    assert text.current.arguments == {0: '{"k": "v"}'} and text.current.tools == {0: "lookup"}


def test_catch_up_pieces_ahead_of_their_request_wait_for_it() -> None:
    # the worker's pieces landed before its MODEL_REQUEST event (two connections, a busy
    # machine): the catch-up keeps them and shows them right after the request, then the rest
    order = LiveOrder()
    first = order.start(
        [ev(1, EventType.STEP_START, 0)], ev(1, EventType.STEP_START, 0), pieces(0, 2)
    )
    assert shape(first) == ["STEP_START0"]
    got = order.batch([ev(2, EventType.MODEL_REQUEST, 0)], pieces(0, 3, start=2))
    assert shape(got) == ["MODEL_REQUEST0", "d0.0", "d0.1", "d0.2"]


def test_catch_up_pieces_of_a_step_committed_meanwhile_are_dropped() -> None:
    order = LiveOrder()
    order.start([ev(1, EventType.STEP_START, 0)], ev(1, EventType.STEP_START, 0), pieces(0, 2))
    events = [ev(2, EventType.MODEL_REQUEST, 0), ev(3, EventType.MODEL_RESPONSE, 0)]
    got = order.batch(events, ())
    # the request comes with its pieces; the response closes the step
    assert shape(got) == ["MODEL_REQUEST0", "d0.0", "d0.1", "MODEL_RESPONSE0"]
    assert shape(order.batch([ev(4, EventType.STEP_END, 0)], pieces(0, 3, start=2))) == [
        "STEP_END0"
    ]


# --- the catch-up of a reader of whole runs (#51: a reader that attached late lost pieces) ----


def _ended_run() -> list[Fenced]:
    return [
        ev(1, EventType.MODEL_REQUEST, 0),
        ev(2, EventType.MODEL_RESPONSE, 0),
        ev(3, EventType.MODEL_REQUEST, 1),
        ev(4, EventType.MODEL_RESPONSE, 1),
    ]


def test_a_whole_catch_up_gives_an_ended_runs_pieces_after_each_request() -> None:
    got = LiveOrder().start_whole(_ended_run(), _ended_run()[-1], [*pieces(0, 2), *pieces(1, 2)])
    assert shape(got) == [
        "MODEL_REQUEST0", "d0.0", "d0.1", "MODEL_RESPONSE0",
        "MODEL_REQUEST1", "d1.0", "d1.1", "MODEL_RESPONSE1",
    ]  # fmt: skip
    # the catch-up of the current step alone gives none of them: what a late reader lost
    assert "d0.0" not in shape(LiveOrder().start(_ended_run(), _ended_run()[-1], pieces(1, 2)))


def test_a_whole_catch_up_drops_an_older_attempts_pieces_and_holds_unanchored_ones() -> None:
    events = [ev(1, EventType.MODEL_REQUEST, 0, fence=2)]
    older, newer, next_step = pieces(0, 2, fence=1), pieces(0, 1, fence=2), pieces(1, 1, fence=2)
    order = LiveOrder()
    got = order.start_whole(events, events[-1], [*older, *newer, *next_step])
    assert shape(got) == ["MODEL_REQUEST0", "d0.0"]  # fence 2's piece, after its request
    assert [(d.step, d.fence) for d in order.pending] == [(1, 2)]  # its request comes later
    later = order.batch(
        [ev(2, EventType.MODEL_RESPONSE, 0, 2), ev(3, EventType.MODEL_REQUEST, 1, 2)], ()
    )
    assert shape(later) == ["MODEL_RESPONSE0", "MODEL_REQUEST1", "d1.0"]


def test_a_whole_catch_up_after_the_request_was_handed_out_gives_its_pieces_first() -> None:
    request = ev(1, EventType.MODEL_REQUEST, 0)
    got = LiveOrder().start_whole([], request, pieces(0, 2))  # the reader is past seq 1
    assert shape(got) == ["d0.0", "d0.1"]
