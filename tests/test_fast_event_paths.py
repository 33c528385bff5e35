"""The two shortcuts of a session's append (P13): the event built without validating again, and
redaction that skips the walk over a payload's texts when its JSON text holds nothing a secret
needs. Each must give exactly what the long way gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.events import (
    AgentEvent,
    EventType,
    ItemsAppendedPayload,
    ModelUsagePayload,
    TextPayload,
    Usage,
)
from tether.core.items import ExternalItem, UserMessage
from tether.runtime.redaction import (
    DEFAULT_REDACTOR,
    SECRET_PATTERNS,
    _screens,
    chain,
    pattern_redactor,
    redact_event,
    secret_redactor,
)

SAMPLE_SECRETS = (
    "sk-proj-" + "Q7x" * 10,
    "AKIA" + "IOSFODNN7EXAMPL1",
    "Bearer " + "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
    "bearer " + "x" * 20,
    "ghp_" + "a1B2" * 9,
    "xoxb-" + "1234567890ab",
    "AIza" + "B" * 35,
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
)


def _payloads() -> list[tuple[EventType, Any]]:
    return [
        (EventType.MEMORY_ITEMS_APPENDED, ItemsAppendedPayload(items=(UserMessage(content="hi"),))),
        (
            EventType.MEMORY_ITEMS_APPENDED,
            ItemsAppendedPayload(
                items=(ExternalItem(source="openai-agents", data={"type": "web_search_call"}),)
            ),
        ),
        (EventType.FINAL_OUTPUT, TextPayload(text="the answer")),
        (
            EventType.MODEL_USAGE,
            ModelUsagePayload(
                model="m", usage=Usage(input_tokens=3, output_tokens=4), call="compaction"
            ),
        ),
    ]


@pytest.mark.parametrize("case", range(4))
def test_an_appended_event_is_the_validated_one(case: int) -> None:
    type_, payload = _payloads()[case]
    fast = AgentEvent.appended(
        type_, payload, tenant="acme", session_id="s1", seq=7, run_id="run-1", step=2
    )
    slow = AgentEvent(
        type=type_,
        tenant="acme",
        session_id="s1",
        seq=7,
        run_id="run-1",
        step=2,
        ts_ms=fast.ts_ms,
        payload=payload,
    )
    assert fast == slow
    assert fast.v == slow.v  # v1 for plain items, v2 external items, v4 usage
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    assert AgentEvent.model_validate_json(fast.model_dump_json()) == fast
    with pytest.raises(ValueError):  # frozen, as the validated one
        fast.seq = 8  # type: ignore[misc]


def test_an_appended_event_refuses_what_is_not_a_payload() -> None:
    with pytest.raises(TypeError):
        AgentEvent.appended(
            EventType.ERROR,
            UserMessage(content="not a payload"),
            tenant="acme",
            session_id="s1",
            seq=1,
            run_id=None,
            step=0,
        )


def _walked(event: AgentEvent, redact: object) -> AgentEvent:
    """:func:`redact_event` the long way (no screen)."""
    unscreened = chain(redact, lambda text: text)  # type: ignore[arg-type]
    assert unscreened not in _screens
    return redact_event(event, unscreened)


def _event(text: str) -> AgentEvent:
    payload = ItemsAppendedPayload(items=(UserMessage(content=text),))
    return AgentEvent.appended(
        EventType.MEMORY_ITEMS_APPENDED,
        payload,
        tenant="acme",
        session_id="s1",
        seq=1,
        run_id=None,
        step=0,
    )


@pytest.mark.parametrize("secret", SAMPLE_SECRETS)
@pytest.mark.parametrize("before", ["", " ", "\n", "\t", '"', "\\", "key:\n", "é"])
def test_the_screen_never_lets_a_secret_through(secret: str, before: str) -> None:
    # "\nsk-..." is "\\nsk-..." in JSON: a screen matching the patterns themselves on the JSON
    # text would miss it (the \\b before sk- fails after the "n" of the escape)
    event = _event(f"{before}{secret}\n")
    screened = redact_event(event, DEFAULT_REDACTOR)
    assert screened == _walked(event, DEFAULT_REDACTOR)
    if not before[-1:].isalnum():  # after a letter, "\\bsk-" does not match either way
        assert secret.split("\n")[0] not in screened.model_dump_json()


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40),
    st.sampled_from((*SAMPLE_SECRETS, "", "plain words")),
    st.text(max_size=40),
)
def test_screened_and_walked_redaction_agree(head: str, middle: str, tail: str) -> None:
    event = _event(head + middle + tail)
    for redact in (
        DEFAULT_REDACTOR,
        chain(DEFAULT_REDACTOR, secret_redactor(["hunter2-secret"])),
    ):
        assert redact_event(event, redact) == _walked(event, redact)


def test_a_secret_json_escapes_is_walked() -> None:
    """A secret value holding a quote appears escaped in JSON text: no screen for it."""
    quoted = secret_redactor(['pass"word-123'])
    assert quoted not in _screens
    combined = chain(DEFAULT_REDACTOR, quoted)
    assert combined not in _screens
    event = _event('my password is pass"word-123')
    assert 'pass\\"word-123' not in redact_event(event, combined).model_dump_json()
    assert json.loads(redact_event(event, combined).model_dump_json())  # still an event


def test_other_patterns_and_own_functions_are_walked() -> None:
    assert pattern_redactor(SECRET_PATTERNS) in _screens
    assert pattern_redactor((r"secret-\d+",)) not in _screens
    own = chain(DEFAULT_REDACTOR, lambda text: text.replace("tiger", "***"))
    assert own not in _screens
    assert "tiger" not in redact_event(_event("a tiger"), own).model_dump_json()


def test_a_redactor_that_cannot_be_weakly_referenced_still_works() -> None:
    """A builtin (``str.lower``) has no screen, and chaining or applying it must not fail."""
    lowered = chain(DEFAULT_REDACTOR, str.lower)
    assert lowered not in _screens
    event = _event("Hello sk-proj-" + "Q7x" * 10)
    assert _text(redact_event(event, lowered)) == "hello ***"
    assert _text(redact_event(event, str.lower)).startswith("hello sk-proj-")


def _text(event: AgentEvent) -> str:
    payload = event.payload
    assert isinstance(payload, ItemsAppendedPayload)
    item = payload.items[0]
    assert isinstance(item, UserMessage)
    return item.content


@pytest.mark.parametrize(("run_id", "step"), [(123, 0), (None, 1.5), (None, "7"), ("r", True)])
def test_a_callers_odd_run_id_or_step_is_validated_as_ever(run_id: Any, step: Any) -> None:
    """Fields a caller gives (``add_items(run_id=...)``) are refused or converted as the
    validated constructor does, never stored as they came (a head that then fails to load)."""
    payload = ItemsAppendedPayload(items=(UserMessage(content="hi"),))
    fields = {"tenant": "acme", "session_id": "s1", "seq": 1, "run_id": run_id, "step": step}
    try:
        expected = AgentEvent(type=EventType.MEMORY_ITEMS_APPENDED, payload=payload, **fields)
    except ValueError:
        with pytest.raises(ValueError):
            AgentEvent.appended(EventType.MEMORY_ITEMS_APPENDED, payload, **fields)
        return
    got = AgentEvent.appended(EventType.MEMORY_ITEMS_APPENDED, payload, **fields)
    assert got.model_dump(exclude={"ts_ms"}) == expected.model_dump(exclude={"ts_ms"})
    assert AgentEvent.model_validate_json(got.model_dump_json()) == got


def test_a_lone_surrogate_is_walked_as_before() -> None:
    """The screen cannot write such a payload as JSON; the walk takes it, as before."""
    event = _event("a\ud800b")
    assert redact_event(event, DEFAULT_REDACTOR) == _walked(event, DEFAULT_REDACTOR)
