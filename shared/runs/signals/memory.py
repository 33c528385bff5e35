"""The mailbox in memory (tests, in-process cycles): the same behaviour as
:class:`~tether.runs.signals.redis.RedisSignalMailbox`, one lock."""

from __future__ import annotations

import json
import threading

from tether.core.events import now_ms
from tether.runs.signals.base import (
    MAX_SIGNALS_PER_SESSION,
    SignalSent,
    full_mailbox,
    is_consumed,
)
from tether.runs.waits.base import WaitIndex
from tether.runtime.signals import Signal, stream_id_key


class InMemorySignalMailbox:
    """:class:`~tether.runs.signals.base.SignalMailbox` in lists; the waits it reads on a send
    are ``waits``' (None: none)."""

    def __init__(self, waits: WaitIndex | None = None) -> None:
        self._lock = threading.Lock()
        self._boxes: dict[tuple[str, str], list[Signal]] = {}
        self._waits = waits
        self._last = (0, 0)

    def _next_id(self) -> str:
        ms = now_ms()
        last_ms, seq = self._last
        self._last = (ms, 0) if ms > last_ms else (last_ms, seq + 1)
        return f"{self._last[0]}-{self._last[1]}"

    def send(
        self, tenant: str, session_id: str, name: str, payload_json: str, *, sent_at_ms: int
    ) -> SignalSent:
        with self._lock:
            box = self._boxes.setdefault((tenant, session_id), [])
            if len(box) >= MAX_SIGNALS_PER_SESSION:
                raise full_mailbox(tenant, session_id)
            signal = Signal(
                id=self._next_id(),
                name=name,
                payload=json.loads(payload_json),
                sent_at_ms=sent_at_ms,
            )
            box.append(signal)
            waiting = [] if self._waits is None else self._waits.records(tenant, session_id)
            return SignalSent(signal.id, waiting)

    def first_after(
        self, tenant: str, session_id: str, name: str, after_id: str | None
    ) -> Signal | None:
        after = (-1, -1) if after_id is None else stream_id_key(after_id)
        with self._lock:
            for signal in self._boxes.get((tenant, session_id), []):
                if signal.name == name and stream_id_key(signal.id) > after:
                    return signal
        return None

    def forget(self, tenant: str, session_id: str, consumed: dict[str, str]) -> None:
        with self._lock:
            box = self._boxes.get((tenant, session_id), [])
            box[:] = [s for s in box if not is_consumed(s, consumed)]

    def signals(self, tenant: str, session_id: str) -> list[Signal]:
        """Every signal the session's mailbox holds (tests)."""
        with self._lock:
            return list(self._boxes.get((tenant, session_id), []))
