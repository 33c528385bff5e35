"""A background thread that prints a session's events live while other code submits runs."""

from __future__ import annotations

import threading
import time

from rich.console import Console

from tether.persistence.streams.base import EventStream
from tether.producer.ops.render import event_text

POLL_IDLE_S = 0.3
BLOCK_MS = 200


class LiveTail:
    """Follow one session's live stream in a daemon thread, printing each event.

    Args:
        stream: the event stream.
        tenant: the session's tenant.
        session_id: the session to follow.
        console: where to print (rich consoles serialise prints across threads).
        prefix: printed before each event line.
    """

    def __init__(
        self,
        stream: EventStream,
        tenant: str,
        session_id: str,
        console: Console,
        *,
        prefix: str = "  tail | ",
    ) -> None:
        self._stream = stream
        self._tenant = tenant
        self._session_id = session_id
        self._console = console
        self._prefix = prefix
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="tether-demo-tail", daemon=True)
        self.seqs: set[int] = set()
        self.last_seq = 0
        self.error: Exception | None = None

    def start(self) -> LiveTail:
        """Start following."""
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop following and wait for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def wait_for(self, seq: int, timeout_s: float) -> bool:
        """Wait until an event with ``seq`` or later was printed; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.last_seq < seq:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.error is not None:
                    return False
                self._cond.wait(remaining)
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self._stream.tail(
                    self._tenant,
                    self._session_id,
                    after_seq=self.last_seq,
                    block_ms=BLOCK_MS,
                    idle_timeout_s=POLL_IDLE_S,
                ):
                    self._console.print(event_text(event, prefix=self._prefix))
                    with self._cond:
                        self.seqs.add(event.seq)
                        self.last_seq = event.seq
                        self._cond.notify_all()
                    if self._stop.is_set():
                        return
            except Exception as exc:  # a thread must end quietly: never print a traceback
                if self._stop.is_set():
                    return  # the connection was closed under us while stopping: expected
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()
                return
