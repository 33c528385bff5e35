"""The model budget of one process: the same rules as the Redis script, on a monotonic clock."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tether.runs.limits.base import Admission
from tether.settings.limits import ModelLimit

#: How long a caller is told to wait for a concurrency slot (slots free without notice).
SLOT_POLL_S = 0.02


@dataclass
class _State:
    tat_req: float = 0.0
    tat_tok: float = 0.0
    paused_until: float = 0.0
    inflight: dict[str, float] = field(default_factory=dict)


class InMemoryModelBudget:
    """:class:`~tether.runs.limits.base.ModelBudget` for one process (tests, in-process agents).

    Args:
        slot_ttl_s: a slot whose call never settled (its process died) frees after this long.
    """

    def __init__(self, *, slot_ttl_s: float = 600.0) -> None:
        self._slot_ttl_s = slot_ttl_s
        self._models: dict[str, _State] = {}
        self._lock = threading.Lock()

    def admit(self, model: str, limit: ModelLimit, token: str, tokens: int) -> Admission:
        now = time.monotonic()
        with self._lock:
            st = self._models.setdefault(model, _State())
            if st.paused_until > now:
                return Admission(False, st.paused_until - now, "paused")
            if limit.concurrent_requests:
                st.inflight = {k: v for k, v in st.inflight.items() if v > now}
                if len(st.inflight) >= limit.concurrent_requests:
                    return Admission(False, SLOT_POLL_S, "concurrency")
            tat_req, tat_tok = max(st.tat_req, now), max(st.tat_tok, now)
            if limit.requests_per_minute and tat_req > now:
                return Admission(False, tat_req - now, "requests")
            if limit.tokens_per_minute and tat_tok > now:
                return Admission(False, tat_tok - now, "tokens")
            st.tat_req = tat_req + limit.us_per_request / 1e6
            st.tat_tok = tat_tok + tokens * limit.us_per_token / 1e6
            if limit.concurrent_requests:
                st.inflight[token] = now + self._slot_ttl_s
        return Admission(True)

    def settle(self, model: str, limit: ModelLimit, token: str, token_delta: int) -> None:
        now = time.monotonic()
        with self._lock:
            st = self._models.setdefault(model, _State())
            st.inflight.pop(token, None)
            if token_delta and limit.tokens_per_minute:
                tat = max(st.tat_tok, now)
                st.tat_tok = max(tat + token_delta * limit.us_per_token / 1e6, now)

    def pause(self, model: str, seconds: float) -> None:
        with self._lock:
            st = self._models.setdefault(model, _State())
            st.paused_until = max(st.paused_until, time.monotonic() + seconds)
