"""Tools: plain Python functions the model can call, with JSON schemas from type hints.

>>> @tool
... def add(a: int, b: int) -> int:
...     '''Add two integers.'''
...     return a + b

A call's arguments are validated against the schema (pydantic) before the function runs. A call
that fails validation or raises becomes a ``TOOL_ERROR: {...}`` result the model sees; it never
crashes the run. A tool may return :class:`Waiting` to park the run until the output is patched
with ``session.replace_tool_output``.

A tool that declares a parameter annotated :class:`ToolContext` (any name; it is not part of
the schema the model sees) receives the call's context, whose :attr:`ToolContext.idempotency_key`
is the same every time this call is executed, across retries and across workers resuming the
run, so the tool can make its own side effect exactly-once (e.g. pass it on as an HTTP
``Idempotency-Key``).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_type_hints, overload, runtime_checkable

import pydantic

from tether.core.items import ToolCall
from tether.core.waits import ChildRef, WaitFor
from tether.errors import ToolError
from tether.models.base import ToolSpec
from tether.runtime.children import ChildSpawner, spawn_child, wait_on_children
from tether.runtime.signals import SignalInbox, signal_output, signal_wait
from tether.runtime.timers import seconds_until, timer_for

WAITING_OUTPUT = "ASYNC_TOOL_WAITING"
#: The placeholder output of a call that waits for a person's approval.
APPROVAL_OUTPUT = "APPROVAL_REQUIRED"


@dataclass(frozen=True)
class Waiting:
    """Returned by an async tool: the real output comes later via ``replace_tool_output``.

    With ``wait_for`` the fleet gives it (a timer: :meth:`ToolContext.sleep`): the run parks
    without a worker and a worker goes on with it when the wait is over (see
    :mod:`tether.runtime.waiting`)."""

    output: str = WAITING_OUTPUT
    operation_id: str | None = None
    wait_for: WaitFor | None = None


@dataclass(frozen=True)
class ToolContext:
    """Who is calling a tool: the run, the step and the call.

    ``idempotency_key`` is derived from tenant, session, request (``request_id``, else the run),
    step and the call's position in its step (``position``) only, so every execution of the
    same call (a retry, a resume on another worker after a crash, a redo of the step after a
    lost compare-and-set, where the model is asked again and answers with new call ids, and a
    run submitted again under the same request id after Redis lost its record, which gets a
    new run id) sees the same key, and no other call does. A call that had started but whose
    result was not recorded when its worker died is executed again with the same key: a tool
    with side effects should deduplicate by it. Without a position (a call settled outside the
    loop) the model's call id stands in for it.
    """

    tenant: str
    session_id: str | None
    run_id: str
    step: int
    call_id: str
    position: int | None = None
    request_id: str | None = None
    """The request the run applies (its idempotency key); None: the run id stands for it."""
    max_wait_s: float | None = None
    """The longest a call of this run may park on the fleet (``TETHER_MAX_WAIT_S``, or its
    tenant's ``max_wait_s``), with the setting that says so; None: no limit here."""
    max_wait_source: str = "TETHER_MAX_WAIT_S"
    signals: SignalInbox | None = None
    """The session's mailbox of signals, on a worker (None: in-process, a wait always parks)."""
    spawner: ChildSpawner | None = dataclasses.field(default=None, repr=False, compare=False)
    """Submits this run's child runs (set by the worker; None in-process)."""

    def spawn(
        self,
        agent: str,
        input: str | None,
        session_id: str | None = None,
        detached: bool = False,
        **run_options: Any,
    ) -> ChildRef:
        """Start a child run of ``agent`` on ``input`` and return its reference, for
        :meth:`wait`: ``ref = ctx.spawn("researcher", "find X")``.

        The child runs on the fleet in its own session (by default one derived from this
        session and this call; ``session_id`` to choose it), once however often this call is
        executed again. ``detached=True``: it is not cancelled with this run. ``run_options``
        are the run options (``metadata``, ``timeout_s``, ``durability``...).

        Raises:
            ToolError: in-process (no fleet), or over the tenant's ``max_child_depth`` or
                ``max_children_per_run`` (named in the message; nothing was submitted).
        """
        return spawn_child(
            self, agent, input, session_id=session_id, detached=detached, options=run_options
        )

    def wait(
        self,
        children: ChildRef | Sequence[ChildRef],
        mode: Literal["all", "any"] = "all",
        timeout_s: float | None = None,
    ) -> Waiting:
        """Park this call on ``children`` without holding a worker: ``return ctx.wait(refs)``.

        The run ends ``WAITING`` (reason ``children``) and goes on when every child ended
        (``mode="all"``), the first one did (``"any"``), or ``timeout_s`` passed; the call's
        output is then each child's status and output or error, as JSON.
        """
        return Waiting(wait_for=wait_on_children(self, children, mode, timeout_s))

    def sleep(self, seconds: float) -> Waiting:
        """Park this call for ``seconds`` without holding a worker: ``return ctx.sleep(7200)``.

        The run ends ``WAITING`` (reason ``timer``), and a worker goes on with it once the time
        has passed; the call's output is then ``{"slept_until": ...}``.

        Raises:
            ToolError: ``seconds`` is not a positive number, or over the run's longest wait
                (the call fails with that message; nothing is parked).
        """
        return Waiting(wait_for=timer_for(seconds, self.max_wait_s, self.max_wait_source))

    def sleep_until(self, when: datetime.datetime) -> Waiting:
        """Park this call until ``when`` (timezone-aware): ``return ctx.sleep_until(dt)``.

        Raises:
            ToolError: ``when`` is naive, or further than the run's longest wait.
        """
        return self.sleep(seconds_until(when))

    def wait_for_signal(self, name: str, timeout_s: float | None = None) -> Waiting | str:
        """The first signal ``name`` this session was sent and has not consumed (in send order),
        or park this call until one comes: ``return ctx.wait_for_signal("approved", 3600)``.

        The output is ``{"signal": name, "payload": ..., "signal_id": ..., "sent_at": ...}``;
        after ``timeout_s`` (None: the run's longest wait) with no signal it is
        ``{"signal": name, "timed_out": true}``, a result the model reads, not an error.

        Raises:
            ToolError: a bad name, or a timeout over the run's longest wait (nothing parked).
        """
        wait_for = signal_wait(name, timeout_s, self.max_wait_s, self.max_wait_source)
        signal = self.signals.take(name) if self.signals is not None else None
        if signal is not None:
            return signal_output(signal)
        return Waiting(wait_for=wait_for)

    @property
    def idempotency_key(self) -> str:
        """A stable 40-hex-digit key for this call (``tk-`` prefixed)."""
        where = self.call_id if self.position is None else f"#{self.position}"
        request = self.request_id or self.run_id
        parts = (self.tenant, self.session_id or "", request, str(self.step), where)
        digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
        return "tk-" + digest[:40]


@dataclass(frozen=True)
class ToolOutcome:
    """The normalised result of executing one call."""

    call: ToolCall
    output: str
    ok: bool
    status: Literal["COMPLETED", "FAILED", "WAITING"]
    error: str | None = None
    wait_for: WaitFor | None = None
    """A WAITING call's wait on the fleet (None: its output comes from outside)."""


def tool_error_text(call: ToolCall, error_type: str, message: str) -> str:
    """The ``TOOL_ERROR: {...}`` text the model sees for a failed call."""
    body = {"errorType": error_type, "error": message, "tool": call.name, "callId": call.id}
    return "TOOL_ERROR: " + json.dumps(body, sort_keys=True)


def failed(call: ToolCall, error_type: str, message: str) -> ToolOutcome:
    """A FAILED outcome for ``call``."""
    return ToolOutcome(
        call=call,
        output=tool_error_text(call, error_type, message),
        ok=False,
        status="FAILED",
        error=message,
    )


class Tool:
    """A callable tool with a derived argument model and JSON schema.

    ``timeout_s`` limits each call of this tool (overriding the agent's ``tool_timeout_s``).
    ``isolated`` runs each call in a child process killed at the limit, with every process it
    started: the only limit that holds for code that never releases the GIL (see
    :mod:`tether.runtime.isolation`); it costs a fork per call, and the tool's side effects on the
    worker's memory are lost with the child. A tool that declares ``timeout_s`` is isolated unless
    it says ``isolated=False``: a limit the tool states must hold (a thread cannot be stopped, so
    an in-process call past its limit fails but goes on running, and one that holds the GIL
    cannot even be waited on: its worker is killed and the run retried as a crash).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        isolated: bool | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise ToolError(f"tool {name or fn.__name__!r}: timeout_s must be > 0, not {timeout_s}")
        self.fn = fn
        self.isolated = timeout_s is not None if isolated is None else isolated
        self.timeout_s = timeout_s
        self.name = name or fn.__name__
        self.description = (description or inspect.getdoc(fn) or self.name).strip()
        self.context_param = _context_param(fn)
        self.args_model = _args_model(fn, self.name, skip=self.context_param)
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        self.parameters: dict[str, Any] = schema

    @property
    def spec(self) -> ToolSpec:
        """What the model is told about this tool."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def parse(self, call: ToolCall) -> dict[str, Any] | ToolOutcome:
        """Validate a call's arguments; a FAILED outcome when they do not fit the schema."""
        try:
            raw = json.loads(call.arguments) if call.arguments.strip() else None
        except ValueError as exc:
            return failed(call, "InvalidArguments", f"arguments are not valid JSON: {exc}")
        except RecursionError:  # the parser recurses per level: a model can nest past the stack
            return failed(
                call,
                "InvalidArguments",
                "arguments are nested too deeply to parse; send one JSON object of the tool's "
                "parameters, nested no deeper than its schema",
            )
        if not isinstance(raw, dict):
            return failed(call, "InvalidArguments", "arguments must be a JSON object")
        try:
            model = self.args_model.model_validate(raw)
        except pydantic.ValidationError as exc:
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return failed(call, "InvalidArguments", f"arguments do not match schema: {detail}")
        return {field: getattr(model, field) for field in type(model).model_fields}

    def execute(self, call: ToolCall, context: ToolContext | None = None) -> ToolOutcome:
        """Validate and run one call, turning every failure into a FAILED outcome."""
        parsed = self.parse(call)
        if isinstance(parsed, ToolOutcome):
            return parsed
        if self.context_param is not None:
            if context is None:  # a direct call outside a run: still a usable, unique key
                context = ToolContext("default", None, "no-run", 0, call.id)
            parsed[self.context_param] = context
        try:
            value = self.fn(**parsed)
        except Exception as exc:  # a tool's failure is data for the model, never a crash
            return failed(call, type(exc).__name__, _message(exc))
        return _outcome(call, value)


def _outcome(call: ToolCall, value: object) -> ToolOutcome:
    """The outcome of a call whose tool returned ``value``."""
    if isinstance(value, Waiting):
        return ToolOutcome(
            call=call, output=value.output, ok=True, status="WAITING", wait_for=value.wait_for
        )
    try:
        output = value if isinstance(value, str) else json.dumps(value, default=str)
    except Exception as exc:  # tuple keys, cycles, huge ints, deep nesting, a __str__ that raises
        return failed(
            call,
            "UnserializableResult",
            f"the tool's result (of type {type(value).__name__}) cannot be encoded as JSON "
            f"({type(exc).__name__}: {_message(exc)}); return a str or JSON-able data (str "
            "keys, no cycles, ints under 4300 digits)",
        )
    if output.startswith("TOOL_ERROR"):
        return ToolOutcome(call=call, output=output, ok=False, status="FAILED", error=output)
    return ToolOutcome(call=call, output=output, ok=True, status="COMPLETED")


def _message(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` fails too."""
    try:
        return str(exc)
    except Exception:
        return f"(a {type(exc).__name__} whose message could not be read)"


def _context_param(fn: Callable[..., Any]) -> str | None:
    """The name of the parameter annotated :class:`ToolContext`, if any."""
    try:
        hints = get_type_hints(fn)
    except Exception:
        return None  # _args_model reports unresolvable hints
    for param in inspect.signature(fn).parameters.values():
        if hints.get(param.name) is ToolContext:
            return param.name
    return None


def _args_model(
    fn: Callable[..., Any], name: str, *, skip: str | None = None
) -> type[pydantic.BaseModel]:
    try:
        hints = get_type_hints(fn)
    except Exception as exc:
        raise ToolError(
            f"tool {name!r}: cannot resolve type hints ({exc}); annotate every parameter"
        ) from exc
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name == skip:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"tool {name!r}: *args/**kwargs are not supported; name each parameter")
        if param.name not in hints:
            raise ToolError(f"tool {name!r}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], default)
    config = pydantic.ConfigDict(extra="forbid")
    return pydantic.create_model(f"{name}_args", __config__=config, **fields)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    isolated: bool | None = None,
    timeout_s: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    isolated: bool | None = None,
    timeout_s: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator turning a typed function into a :class:`Tool` (see its ``isolated`` and
    ``timeout_s``)."""
    if fn is not None:
        return Tool(fn)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, isolated=isolated, timeout_s=timeout_s)

    return wrap


@runtime_checkable
class ToolSource(Protocol):
    """Tools that come and go (an MCP server's, :mod:`tether.integrations.mcp`): an agent's
    registry asks a source for its tools at every step, for the run's tenant."""

    def tools_for(self, tenant: str) -> Sequence[Tool]:
        """The tools ``tenant``'s runs may call now (cheap: asked at every step)."""
        ...


class ToolRegistry:
    """Tools by name: the agent's own, then those of its sources (a name already taken is
    skipped)."""

    def __init__(self, tools: Iterable[Tool | ToolSource | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        for t in tools:
            if isinstance(t, Tool):
                self.add(t)
            elif isinstance(t, ToolSource):
                self._sources.append(t)
            else:
                self.add(Tool(t))

    def add(self, t: Tool) -> None:
        """Register a tool; a duplicate name is an error."""
        if t.name in self._tools:
            raise ToolError(f"tool name {t.name!r} registered twice; give one of them another name")
        self._tools[t.name] = t

    def _current(self, tenant: str | None) -> Mapping[str, Tool]:
        if not self._sources or tenant is None:
            return self._tools
        found = dict(self._tools)
        for source in self._sources:
            for t in source.tools_for(tenant):
                found.setdefault(t.name, t)
        return found

    def get(self, name: str, tenant: str | None = None) -> Tool | None:
        """The tool called ``name`` (for ``tenant``'s runs: its sources' too), or None."""
        found = self._tools.get(name)
        if found is None and self._sources and tenant is not None:
            found = self._current(tenant).get(name)
        return found

    def specs(self, tenant: str | None = None) -> tuple[ToolSpec, ...]:
        """Specs of every tool, in registration order (then the sources')."""
        return tuple(t.spec for t in self._current(tenant).values())

    def names(self, tenant: str | None = None) -> tuple[str, ...]:
        """Registered names, in order (then the sources')."""
        return tuple(self._current(tenant))

    def as_mapping(self) -> Mapping[str, Tool]:
        """A read-only view of the agent's own tools."""
        return dict(self._tools)
