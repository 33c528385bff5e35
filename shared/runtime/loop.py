"""The ReAct loop: model request, tool calls, tool results, repeat until a final answer.

One step is: auto-compact (when the policy says so) → ``STEP_START`` → project context →
``MODEL_REQUEST`` → model → ``MODEL_RESPONSE`` → ``MEMORY_ITEMS_APPENDED`` → either
``FINAL_OUTPUT`` or tool calls (``TOOL_CALL`` each, then ``TOOL_RESULT`` each in call order) →
``STEP_END``. The loop is a small ``while`` over tagged outcomes of :func:`_step`.

A billed model call without a ``MODEL_RESPONSE`` is recorded as a ``MODEL_USAGE`` event and
counted in the run's usage (and its token budget) all the same: the summary call of an LLM
compaction (before ``MEMORY_COMPRESS``), and an answer the client could not use (before the
``ERROR`` of the run it fails).

With a *checkpoint* hook (``durability="step"`` on a worker) the loop calls it at every point a
crashed run can be resumed from: once a step's tool calls are recorded (before any runs), after
each tool result, and after each step that is not the last. A run resumed from a
:class:`~tether.runtime.progress.RunProgress` first finishes the step that was cut short (only
its calls without a result run, under the same idempotency keys), then goes on with the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tether.core.events import (
    EventType,
    ItemsAppendedPayload,
    ModelRequestPayload,
    ModelResponsePayload,
    ModelUsagePayload,
    ProjectionPayload,
    TextPayload,
    ToolCallPayload,
    ToolResultPayload,
    Usage,
    UserInputPayload,
)
from tether.core.items import Item, ToolCall, ToolOutput, UserMessage
from tether.core.results import AgentResult, RunStatus, ToolResultRecord
from tether.core.text import valid_strings
from tether.errors import ModelError, RunCancelled, RunTimeout, TetherError, TokenBudgetExceeded
from tether.models.base import (
    ModelClient,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    StreamingModelClient,
    billed_usage,
)
from tether.observability.tracing import record_usage, span
from tether.runtime.children import child_fields
from tether.runtime.llm_summary import record_summary_calls, summary_calls
from tether.runtime.progress import RunProgress
from tether.runtime.signals import inbox_fields
from tether.runtime.streaming import redacted
from tether.runtime.timers import wait_limit_fields
from tether.runtime.tool_runner import Call, execute_parallel, run_with_timeout
from tether.runtime.tools import APPROVAL_OUTPUT, ToolContext, ToolOutcome, failed
from tether.runtime.waiting import pending_calls

if TYPE_CHECKING:
    from tether.runtime.session import AgentSession, CancelCheck
    from tether.runtime.streaming import RunDeltas

#: Called at every point a run can be resumed from (see the module docstring).
Checkpoint = Callable[[], None]

RUNTIME_NAME = "react"


@dataclass
class _RunState:
    run_id: str
    started_s: float
    first_seq: int
    timeout_s: float
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResultRecord] = field(default_factory=list)
    last_text: str | None = None
    checkpoint: Checkpoint | None = None
    deltas: RunDeltas | None = None
    request_id: str | None = None

    def mark(self, *, last_result: bool = False) -> None:
        """A point this run can be resumed from. After a step's ``last_result`` a hook with a
        ``defer`` method may write it with the run's next write (the next model request's)."""
        hook = self.checkpoint
        if hook is not None:
            ((getattr(hook, "defer", None) if last_result else None) or hook)()


StepOutcome = Literal["final", "again", "waiting"]


def run_loop(
    session: AgentSession,
    input: str | None,
    *,
    run_id: str,
    cancel_check: CancelCheck | None,
    timeout_s: float | None = None,
    checkpoint: Checkpoint | None = None,
    resume: RunProgress | None = None,
    on_delta: RunDeltas | None = None,
    request_id: str | None = None,
) -> AgentResult:
    """Run one request on ``session`` (the caller holds the session lock), or go on with one
    whose recorded ``resume`` progress the session already holds; a streaming model hands its
    pieces to ``on_delta`` (see :mod:`tether.runtime.streaming`)."""
    state = _RunState(
        run_id=run_id,
        request_id=request_id,
        started_s=time.monotonic(),
        first_seq=session.last_seq + 1 if resume is None else resume.first_seq,
        timeout_s=session.agent.options.timeout_s if timeout_s is None else timeout_s,
        checkpoint=checkpoint,
        deltas=redacted(on_delta, session.agent.redact) if on_delta is not None else None,
    )
    step = 0
    try:
        if resume is not None:
            step = resume.next_step
            if _resume(session, state, resume) == "waiting":
                return _result(session, state, RunStatus.WAITING, step)
        elif input is not None:
            session.write(
                EventType.USER_INPUT,
                UserInputPayload(item=UserMessage(content=input)),
                run_id=run_id,
            )
        max_steps = session.agent.options.max_steps
        while max_steps == 0 or step < max_steps:
            _check_limits(session, state, cancel_check)
            outcome = _step(session, state, step)
            step += 1
            if outcome == "final":
                return _result(session, state, RunStatus.COMPLETED, step)
            if outcome == "waiting":
                return _result(session, state, RunStatus.WAITING, step)
            state.mark()
        return _result(session, state, RunStatus.CONTINUATION_REQUIRED, step)
    except BaseException as exc:
        session.emit_error(exc, run_id=run_id, step=step)
        raise


def _resume(session: AgentSession, state: _RunState, progress: RunProgress) -> StepOutcome:
    """Take over what ``progress`` recorded; finish the step it cut short, if any."""
    # the progress sums the run's MODEL_RESPONSE usage; its MODEL_USAGE events count too
    state.usage = progress.usage + _usage_without_response(session, state.run_id, state.first_seq)
    state.tool_calls = list(progress.tool_calls)
    state.tool_results = list(progress.tool_results)
    state.last_text = progress.last_text
    if progress.open_step is None:
        return "again"
    step = progress.open_step
    valid, parked = _validated(session, state, progress.pending, step)
    waiting = _execute(session, state, valid, step) or parked or _step_waits(session, state, step)
    session.emit(EventType.STEP_END, TextPayload(text=RUNTIME_NAME), run_id=state.run_id, step=step)
    if not waiting:
        state.mark()
    return "waiting" if waiting else "again"


def _step_waits(session: AgentSession, state: _RunState, step: int) -> bool:
    """Whether a call of ``step`` already recorded a WAITING result (before the run was cut
    short): the resumed step ends the run ``WAITING`` as the first attempt would have."""
    return any(
        e.run_id == state.run_id
        and e.step == step
        and isinstance(e.payload, ToolResultPayload)
        and e.payload.status == "WAITING"
        for e in session.events
    )


def _check_limits(
    session: AgentSession, state: _RunState, cancel_check: CancelCheck | None
) -> None:
    if cancel_check is not None and cancel_check():
        raise RunCancelled(f"run {state.run_id!r} of session {session.session_id!r} was cancelled")
    timeout_s = state.timeout_s
    if timeout_s and time.monotonic() - state.started_s >= timeout_s:
        raise RunTimeout(
            f"run {state.run_id!r} exceeded its wall-clock timeout of {timeout_s} s; "
            "raise the run's timeout (--timeout-s, or timeout_s= on the request) or the agent's "
            "AgentOptions.timeout_s, or split the task"
        )


def _step(session: AgentSession, state: _RunState, step: int) -> StepOutcome:
    _auto_compact(session, state, step)
    session.emit(
        EventType.STEP_START, TextPayload(text=RUNTIME_NAME), run_id=state.run_id, step=step
    )
    response = _call_model(session, state, step)
    calls = _normalize_calls(response.tool_calls, step)
    if calls != list(response.tool_calls):
        response = ModelResponse(text=response.text, tool_calls=tuple(calls), usage=response.usage)
    session.write(
        EventType.MEMORY_ITEMS_APPENDED,
        ItemsAppendedPayload(items=response.items_for_memory()),
        run_id=state.run_id,
        step=step,
    )
    state.last_text = response.text
    if not calls:
        session.emit(
            EventType.FINAL_OUTPUT,
            TextPayload(text=response.text or ""),
            run_id=state.run_id,
            step=step,
        )
        session.emit(
            EventType.STEP_END, TextPayload(text=RUNTIME_NAME), run_id=state.run_id, step=step
        )
        return "final"
    waiting = _run_tools(session, state, calls, step)
    session.emit(EventType.STEP_END, TextPayload(text=RUNTIME_NAME), run_id=state.run_id, step=step)
    return "waiting" if waiting else "again"


def _auto_compact(session: AgentSession, state: _RunState, step: int) -> None:
    policy = session.agent.options.compact_policy
    if policy is None:
        return
    billed = Usage()
    try:
        snapshot = session.memory_snapshot()
        if policy.should_compact(snapshot):
            with summary_calls() as calls:
                try:
                    result = policy.compact(snapshot)
                finally:  # billed also when the policy fails after its call
                    billed = record_summary_calls(session, calls, run_id=state.run_id, step=step)
            session.apply_compact(result, run_id=state.run_id, step=step)
    except Exception as exc:  # a broken policy must not break the run; memory stays as it was
        session.emit_error(exc, run_id=state.run_id, step=step)
    if billed != Usage():
        state.usage = state.usage + billed
        _check_token_budget(session, state)


def _usage_without_response(session: AgentSession, run_id: str, first_seq: int) -> Usage:
    """The tokens of the ``MODEL_USAGE`` events of ``run_id`` (from ``first_seq`` on)."""
    paid = (e.payload for e in session.events if e.seq >= first_seq and e.run_id == run_id)
    return sum((p.usage for p in paid if isinstance(p, ModelUsagePayload)), Usage())


def _prompt_items(session: AgentSession, state: _RunState, step: int) -> tuple[Item, ...]:
    options = session.agent.options
    items = session.memory_snapshot().items
    if options.context_budget is None:
        return items
    from tether.runtime.projection import DefaultContextProjector

    projector = options.projector or DefaultContextProjector()
    projected, report = projector.project(items, options.context_budget)
    session.emit(
        EventType.MEMORY_COMPRESS, ProjectionPayload(report=report), run_id=state.run_id, step=step
    )
    return projected


def _call_model(session: AgentSession, state: _RunState, step: int) -> ModelResponse:
    agent = session.agent
    summary = session.memory_snapshot().summary
    request = ModelRequest(
        model=agent.model_name,
        items=_prompt_items(session, state, step),
        system_prompt=agent.system_prompt,
        summary=summary or None,
        tools=agent.tools.specs(session.tenant),
        parallel_tool_calls=agent.options.parallel_tool_calls,
    )
    session.emit(
        EventType.MODEL_REQUEST,
        ModelRequestPayload(
            model=request.model,
            item_count=len(request.items),
            tool_names=agent.tools.names(session.tenant),
            has_summary=bool(summary),
        ),
        run_id=state.run_id,
        step=step,
    )
    try:
        with span("tether.model", {"gen_ai.request.model": request.model}, step=step) as call:
            deadline_s = state.started_s + state.timeout_s if state.timeout_s else None
            response = _ask(agent.model, request, state.deltas, step, deadline_s)
            record_usage(call, response.usage)
    except TetherError as exc:
        billed = billed_usage(exc)  # an answer it could not use: the provider billed it
        if billed is not None:
            session.emit(
                EventType.MODEL_USAGE,
                ModelUsagePayload(model=request.model, usage=billed, call="unusable_answer"),
                run_id=state.run_id,
                step=step,
            )
            state.usage = state.usage + billed
        raise
    except Exception as exc:
        raise ModelError(f"model {request.model!r} failed: {type(exc).__name__}: {exc}") from exc
    # before any event holds it: a lone surrogate could never be stored, and its commit would
    # fail on every attempt (repeating this call and the step's tools)
    response = valid_strings(response)
    session.emit(
        EventType.MODEL_RESPONSE,
        ModelResponsePayload(
            text=response.text, tool_calls=response.tool_calls, usage=response.usage
        ),
        run_id=state.run_id,
        step=step,
    )
    state.usage = state.usage + response.usage
    _check_token_budget(session, state)
    return response


def _check_token_budget(session: AgentSession, state: _RunState) -> None:
    budget = session.agent.options.token_budget
    if budget is not None and state.usage.total_tokens >= budget:
        raise TokenBudgetExceeded(
            f"run {state.run_id!r} used {state.usage.total_tokens} tokens, over its budget of "
            f"{budget}; raise AgentOptions.token_budget"
        )


def _ask(
    model: ModelClient,
    request: ModelRequest,
    deltas: RunDeltas | None,
    step: int,
    deadline_s: float | None = None,
) -> ModelResponse:
    """The model's answer: streamed when someone takes the pieces and the model can stream.

    A streamed answer is cut at the run's deadline (``deadline_s``, monotonic): a model that
    keeps sending pieces would otherwise keep the run past it until the worker's guardian
    kills the process, and the run would be retried as a crash, paying the model again."""
    if deltas is not None and isinstance(model, StreamingModelClient):
        sink = deltas

        def piece(delta: ModelDelta) -> None:
            if deadline_s is not None and time.monotonic() >= deadline_s:
                raise RunTimeout(
                    f"the model was still answering step {step} at the run's deadline; raise "
                    "the run's timeout_s, or ask for shorter answers (max_tokens)"
                )
            sink.piece(step, valid_strings(delta))

        try:
            return model.stream(request, piece)
        finally:
            deltas.step_done(step)  # the step's pieces go out before its MODEL_RESPONSE
    return model.complete(request)


def _normalize_calls(calls: tuple[ToolCall, ...], step: int) -> list[ToolCall]:
    out = []
    for index, call in enumerate(calls):
        call_id = call.id.strip() or f"tool_step_{step}_{index}"
        out.append(call.model_copy(update={"id": call_id, "name": call.name.strip()}))
    return out


def _run_tools(session: AgentSession, state: _RunState, calls: list[ToolCall], step: int) -> bool:
    """Emit calls, execute the valid ones, write results in call order; True when one waits."""
    for call in calls:
        session.emit(
            EventType.TOOL_CALL, ToolCallPayload(call=call), run_id=state.run_id, step=step
        )
        state.tool_calls.append(call)
    valid, parked = _validated(session, state, calls, step)
    state.mark()  # the calls are recorded: a resumed run executes these same calls
    return _execute(session, state, valid, step) or parked


def _validated(
    session: AgentSession, state: _RunState, calls: Sequence[ToolCall], step: int
) -> tuple[list[Call], bool]:
    """The calls to run now: those naming a known tool with valid arguments. The rest get a
    FAILED result, and calls needing approval a WAITING placeholder (then True)."""
    agent = session.agent
    valid: list[Call] = []
    parked = False
    for position, call in enumerate(calls):
        if call.name in agent.options.require_approval:
            placeholder = ToolOutcome(call=call, output=APPROVAL_OUTPUT, ok=True, status="WAITING")
            _write_result(session, state, placeholder, step)
            parked = True
            continue
        tool = agent.tools.get(call.name, session.tenant)
        problem: ToolOutcome | None = None
        if tool is None:
            known = ", ".join(agent.tools.names(session.tenant)) or "none"
            problem = failed(
                call, "UnknownTool", f"no tool named {call.name!r}; known tools: {known}"
            )
        else:
            parsed = tool.parse(call)
            problem = parsed if isinstance(parsed, ToolOutcome) else None
        if problem is not None:
            _write_result(session, state, problem, step)
            continue
        assert tool is not None
        context = ToolContext(
            session.tenant,
            session.session_id,
            state.run_id,
            step,
            call.id,
            position=position,
            request_id=state.request_id,
            **wait_limit_fields(),
            **inbox_fields(session),
            **child_fields(),
        )
        valid.append((tool, call, context))
    return valid, parked


def _execute(session: AgentSession, state: _RunState, calls: list[Call], step: int) -> bool:
    """Run the calls and write their results; True when one of them waits.

    Sequential calls are recorded one by one, so a crash never repeats a finished call;
    parallel calls are recorded together, in call order, when all have finished.
    """
    options = session.agent.options
    timeout_s = options.tool_timeout_s
    waiting = False
    if options.parallel_tool_calls and len(calls) > 1:
        outcomes = execute_parallel(
            calls, max_parallel=options.max_parallel_tool_calls, timeout_s=timeout_s
        )
        for outcome in outcomes:
            _write_result(session, state, outcome, step)
        state.mark(last_result=options.compact_policy is None)
        return any(o.status == "WAITING" for o in outcomes)
    for n, (tool, call, context) in enumerate(calls, 1):
        outcome = run_with_timeout(tool, call, context, timeout_s)
        _write_result(session, state, outcome, step)
        # a compaction before the next step may call a model: the result is written first
        state.mark(last_result=n == len(calls) and options.compact_policy is None)
        waiting = waiting or outcome.status == "WAITING"
    return waiting


def _write_result(session: AgentSession, state: _RunState, outcome: ToolOutcome, step: int) -> None:
    outcome = valid_strings(outcome)  # a tool's text, like the model's, must be storable
    item = ToolOutput(
        call_id=outcome.call.id,
        name=outcome.call.name,
        output=outcome.output,
        wait_for=outcome.wait_for,
    )
    session.write(
        EventType.TOOL_RESULT,
        ToolResultPayload(item=item, ok=outcome.ok, status=outcome.status, error=outcome.error),
        run_id=state.run_id,
        step=step,
    )
    state.tool_results.append(
        ToolResultRecord(
            call_id=item.call_id,
            name=item.name,
            output=item.output,
            ok=outcome.ok,
            status=outcome.status,
            error=outcome.error,
        )
    )


def _result(session: AgentSession, state: _RunState, status: RunStatus, steps: int) -> AgentResult:
    return AgentResult(
        run_id=state.run_id,
        session_id=session.session_id,
        tenant=session.tenant,
        status=status,
        output=state.last_text,
        steps=steps,
        tool_calls=tuple(state.tool_calls),
        tool_results=tuple(state.tool_results),
        usage=state.usage,
        first_seq=state.first_seq,
        last_seq=session.last_seq,
        pending=(
            pending_calls(session.memory_snapshot().items, state.tool_calls, state.tool_results)
            if status is RunStatus.WAITING
            else ()
        ),
    )
