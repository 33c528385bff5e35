"""The model-facing half of LLM compaction: the prompt, the parser and the markdown rendering.

Kept apart from :mod:`tether.runtime.compaction` so the policy stays small; everything here is a
pure
function except :func:`request_summary`, which makes the one model call.

The summary call is billed like any other: :func:`request_summary` hands its usage (also that of
an answer it could not use) to the :func:`summary_calls` collector of the compaction it runs in,
and whoever compacts (the agent loop) records it as a ``MODEL_USAGE`` event. The policy's
result (:class:`~tether.core.context.CompactResult`, the ``MEMORY_COMPRESS`` event) stays
what it was.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from tether.core.events import AgentEvent, EventType, ModelUsagePayload, Payload, Usage
from tether.core.items import ITEMS_ADAPTER, Item, ToolCallsMessage, UserMessage
from tether.core.text import valid_text
from tether.errors import ModelError
from tether.models.base import ModelClient, ModelRequest, billed_usage

READ_TOOLS = frozenset({"read", "grep", "find", "read_file"})
"""Tool names whose ``path``/``file`` argument is recorded as a file read."""

MODIFY_TOOLS = frozenset({"write", "edit", "create", "delete", "write_file", "apply_patch"})
"""Tool names whose ``path``/``file`` argument is recorded as a file modified."""

SUMMARY_SYSTEM_PROMPT = (
    "You are a conversation summarizer for a coding/tool-using agent. Summarize the conversation "
    "the user gives you so that work can continue without it. Reply with ONE JSON object and "
    "nothing else, with these keys:\n"
    '{"goal": string, "completed": [string], "pending": [string], "decisions": [string], '
    '"errors": [string], "testResults": [string], "openQuestions": [string]}\n'
    "Merge the previous summary, if any, into the new one. Keep file paths, commands, error "
    "messages and identifiers exactly. Keep it under 500 words."
)

UNAVAILABLE_PREFIX = "Compaction summary unavailable (LLM summarization failed)."

_SECTIONS = (
    ("completed", "Completed"),
    ("pending", "Pending"),
    ("decisions", "Key Decisions"),
    ("errors", "Errors"),
    ("test_results", "Test Results"),
    ("open_questions", "Open Questions"),
)


@dataclass(frozen=True)
class SummaryCall:
    """One summary call's tokens, for the model that was asked."""

    model: str
    usage: Usage


_collector: ContextVar[list[SummaryCall] | None] = ContextVar("summary_calls", default=None)


@contextmanager
def summary_calls() -> Iterator[list[SummaryCall]]:
    """Collect, in the list it yields, the usage of every summary call
    :func:`request_summary` makes in this context (this thread's, until the block exits): a
    call that reported no tokens is left out."""
    calls: list[SummaryCall] = []
    token = _collector.set(calls)
    try:
        yield calls
    finally:
        _collector.reset(token)


class EventSink(Protocol):
    """Where :func:`record_summary_calls` records (an
    :class:`~tether.runtime.session.AgentSession`: the session sits above this module, which
    only needs its ``emit``)."""

    def emit(
        self,
        type_: EventType,
        payload: Payload | None = None,
        *,
        run_id: str | None = None,
        step: int = 0,
    ) -> AgentEvent:
        """Append an event that does not write memory."""


def record_summary_calls(
    session: EventSink, calls: Sequence[SummaryCall], *, run_id: str | None, step: int = 0
) -> Usage:
    """Record each summary call a compaction made (collected by :func:`summary_calls`) as a
    ``MODEL_USAGE`` event of ``run_id`` (None: a compaction outside a run), counted like a
    ``MODEL_RESPONSE``; answer their tokens summed."""
    total = Usage()
    for call in calls:
        session.emit(
            EventType.MODEL_USAGE,
            ModelUsagePayload(model=call.model, usage=call.usage, call="compaction"),
            run_id=run_id,
            step=step,
        )
        total = total + call.usage
    return total


def _billed(model_name: str, usage: Usage | None) -> None:
    calls = _collector.get()
    if calls is not None and usage is not None and usage != Usage():
        calls.append(SummaryCall(model_name, usage))


@dataclass(frozen=True)
class ParsedSummary:
    """The structured fields of a summary, and its rendered text."""

    text: str = ""
    goal: str = ""
    completed: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    test_results: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()

    def with_text(self, text: str) -> ParsedSummary:
        """A copy with another rendered text."""
        return dataclasses.replace(self, text=text)


def extract_file_paths(items: Sequence[Item]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Files read and files modified by the tool calls in ``items``, deduplicated in order.

    The path comes from the call's JSON arguments, key ``path`` or ``file``; calls whose
    arguments are not a JSON object are skipped.
    """
    read: dict[str, None] = {}
    modified: dict[str, None] = {}
    for item in items:
        if not isinstance(item, ToolCallsMessage):
            continue
        for call in item.tool_calls:
            name = call.name.lower()
            target = read if name in READ_TOOLS else modified if name in MODIFY_TOOLS else None
            if target is None:
                continue
            for path in _paths_from_arguments(call.arguments):
                target.setdefault(path, None)
    return tuple(read), tuple(modified)


def _paths_from_arguments(arguments: str) -> list[str]:
    try:
        args = json.loads(arguments)
    except (ValueError, RecursionError):  # the model's text: anything, nested at any depth
        return []
    if not isinstance(args, dict):
        return []
    values = (args.get("path"), args.get("file"))
    return [v.strip() for v in values if isinstance(v, str) and v.strip()]


def build_summary_prompt(
    items: Sequence[Item],
    previous: str | None,
    read_files: Sequence[str],
    modified_files: Sequence[str],
) -> str:
    """The user message of the summary request."""
    parts: list[str] = []
    if previous and previous.strip():
        parts.append(f"Previous summary:\n{previous.strip()}\n")
    if read_files or modified_files:
        parts.append(f"Files read: {json.dumps(list(read_files))}")
        parts.append(f"Files modified: {json.dumps(list(modified_files))}\n")
    conversation = ITEMS_ADAPTER.dump_json(list(items)).decode()
    parts.append(f"Conversation to summarize:\n{conversation}")
    return "\n".join(parts)


def request_summary(
    model: ModelClient,
    model_name: str,
    items: Sequence[Item],
    previous: str | None,
    read_files: Sequence[str],
    modified_files: Sequence[str],
) -> str:
    """Make the one summary call and return the model's text ("" when it returned none).

    Its usage goes to the :func:`summary_calls` collector, if any: also when the call fails
    with a :class:`~tether.errors.ModelError` carrying the usage of an answer the client could
    not use."""
    prompt = build_summary_prompt(items, previous, read_files, modified_files)
    request = ModelRequest(
        model=model_name,
        items=(UserMessage(content=prompt),),
        system_prompt=SUMMARY_SYSTEM_PROMPT,
    )
    try:
        response = model.complete(request)
    except ModelError as exc:
        _billed(model_name, billed_usage(exc))
        raise
    _billed(model_name, response.usage)
    # the summary goes into a COMPACT event: storable, like every other model answer
    return valid_text(response.text or "")


def parse_summary(raw: str) -> ParsedSummary | None:
    """Parse the model's JSON (first ``{`` to last ``}``); None when there is no usable object.

    Code fences and prose around the object are ignored, and a string is accepted where a list
    was expected. An object with none of the expected keys counts as unusable.
    """
    start, end = raw.find("{"), raw.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(raw[start : end + 1])
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    keys = ("goal", "completed", "pending", "decisions", "errors", "testResults", "openQuestions")
    if not any(key in data for key in (*keys, "test_results", "open_questions")):
        return None
    return ParsedSummary(
        goal=" ".join(_as_strings(data.get("goal"))),
        completed=_as_strings(data.get("completed")),
        pending=_as_strings(data.get("pending")),
        decisions=_as_strings(data.get("decisions")),
        errors=_as_strings(data.get("errors")),
        test_results=_as_strings(data.get("testResults", data.get("test_results"))),
        open_questions=_as_strings(data.get("openQuestions", data.get("open_questions"))),
    )


def _as_strings(value: Any) -> tuple[str, ...]:
    """A list of non-empty strings from a list, a single string, or any other JSON value."""
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    out: list[str] = []
    for entry in values:
        text = entry if isinstance(entry, str) else json.dumps(entry)
        if text.strip():
            out.append(text.strip())
    return tuple(out)


def render_summary(
    parsed: ParsedSummary, read_files: Sequence[str], modified_files: Sequence[str]
) -> str:
    """Markdown sections (``## Goal``, ``## Completed``, ..., files); empty sections are left out.

    File lists are rendered too so they survive into the next compaction's previous summary.
    """
    sections: list[str] = []
    if parsed.goal:
        sections.append(f"## Goal\n{parsed.goal}")
    for field, title in _SECTIONS:
        entries: tuple[str, ...] = getattr(parsed, field)
        if entries:
            sections.append(f"## {title}\n" + "\n".join(f"- {e}" for e in entries))
    for title, paths in (("Files Read", read_files), ("Files Modified", modified_files)):
        if paths:
            sections.append(f"## {title}\n" + "\n".join(f"- {p}" for p in paths))
    return "\n\n".join(sections)


def unavailable_summary(summarized_count: int, previous: str | None) -> str:
    """The fallback summary when the model call fails; keeps the previous summary if any.

    The reference drops the previous summary here; keeping it loses nothing already known.
    """
    text = f"{UNAVAILABLE_PREFIX} {summarized_count} items were summarized."
    if previous and previous.strip():
        text += f"\n\nPrevious summary:\n{previous.strip()}"
    return text
