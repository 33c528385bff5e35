"""A deterministic model for tests and demo agents: no network, no randomness."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

from tether.errors import ModelError
from tether.models.base import DeltaSink, ModelDelta, ModelRequest, ModelResponse

Responder = Callable[[ModelRequest], ModelResponse]
#: The longest piece of tool-call arguments :meth:`ScriptedModel.stream` hands out at once.
PIECE_CHARS = 16


def _words(text: str) -> list[str]:
    """``text`` cut after each space, so the pieces join back to it exactly."""
    pieces, start = [], 0
    for i, char in enumerate(text):
        if char == " ":
            pieces.append(text[start : i + 1])
            start = i + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces


class ScriptedModel:
    """Answers from a script.

    Either a list of responses consumed in order (then ``default_text`` forever, or a
    :class:`ModelError` when ``default_text`` is None), or a responder function that computes
    the answer from the request (used by the demo agents, which must work across processes).

    Args:
        script: responses to return in order.
        responder: a function of the request; used when given (``script`` must then be empty).
        default_text: the final answer once the script is exhausted.
        keep_requests: how many of the latest requests :attr:`requests` keeps (None: every one,
            for tests that inspect them; 0: none, for agents that live as long as a worker).
    """

    def __init__(
        self,
        script: Iterable[ModelResponse] = (),
        *,
        responder: Responder | None = None,
        default_text: str | None = "done",
        keep_requests: int | None = None,
    ) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(f"keep_requests must be None or >= 0, not {keep_requests}")
        self._queue: deque[ModelResponse] = deque(script)
        if responder is not None and self._queue:
            raise ValueError("give a script or a responder, not both")
        self._responder = responder
        self._default_text = default_text
        self._lock = threading.Lock()
        # a request holds the session's whole history: a worker's agents keep none, or its heap
        # grows with every run and each full collection has more to scan (the P1 tail)
        self.requests: deque[ModelRequest] = deque(maxlen=keep_requests)

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """:meth:`complete`, handing the answer out in pieces first (its text word by word,
        then each tool call's arguments in pieces of at most :data:`PIECE_CHARS`), as a
        streaming server would."""
        response = self.complete(request)
        for piece in _words(response.text or ""):
            on_delta(ModelDelta("text", piece))
        for index, call in enumerate(response.tool_calls):
            args = call.arguments
            for start in range(0, max(len(args), 1), PIECE_CHARS):
                first = start == 0
                on_delta(
                    ModelDelta(
                        "tool_arguments",
                        args[start : start + PIECE_CHARS],
                        call_index=index,
                        call_id=call.id if first else None,
                        tool_name=call.name if first else None,
                    )
                )
        return response

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)  # maxlen 0: dropped at once
            if self._responder is not None:
                return self._responder(request)
            if self._queue:
                return self._queue.popleft()
        if self._default_text is None:
            raise ModelError("ScriptedModel script is exhausted; add responses or set default_text")
        return ModelResponse.final(self._default_text)
