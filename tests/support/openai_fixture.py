"""The test OpenAI server as a pytest plugin: a process per test session, reset per test.

``openai_server`` (function scope) yields an :class:`OpenAIServer`: the ``base_url`` and
``api_key`` to give a client, and a small client of the server's control API:

>>> openai_server.script([ModelResponse.call("c1", "add", {"a": 1}), "the answer is 3"])
>>> model = OpenAIChatModel(openai_server.base_url, openai_server.api_key)
>>> openai_server.requests()[1].messages[-1]["role"]   # the tool result came back
'tool'

The server (:mod:`tests.support.openai_server`) runs as ``python -m tests.support.openai_server
--port 0`` in its own process, started once per session and killed at the end; clients talk
HTTP to it exactly as they would to a provider.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.openai_server import KEY_VARIABLE
from tether.models.base import ModelResponse

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0

Scripted = str | ModelResponse | Mapping[str, Any]
"""A script entry: final text, a ModelResponse (text and tool calls), or a reply object (see
:mod:`tests.support.openai_replies`)."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    api_path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any
    status: int
    request_id: str
    received_at: float
    """When it arrived (wall-clock seconds, the server's clock)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of a chat request (empty when absent)."""
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def input(self) -> list[dict[str, Any]]:
        """The ``input`` items of a Responses API request (empty when absent)."""
        return list(self.body.get("input", [])) if isinstance(self.body, dict) else []


def reply(
    text: str | None = None,
    tool_calls: Iterable[tuple[str, str, str]] = (),
    *,
    usage: Mapping[str, int] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """A reply object: ``tool_calls`` as ``(id, name, arguments)``; ``options`` are the other
    reply fields (``status``, ``message``, ``delay_s``, ``chunk_delay_s``, ``malformed``...)."""
    doc: dict[str, Any] = {
        "text": text,
        "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in tool_calls],
        **options,
    }
    if usage is not None:
        doc["usage"] = dict(usage)
    return doc


def _to_reply(entry: Scripted) -> dict[str, Any]:
    if isinstance(entry, str):
        return reply(entry)
    if isinstance(entry, ModelResponse):
        calls = [(c.id, c.name, c.arguments) for c in entry.tool_calls]
        return reply(entry.text, calls)
    return dict(entry)


class OpenAIServer:
    """A running test server: where it is, its key, and its control API."""

    def __init__(self, root_url: str, api_key: str, process: subprocess.Popen[bytes]) -> None:
        self.root_url = root_url
        self.base_url = root_url + "/v1"
        self.api_key = api_key
        self.process = process
        self._http = httpx.Client(base_url=root_url, timeout=10.0)

    def _post(self, path: str, doc: Mapping[str, Any]) -> Any:
        response = self._http.post(path, json=dict(doc))
        response.raise_for_status()
        return response.json()

    def script(self, entries: Iterable[Scripted]) -> None:
        """Append replies to the script; each model request consumes the next one."""
        self._post("/_control/script", {"replies": [_to_reply(e) for e in entries]})

    def fail_next(
        self,
        count: int,
        status: int = 500,
        *,
        retry_after_s: float | None = None,
        message: str = "openai_server scripted failure",
    ) -> None:
        """Fail the next ``count`` model requests with ``status`` (before the script resumes)."""
        doc = {"count": count, "status": status, "retry_after_s": retry_after_s, "message": message}
        self._post("/_control/fail_next", doc)

    def default_reply(self, entry: Scripted | None, *, model: str | None = None) -> None:
        """Answer every request the script leaves unanswered with ``entry`` (None: stop); with
        ``model``, only the requests for that model (they take it over the default)."""
        doc: dict[str, Any] = {"reply": None if entry is None else _to_reply(entry)}
        if model is not None:
            doc["model"] = model
        self._post("/_control/default", doc)

    def set_models(self, models: Iterable[str]) -> None:
        """What ``GET /v1/models`` lists."""
        self._post("/_control/models", {"models": list(models)})

    def requests(self) -> list[RecordedRequest]:
        """Every request received since the last reset, oldest first."""
        response = self._http.get("/_control/requests")
        response.raise_for_status()
        return [RecordedRequest(**doc) for doc in response.json()]

    def model_requests(self) -> list[RecordedRequest]:
        """The chat and responses requests (not ``/models``)."""
        return [r for r in self.requests() if r.method == "POST"]

    def reset(self) -> None:
        """Forget script, failures and requests."""
        self._post("/_control/reset", {})

    def close(self) -> None:
        """Stop the process (and the control client)."""
        self._http.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def start_openai_server(api_key: str) -> OpenAIServer:
    """Start ``python -m tests.support.openai_server --port 0`` and wait until it serves.

    Raises:
        RuntimeError: the process exited or did not say where it listens within 20 s (the
            message carries what it printed).
    """
    env = {**os.environ, KEY_VARIABLE: api_key}
    # stderr to a file, not a pipe: a pipe nobody reads would fill up with the tracebacks of
    # dropped connections and stall the server (the process keeps its own descriptor)
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.openai_server", "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            stdin=subprocess.DEVNULL,
        )
        line = _first_line(process)
        if not line.startswith("listening on "):
            process.kill()
            process.wait(timeout=10)
            errors.seek(0)
            raise RuntimeError(
                f"the test OpenAI server did not start (exit code {process.returncode}, first "
                f"line {line!r}); stderr:\n{errors.read().decode(errors='replace')[-3000:]}"
            )
    server = OpenAIServer(line.removeprefix("listening on "), api_key, process)
    server._http.get("/_control/health").raise_for_status()
    return server


def _first_line(process: subprocess.Popen[bytes]) -> str:
    """The first line the process prints, or "" if none within the start timeout."""
    first: list[bytes] = []
    stdout = process.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    return first[0].decode().strip() if first else ""


@pytest.fixture(scope="session")
def openai_server_process() -> Iterator[OpenAIServer]:
    """The server process, shared by the session's tests."""
    server = start_openai_server("sk-test-" + secrets.token_hex(16))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def openai_server(openai_server_process: OpenAIServer) -> OpenAIServer:
    """The server, reset for this test."""
    openai_server_process.reset()
    return openai_server_process
