"""The autoscaling policy: signals and the current worker count in, the desired count out.

A pure function (:func:`decide`) over frozen values, so every rule is tested without a process:

- **scale out** when the queued work per slot exceeds :attr:`ScalePolicy.backlog_per_slot`, or
  the oldest queued run has waited longer than :attr:`ScalePolicy.max_wait_s`: straight to the
  count that gives every waiting and running run a slot (a burst of 400 runs reaches the maximum
  in one step, not one worker per tick), at least one more;
- **scale in** only after the fleet has been *idle* (nothing queued, and at least one worker's
  worth of slots free) for :attr:`ScalePolicy.idle_s` without a break, to the count the busy
  slots need; any queued run resets the idle clock. Out and in use different conditions (work
  waiting vs. nothing waiting for a while), so the count does not flap around one threshold;
- a **cooldown** after every change (:attr:`ScalePolicy.cooldown_s`) lets started workers come
  up, and stopped ones hand their runs back, before the next reading is trusted;
- always within ``[min_workers, max_workers]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ScalePolicy(BaseModel):
    """The knobs of :func:`decide` (validated: ``tether autoscale``'s options land here)."""

    model_config = ConfigDict(frozen=True)

    min_workers: int = Field(ge=0, le=64)
    max_workers: int = Field(ge=1, le=64)
    slots_per_worker: int = Field(default=1, ge=1, le=32, description="Each worker's pool size.")
    backlog_per_slot: float = Field(
        default=1.0, gt=0, description="Scale out above this many queued runs per slot."
    )
    max_wait_s: float = Field(
        default=5.0, gt=0, description="Scale out when the oldest queued run waited longer."
    )
    idle_s: float = Field(default=15.0, ge=0, description="Idle this long before scaling in.")
    cooldown_s: float = Field(default=3.0, ge=0, description="No change this soon after one.")

    @model_validator(mode="after")
    def _bounds(self) -> ScalePolicy:
        if self.min_workers > self.max_workers:
            raise ValueError(
                f"min_workers {self.min_workers} is above max_workers {self.max_workers}; "
                "give MIN:MAX with MIN <= MAX, e.g. 1:4"
            )
        return self


@dataclass(frozen=True)
class Load:
    """What the policy reads of the fleet signals (for the supervisor's queue)."""

    queued: int
    busy_slots: int
    oldest_age_s: float | None = None


@dataclass(frozen=True)
class PolicyState:
    """What :func:`decide` remembers between calls."""

    idle_since_s: float | None = None
    changed_at_s: float | None = None


@dataclass(frozen=True)
class Decision:
    """The desired worker count, why, and the state for the next call."""

    desired: int
    reason: str
    state: PolicyState


def decide(
    policy: ScalePolicy, load: Load, current: int, state: PolicyState, now_s: float
) -> Decision:
    """The worker count to have now (``now_s``: a monotonic clock)."""
    lo, hi = policy.min_workers, policy.max_workers
    if current < lo or current > hi:
        target = min(max(current, lo), hi)
        return Decision(target, f"bounds [{lo}, {hi}]", PolicyState(None, now_s))
    slots = policy.slots_per_worker
    idle = load.queued == 0 and load.busy_slots <= (current - 1) * slots
    since = state.idle_since_s if state.idle_since_s is not None else now_s
    state = replace(state, idle_since_s=since if idle else None)
    if state.changed_at_s is not None and now_s - state.changed_at_s < policy.cooldown_s:
        return Decision(current, "cooldown", state)
    backlog = load.queued / max(1, current * slots)
    waited = load.oldest_age_s or 0.0
    # with no worker, nothing queued will ever start: out at once (one canvas message, which
    # carries no submission time, at --min 0 waited for good: 1 per slot is not over 1)
    stranded = current == 0
    if load.queued > 0 and (
        stranded or backlog > policy.backlog_per_slot or waited > policy.max_wait_s
    ):
        needed = math.ceil((load.queued + load.busy_slots) / slots)
        target = min(hi, max(current + 1, needed))
        if target > current:
            why = f"{load.queued} queued, {backlog:.1f} per slot, oldest {waited:.1f} s"
            return Decision(target, f"scale out: {why}", PolicyState(None, now_s))
    if idle and state.idle_since_s is not None and now_s - state.idle_since_s >= policy.idle_s:
        target = max(lo, math.ceil(load.busy_slots / slots))
        if target < current:
            why = f"idle {now_s - state.idle_since_s:.0f} s, {load.busy_slots} busy slots"
            return Decision(target, f"scale in: {why}", PolicyState(None, now_s))
    return Decision(current, "steady", state)
