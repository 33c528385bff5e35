"""A tiny OpenAI-compatible chat-completions server for tests (pytest plugin).

The ``fake_openai`` fixture starts a :class:`http.server.ThreadingHTTPServer` on 127.0.0.1 (free
port) in a thread and yields a :class:`FakeOpenAI`:

>>> fake_openai.script([ModelResponse.call("c1", "add", {"a": 1}), "the answer is 3"])
>>> model = OpenAIChatModel(fake_openai.base_url, fake_openai.api_key)
>>> fake_openai.requests[1].body["messages"][-1]["role"]  # the tool result came back
'tool'

Behaviour:
- Only ``POST /v1/chat/completions`` exists; other paths answer 404.
- The bearer token must equal ``api_key`` (unless ``require_auth`` is False). A wrong one gets a
  401 whose message *echoes the token it received in full*: a deliberately hostile server, so
  tests can prove the client scrubs keys from error excerpts.
- :meth:`FakeOpenAI.fail_next` makes the next N authorised requests fail (e.g. 500 or 429 with a
  ``Retry-After``) before the script resumes.
- Every request is recorded (headers with lower-case names, parsed JSON body, the answered
  status), including rejected ones.
- An exhausted script answers 400 "fake_openai script exhausted", which clients do not retry, so
  a test that under-scripts fails fast with that message.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tether.models.base import ModelResponse

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class FakeReply:
    """One scripted HTTP answer.

    Attributes:
        status: the HTTP status.
        body: a JSON-able body (ignored when ``raw`` is given).
        headers: extra response headers (e.g. ``Retry-After``).
        delay_s: wait this long before answering (to provoke client timeouts).
        raw: the exact body bytes to send (for malformed answers).
    """

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    status: int

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of a chat-completions body (empty when absent)."""
        if isinstance(self.body, dict):
            return list(self.body.get("messages", []))
        return []


Scripted = FakeReply | ModelResponse | Mapping[str, Any] | str
"""A script entry: a reply, a ModelResponse or plain text (turned into a completion), or a raw
completion body (a mapping, answered with 200)."""


def completion_body(
    text: str | None = None,
    tool_calls: Iterable[Mapping[str, Any]] = (),
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    model: str = "fake-model",
) -> dict[str, Any]:
    """A chat-completion JSON body with one choice."""
    calls = list(tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(message: str, *, kind: str = "server_error", code: str | None = None) -> Any:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "code": code}}


def _to_reply(entry: Scripted) -> FakeReply:
    if isinstance(entry, FakeReply):
        return entry
    if isinstance(entry, str):
        return FakeReply(body=completion_body(entry))
    if isinstance(entry, ModelResponse):
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in entry.tool_calls
        ]
        body = completion_body(entry.text, calls)
        if entry.usage.total_tokens:
            body["usage"] = {
                "prompt_tokens": entry.usage.input_tokens,
                "completion_tokens": entry.usage.output_tokens,
                "total_tokens": entry.usage.total_tokens,
            }
        return FakeReply(body=body)
    return FakeReply(body=dict(entry))


class FakeOpenAI:
    """State and controls of one fake server (see the module docstring).

    Attributes:
        base_url: the API root to give a client, ``http://127.0.0.1:<port>/v1``.
        api_key: the bearer token the server accepts (random per fixture).
        require_auth: whether to check the bearer token (False: any or none is accepted).
    """

    def __init__(self, port: int, api_key: str) -> None:
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.api_key = api_key
        self.require_auth = True
        self._lock = threading.Lock()
        self._queue: deque[FakeReply] = deque()
        self._failures: deque[FakeReply] = deque()
        self._requests: list[RecordedRequest] = []
        self.closing = threading.Event()

    def script(self, responses: Iterable[Scripted]) -> None:
        """Append answers to the script; each chat request consumes the next one."""
        replies = [_to_reply(r) for r in responses]
        with self._lock:
            self._queue.extend(replies)

    def fail_next(
        self,
        times: int,
        status: int = 500,
        *,
        retry_after: str | None = None,
        message: str = "fake_openai scripted failure",
    ) -> None:
        """Make the next ``times`` authorised chat requests fail with ``status``."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        reply = FakeReply(status=status, body=error_body(message), headers=headers)
        with self._lock:
            self._failures.extend([reply] * times)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        """How many scripted answers are left (failures not counted)."""
        with self._lock:
            return len(self._queue)

    def handle(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> FakeReply:
        """Choose the answer to one request and record it (called by the handler thread)."""
        body: Any
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        reply = self._choose(method, path, headers, raw, body)
        with self._lock:
            self._requests.append(RecordedRequest(method, path, dict(headers), body, reply.status))
        return reply

    def _choose(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes, body: Any
    ) -> FakeReply:
        if method != "POST" or path != CHAT_PATH:
            return FakeReply(404, error_body(f"no route {method} {path}", kind="not_found"))
        auth = headers.get("authorization", "")
        if self.require_auth and auth != f"Bearer {self.api_key}":
            # Echo the received token on purpose: clients must scrub it from their errors.
            message = f"Incorrect API key provided: {auth.removeprefix('Bearer ')!r}"
            return FakeReply(401, error_body(message, kind="invalid_request_error"))
        if not isinstance(body, dict):
            return FakeReply(400, error_body(f"body is not a JSON object: {raw[:80]!r}"))
        with self._lock:
            if self._failures:
                return self._failures.popleft()
            if self._queue:
                return self._queue.popleft()
        return FakeReply(400, error_body("fake_openai script exhausted; script() more answers"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake_factory: Callable[[int], FakeOpenAI]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake: FakeOpenAI = fake_factory(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real endpoints
    # Headers and body go out in separate writes; with Nagle on, each answer waits ~40 ms for
    # the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.server.fake
        reply = fake.handle(self.command, self.path, headers, raw)
        if reply.delay_s and fake.closing.wait(reply.delay_s):
            return  # server shutting down: drop the connection
        data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging (it would go to stderr)."""


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running fake OpenAI server, fresh per test."""
    api_key = "sk-fake-" + secrets.token_hex(16)
    server = _Server(lambda port: FakeOpenAI(port, api_key))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server.fake
    finally:
        server.fake.closing.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
