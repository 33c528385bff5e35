"""An agent whose ``transfer`` tool needs a person's approval (loaded by workers and tests)."""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest
from tether.runtime.options import AgentOptions
from tether.runtime.tools import ToolContext

TRANSFERS: list[str] = []
"""Idempotency keys of the transfers this process made (in-process tests read it)."""


@tool
def transfer(amount: int, ctx: ToolContext, memo: str = "") -> str:
    """Move money: a side effect that needs approval."""
    TRANSFERS.append(ctx.idempotency_key)
    return f"transferred {amount}"


def _respond(request: ModelRequest) -> ModelResponse:
    last = request.items[-1] if request.items else None
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"done: {last.output}")
    text = last.content if isinstance(last, UserMessage) else ""
    amount = int(text.split()[-1]) if text.split() and text.split()[-1].isdigit() else 0
    arguments: dict[str, object] = {"amount": amount}
    for word in text.split():
        if word.startswith("memo:"):  # a credential the model writes itself: "memo:<hex>"
            arguments["memo"] = f"sk-proj-{word[5:]}"
    return ModelResponse.call(f"call_{len(request.items)}", "transfer", arguments)


def approver_agent() -> Agent:
    """``transfer N`` asks to transfer N, which waits for approval (``transfer memo:<hex> N``:
    the call's arguments hold a credential, ``sk-proj-<hex>``, that the model wrote)."""
    return Agent(
        ScriptedModel(responder=_respond),
        "scripted-approver",
        tools=[transfer],
        name="approver",
        options=AgentOptions(require_approval=frozenset({"transfer"})),
    )


TETHER_AGENTS = {"approver": approver_agent}
