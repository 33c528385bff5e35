"""The outcome of one agent run: how it ended (:class:`RunStatus`), its output and tool results,
and the calls a waiting run waits on with the resolutions that settle them."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.core.events import Usage
from tether.core.items import ToolCall
from tether.core.waits import WaitFor


class RunStatus(StrEnum):
    """How a run ended.

    ``COMPLETED``: final answer. ``WAITING``: an async tool parked the run.
    ``CONTINUATION_REQUIRED``: the step limit was reached. ``FAILED``, ``CANCELLED`` and
    ``INTERRUPTED`` (stopped for a newer run, its finished steps kept) are recorded by the
    distributed layer (in-process runs raise instead).
    """

    COMPLETED = "COMPLETED"
    WAITING = "WAITING"
    CONTINUATION_REQUIRED = "CONTINUATION_REQUIRED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"


class ToolResultRecord(BaseModel):
    """One tool result as reported in :class:`AgentResult`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str
    name: str
    output: str
    ok: bool
    status: str
    error: str | None = None


class PendingCall(BaseModel):
    """A tool call a ``WAITING`` run waits on: a person's approval, or an output from outside."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str
    tool: str
    arguments: str
    """The call's JSON arguments, as the model wrote them."""
    reason: Literal["approval", "output"]
    wait_for: WaitFor | None = Field(default=None, exclude_if=lambda v: v is None)
    """A call parked on the fleet (reason ``output``): what it waits for; the fleet gives its
    output (:mod:`tether.runtime.waiting`). Omitted from the JSON when None."""


class Resolution(BaseModel):
    """What to do with a pending call when the run goes on: approve it (the tool runs now),
    reject it (the model sees ``reason``), or give its output; or ``cancel`` it: the call gets
    a ``Cancelled`` tool error and the run ends ``CANCELLED`` there, without a model call (how a
    run parked on the fleet is cancelled, durably); or ``interrupt`` it: the same with an
    ``Interrupted`` tool error, ending ``INTERRUPTED`` (a newer run with ``on_busy='interrupt'``
    superseding a run parked on the fleet); or ``signal``: a call parked on a signal gets
    the first signal of its name the session has not consumed (else its timeout's result), read
    by the worker from the session's mailbox when it runs the continuation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str = Field(min_length=1, max_length=256)
    action: Literal["approve", "reject", "output", "cancel", "interrupt", "signal"]
    text: str | None = Field(default=None, max_length=1_000_000)
    """The output (``output``) or the reason (``reject``, ``cancel``, ``interrupt``)."""


#: The actions that settle a parked call and end the run there, without a model call.
STOPPING_ACTIONS = frozenset({"cancel", "interrupt"})


class RunOutcome(BaseModel):
    """The fields every run result has, in-process (:class:`AgentResult`) or distributed
    (:class:`~tether.runs.contract.RunResult`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    session_id: str | None
    tenant: str
    status: RunStatus
    output: str | None = None
    steps: int = 0
    usage: Usage = Usage()
    first_seq: int = 0
    last_seq: int = 0
    pending: tuple[PendingCall, ...] = ()
    """For a ``WAITING`` run: the calls it waits on."""


class AgentResult(RunOutcome):
    """What :meth:`AgentSession.run` returns."""

    output: str | None
    steps: int
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResultRecord, ...] = ()
