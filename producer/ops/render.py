"""Terminal rendering for the CLI and the demo: events coloured by type, results, tables.

Everything human-readable goes through a :class:`rich.console.Console`; machine-readable output
(``--json``) is written with :func:`emit_json`, which bypasses rich so that long lines are never
wrapped or highlighted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tether.core.events import AgentEvent, EventType
from tether.core.items import item_text
from tether.core.memory import MemorySnapshot
from tether.persistence.reader import VerifyReport
from tether.runs.contract import RunResult

#: Width used when output is not a terminal (pipes, CI logs, tests): wide enough not to wrap.
PIPE_WIDTH = 160
MAX_SUMMARY_CHARS = 100

EVENT_STYLES: dict[EventType, str] = {
    EventType.STEP_START: "dim",
    EventType.STEP_END: "dim",
    EventType.MODEL_REQUEST: "blue",
    EventType.MODEL_RESPONSE: "cyan",
    EventType.TOOL_CALL: "magenta",
    EventType.TOOL_RESULT: "bright_magenta",
    EventType.FINAL_OUTPUT: "bold green",
    EventType.ERROR: "bold red",
    EventType.USER_INPUT: "yellow",
    EventType.MEMORY_ITEMS_APPENDED: "dim cyan",
    EventType.TOOL_OUTPUT_REPLACED: "magenta",
    EventType.MEMORY_COMPRESS: "bright_blue",
    EventType.SESSION_RESTORED: "bold yellow",
    EventType.MODEL_USAGE: "cyan",
}


def make_console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr) that does not wrap when output is piped."""
    console = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console.width = PIPE_WIDTH
    return console


def emit_json(value: Any, *, lines: bool = False) -> None:
    """Write ``value`` as JSON on stdout (one compact line with ``lines``, else indented)."""
    text = json.dumps(value, default=str) if lines else json.dumps(value, indent=2, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _short(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    flat = " | ".join(part for part in text.splitlines() if part.strip()) or text
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def event_summary(event: AgentEvent) -> str:
    """A one-line description of an event's payload."""
    p = event.payload
    if p.kind == "text":
        return p.text
    if p.kind == "user_input":
        return p.item.content
    if p.kind in ("items_appended", "tool_output_replaced", "compact", "restored"):
        return _memory_summary(event)
    if p.kind == "model_request":
        tools = f" tools={','.join(p.tool_names)}" if p.tool_names else ""
        return f"{p.model} items={p.item_count}{tools}"
    if p.kind == "model_response":
        calls = " ".join(f"-> {c.name}({c.arguments})" for c in p.tool_calls)
        return " ".join(x for x in (p.text or "", calls) if x)
    if p.kind == "tool_call":
        return f"{p.call.name}({p.call.arguments})"
    if p.kind == "tool_result":
        status = "" if p.ok else f" [{p.status}: {p.error}]"
        return f"{p.item.name} -> {p.item.output}{status}"
    if p.kind == "error":
        return f"{p.error_type}: {p.message}"
    if p.kind == "usage":
        return f"tokens in={p.input_tokens} out={p.output_tokens}"
    if p.kind == "model_usage":
        return f"{p.model} ({p.call}) tokens in={p.usage.input_tokens} out={p.usage.output_tokens}"
    return ""


def _memory_summary(event: AgentEvent) -> str:
    p = event.payload
    if p.kind == "items_appended":
        return " / ".join(item_text(item) for item in p.items)
    if p.kind == "tool_output_replaced":
        return f"{p.call_id} -> {p.output}"
    if p.kind == "compact":
        return f"compacted to {len(p.result.memory.items)} items"
    if p.kind == "restored":
        return f"restored (base seq {p.base_seq})"
    return ""


def event_text(event: AgentEvent, *, prefix: str = "") -> Text:
    """``[prefix] seq TYPE run step summary``, coloured by event type."""
    style = EVENT_STYLES.get(event.type, "")
    text = Text(prefix, style="dim")
    text.append(f"{event.seq:>5} ", style="dim")
    text.append(f"{event.type.value:<22}", style=style)
    run = (event.run_id or "-")[-12:]
    text.append(f" {run:<12} s{event.step:<2} ", style="dim")
    loud = event.type in (EventType.FINAL_OUTPUT, EventType.ERROR)
    text.append(_short(event_summary(event)), style=style if loud else "")
    return text


def events_table(events: Iterable[AgentEvent], title: str | None = None) -> Table:
    """A table of events."""
    table = Table(title=title, show_lines=False, expand=False)
    for name in ("seq", "type", "run", "step", "summary"):
        table.add_column(name, overflow="fold")
    for e in events:
        style = EVENT_STYLES.get(e.type, "")
        table.add_row(
            str(e.seq),
            Text(e.type.value, style=style),
            e.run_id or "-",
            str(e.step),
            _short(event_summary(e)),
        )
    return table


def result_line(result: RunResult, worker: str | None = None) -> Text:
    """One line describing a finished run (status, worker, timings)."""
    style = "green" if result.ok else "red"
    text = Text(f"{result.status.value}", style=style)
    text.append(f" run {result.run_id} on {worker or result.worker or '?'}", style="dim")
    text.append(f" (queued {result.queue_ms} ms, ran {result.run_ms} ms", style="dim")
    text.append(f", attempts {result.attempts}{spend_text(result)})", style="dim")
    if result.error_type:
        text.append(f" {result.error_type}: {result.error_message}", style="red")
    return text


def spend_text(result: RunResult) -> str:
    """``, 1,234 tokens, $0.0012`` (nothing for a run without tokens; no cost when unpriced)."""
    usage = result.usage
    tokens = usage.input_tokens + usage.output_tokens
    if not tokens:
        return ""
    cost = "" if result.cost_usd is None else f", ${result.cost_usd:.4g}"
    return f", {tokens:,} tokens{cost}"


def settings_table(values: Mapping[str, Any], descriptions: Mapping[str, str]) -> Table:
    """The effective settings (already masked) with their descriptions."""
    table = Table(title="Effective settings")
    table.add_column("variable", style="bold")
    table.add_column("value")
    table.add_column("description", style="dim")
    for name, value in values.items():
        shown = json.dumps(value) if isinstance(value, list) else str(value)
        table.add_row(name, "" if value is None else shown, descriptions.get(name, ""))
    return table


def verify_line(report: VerifyReport) -> Text:
    """``PASS``/``FAIL`` line of one verified session."""
    text = pass_fail(report.ok)
    text.append(
        f"  {report.tenant}/{report.session_id}: {report.event_count} events, "
        f"last seq {report.last_seq}"
    )
    for problem in report.problems:
        text.append(f"; {problem}", style="red")
    return text


def pass_fail(ok: bool) -> Text:
    """A coloured ``PASS`` or ``FAIL`` word."""
    return Text("PASS", style="bold green") if ok else Text("FAIL", style="bold red")


def memory_table(memory: MemorySnapshot, title: str | None = None) -> Table:
    """A session's memory: one row per item, plus the summary when there is one."""
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("type")
    table.add_column("text", overflow="fold")
    if memory.summary:
        table.add_row("-", "summary", memory.summary)
    for index, item in enumerate(memory.items, start=1):
        table.add_row(str(index), item.type, _short(item_text(item), 200))
    return table
