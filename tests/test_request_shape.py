"""One request shape (issue #26, item 3): the run options are declared once, and a run request
is validated once on each side and serialized once.

The counts are measured, not assumed: :class:`Count` wraps every way pydantic validates or
serializes a :class:`RunRequest`, and a real producer submits to a private redis-server (also the
broker); the message it published is then handed, as Celery would hand it, to the worker's task
on an in-process engine over the same Redis. Before this change a run cost 3 validations and 3
serializations (producer 1 + 2, worker 2 + 1); now 1 + 1 in the producer and 1 + 0 in the worker.
"""

from __future__ import annotations

import base64
import json
import os
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import unique
from tether.errors import InvalidInput
from tether.persistence.redis_conn import redis_from_url
from tether.producer.client import Producer
from tether.producer.submission import RunSpec, run_spec
from tether.runs.contract import RunRequest, WireRequest, parse_wire
from tether.runs.options import RUN_OPTIONS, RunExtras, RunOptions, RunOptionsKwargs
from tether.settings import Settings

VALIDATIONS = ("model_validate", "model_validate_json", "__init__")
SERIALIZATIONS = ("model_dump", "model_dump_json")


class Count:
    """How often a RunRequest was validated and serialized since the last :meth:`take`."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def take(self) -> tuple[int, int]:
        """``(validations, serializations)`` counted so far; starts counting afresh."""
        calls, self.calls = self.calls, []
        return (
            sum(c in VALIDATIONS for c in calls),
            sum(c in SERIALIZATIONS for c in calls),
        )


@pytest.fixture
def count(monkeypatch: pytest.MonkeyPatch) -> Count:
    """Wraps RunRequest's validating and serializing methods for the test."""
    counter = Count()

    def counted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counter.calls.append(name)
            return method(*args, **kwargs)

        return wrapper

    for name in ("model_validate", "model_validate_json"):
        bound = getattr(RunRequest, name)  # a classmethod, bound to the class
        monkeypatch.setattr(RunRequest, name, counted(name, bound))
    for name in ("__init__", *SERIALIZATIONS):
        monkeypatch.setattr(RunRequest, name, counted(name, getattr(RunRequest, name)))
    return counter


@contextmanager
def worker_on(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The worker's task runs in this process, on an engine over ``settings``' Redis."""
    from tether.worker import tasks
    from tether.worker.engine.services import build_services

    services = build_services(lambda tenant, session_id: None, settings)
    # calling the task reads the Celery app's configuration once, from the environment (a
    # worker's); it connects to nothing here, but there is no default Redis to read
    monkeypatch.setenv("TETHER_BROKER_URL", settings.effective_broker_url)
    monkeypatch.setattr(tasks, "_services", services)
    monkeypatch.setattr(tasks, "_services_pid", os.getpid())
    yield


def published_request(settings: Settings) -> Any:
    """The ``request`` argument of the one run message on the broker (kombu's Redis transport
    keeps the message as JSON with a base64 body: ``[args, kwargs, embed]``)."""
    client = redis_from_url(settings.effective_broker_url)
    try:
        (raw,) = client.lrange(f"{settings.namespace}-celery:{settings.queue}", 0, -1)
    finally:
        client.close()
    envelope = json.loads(raw)
    args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
    assert args == [] and list(kwargs) == ["request"]
    return kwargs["request"]


def registered_text(producer: Producer, run_id: str) -> str:
    ref = producer.locate(run_id)
    assert ref is not None
    raw = producer.redis.hget(producer.keys.run(*ref), "request")
    assert isinstance(raw, bytes)
    return raw.decode()


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    """A trusting deployment (TETHER_REGISTERED_RUNS_ONLY=false), whose messages carry the
    request: the worker registers and compares what they carry."""
    return Settings(
        broker_url=redis_url,
        namespace=unique("shape"),
        store_url=f"file://{tmp_path}/store",
        registered_runs_only=False,
    )


@pytest.fixture
def default_settings(settings: Settings) -> Settings:
    """The default: workers act only on registered runs, messages carry their ids."""
    return settings.model_copy(update={"registered_runs_only": True})


def _submit(settings: Settings, count: Count) -> tuple[str, str, Any]:
    """Submit one run; its run id, the text of its record, and its message's request."""
    with Producer(settings) as producer:
        handle = producer.run_async("s-1", "hi", agent="echo", timeout_s=5)
        assert count.take() == (1, 1)  # producer: one validation, one serialization
        text = registered_text(producer, handle.run_id)
    return handle.run_id, text, published_request(settings)


def _result(settings: Settings, run_id: str) -> Any:
    with Producer(settings) as producer:
        view = producer.record(run_id)
    assert view is not None and view.result is not None
    return view.result


def test_a_run_is_validated_once_on_each_side_and_serialized_once(
    settings: Settings, count: Count, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.worker.tasks import run_task

    run_id, text, body = _submit(settings, count)
    assert body == text  # the record and the message carry the same JSON text
    with worker_on(settings, monkeypatch):
        reply = run_task(request=body)
    # worker: one validation at the task boundary; the claim found the registered copy holds
    # the same text and reused it; nothing was serialized
    assert count.take() == (1, 0)
    assert reply == {"run_id": run_id, "state": "duplicate", "processed": 1}
    assert _result(settings, run_id).output == "echo: hi"


def test_by_default_a_message_is_a_wake_up_and_the_record_is_validated_once(
    default_settings: Settings, count: Count, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#47: the default message carries the run's ids only (none of its text reaches the
    broker); the worker reads those ids without validating a request, and validates the
    registered copy once when the claim reads it."""
    from tether.worker.tasks import run_task

    run_id, text, body = _submit(default_settings, count)
    assert json.loads(body) == {
        **{k: json.loads(text)[k] for k in ("run_id", "request_id", "tenant", "session_id")},
        **{"agent": "echo", "input": None, "submitted_at_ms": json.loads(text)["submitted_at_ms"]},
    }
    with worker_on(default_settings, monkeypatch):
        reply = run_task(request=body)
    assert count.take() == (1, 0)  # the registered copy, read by the claim; nothing serialized
    assert reply == {"processed": 1}
    assert _result(default_settings, run_id).output == "echo: hi"


def test_a_message_of_an_earlier_producer_still_runs_once(
    settings: Settings, count: Count, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Producers before this change sent the request as a JSON object: the worker serializes
    it once (for its registration), and reuses it, the texts being the same."""
    from tether.worker.tasks import run_task

    run_id, text, _body = _submit(settings, count)
    with worker_on(settings, monkeypatch):
        reply = run_task(request=json.loads(text))
    assert count.take() == (1, 1)
    assert reply["processed"] == 1
    assert _result(settings, run_id).output == "echo: hi"


def test_the_registered_copy_runs_when_the_message_differs(
    settings: Settings, count: Count, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message for the same run whose request differs from the one its producer registered
    (a forged or replayed message): the registered copy, read from Redis, is the one that runs."""
    from tether.worker.tasks import run_task

    run_id, text, _body = _submit(settings, count)
    forged = json.dumps({**json.loads(text), "input": "forged"})
    with worker_on(settings, monkeypatch):
        reply = run_task(request=forged)
    assert count.take() == (2, 0)  # the message, then the record it did not match
    assert reply == {"run_id": run_id, "state": "duplicate", "processed": 1}
    assert _result(settings, run_id).output == "echo: hi"


def test_a_message_text_is_kept_unless_its_time_stamp_is_left_out() -> None:
    request = RunRequest(run_id="r-1", request_id="r-1", session_id="s", agent="a", input="x")
    text = request.model_dump_json()
    spaced = json.dumps(json.loads(text), indent=1)  # another producer's spelling, same request
    assert parse_wire(spaced) == WireRequest(request, spaced)
    # without submitted_at_ms every read would stamp it anew: the worker writes its own text
    unstamped = json.dumps({k: v for k, v in json.loads(text).items() if k != "submitted_at_ms"})
    wire = parse_wire(unstamped)
    assert wire.text != unstamped and RunRequest.model_validate_json(wire.text) == wire.request
    with pytest.raises(InvalidInput, match=r"^invalid run request: request: Invalid JSON"):
        parse_wire("remember x")


# --- the options, declared once -----------------------------------------------------------------


def test_the_keyword_form_of_the_options_is_the_model() -> None:
    hints = typing.get_type_hints(RunOptionsKwargs)
    assert set(hints) == set(RunOptions.model_fields) == RUN_OPTIONS
    assert RunOptionsKwargs.__required_keys__ == {"agent"}
    assert set(typing.get_type_hints(RunExtras)) == RUN_OPTIONS - {"agent"}
    assert {n for n, f in RunOptions.model_fields.items() if f.is_required()} == {"agent"}
    # the request validates the options with the model's own fields (tenant and request_id
    # are resolved on the request: the producer fills them in)
    assert issubclass(RunRequest, RunOptions)
    for name in RUN_OPTIONS - {"tenant", "request_id"}:
        assert repr(RunRequest.model_fields[name]) == repr(RunOptions.model_fields[name])


def test_a_keyword_that_is_no_run_option_is_refused_before_any_io() -> None:
    producer = Producer(Settings(broker_url="redis://127.0.0.1:1/0"))  # I/O would fail
    try:
        with pytest.raises(TypeError, match="'run_id'"):
            producer.run_async("s-1", "hi", agent="echo", run_id="mine")  # type: ignore[call-arg]
    finally:
        producer.close()
    with pytest.raises(TypeError, match="'session'"):
        RunSpec("s-1", "hi", "echo", session="s-2")  # type: ignore[call-arg]
    spec = run_spec("s-1", "hi", agent="echo", timeout_s=5)
    assert spec == RunSpec("s-1", "hi", "echo", timeout_s=5)
    assert spec.options == {"agent": "echo", "timeout_s": 5}


def test_the_cli_takes_its_run_options_from_the_model() -> None:
    import inspect

    from tether.producer.ops.cli import runs

    for command in (runs.run_command, runs.submit):
        named = set(inspect.signature(command).parameters) & RUN_OPTIONS
        assert named == {
            "agent",
            "tenant",
            "request_id",
            "timeout_s",
            "on_busy",
            "durability",
            "webhook",
        }
    assert runs.option_help("on_busy") == RunOptions.model_fields["on_busy"].description
    options = runs.run_options({"agent": "echo", "on_busy": None, "as_json": True, "tenant": "t"})
    assert options == {"agent": "echo", "tenant": "t"}  # None: the model's default applies


def test_the_options_pydantic_free_names_are_the_models_fields() -> None:
    """The CLI's help and the keyword check read ``option_docs``; the model declares the options:
    both must name the same options, each described once."""
    from tether.runs.option_docs import OPTION_HELP, RUN_OPTIONS
    from tether.runs.options import RunOptions

    assert frozenset(RunOptions.model_fields) == RUN_OPTIONS
    assert list(RunOptions.model_fields) == list(OPTION_HELP)
    for name, field in RunOptions.model_fields.items():
        assert field.description == OPTION_HELP[name]


def test_a_wake_up_whose_record_is_gone_is_refused_by_a_trusting_worker(
    settings: Settings, count: Count, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registered-only producer sends only a run's ids; a worker without the setting
    registered such a message when the producer's record was gone (Redis lost it) and ran an
    empty request. It refuses it now, and a wake-up whose record is there runs that record."""
    from tether.producer.submission import wake_up
    from tether.worker.tasks import run_task

    run_id, text, _body = _submit(settings, count)
    woken = wake_up(RunRequest.model_validate_json(text))
    with worker_on(settings, monkeypatch):
        assert run_task(request=woken)["processed"] == 1  # the registered copy ran
        lost = json.loads(woken) | {"run_id": "run-lost-1", "request_id": "run-lost-1"}
        reply = run_task(request=json.dumps(lost))
    assert reply == {"run_id": "run-lost-1", "state": "refused", "error": "unregistered"}
    assert _result(settings, run_id).output == "echo: hi"
    with Producer(settings) as producer:
        assert producer.record("run-lost-1") is None  # nothing registered, nothing ran
