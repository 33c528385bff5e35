"""A streaming agent for the token-streaming tests on real workers (loaded through
TETHER_AGENT_MODULES). Its model streams like a provider, one word at a time, and the run's input
steers it:

- ``plain``: two steps (text and a ``note`` call, then a final answer), streamed at once;
- ``gate:<token>``: as ``plain``, but step 0 stops after :data:`HALF` pieces until the test
  opens ``<prefix>:<token>:open`` (the test attaches readers or asks for a cancel meanwhile);
- ``die:<token>``: the first attempt of step 0 stops after :data:`HALF` pieces and waits to be
  killed; later attempts stream straight through;
- ``long``: one step answering :data:`LONG_WORDS` words, a word every :data:`LONG_PACE_S`
  (slower than a publish round trip, so about an entry per word: the channel's bound).

Each call counts itself at ``<prefix>:<token>:calls``; at a stop it sets
``<prefix>:<token>:midway``. The Redis and the prefix come from ``STREAM_TEST_REDIS_URL`` and
``STREAM_TEST_PREFIX``.
"""

from __future__ import annotations

import os
import time

import redis

from tether import Agent, ModelResponse, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import DeltaSink, ModelDelta, ModelRequest
from tether.models.scripted import ScriptedModel

HALF = 4
LONG_WORDS = 600
LONG_PACE_S = 0.001
#: Longest a stopped step waits for its gate (a test that failed never opens it).
GATE_WAIT_S = 60.0
STEP0_TEXT = "let me write that down in the notes before answering you"
FINAL_TEXT = "the answer is forty two and it was noted for later"


@tool
def note(text: str) -> str:
    """Write a note."""
    return f"noted: {text}"


def _client() -> tuple[redis.Redis, str]:
    return redis.Redis.from_url(os.environ["STREAM_TEST_REDIS_URL"]), os.environ[
        "STREAM_TEST_PREFIX"
    ]


def _input(request: ModelRequest) -> str:
    return next(i.content for i in reversed(request.items) if isinstance(i, UserMessage))


def _tool_done(request: ModelRequest) -> bool:
    """Whether this run's ``note`` call has its result (step 1), after the newest input."""
    last_input = max(i for i, item in enumerate(request.items) if isinstance(item, UserMessage))
    return any(isinstance(item, ToolOutput) for item in request.items[last_input:])


def _respond(request: ModelRequest) -> ModelResponse:
    text = _input(request)
    if text == "long":
        return ModelResponse.final(" ".join(f"w{n}" for n in range(LONG_WORDS)))
    if _tool_done(request):
        return ModelResponse.final(FINAL_TEXT)
    return ModelResponse.call(
        "call_note", "note", {"text": "forty two, for the record"}, text=STEP0_TEXT
    )


def _paced(on_delta: DeltaSink) -> DeltaSink:
    def paced(piece: ModelDelta) -> None:
        on_delta(piece)
        time.sleep(LONG_PACE_S)  # the model's own pace, as a provider's tokens come

    return paced


class GatedModel(ScriptedModel):
    """Streams word by word; step 0 of a ``gate:``/``die:`` run stops halfway (see above)."""

    def __init__(self) -> None:
        super().__init__(responder=_respond)

    def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        mode, _, token = _input(request).partition(":")
        if mode == "long":
            return super().stream(request, _paced(on_delta))
        if mode not in ("gate", "die") or _tool_done(request):
            return super().stream(request, on_delta)
        client, prefix = _client()
        calls = client.incr(f"{prefix}:{token}:calls")
        pieces: list[object] = []
        response = super().stream(request, pieces.append)  # type: ignore[arg-type]
        stop = mode == "gate" or calls == 1  # a redo after a kill goes straight through
        for n, piece in enumerate(pieces):
            if stop and n == HALF:
                client.set(f"{prefix}:{token}:midway", calls)
                deadline = time.monotonic() + GATE_WAIT_S
                while not client.exists(f"{prefix}:{token}:open"):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"gate {token} never opened")
                    time.sleep(0.02)  # the model "thinks" until the test lets it go on
            on_delta(piece)  # type: ignore[arg-type]
        return response


TETHER_AGENTS = {"streamer": lambda: Agent(GatedModel(), "stream-model", tools=[note])}
