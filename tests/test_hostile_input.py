"""Hostile input: fuzzed run requests, producer arguments, raw worker messages and CLI arguments;
messages a client should never send; unreadable session heads.

Every fuzz test prints ``FUZZ <name> cases=<n> crashes=<m>`` (see :mod:`tests.support.fuzz`;
``python -m tests.chaos_report`` sums them). A *crash* is anything but a clear
:class:`~tether.errors.InvalidInput` (or, for the CLI, a usage exit code with one ``error:``
line naming a usage error).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.chaos_stack import (
    ChaosStack,
    parent_pid,
    wait_broker_idle,
)
from tests.support.fuzz import Tally, fuzz, is_valid_id, valid_ids
from tests.support.stack import eventually, unique
from tether.core.events import AgentEvent, EventType, TextPayload
from tether.errors import FencedOut, InvalidInput, TetherError
from tether.ids import validate_id
from tether.keys import RedisKeys
from tether.persistence.objects import HEAD_KIND, seal, unseal
from tether.persistence.streams.redis import RedisEventStream
from tether.producer.client import Producer
from tether.runs.contract import RunRef, RunRequest, parse_request
from tether.settings import Settings

pytest_plugins = ["tests.support.chaos_fixtures"]  # the chaos_stack and chaos fixtures

MAX_MESSAGE_CHARS = 2000


# --- hostile values ---------------------------------------------------------------------------


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def nested_dict(depth: int) -> dict[str, Any]:
    """``{"a": {"a": ... 1}}`` ``depth`` levels deep."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[no-any-return]


def nested_list(depth: int) -> list[Any]:
    """``[[[... 1]]]`` ``depth`` levels deep."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value  # type: ignore[no-any-return]


SPECIAL_IDS = [
    "",
    ".",
    "..",
    "../etc/passwd",
    "..%2f..%2fetc",
    "a/b",
    "a\\b",
    "/abs",
    ".hidden",
    "a..b",
    "x" * 129,
    "\u0455ession",  # Cyrillic dze, looks like "s"
    "\uff53\uff45\uff53\uff53",  # fullwidth "sess"
    "s\u200bid",
    "s\x00id",
    "s\nid",
    "s id",
    "s\tid",
    "\ud800",
    "\udcff",
    "a{b}",
    "{t/s}",
    "s\u2024\u2024x",
    "caf\u00e9",
    "\u212a",  # Kelvin sign
    "a\r\nSET x 1",
    "*",
    "?",
    "a;b",
    "$(id)",
    "`id`",
    "%s%n",
]
hostile_ids_not_none: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(SPECIAL_IDS),
    st.text(max_size=40).filter(lambda s: not is_valid_id(s)),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=2),
    # bytes are decoded as UTF-8 text first: hostile only when the text is not a valid id
    st.binary(max_size=8).filter(lambda b: not is_valid_id(b.decode("utf-8", "replace"))),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
hostile_ids = st.one_of(hostile_ids_not_none, st.none())
surrogate_text = st.tuples(
    st.text(max_size=10),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=10),
).map("".join)
deep_json = st.one_of(
    st.integers(33, 600).map(nested_dict),
    st.integers(33, 600).map(lambda d: {"x": nested_list(d)}),
    st.just(nested_dict(5000)),
)
hostile_inputs: st.SearchStrategy[Any] = st.one_of(
    surrogate_text,
    st.integers(501, 4000).map(lambda n: "\u00e9" * n),  # over the 1000-byte test limit
    st.integers(),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.binary(min_size=1, max_size=16).filter(_not_utf8),
    st.booleans(),
)
hostile_metadata: st.SearchStrategy[Any] = st.one_of(
    deep_json,
    st.just({"n": float("nan")}),
    st.just({"n": float("inf")}),
    st.dictionaries(surrogate_text, st.integers(), min_size=1, max_size=2),
    st.dictionaries(st.text(max_size=3), surrogate_text, min_size=1, max_size=2),
    st.just({"big": "x" * 20_000}),
    st.lists(st.integers(), max_size=3),
    st.text(max_size=5),
    st.integers(),
)
hostile_options: st.SearchStrategy[tuple[str, Any]] = st.one_of(
    st.tuples(
        st.just("timeout_s"),
        st.one_of(
            st.sampled_from([0, -1, 86_401, float("nan"), float("inf"), True, "5", [1]]),
            st.floats(max_value=0),
        ),
    ),
    st.tuples(st.just("on_busy"), st.one_of(st.text(max_size=8), st.integers(), st.none())),
    st.tuples(
        st.just("agent"),
        st.one_of(st.just(""), st.just("a" * 129), st.integers(), st.none(), surrogate_text),
    ),
)

FIELDS = ("run_id", "request_id", "tenant", "session_id")


@st.composite
def hostile_request_docs(draw: st.DrawFn) -> Any:
    """A run request document with at least one hostile part (or not a document at all)."""
    if draw(st.integers(0, 19)) == 0:
        return draw(
            st.one_of(
                st.none(),
                st.integers(),
                st.text(max_size=10),
                st.lists(st.integers()),
                st.binary(max_size=10),
            )
        )
    doc: dict[str, Any] = {
        "run_id": draw(valid_ids),
        "request_id": draw(valid_ids),
        "session_id": draw(valid_ids),
        "agent": "notes",
        "input": "remember x",
    }
    kind = draw(st.sampled_from(["id", "input", "metadata", "option", "unknown", "version"]))
    if kind == "id":
        doc[draw(st.sampled_from(FIELDS))] = draw(hostile_ids)
    elif kind == "input":
        doc["input"] = draw(hostile_inputs)
    elif kind == "metadata":
        doc["metadata"] = draw(hostile_metadata)
    elif kind == "option":
        name, value = draw(hostile_options)
        doc[name] = value
    elif kind == "unknown":
        fields = RunRequest.model_fields
        unknown = st.text(min_size=1, max_size=12).filter(lambda k: k not in fields)
        doc[draw(unknown)] = draw(st.integers())
    else:
        doc["v"] = draw(st.one_of(st.integers().filter(lambda v: v != 1), st.text(max_size=3)))
    if draw(st.booleans()):  # sometimes a second problem on top
        doc[draw(st.sampled_from(FIELDS))] = draw(st.one_of(valid_ids, hostile_ids))
    return doc


def _clear(exc: BaseException) -> str | None:
    """None when ``exc`` is a clear InvalidInput, else what is wrong with it."""
    if not isinstance(exc, InvalidInput):
        return f"{type(exc).__name__}: {exc!s:.200}"
    text = str(exc)
    if not text or len(text) > MAX_MESSAGE_CHARS or not text.isprintable():
        return f"unclear message ({len(text)} chars): {text[:200]!r}"
    return None


# --- run requests -------------------------------------------------------------------------------

PARSE = Tally("parse_request")


@fuzz(500)
@given(doc=hostile_request_docs())
def _fuzz_parse_request(doc: Any) -> None:
    PARSE.cases += 1
    try:
        request = parse_request(doc)
    except Exception as exc:
        problem = _clear(exc)
        if problem:
            PARSE.crashes.append(problem)
        return
    # accepted: a valid id in the wrong field, a second problem overwritten... it must be sound
    for name in FIELDS:
        validate_id(getattr(request, name))
    RunRequest.model_validate_json(request.model_dump_json())
    with contextlib.suppress(InvalidInput):
        request.check_input_size(1000)


def test_fuzz_parse_request() -> None:
    """The cases run here (hypothesis) and their tally is checked by the same test."""
    _fuzz_parse_request()
    assert PARSE.cases >= 500
    PARSE.report()


PRODUCER = Tally("Producer.run_async")


@pytest.fixture(scope="module")
def offline_producer() -> Iterator[Producer]:
    """A producer whose Redis does not exist: any I/O would fail with StreamUnavailable, so an
    InvalidInput proves the request was refused before anything was sent."""
    producer = Producer(
        Settings(broker_url="redis://127.0.0.1:1/0", max_input_bytes=1000, tenant="t1")
    )
    yield producer
    producer.close()


@st.composite
def hostile_run_args(draw: st.DrawFn) -> dict[str, Any]:
    """``run_async`` keyword arguments with at least one hostile value."""
    args: dict[str, Any] = {
        "session_id": draw(valid_ids),
        "input": "remember x",
        "agent": "notes",
        "tenant": draw(st.one_of(st.none(), valid_ids)),
        "request_id": draw(st.one_of(st.none(), valid_ids)),
        "metadata": None,
    }
    kind = draw(st.sampled_from(["session_id", "tenant", "request_id", "input", "metadata", "opt"]))
    if kind in ("session_id", "tenant", "request_id"):
        args[kind] = draw(hostile_ids_not_none)
    elif kind == "input":
        args["input"] = draw(hostile_inputs)
    elif kind == "metadata":
        args["metadata"] = draw(hostile_metadata)
    else:
        name, value = draw(hostile_options)
        args[name] = value
    return args


@fuzz(300)
@given(args=hostile_run_args())
def _fuzz_producer_arguments(offline_producer: Producer, args: dict[str, Any]) -> None:
    PRODUCER.cases += 1
    session_id = args.pop("session_id")
    text = args.pop("input")
    try:
        offline_producer.run_async(session_id, text, **args)
    except Exception as exc:
        problem = _clear(exc)
        if problem:
            PRODUCER.crashes.append(f"{problem} for {session_id!r} {text!r:.60} {args}")
        return
    PRODUCER.crashes.append(f"accepted {session_id!r} {text!r:.40} {args}")


def test_fuzz_producer_arguments(offline_producer: Producer) -> None:
    _fuzz_producer_arguments(offline_producer)
    assert PRODUCER.cases >= 300
    PRODUCER.report()


# --- raw messages to real workers -----------------------------------------------------------------


def _publish(stack: ChaosStack, messages: list[tuple[str, Any, dict[str, Any]]]) -> None:
    """Publish ``(task name, body, extra publish options)`` messages straight to the queue."""
    with stack.producer.celery.connection_for_write() as conn:
        publisher = conn.Producer(serializer="json")
        for task, body, options in messages:
            options = dict(options)
            headers = {"task": task, "id": options.pop("id", f"raw-{uuid.uuid4().hex}")}
            publisher.publish(
                body,
                routing_key=stack.settings.queue,
                exchange=stack.settings.queue,
                headers=headers,
                **options,
            )


def _pool_children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent_pid(int(entry)) == pid:
            out.add(int(entry))
    return out


_RAW_JSON = {"content_type": "application/json", "content_encoding": "utf-8"}


def _deep_json_body(depth: int) -> bytes:
    """A task body whose request is nested ``depth`` levels (too deep to encode with json)."""
    return b'[[], {"request": ' + b'{"a":' * depth + b"1" + b"}" * depth + b"}, {}]"


def _mutations(rng: random.Random, sid: str) -> dict[str, Any]:
    """One hostile request document aimed at ``sid`` (rejected by a worker)."""
    run_id = f"fz-{uuid.uuid4().hex[:16]}"
    doc: dict[str, Any] = {
        "run_id": run_id,
        "request_id": run_id,
        "session_id": sid,
        "agent": "notes",
        "input": "remember hostile",
    }
    mutations: list[Callable[[], dict[str, Any]]] = [
        lambda: {
            "session_id": rng.choice(["../" + sid, sid + "/../x", sid + "\u200b", "\u0455" + sid])
        },
        lambda: {"tenant": rng.choice(["../default", "default/x", "", "DEF\u0410ULT", 7])},
        lambda: {"input": "remember " + "\ud800" * rng.randint(1, 3)},
        lambda: {"input": "remember " + "y" * (70_000 + rng.randrange(1000))},
        lambda: {"metadata": nested_dict(rng.randint(33, 400))},
        lambda: {"metadata": {"k": "\udfff"}},
        lambda: {rng.choice(["fence", "lease", "__class__", "worker"]): rng.randint(0, 99)},
        lambda: {"agent": rng.choice(["no-such-agent", "../notes", "notes\x00", "a" * 129])},
        lambda: {"input": rng.choice([7, ["remember x"], {"remember": "x"}, True])},
        lambda: {"v": rng.choice([0, 2, "1", None])},
        lambda: {"timeout_s": rng.choice([-1, 0, 1e9, "10", True])},
        lambda: {"on_busy": rng.choice(["drop", "", None, 1])},
        lambda: {"metadata": {"x": "z" * 20_000}},
        lambda: {"submitted_at_ms": rng.choice([-1, 2**60, "now", 1.5])},
    ]
    doc.update(rng.choice(mutations)())
    return doc


def _salvageable(doc: dict[str, Any]) -> bool:
    """Whether a worker can record the refusal under the request's run id (else it logs it)."""
    return all(
        is_valid_id(value)
        for value in (
            doc.get("run_id"),
            doc.get("session_id"),
            doc.get("tenant") or "default",
            doc.get("request_id") or doc.get("run_id"),
        )
    )


def _canaries(stack: ChaosStack, count: int = 3) -> dict[str, bytes]:
    """Sessions with some history; returns their head bytes (to prove them unchanged)."""
    heads = {}
    for _ in range(count):
        sid = unique("canary")
        stack.producer.run(sid, "remember one", agent="notes", wait_s=60)
        stack.producer.run(sid, "remember two", agent="notes", wait_s=60)
        heads[sid] = _head_bytes(stack, sid)
    return heads


def _head_bytes(stack: ChaosStack, sid: str, tenant: str = "default") -> bytes:
    key = f"tether/v1/{tenant}/{sid}/head.json"
    return stack.s3_client().get_object(Bucket=stack.bucket, Key=key)["Body"].read()  # type: ignore[no-any-return]


def _assert_unchanged(stack: ChaosStack, heads: dict[str, bytes]) -> None:
    client = stack.redis_client()
    try:
        for sid, head in heads.items():
            assert _head_bytes(stack, sid) == head, f"session {sid} was changed"
            assert client.llen(stack.producer.keys.pending("default", sid)) == 0
    finally:
        client.close()
    for sid in heads:
        assert stack.reader().verify(sid).ok


def test_fuzz_raw_messages_to_real_workers(chaos: ChaosStack) -> None:
    """80 hostile messages in one batch: all refused, no worker crashes, no session changed."""
    tally = Tally("raw worker messages")
    heads = _canaries(chaos)
    sids = list(heads)
    before = {w.name: (w.pid, _pool_children(w.pid or 0)) for w in chaos.workers}
    rng = random.Random(20260)
    messages: list[tuple[str, Any, dict[str, Any]]] = []
    salvageable: list[RunRef] = []
    for n in range(60):
        doc = _mutations(rng, sids[n % len(sids)])
        messages.append(("tether.run", [[], {"request": doc}, {}], {}))
        if _salvageable(doc):  # recorded under the ids the worker salvages (see _salvageable)
            tenant = doc.get("tenant") or "default"
            salvageable.append(RunRef(tenant, doc["session_id"], doc["run_id"]))
    # malformed at the envelope level: not a request, not a body triple, not even JSON
    envelope = [
        ("tether.run", {"not": "celery"}, {}),
        ("tether.run", [[{"request": {}}], {}, {}], {}),
        ("tether.run", [[], {"request": None}, {}], {}),
        ("tether.run", [[], {"request": "remember x"}, {}], {}),
        ("tether.run", [[], {"request": [1, 2]}, {}], {}),
        ("tether.run", [[], {"request": {}, "fence": 99}, {}], {}),
        ("tether.run", [[], {"req": {"run_id": "x"}}, {}], {}),
        ("tether.run", "just a string", {}),
        ("tether.run", None, {}),
        ("tether.drain", [[], {"tenant": "../x", "session_id": sids[0]}, {}], {}),
        ("tether.drain", [[], {"tenant": "default", "session_id": {"$ne": 1}}, {}], {}),
        ("tether.drain", [[], {"tenant": "default", "session_id": sids[1], "x": 1}, {}], {}),
        ("tether.drain", [[], {}, {}], {}),
        ("tether.run", b"\xff\xfe\x00 not utf-8 {", _RAW_JSON),
        ("tether.run", b'{"unterminated": ', _RAW_JSON),
        (
            "tether.run",
            b"\x80\x81",
            {"content_type": "application/x-unknown", "content_encoding": "binary"},
        ),
        ("tether.run", "\ud800", {}),
        ("tether.run", _deep_json_body(5000), _RAW_JSON),
        ("tether.run", _deep_json_body(100_000), _RAW_JSON),
        ("tether.run", [[], {"request": {"run_id": "r" * 5000}}, {}], {}),
        ("tether.run", [[], {"request": {"run_id": "ok-1", "session_id": sids[2]}}, {}], {}),
    ]
    messages += envelope
    tally.cases = len(messages)
    _publish(chaos, messages)
    wait_broker_idle(chaos, timeout_s=120)
    # workers act only on registered runs (the default since #47): nobody registered these,
    # so each is refused (logged and counted) and nothing is recorded under the ids it names
    for ref in salvageable:
        if chaos.producer.runs.get(ref) is not None:
            tally.crashes.append(f"{ref.run_id}: an unregistered message was recorded")
    after = {w.name: (w.pid, _pool_children(w.pid or 0)) for w in chaos.workers}
    if after != before:
        tally.crashes.append(f"worker processes changed: {before} -> {after}")
    logs = "".join(w.log_text() for w in chaos.workers)
    for marker in ("WorkerLostError", "Process 'ForkPoolWorker", "Unrecoverable error"):
        if marker in logs:
            tally.crashes.append(f"worker log shows {marker}")
    for line in logs.splitlines():  # Celery logs an undecodable body at CRITICAL and drops it
        if "CRITICAL/" in line and "Can't decode message body" not in line:
            tally.crashes.append(f"worker log: {line[:200]}")
    _assert_unchanged(chaos, heads)
    assert chaos.producer.run(sids[0], "recall", agent="notes", wait_s=60).output == "one\ntwo"
    tally.report()


# --- messages a client should never send ----------------------------------------------------------


def _log_line(stack: ChaosStack, *parts: str) -> str | None:
    """The first worker log line containing every one of ``parts``."""
    for worker in stack.workers:
        for line in worker.log_text().splitlines():
            if all(part in line for part in parts):
                return line
    return None


class _Touch:
    """Unpickling this creates a file: proof that a pickle was (or was not) loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (Path.touch, (Path(self.path),))


def test_pickle_message_is_refused_and_never_loaded(chaos: ChaosStack, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    body = pickle.dumps(((), {"request": _Touch(str(marker))}, {}))
    with chaos.producer.celery.connection_for_write() as conn:
        conn.Producer().publish(
            body,
            routing_key=chaos.settings.queue,
            exchange=chaos.settings.queue,
            headers={"task": "tether.run", "id": "pickled-evil"},
            content_type="application/x-python-serialize",
            content_encoding="binary",
        )
    eventually(lambda: _log_line(chaos, "Refusing", "untrusted content of type pickle"), 30)
    wait_broker_idle(chaos)
    assert not marker.exists(), "a worker unpickled an untrusted message"
    assert chaos.producer.runs.locate("default", "pickled-evil") is None
    assert all(w.alive() for w in chaos.workers)


def test_unknown_task_type_is_refused(chaos: ChaosStack, tmp_path: Path) -> None:
    _publish(
        chaos,
        [
            ("tether.exec_shell", [["touch", str(tmp_path / "x")], {}, {}], {}),
            ("tether.admin", [[], {"cmd": "flushall"}, {}], {}),
            ("os.system", [[f"touch {tmp_path / 'y'}"], {}, {}], {}),
        ],
    )
    for name in ("tether.exec_shell", "tether.admin", "os.system"):
        eventually(
            functools.partial(_log_line, chaos, "unregistered task", repr(name)), timeout_s=30
        )
    wait_broker_idle(chaos)
    assert list(tmp_path.iterdir()) == []
    assert all(w.alive() for w in chaos.workers)


def test_forged_fence_tokens_are_refused(chaos: ChaosStack) -> None:
    sid = unique("fence")
    chaos.producer.run(sid, "remember real", agent="notes", wait_s=60)
    head = _head_bytes(chaos, sid)
    client = chaos.redis_client()
    stream = RedisEventStream(client, keys=chaos.producer.keys)
    try:
        current = int(client.get(chaos.producer.keys.fence("default", sid)) or 0)
        entries = client.xlen(chaos.producer.keys.events("default", sid))
        last = stream.read("default", sid)[-1].seq
        forged = [
            AgentEvent(
                type=EventType.FINAL_OUTPUT,
                tenant="default",
                session_id=sid,
                seq=last + 1,
                payload=TextPayload(text="forged"),
            )
        ]
        # a stale fence (a zombie), and fences never granted (a guess ahead of the counter)
        for fence in (0, current - 1, current + 1, current + 1000, 2**62):
            with pytest.raises(FencedOut):
                stream.append("default", sid, forged, fence)
        assert client.xlen(chaos.producer.keys.events("default", sid)) == entries
    finally:
        client.close()
    # a fence smuggled into a run message: refused as an unknown field / unknown argument
    run_id = f"forged-{uuid.uuid4().hex[:8]}"
    doc = {
        "run_id": run_id,
        "request_id": run_id,
        "session_id": sid,
        "agent": "notes",
        "input": "remember forged",
        "fence": current + 1,
    }
    _publish(
        chaos,
        [
            ("tether.run", [[], {"request": doc}, {}], {}),
            (
                "tether.run",
                [
                    [],
                    {
                        "request": dict(doc, run_id=run_id + "b", request_id=run_id + "b"),
                        "fence": current + 1,
                    },
                    {},
                ],
                {},
            ),
        ],
    )
    forged_ref = RunRef("default", sid, run_id)  # no tenant in the message: the default
    # a message names a run, and nothing else of it is read (workers act only on registered
    # runs): refused as unregistered, nothing recorded; the extra argument is a TypeError
    eventually(lambda: _log_line(chaos, "refused run message", run_id), timeout_s=30)
    wait_broker_idle(chaos)
    assert chaos.producer.runs.get(forged_ref) is None
    assert chaos.producer.runs.get(forged_ref._replace(run_id=run_id + "b")) is None
    assert _head_bytes(chaos, sid) == head
    assert chaos.producer.run(sid, "recall", agent="notes", wait_s=60).output == "real"


def test_forged_message_cannot_rewrite_a_finished_run(chaos: ChaosStack) -> None:
    sid = unique("reuse")
    done = chaos.producer.run(sid, "remember real", agent="notes", wait_s=60)
    head = _head_bytes(chaos, sid)
    forged_invalid = {
        "run_id": done.run_id,
        "request_id": done.request_id,
        "session_id": sid,
        "agent": "notes",
        "input": 7,
    }
    forged_valid = {
        "run_id": done.run_id,
        "request_id": "another-request",
        "session_id": sid,
        "agent": "notes",
        "input": "remember forged",
    }
    forged_other_tenant = dict(forged_valid, tenant="other", request_id="third")
    _publish(
        chaos,
        [
            ("tether.run", [[], {"request": d}, {}], {})
            for d in (forged_invalid, forged_valid, forged_other_tenant)
        ],
    )
    # a drain message for the session from outside only applies what was queued (nothing)
    _publish(chaos, [("tether.drain", [[], {"tenant": "default", "session_id": sid}, {}], {})])
    wait_broker_idle(chaos)

    # A message only names a run; the worker runs the registered copy (the default since #47):
    # the two naming the finished run find nothing queued and change nothing, and the one
    # naming another tenant's session is refused (nobody registered it there) and recorded
    # nowhere.
    eventually(lambda: _log_line(chaos, "refused run message", "'other'"), timeout_s=30)
    assert chaos.producer.runs.locate("other", done.run_id) is None
    assert chaos.producer.runs.locate("default", done.run_id) == done.ref
    view = chaos.producer.runs.get(done.ref)
    assert view is not None and view.result == done
    assert _head_bytes(chaos, sid) == head
    assert chaos.producer.run(sid, "recall", agent="notes", wait_s=60).output == "real"


# --- unreadable session heads -------------------------------------------------------------------


def _rewrite_head(stack: ChaosStack, sid: str, transform: Callable[[bytes], bytes]) -> bytes:
    key = f"tether/v1/default/{sid}/head.json"
    client = stack.s3_client()
    data = transform(client.get_object(Bucket=stack.bucket, Key=key)["Body"].read())
    client.put_object(Bucket=stack.bucket, Key=key, Body=data)
    # an operator who edits a head in the bucket drops its cached copy too (README,
    # TETHER_HEAD_CACHE_TTL_S); without that, the first attempt would act on the cached head and
    # its commit would fail the compare-and-set, so the head would still never be overwritten
    redis_client = stack.redis_client()
    try:
        redis_client.delete(RedisKeys(stack.settings.namespace).head_cache("default", sid))
    finally:
        redis_client.close()
    return data


def _flip_a_byte(data: bytes) -> bytes:
    index = data.index(b'"remember ') + 3
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def _future_version(data: bytes) -> bytes:
    body = json.loads(unseal(data, HEAD_KIND, where="test").body)
    body["schema_version"] = 99
    return seal(HEAD_KIND, json.dumps(body).encode())


@pytest.mark.parametrize(
    ("transform", "error_type"),
    [(_flip_a_byte, "SnapshotCorrupt"), (_future_version, "UnsupportedSchemaVersion")],
    ids=["corrupt", "unknown-version"],
)
def test_unreadable_head_fails_the_run_and_is_not_overwritten(
    chaos: ChaosStack, transform: Callable[[bytes], bytes], error_type: str
) -> None:
    sid = unique("badhead")
    chaos.producer.run(sid, "remember kept", agent="notes", wait_s=60)
    broken = _rewrite_head(chaos, sid, transform)
    started = time.monotonic()
    handles = [chaos.producer.run_async(sid, f"remember {n}", agent="notes") for n in range(2)]
    for handle in handles:
        result = handle.run_result(timeout=60)
        assert result.status.value == "FAILED"
        assert result.error_type == error_type, result
        assert "head.json" in (result.error_message or "")
        assert result.attempts == 1  # no retry: retrying cannot help
    with pytest.raises(TetherError) as raised:
        handles[0].result(timeout=0)
    assert raised.value.error_type == error_type
    assert time.monotonic() - started < 30
    assert _head_bytes(chaos, sid) == broken  # never overwritten
    with contextlib.suppress(Exception):
        _rewrite_head(chaos, sid, lambda _d: broken)


# --- CLI arguments -------------------------------------------------------------------------

CLI = Tally("CLI arguments")


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment for in-process CLI calls: a local store, a Redis that does not exist.

    Building the click command from the typer app takes ~0.1 s and is pure, so it is built once
    here; ``run_cli`` (its error handling is what is tested) runs unchanged.
    """
    import typer.main

    store = tmp_path_factory.mktemp("cli-store")
    env = {
        "TETHER_STORE_URL": f"file://{store}",
        "TETHER_BROKER_URL": "redis://127.0.0.1:1/0",
    }
    built: dict[int, Any] = {}
    original = typer.main.get_command

    def get_command_once(app: Any) -> Any:
        if id(app) not in built:
            built[id(app)] = original(app)
        return built[id(app)]

    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.setattr(typer.main, "get_command", get_command_once)
        yield env


def _cli_commands(bad: str, good: str) -> list[list[str]]:
    return [
        ["sessions", "show", bad],
        ["sessions", "events", bad],
        ["sessions", "verify", bad],
        ["sessions", "project", bad],
        ["sessions", "list", "--tenant", bad],
        ["sessions", "show", good, "--tenant", bad],
        ["sessions", "fork", good, bad],
        ["sessions", "fork", bad, good],
        ["sessions", "delete", bad, "--yes"],
        ["run", bad, "remember x", "--agent", "notes"],
        ["run", good, "remember x", "--agent", "notes", "--tenant", bad],
        ["run", good, "remember x", "--agent", "notes", "--request-id", bad],
        ["submit", bad, "hi", "--agent", "echo"],
        ["wait", bad],
        ["cancel", bad],
        ["tail", bad],
    ]


cli_bad_ids = st.one_of(
    st.sampled_from([s for s in SPECIAL_IDS if s and not s.startswith("-") and "\x00" not in s]),
    st.text(min_size=1, max_size=30).filter(
        lambda s: not is_valid_id(s) and not s.startswith("-") and "\x00" not in s
    ),
)


@fuzz(150)
@given(
    bad=cli_bad_ids,
    good=valid_ids.filter(lambda s: not s.startswith("-")),  # a leading "-" reads as an option
    which=st.integers(0, 15),
)
def _fuzz_cli_arguments(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], bad: str, good: str, which: int
) -> None:
    from tether.producer.ops.cli import run_cli

    CLI.cases += 1
    argv = _cli_commands(bad, good)[which]
    capsys.readouterr()
    try:
        code = run_cli(argv)
    except BaseException as exc:
        CLI.crashes.append(f"{argv!r} raised {type(exc).__name__}: {exc}")
        return
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    if code != 2:
        CLI.crashes.append(f"{argv!r} exited {code}: {err[:200]!r}")
    elif not lines or not (_usage_line(lines[-1]) or "Usage:" in err):
        CLI.crashes.append(f"{argv!r}: unclear error {err[:200]!r}")


def _usage_line(line: str) -> bool:
    """``error: <UsageError subclass>: <message>``: the CLI's one line for a usage error."""
    from tether.errors import UsageError, error_from_record

    if not line.startswith("error: "):
        return False
    name = line.removeprefix("error: ").split(":", 1)[0]
    return isinstance(error_from_record(name, ""), UsageError) and len(line) < MAX_MESSAGE_CHARS


def test_fuzz_cli_arguments(cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz_cli_arguments(cli_env, capsys)
    assert CLI.cases >= 150
    CLI.report()


def test_cli_invalid_utf8_argv_in_a_real_process(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates: a clear usage error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(
        {
            "TETHER_STORE_URL": f"file://{tmp_path}",
            "TETHER_BROKER_URL": "redis://127.0.0.1:1/0",
            "PYTHONIOENCODING": "utf-8",
        }
    )
    cases: list[list[str | bytes]] = [
        ["run", b"s\xff\xfe", "remember x", "--agent", "notes"],
        ["run", "s1", b"remember \xff\xc0", "--agent", "notes"],
    ]
    for args in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "tether.producer.ops.cli", *args],
            env=env,
            capture_output=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[1],
            check=False,
        )
        err = proc.stderr.decode("utf-8", "replace").strip()
        assert proc.returncode == 2, (args, proc.returncode, err[-500:])
        assert err.splitlines()[-1].startswith("error: Invalid"), err[-500:]
        assert "Traceback" not in err
    print(f"\nFUZZ CLI invalid UTF-8 argv (real process) cases={len(cases)} crashes=0")
