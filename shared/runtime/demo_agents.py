"""Built-in demo agents: deterministic, no network, registered by name.

- ``echo``: answers ``echo: <input>``.
- ``calculator``: calls the ``calculate`` tool on the input, then answers with the value.
- ``notes``: ``remember <fact>`` stores the fact in memory (as the user message) and answers
  ``noted: <fact>``; ``recall`` answers with every remembered fact, in order, read from memory.
- ``sleepy``: ``sleep <seconds>`` runs a tool that sleeps (cancellation and crash tests).
- ``approver``: ``transfer <amount>`` asks to run the ``transfer`` tool, which needs a person's
  approval: the run ends ``WAITING`` until ``tether approve`` (or ``reject``) settles the call.
"""

from __future__ import annotations

import ast
import operator
import time
from collections.abc import Callable

from tether.core.items import ToolOutput, UserMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.models.scripted import ScriptedModel
from tether.runtime.agent import Agent
from tether.runtime.options import AgentOptions
from tether.runtime.tools import tool

_OPS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
MAX_EXPRESSION_CHARS = 200
#: Integers stay below 2**4096: a bound on the *result*, checked before each power is computed,
#: since an exponent bound alone lets nested powers, e.g. ((9**64)**64)**64, run for seconds while
#: holding the GIL (and starve the worker's lease heartbeat).
MAX_INT_BITS = 4096


def _power(left: float, right: float) -> float:
    if abs(right) > 64:
        raise ValueError("exponent too large (max 64)")
    grows = isinstance(left, int) and isinstance(right, int) and right > 0
    if grows and abs(int(left)).bit_length() * int(right) > MAX_INT_BITS:
        raise ValueError(f"result too large (max {MAX_INT_BITS} bits)")
    return _OPS[ast.Pow](left, right)


def _bounded(value: float) -> float:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"result too large (max {MAX_INT_BITS} bits)")
    return value


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return _bounded(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _bounded(_power(left, right))
        return _bounded(_OPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported expression element {type(node).__name__}; use + - * / ** % //")


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression such as ``(2 + 3) * 4``."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    value = _eval(ast.parse(expression, mode="eval").body)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


@tool
def sleep(seconds: float) -> str:
    """Sleep for ``seconds`` (at most 3600)."""
    time.sleep(max(0.0, min(seconds, 3600.0)))
    return f"slept {seconds}"


def _last_user(request: ModelRequest) -> str:
    for item in reversed(request.items):
        if isinstance(item, UserMessage):
            return item.content
    return ""


def _echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse.final(f"echo: {_last_user(request)}")


def _tool_round(
    tool_name: str, arg_name: str, transform: Callable[[str], object]
) -> Callable[[ModelRequest], ModelResponse]:
    """A responder that calls one tool with the user's input, then answers with its output."""

    def respond(request: ModelRequest) -> ModelResponse:
        last = request.items[-1] if request.items else None
        if isinstance(last, ToolOutput):
            return ModelResponse.final(last.output)
        text = _last_user(request)
        try:
            value = transform(text)
        except ValueError as exc:
            return ModelResponse.final(f"cannot {tool_name}: {exc}")
        call_id = f"call_{len(request.items)}"
        return ModelResponse.call(call_id, tool_name, {arg_name: value})

    return respond


def _sleep_arg(text: str) -> float:
    parts = text.split()
    if len(parts) != 2 or parts[0] != "sleep":
        raise ValueError("input must be 'sleep <seconds>'")
    return float(parts[1])


def _notes(request: ModelRequest) -> ModelResponse:
    text = _last_user(request).strip()
    if text.startswith("remember "):
        return ModelResponse.final(f"noted: {text[len('remember ') :]}")
    if text == "recall":
        facts = [
            item.content[len("remember ") :]
            for item in request.items
            if isinstance(item, UserMessage) and item.content.startswith("remember ")
        ]
        return ModelResponse.final("\n".join(facts) if facts else "(nothing remembered)")
    return ModelResponse.final("say 'remember <fact>' or 'recall'")


def echo_agent() -> Agent:
    """The ``echo`` demo agent."""
    return Agent(ScriptedModel(responder=_echo, keep_requests=0), "scripted-echo", name="echo")


def calculator_agent() -> Agent:
    """The ``calculator`` demo agent."""
    responder = _tool_round("calculate", "expression", lambda text: text)
    return Agent(
        ScriptedModel(responder=responder, keep_requests=0),
        "scripted-calculator",
        tools=[calculate],
        name="calculator",
    )


def notes_agent() -> Agent:
    """The ``notes`` demo agent."""
    return Agent(
        ScriptedModel(responder=_notes, keep_requests=0),
        "scripted-notes",
        name="notes",
        options=AgentOptions(max_steps=2),
    )


def sleepy_agent() -> Agent:
    """The ``sleepy`` demo agent."""
    responder = _tool_round("sleep", "seconds", _sleep_arg)
    return Agent(
        ScriptedModel(responder=responder, keep_requests=0),
        "scripted-sleepy",
        tools=[sleep],
        name="sleepy",
    )


@tool
def transfer(amount: int) -> str:
    """Pretend to move money (the demo's side effect that needs approval)."""
    return f"transferred {amount}"


def approver_agent() -> Agent:
    """The ``approver`` demo agent."""
    return Agent(
        ScriptedModel(responder=_tool_round("transfer", "amount", _amount), keep_requests=0),
        "scripted-approver",
        tools=[transfer],
        name="approver",
        options=AgentOptions(require_approval=frozenset({"transfer"})),
    )


def _amount(text: str) -> int:
    parts = text.split()
    if len(parts) != 2 or parts[0] != "transfer" or not parts[1].isdigit():
        raise ValueError("input must be 'transfer <amount>'")
    return int(parts[1])


DEMO_AGENTS: dict[str, Callable[[], Agent]] = {
    "approver": approver_agent,
    "echo": echo_agent,
    "calculator": calculator_agent,
    "notes": notes_agent,
    "sleepy": sleepy_agent,
}
