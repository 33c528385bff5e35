"""Fair shares of one model's limit between tenants: start-time fair queueing over the calls
that wait for it, work-conserving.

Each tenant has a *virtual finish time*: every call it is admitted with pushes it by the call's
cost over the tenant's weight (``tenant_weights`` in ``TETHER_MODEL_LIMITS``, 1 by default). A
call's *start* is its tenant's finish time, but never further behind the *system virtual time*
(the latest start admitted) than the limit's ``idle_credit_s``: a tenant coming back from idle
does not bank the turns it did not take, beyond that credit. When the model's limits have room
for a call, it is admitted unless another tenant has a call waiting whose start is earlier (that
tenant's turn); so while several tenants wait, each gets the limit in proportion to its weight,
and a tenant alone (nobody else waiting) uses all of it.

A call is *waiting* from its first refusal until it is admitted, or until it has not asked again
for a while (:data:`WAIT_GRACE_S` after the poll it was told to make): a caller that went away
(its run was cancelled, its worker died) holds nobody back for longer than that.

A call's *cost* is the share of the limit it takes: the requests GCRA's interval, or its
tokens' share of the tokens GCRA, whichever is larger (in µs); with only a concurrency limit,
every call costs the same, :data:`CALL_COST_US`.

This module is the reference (:class:`ShareBook`, used by
:class:`~tether.runs.limits.memory.InMemoryModelBudget`); ``model_budget.lua`` is the same rules
on Redis, and both pass ``tests/test_model_budget_contract.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.settings.limits import ModelLimit

#: The tenant of a call made outside any run (an in-process agent).
DEFAULT_TENANT = "default"
#: How long a waiting call still counts after the poll it was told to make (s).
WAIT_GRACE_S = 3.0
#: The longest a caller sleeps between two polls (the gate's ``MAX_SLEEP_S``).
MAX_POLL_S = 1.0
#: How long a caller refused for another tenant's turn waits before asking again (s).
SHARE_POLL_S = 0.02
#: The cost of a call under a concurrency limit alone (µs of virtual time).
CALL_COST_US = 1_000_000.0


def call_cost_us(limit: ModelLimit, tokens: int) -> float:
    """What one call estimated at ``tokens`` tokens takes of ``limit`` (µs of virtual time)."""
    cost = max(float(limit.us_per_request), max(0, tokens) * limit.us_per_token)
    return cost if cost > 0 else CALL_COST_US


@dataclass
class ShareBook:
    """The fair-share state of one model: tenants' finish times and the calls waiting."""

    finish_us: dict[str, float] = field(default_factory=dict)
    """Each tenant's virtual finish time (µs)."""
    system_us: float = 0.0
    """The system virtual time: the latest start admitted (µs)."""
    waiting: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Call token -> (tenant, when it stops counting as waiting, s)."""
    admitted_s: dict[str, float] = field(default_factory=dict)
    """When each tenant's last call was admitted (s)."""

    def wait(self, tenant: str, token: str, now_s: float, wait_s: float, grace_s: float) -> None:
        """The call ``token`` of ``tenant`` was refused and told to wait ``wait_s``."""
        self.waiting[token] = (tenant, now_s + min(max(wait_s, 0.0), MAX_POLL_S) + grace_s)

    def start_us(self, tenant: str, credit_us: float) -> float:
        """Where ``tenant``'s next call starts in virtual time."""
        return max(self.finish_us.get(tenant, 0.0), self.system_us - credit_us)

    def others_turn(self, tenant: str, now_s: float, credit_us: float) -> bool:
        """True when another tenant has a call waiting that starts before ``tenant``'s."""
        self.waiting = {k: v for k, v in self.waiting.items() if v[1] > now_s}
        mine = self.start_us(tenant, credit_us)
        others = {who for who, _ in self.waiting.values() if who != tenant}
        return any(self.start_us(who, credit_us) < mine for who in others)

    def leaves_to_others(
        self, tenant: str, now_s: float, credit_us: float, recent_s: float
    ) -> bool:
        """True when ``tenant`` should leave a free worker to another tenant's run: ``tenant``
        has a call waiting (which takes its next turn), and another tenant that starts earlier
        has a call waiting or had one admitted in the last ``recent_s`` (its next run is on
        its way to a worker)."""
        self.waiting = {k: v for k, v in self.waiting.items() if v[1] > now_s}
        if not any(who == tenant for who, _ in self.waiting.values()):
            return False
        mine = self.start_us(tenant, credit_us)
        active = {who for who, _ in self.waiting.values()}
        active |= {who for who, at in self.admitted_s.items() if now_s - at <= recent_s}
        active.discard(tenant)
        return any(self.start_us(who, credit_us) < mine for who in active)

    def admit(
        self,
        tenant: str,
        token: str,
        cost_us: float,
        weight: float,
        credit_us: float,
        now_s: float,
    ) -> None:
        """The call ``token`` of ``tenant`` was admitted at ``cost_us``."""
        start = self.start_us(tenant, credit_us)
        self.finish_us[tenant] = start + cost_us / weight
        self.system_us = max(self.system_us, start)
        self.waiting.pop(token, None)
        self.admitted_s[tenant] = now_s
