"""An agent's options: the limits and behaviour of the agent loop (:class:`AgentOptions`).

Below the session, the loop and the agent, which all read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tether.core.context import ContextBudget
    from tether.runtime.compaction import CompactPolicy
    from tether.runtime.projection import ContextProjector


Durability = Literal["run", "step"]
"""When a distributed run records progress: only at its end, or at every step boundary."""


@dataclass(frozen=True)
class AgentOptions:
    """Limits and behaviour of the agent loop.

    Attributes:
        max_steps: model calls per run before ``CONTINUATION_REQUIRED`` (0: unlimited).
        timeout_s: wall-clock limit per run, checked between steps (0: none).
        token_budget: stop a run once it used this many tokens (None: unlimited).
        parallel_tool_calls: run a step's tool calls concurrently.
        max_parallel_tool_calls: at most this many at once.
        tool_timeout_s: a call running longer becomes a failed result (None: no limit).
        context_budget: shape each prompt with the projector (None: send all memory).
        projector: the projector (None: :class:`tether.runtime.projection.DefaultContextProjector`).
        compact_policy: checked before every step; compacts memory when it says so.
        require_approval: names of tools that run only once a person approved the call: the
            run ends ``WAITING`` with the call pending, and goes on when it is approved
            (the tool runs then) or rejected (the model sees why).
        durability: on a worker, ``"step"`` records a checkpoint at every step boundary so a
            run cut short (crash, lost lease) resumes there on another worker instead of being
            redone; ``"run"`` only commits at the end. A request may override it.
    """

    max_steps: int = 20
    timeout_s: float = 300.0
    token_budget: int | None = None
    parallel_tool_calls: bool = False
    max_parallel_tool_calls: int = 4
    tool_timeout_s: float | None = None
    context_budget: ContextBudget | None = None
    projector: ContextProjector | None = None
    compact_policy: CompactPolicy | None = None
    # the default: a resumed run never asks the model again for a step it answered nor reruns
    # a recorded tool call, and it costs nothing for runs that end in their first step
    durability: Durability = "step"
    require_approval: frozenset[str] = frozenset()
