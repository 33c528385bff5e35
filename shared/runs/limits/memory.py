"""The model budget of one process: the same rules as the Redis script, on a monotonic clock
(injectable, so tests can move it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.runs.limits.base import Admission, WaitReason
from tether.runs.limits.shares import (
    DEFAULT_TENANT,
    SHARE_POLL_S,
    WAIT_GRACE_S,
    ShareBook,
    call_cost_us,
)
from tether.settings.limits import ModelLimit

#: How long a caller is told to wait for a concurrency slot (slots free without notice).
SLOT_POLL_S = 0.02


@dataclass
class _State:
    tat_req: float = 0.0
    tat_tok: float = 0.0
    paused_until: float = 0.0
    inflight: dict[str, float] = field(default_factory=dict)
    shares: ShareBook = field(default_factory=ShareBook)


class InMemoryModelBudget:
    """:class:`~tether.runs.limits.base.ModelBudget` for one process (tests, in-process agents).

    Args:
        slot_ttl_s: a slot whose call never settled (its process died) frees after this long.
        wait_grace_s: a waiting call that has not asked again this long after the poll it was
            told to make stops counting as waiting (:mod:`~tether.runs.limits.shares`).
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(
        self,
        *,
        slot_ttl_s: float = 600.0,
        wait_grace_s: float = WAIT_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._slot_ttl_s = slot_ttl_s
        self._wait_grace_s = wait_grace_s
        self._clock = clock
        self._models: dict[str, _State] = {}
        self._lock = threading.Lock()

    def admit(
        self,
        model: str,
        limit: ModelLimit,
        token: str,
        tokens: int,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> Admission:
        now = self._clock()
        with self._lock:
            st = self._models.setdefault(model, _State())
            refused = self._refusal(st, limit, now, tenant)
            if refused is not None:
                wait_s, reason = refused
                st.shares.wait(tenant, token, now, wait_s, self._wait_grace_s)
                return Admission(False, wait_s, reason)
            tat_req, tat_tok = max(st.tat_req, now), max(st.tat_tok, now)
            st.tat_req = tat_req + limit.us_per_request / 1e6
            st.tat_tok = tat_tok + tokens * limit.us_per_token / 1e6
            if limit.concurrent_requests:
                st.inflight[token] = now + self._slot_ttl_s
            credit_us = limit.idle_credit_s * 1e6
            cost_us = call_cost_us(limit, tokens)
            st.shares.admit(tenant, token, cost_us, limit.weight(tenant), credit_us, now)
        return Admission(True)

    @staticmethod
    def _refusal(
        st: _State, limit: ModelLimit, now: float, tenant: str
    ) -> tuple[float, WaitReason] | None:
        """Why a call cannot be admitted now, and how long to wait; None: it can."""
        if st.paused_until > now:
            return st.paused_until - now, "paused"
        if limit.concurrent_requests:
            st.inflight = {k: v for k, v in st.inflight.items() if v > now}
            if len(st.inflight) >= limit.concurrent_requests:
                return SLOT_POLL_S, "concurrency"
        tat_req, tat_tok = max(st.tat_req, now), max(st.tat_tok, now)
        if limit.requests_per_minute and tat_req > now:
            return tat_req - now, "requests"
        if limit.tokens_per_minute and tat_tok > now:
            return tat_tok - now, "tokens"
        if st.shares.others_turn(tenant, now, limit.idle_credit_s * 1e6):
            return SHARE_POLL_S, "share"
        return None

    def leaves_to_others(self, model: str, limit: ModelLimit, tenant: str) -> bool:
        with self._lock:
            st = self._models.setdefault(model, _State())
            credit_us = limit.idle_credit_s * 1e6
            return st.shares.leaves_to_others(tenant, self._clock(), credit_us, self._wait_grace_s)

    def settle(self, model: str, limit: ModelLimit, token: str, token_delta: int) -> None:
        now = self._clock()
        with self._lock:
            st = self._models.setdefault(model, _State())
            st.inflight.pop(token, None)
            if token_delta and limit.tokens_per_minute:
                tat = max(st.tat_tok, now)
                st.tat_tok = max(tat + token_delta * limit.us_per_token / 1e6, now)

    def pause(self, model: str, seconds: float) -> None:
        with self._lock:
            st = self._models.setdefault(model, _State())
            st.paused_until = max(st.paused_until, self._clock() + seconds)
