"""Printing a live feed with the model's text growing in place (``tether tail --tokens``).

Events print as ``tether tail`` prints them, one line each. The pieces of the step under way
print on one line as they arrive, after a ``... step N`` marker: the text a person would watch
being written. When a newer attempt redoes the step (a worker died mid-stream), the line is
closed with a note that the text so far is void and the step starts again; the step's
``MODEL_RESPONSE`` line that follows is the committed answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.text import Text

from tether.core.events import AgentEvent, event_to_dict
from tether.persistence.deltas.base import LiveDelta
from tether.persistence.deltas.live import LiveItem, LiveText
from tether.producer.ops.render import emit_json, event_text


def delta_doc(delta: LiveDelta) -> dict[str, Any]:
    """A piece as JSON (``tether tail --tokens --json``, the console's feed)."""
    doc: dict[str, Any] = {
        "type": "DELTA",
        "run_id": delta.run_id,
        "fence": delta.fence,
        "step": delta.step,
        "index": delta.index,
        "kind": delta.kind,
        "text": delta.text,
        "call_index": delta.call_index,
    }
    if delta.call_id is not None:
        doc["call_id"] = delta.call_id
    if delta.tool_name is not None:
        doc["tool_name"] = delta.tool_name
    return doc


class TokenPrinter:
    """Prints one live feed on ``console`` (or JSON lines)."""

    def __init__(self, console: Console, *, as_json: bool = False) -> None:
        self._console = console
        self._json = as_json
        self._text = LiveText()
        self._line_open = False

    def show_all(self, items: Iterable[LiveItem]) -> None:
        """Print every item as it comes."""
        try:
            for item in items:
                self.show(item)
        finally:
            self._close_line()

    def show(self, item: LiveItem) -> None:
        """Print one item."""
        if self._json:
            emit_json(
                delta_doc(item) if isinstance(item, LiveDelta) else event_to_dict(item), lines=True
            )
            return
        change = self._text.add(item)
        if isinstance(item, AgentEvent):
            self._close_line()
            self._console.print(event_text(item))
            return
        if change == "redo":
            self._close_line(
                Text(" [redone by a newer attempt: the text above is void]", style="yellow")
            )
        if not self._line_open:
            marker = f"{'':>5} ... {item.run_id[-12:]:<12} s{item.step:<2} "
            self._console.print(Text(marker, style="dim"), end="")
            self._line_open = True
        style = "cyan" if item.kind == "text" else "magenta"
        self._console.print(Text(item.text, style=style), end="", soft_wrap=True)

    def _close_line(self, note: Text | None = None) -> None:
        if self._line_open:
            self._console.print(note or "")
            self._line_open = False
