"""An OpenAI-compatible HTTP server for tests, run as its own process.

    python -m tests.support.openai_server --port 0      # prints "listening on http://..."

The API key it accepts comes from ``$OPENAI_SERVER_API_KEY`` (or ``--api-key``). It speaks:

- ``POST /v1/chat/completions`` and ``POST /v1/responses``, plain JSON or, with
  ``"stream": true``, server-sent events (chat: ``chat.completion.chunk`` objects with
  ``delta.content`` and ``delta.tool_calls[i].function.arguments`` pieces, usage in a last chunk
  when ``stream_options.include_usage``, then ``[DONE]``; responses: ``response.created``,
  ``response.output_text.delta``, ``response.function_call_arguments.delta``, ...,
  ``response.completed`` with usage);
- ``GET /v1/models``;
- the same under Azure's paths (``/openai/deployments/<name>/...``, ``/openai/...``, key in the
  ``api-key`` header).

Every answer carries an ``x-request-id``. A wrong or missing key gets a 401 whose message echoes
the key received, in full: a hostile server on purpose, so tests prove that clients scrub it.

The control API (no key, for tests in another process; :mod:`tests.support.openai_fixture`
wraps it): ``POST /_control/script`` ``{"replies": [...]}`` appends replies (see
:mod:`tests.support.openai_replies`) that model requests consume in order;
``POST /_control/fail_next`` ``{"count", "status", "retry_after_s", "message"}`` fails the next
requests first; ``POST /_control/default`` ``{"reply": {...} | null}`` answers every request
the script leaves unanswered (a benchmark's endless traffic; with ``"model"``, only the requests
for that model: a judge answering apart from the agent it grades); ``POST /_control/models``
``{"models": [...]}`` sets what ``/models`` lists;
``GET /_control/requests`` the recorded requests (each with ``received_at``, the wall-clock
second it arrived: rates are measured on the server's side); ``POST /_control/reset``;
``GET /_control/health``. An exhausted script answers 400 "script exhausted", which clients do
not retry, so a test that scripts too little fails fast saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support import openai_replies as replies

DEFAULT_MODELS = ("test-model", "test-embedder")
KEY_VARIABLE = "OPENAI_SERVER_API_KEY"
_AZURE_PREFIX = re.compile(r"^/openai(/deployments/[^/]+)?(?=/)")


class ServerState:
    """What the server was told and what it received (shared by its handler threads)."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the script, pending failures, recorded requests; list the default models."""
        with self.lock:
            self.script: deque[dict[str, Any]] = deque()
            self.failures: deque[dict[str, Any]] = deque()
            self.requests: list[dict[str, Any]] = []
            self.models = list(DEFAULT_MODELS)
            self.serial = 0
            self.default: dict[str, Any] | None = None
            self.model_defaults: dict[str, dict[str, Any]] = {}

    def next_serial(self) -> int:
        """A fresh number for ids (request ids, completion ids)."""
        with self.lock:
            self.serial += 1
            return self.serial

    def next_reply(self, model: str) -> dict[str, Any]:
        """The next failure, else the next scripted reply, else the model's default, else the
        default, else the "script exhausted" error."""
        with self.lock:
            if self.failures:
                return self.failures.popleft()
            if self.script:
                return self.script.popleft()
            if model in self.model_defaults:
                return self.model_defaults[model]
            if self.default is not None:
                return self.default
        return {"status": 400, "message": "openai_server script exhausted; script more replies"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: ServerState) -> None:
        super().__init__(address, _Handler)
        self.state = state


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like real endpoints
    # headers and body go out in separate writes; with Nagle on, each waits for a delayed ACK
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a test's output is not the place for access logs."""

    # --- routing ----------------------------------------------------------------------------

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        try:
            if parts.path.startswith("/_control/"):
                self._control(parts.path, body)
            else:
                self._api(parts.path, parts.query, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing left to answer

    def _api(self, path: str, query: str, body: Any) -> None:
        received_at = time.time()
        state = self.server.state
        request_id = f"req_{state.next_serial()}"
        api_path = _AZURE_PREFIX.sub("/v1", path)
        received = self._received_key()
        record = {
            "method": self.command,
            "path": path,
            "api_path": api_path,
            "query": dict(parse_qsl(query)),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
            "request_id": request_id,
            "received_at": received_at,
        }
        status, answer = self._answer(api_path, received, body, request_id)
        record["status"] = status
        with state.lock:
            state.requests.append(record)
        answer()

    def _answer(
        self, api_path: str, received: str | None, body: Any, request_id: str
    ) -> tuple[int, Any]:
        """The status to record and the function that sends the answer."""
        state = self.server.state
        known = (self.command, api_path) in {
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/responses"),
            ("GET", "/v1/models"),
        }
        if not known:
            message = f"no route {self.command} {api_path}"
            return 404, lambda: self._json(404, replies.error_body(message), request_id)
        if received != state.api_key:
            # the key received, echoed in full on purpose: clients must scrub it
            message = f"Incorrect API key provided: {received!r}."
            error = replies.error_body(
                message, kind="invalid_request_error", code="invalid_api_key"
            )
            return 401, lambda: self._json(401, error, request_id)
        if api_path == "/v1/models":
            with state.lock:
                data = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "tests"}
                    for m in state.models
                ]
            return 200, lambda: self._json(200, {"object": "list", "data": data}, request_id)
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            error = replies.error_body("body must be a JSON object with a model")
            return 400, lambda: self._json(400, error, request_id)
        reply = state.next_reply(body["model"])
        status = int(reply.get("status", 200))
        return status, lambda: self._reply(api_path, body, reply, received or "", request_id)

    def _received_key(self) -> str | None:
        auth = self.headers.get("Authorization")
        if auth is not None:
            return auth.removeprefix("Bearer ")
        return self.headers.get("api-key")

    # --- answers ----------------------------------------------------------------------------

    def _reply(
        self, api_path: str, body: dict[str, Any], reply: dict[str, Any], key: str, rid: str
    ) -> None:
        time.sleep(float(reply.get("delay_s", 0)))
        status = int(reply.get("status", 200))
        headers = {str(k): str(v) for k, v in reply.get("headers", {}).items()}
        if status >= 400:
            error = replies.error_body(str(reply.get("message", "scripted failure")))
            self._json(status, error, rid, headers)
            return
        serial = self.server.state.next_serial()
        model = body["model"]
        chat = api_path == "/v1/chat/completions"
        if not body.get("stream"):
            if "body" in reply:  # a document sent as it is (unusable answers)
                self._json(status, reply["body"], rid, headers)
            elif reply.get("malformed"):
                data = replies.malformed_chunk(key).encode()
                self._send(status, data, rid, headers)
            elif chat:
                self._json(status, replies.chat_body(reply, model, serial), rid, headers)
            else:
                self._json(status, replies.responses_body(reply, model, serial), rid, headers)
            return
        events: Iterable[tuple[str | None, str]]
        if chat:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = replies.chat_chunks(reply, model, serial, include_usage=usage, key=key)
            events = ((None, data) for data in chunks)
        else:
            events = replies.responses_events(reply, model, serial, key=key)
        self._stream(events, float(reply.get("chunk_delay_s", 0)), rid, headers)

    def _json(
        self, status: int, doc: Any, rid: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send(status, json.dumps(doc).encode(), rid, headers or {})

    def _send(self, status: int, data: bytes, rid: str, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", rid)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self,
        events: Iterable[tuple[str | None, str]],
        delay_s: float,
        rid: str,
        headers: Mapping[str, str],
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", rid)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        for event, data in events:
            time.sleep(delay_s)
            text = (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
            self._chunk(text.encode())
        self._chunk(b"")  # the last chunk of a chunked body

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # --- control ------------------------------------------------------------------------------

    def _control(self, path: str, body: Any) -> None:
        state = self.server.state
        doc = body if isinstance(body, dict) else {}
        answer: Any = {"ok": True}
        if path == "/_control/health":
            pass
        elif path == "/_control/script":
            with state.lock:
                state.script.extend(doc.get("replies", []))
        elif path == "/_control/fail_next":
            failure: dict[str, Any] = {
                "status": int(doc.get("status", 500)),
                "message": str(doc.get("message", "openai_server scripted failure")),
            }
            if doc.get("retry_after_s") is not None:
                failure["headers"] = {"Retry-After": str(doc["retry_after_s"])}
            with state.lock:
                state.failures.extend([failure] * int(doc.get("count", 1)))
        elif path == "/_control/default":
            reply = doc.get("reply")
            model = doc.get("model")
            with state.lock:
                if isinstance(model, str):
                    state.model_defaults.pop(model, None)
                    if isinstance(reply, dict):
                        state.model_defaults[model] = dict(reply)
                else:
                    state.default = dict(reply) if isinstance(reply, dict) else None
        elif path == "/_control/models":
            with state.lock:
                state.models = [str(m) for m in doc.get("models", [])]
        elif path == "/_control/requests":
            with state.lock:
                answer = list(state.requests)
        elif path == "/_control/reset":
            state.reset()
        else:
            self._json(404, replies.error_body(f"no control route {path}"), "control")
            return
        self._json(200, answer, "control")


def main(argv: list[str] | None = None) -> int:
    """Serve until killed; the first line on stdout says where."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--api-key", default=None, help=f"the accepted key (default: ${KEY_VARIABLE})"
    )
    args = parser.parse_args(argv)
    key = args.api_key or os.environ.get(KEY_VARIABLE)
    if not key:
        print(f"error: no API key; set {KEY_VARIABLE} or pass --api-key", file=sys.stderr)
        return 2
    server = _Server((args.host, args.port), ServerState(key))
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
