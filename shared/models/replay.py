"""A model client that plays a recorded run back: each request gets the answer recorded for it.

Used by :mod:`tether.runtime.replay`. The n-th request of the replay is the n-th step of the
recording: it must look like the recorded ``MODEL_REQUEST`` of that step (the model name, how
many prompt items, which tools were visible, whether a summary led the prompt), and it is
answered with that step's recorded ``MODEL_RESPONSE`` and the memory items the recording
appended (a recorded model failure fails again, with the recorded error). A request unlike the
recorded one, or past the recording's last step, raises
:class:`~tether.errors.ReplayDiverged`: no model is ever called.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from tether.core.events import ErrorPayload, ModelRequestPayload, ModelResponsePayload
from tether.core.items import Item
from tether.errors import ModelError, ReplayDiverged, error_from_record
from tether.models.base import ModelRequest, ModelResponse


@dataclass(frozen=True)
class RecordedAnswer:
    """One recorded model call: what was asked, what came back, what memory received."""

    step: int
    request: ModelRequestPayload
    response: ModelResponsePayload | None
    """None when the model failed: ``error`` says how."""
    memory_items: tuple[Item, ...] | None = None
    error: ErrorPayload | None = None


def describe_request(request: ModelRequestPayload) -> str:
    """A model request on one line, for divergence reports."""
    tools = ", ".join(request.tool_names) or "none"
    summary = ", with a summary" if request.has_summary else ""
    return (
        f"model request to {request.model!r} with {request.item_count} items, "
        f"tools [{tools}]{summary}"
    )


def request_payload(request: ModelRequest) -> ModelRequestPayload:
    """What the agent loop records of ``request`` (its ``MODEL_REQUEST`` payload)."""
    return ModelRequestPayload(
        model=request.model,
        item_count=len(request.items),
        tool_names=tuple(spec.name for spec in request.tools),
        has_summary=bool(request.summary),
    )


class ReplayModel:
    """Answers from a recording, in order (a :class:`~tether.models.base.ModelClient`)."""

    def __init__(self, answers: Sequence[RecordedAnswer]) -> None:
        self._answers = tuple(answers)
        self._next = 0
        self._lock = threading.Lock()

    @property
    def asked(self) -> int:
        """How many requests were answered."""
        return self._next

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The recorded answer of the next step, when ``request`` matches its recorded request.

        Raises:
            ReplayDiverged: the request differs from the recorded one, or the recording has
                no further step.
        """
        with self._lock:
            index = self._next
            if index >= len(self._answers):
                raise ReplayDiverged(
                    f"the replay asked the model {index + 1} times; the recording answered "
                    f"{len(self._answers)} times"
                )
            answer = self._answers[index]
            asked = request_payload(request)
            if asked != answer.request:
                raise ReplayDiverged(
                    f"step {answer.step}: expected {describe_request(answer.request)}, "
                    f"got {describe_request(asked)}"
                )
            self._next = index + 1
        recorded = answer.response
        if recorded is None:  # the model failed here: fail the same way
            error = answer.error
            raise error_from_record(
                error.error_type if error else ModelError.__name__,
                error.message if error else "the recorded model call failed",
            )
        return ModelResponse(
            text=recorded.text,
            tool_calls=recorded.tool_calls,
            usage=recorded.usage,
            memory_items=answer.memory_items,
        )
