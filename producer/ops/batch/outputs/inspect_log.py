"""``tether batch export RESULTS --format inspect``: a results file as an Inspect AI eval log.

Built with inspect_ai's own log classes and written by its ``write_eval_log`` (``pip install
'tether[inspect]'``), so ``inspect_ai.log.read_eval_log`` and ``inspect view`` read it like a log
of ``inspect eval``. The mapping:

- the batch is the task (``eval.task``: the batch id; ``eval.model``: ``tether/<agent>``);
- a line is a sample: ``id`` the case id made safe as a path (:mod:`.entry_names`: inspect_ai
  names the sample's entry in the ``.eval`` zip after it; an id that had to change becomes
  ``<slug>~<hash>``), ``metadata.tether_case_id`` the case id as it was, ``epoch`` the line's
  epoch + 1 (Inspect counts from 1), ``input``/``target`` the case's, ``messages`` the
  session's transcript (user inputs, model replies with their tool calls, tool results),
  ``output`` the final output, ``scores`` one Inspect ``Score`` per Tether scorer (a scoring
  error: value 0 with ``metadata.error``), a failed run as the sample's ``error``, tokens as
  ``model_usage``, latency as ``total_time``;
- ``results.scores``: per scorer, the mean and standard error over cases (epochs averaged first,
  as ``tether batch`` reports them).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigurationError
from tether.producer.ops.batch.outputs.entry_names import safe_names
from tether.producer.ops.batch.outputs.transcripts import Message
from tether.producer.ops.batch.summary import summary_of_results

if TYPE_CHECKING:
    from tether.producer.ops.batch.results import CaseResult

#: Returns a line's transcript as chat messages.
MessagesOf = Callable[["CaseResult"], list[Message]]

INSTALL_HINT = "install it with: pip install 'tether[inspect]'"


def _require_inspect() -> None:
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"exporting an Inspect AI log needs the inspect-ai package; {INSTALL_HINT}"
        ) from exc


def _arguments(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return {"raw": text}  # the model's invalid JSON, kept as it was
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _chat(messages: list[Message]) -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    chat: list[Any] = []
    for m in messages:
        if m.role == "user":
            chat.append(ChatMessageUser(content=m.content))
        elif m.role == "assistant":
            calls = [
                ToolCall(id=i, function=n, arguments=_arguments(a)) for i, n, a in m.tool_calls
            ]
            chat.append(ChatMessageAssistant(content=m.content, tool_calls=calls or None))
        else:
            chat.append(
                ChatMessageTool(content=m.content, tool_call_id=m.tool_call_id, function=m.name)
            )
    return chat


def _scores(result: CaseResult) -> dict[str, Any]:
    from inspect_ai.scorer import Score

    scores: dict[str, Any] = {}
    for name, record in (result.scores or {}).items():
        metadata: dict[str, Any] = dict(record.metadata or {})
        metadata["passed"] = record.passed
        if record.error is not None:
            metadata["error"] = record.error
        scores[name] = Score(
            value=record.value if record.value is not None else 0.0,
            answer=result.output,
            explanation=record.explanation if record.error is None else record.error,
            metadata=metadata,
        )
    return scores


def _input(result: CaseResult) -> str | list[Any]:
    from inspect_ai.model import ChatMessageUser

    if isinstance(result.input, list):
        return [ChatMessageUser(content=turn) for turn in result.input]
    return result.input or ""


def _target(expected: Any) -> str | list[str]:
    if expected is None:
        return ""
    if isinstance(expected, str):
        return expected
    if isinstance(expected, list) and all(isinstance(x, str) for x in expected):
        return list(expected)
    return json.dumps(expected)


def _sample(result: CaseResult, sample_id: str, model: str, messages: list[Message]) -> Any:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage

    usage = result.usage
    error = None
    if result.errored:
        text = f"{result.error_type or result.status}: {result.error or ''}".strip()
        error = EvalError(message=text, traceback="", traceback_ansi="")
    metadata: dict[str, Any] = dict(result.metadata or {})
    metadata.update(
        tether_case_id=result.id,
        tether_session_id=result.session_id,
        tether_run_ids=result.run_ids,
        tether_status=result.status,
        tether_passed=result.passed,
        tether_attempt=result.attempt,
        tags=result.tags or [],
    )
    return EvalSample(
        id=sample_id,
        epoch=result.epoch + 1,
        input=_input(result),
        target=_target(result.expected),
        messages=_chat(messages),
        output=ModelOutput.from_content(model, result.output or ""),
        scores=_scores(result),
        metadata=metadata,
        model_usage={
            model: ModelUsage(
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                total_tokens=usage.total_tokens if usage else result.tokens,
            )
        },
        total_time=result.latency_ms / 1000,
        error=error,
    )


def _results(results: list[CaseResult], metrics: dict[str, Any]) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    scores = []
    for name, stats in metrics["scorers"].items():
        values = {"mean": stats["mean"], "stderr": stats["stderr"]}
        scores.append(
            EvalScore(
                name=name,
                scorer=name,
                scored_samples=stats["samples"],
                metrics={
                    k: EvalMetric(name=k, value=v) for k, v in values.items() if v is not None
                },
            )
        )
    completed = sum(1 for r in results if not r.errored)
    return EvalResults(total_samples=len(results), completed_samples=completed, scores=scores)


def build_eval_log(results: list[CaseResult], messages_of: MessagesOf) -> Any:
    """The ``inspect_ai.log.EvalLog`` of a batch's result lines."""
    _require_inspect()
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, EvalStats

    summary = summary_of_results(results, batch_id="", out="")
    batch_id = results[0].batch_id if results else "batch"
    agents = sorted({r.agent for r in results}) or ["unknown"]
    model = f"tether/{agents[0]}" if len(agents) == 1 else "tether/" + "+".join(agents)
    case_ids = list(dict.fromkeys(r.id for r in results))
    names = safe_names(case_ids)
    spec = EvalSpec(
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        task=batch_id,
        dataset=EvalDataset(
            name=batch_id, samples=len(case_ids), sample_ids=[names[i] for i in case_ids]
        ),
        model=model,
        config=EvalConfig(epochs=summary.epochs),
        metadata={"tether_batch_id": batch_id, "tether_agents": agents},
    )
    samples = [_sample(r, names[r.id], model, messages_of(r)) for r in results]
    return EvalLog(
        status="success",
        eval=spec,
        results=_results(results, summary.metrics),
        stats=EvalStats(),
        samples=samples,
    )


def write_inspect_log(results: list[CaseResult], messages_of: MessagesOf, out: Path) -> Path:
    """Write the batch as an Inspect AI log (``.eval``, or ``.json`` by the suffix of ``out``)."""
    from inspect_ai.log import write_eval_log

    log = build_eval_log(results, messages_of)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(out), format="json" if out.suffix == ".json" else "eval")
    return out


__all__ = ["build_eval_log", "write_inspect_log"]
