"""A deterministic model for tests and demo agents: no network, no randomness."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

from tether.errors import ModelError
from tether.models.base import ModelRequest, ModelResponse

Responder = Callable[[ModelRequest], ModelResponse]


class ScriptedModel:
    """Answers from a script.

    Either a list of responses consumed in order (then ``default_text`` forever, or a
    :class:`ModelError` when ``default_text`` is None), or a responder function that computes
    the answer from the request (used by the demo agents, which must work across processes).

    Args:
        script: responses to return in order.
        responder: a function of the request; used when given (``script`` must then be empty).
        default_text: the final answer once the script is exhausted.
    """

    def __init__(
        self,
        script: Iterable[ModelResponse] = (),
        *,
        responder: Responder | None = None,
        default_text: str | None = "done",
    ) -> None:
        self._queue: deque[ModelResponse] = deque(script)
        if responder is not None and self._queue:
            raise ValueError("give a script or a responder, not both")
        self._responder = responder
        self._default_text = default_text
        self._lock = threading.Lock()
        # bounded: built-in agents live as long as a worker, and must not grow without limit
        self.requests: deque[ModelRequest] = deque(maxlen=1000)

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)
            if self._responder is not None:
                return self._responder(request)
            if self._queue:
                return self._queue.popleft()
        if self._default_text is None:
            raise ModelError("ScriptedModel script is exhausted; add responses or set default_text")
        return ModelResponse.final(self._default_text)
