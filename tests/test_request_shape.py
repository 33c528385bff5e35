"""One request shape (issue #26, item 3): the run options are declared once."""

from __future__ import annotations

import typing

import pytest

from tether.producer.client import Producer, RunSpec
from tether.producer.submission import run_spec
from tether.runs.contract import RunRequest
from tether.runs.options import RUN_OPTIONS, RunExtras, RunOptions, RunOptionsKwargs
from tether.settings import Settings


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
        assert named == {"agent", "tenant", "request_id", "timeout_s", "on_busy"}
    assert runs.option_help("on_busy") == RunOptions.model_fields["on_busy"].description
    options = runs.run_options({"agent": "echo", "on_busy": None, "as_json": True, "tenant": "t"})
    assert options == {"agent": "echo", "tenant": "t"}  # None: the model's default applies
