"""Where the agent loop hands the pieces of a streamed model answer.

When a run is given a :class:`RunDeltas` (a worker gives one per run) and the agent's model
implements :class:`~tether.models.base.StreamingModelClient`, the loop calls ``stream`` instead
of ``complete`` and passes each piece on with its step. ``step_done`` comes once the call has
returned or failed and before the step's ``MODEL_RESPONSE`` event is emitted, so everything
published for a step is out before the step's events. Without one (in-process use) the loop
calls ``complete`` as it always did.

Pieces are redacted like events (:func:`redacted`): a secret the model repeats never reaches the
live channel either, even when the provider splits it across pieces.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Protocol

from tether.models.base import ModelDelta
from tether.runtime.redaction import TextRedactor


class RunDeltas(Protocol):
    """One run's sink for streamed pieces."""

    def piece(self, step: int, delta: ModelDelta) -> None:
        """One piece of the answer of ``step``'s model call (called on the run's thread)."""

    def step_done(self, step: int) -> None:
        """``step``'s model call is over: hand out what is pending before returning (never
        raise: pieces are for people watching, the run does not depend on them)."""


def redacted(inner: RunDeltas, redact: TextRedactor | None) -> RunDeltas:
    """``inner`` behind the agent's redactor (``inner`` itself when redaction is off)."""
    return inner if redact is None else _RedactedDeltas(inner, redact)


#: How much text before a new stretch its redaction sees: what a pattern may look behind at
#: (``Bearer `` and a word boundary; a match itself holds no whitespace, so none starts in it;
#: a private key, whose lines do, is held back whole instead).
CONTEXT_CHARS = 16


class _RedactedDeltas:
    """Hands out each piece redacted as part of everything its stream has said so far.

    A piece alone cannot be redacted: a provider may split a secret across pieces, and a
    pattern may need the text before it (``Bearer <token>``). So each stream (the text, or one
    tool call's arguments) keeps its raw text, and only the part up to its last whitespace is
    redacted and handed out; the rest waits for more text or for the end of the step. Secrets
    and the credential patterns hold no whitespace, so a match never crosses that boundary and
    what was handed out stays a prefix of the redacted whole. The one exception, a PEM private
    key (its lines are whitespace apart), is held back whole from its ``-----BEGIN`` until its
    end marker arrives (:func:`unfinished_key`). A stream ends whole when the next one starts
    (the text before the calls, call 0 before call 1) or when the step does.
    """

    def __init__(self, inner: RunDeltas, redact: TextRedactor) -> None:
        self._inner = inner
        self._redact = redact
        self._streams: dict[tuple[int, str, int], _Stream] = {}
        self._last: tuple[int, str, int] | None = None

    def piece(self, step: int, delta: ModelDelta) -> None:
        key = (step, delta.kind, delta.call_index)
        if self._last is not None and self._last != key and self._last in self._streams:
            # providers stream the text, then each call's arguments, one after the other: a
            # piece of the next one means the last one is complete, so it goes out whole (and
            # the pieces keep the order the model sent them in)
            last = self._streams[self._last]
            self._emit(self._last[0], last, len(last.raw))
        self._last = key
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream(first=delta)
        text = delta.text
        stream.raw += text
        # four calls, not a generator over the characters: this runs for every piece
        cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"), text.rfind("\r"))
        if cut < 0:
            return
        end = len(stream.raw) - len(text) + cut + 1
        held = unfinished_key(stream.raw, stream.done)
        if held is not None and held < end:
            # up to the last whitespace before the key: a match of another pattern may run
            # into its dashes
            raw = stream.raw
            end = 1 + max(raw.rfind(c, stream.done, held) for c in " \n\t\r")
        if end > 0:
            self._emit(step, stream, end)

    def step_done(self, step: int) -> None:
        self._last = None
        for key in [k for k in self._streams if k[0] == step]:
            stream = self._streams.pop(key)
            self._emit(step, stream, len(stream.raw))
        self._inner.step_done(step)

    def _emit(self, step: int, stream: _Stream, end: int) -> None:
        """Hand out ``stream``'s raw text up to ``end``, redacted: only the part not handed out
        yet is redacted, behind :data:`CONTEXT_CHARS` of what came before it (a pattern may
        look behind, as ``Bearer <token>`` does), so a step's cost stays linear in its text."""
        if end <= stream.done:
            return
        context = stream.raw[max(0, stream.done - CONTEXT_CHARS) : stream.done]
        text = self._redact(stream.raw[stream.done - len(context) : end])
        stream.done = end
        if not text.startswith(context):  # rare: the context itself holds something masked
            context = self._redact(context)
            if not text.startswith(context):
                return  # a redaction reached back into what was handed out: the event will tell
        new = text[len(context) :]
        if not new:
            return
        first, stream.first = stream.first, None
        t = first if first is not None else stream.template
        # the constructor, not dataclasses.replace (several times slower): once per piece
        self._inner.piece(step, ModelDelta(t.kind, new, t.call_index, t.call_id, t.tool_name))


_KEY_START = "-----BEGIN"
_KEY_HEADER = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")
#: A ``-----BEGIN`` line longer than this without the header's end is not a private key's
_KEY_HEADER_MAX_CHARS = 64


def unfinished_key(raw: str, start: int) -> int | None:
    """Where the first PEM private key of ``raw[start:]`` that may still be unfinished begins
    (the credential pattern whose match spans whitespace; see
    :data:`~tether.runtime.redaction.SECRET_PATTERNS`), or None: a ``-----BEGIN`` whose header
    may still turn out to be a private key's counts, one whose end marker came does not."""
    at = raw.find(_KEY_START, start)
    while at >= 0:
        header = _KEY_HEADER.match(raw, at)
        if header is None:
            line = raw[at : at + _KEY_HEADER_MAX_CHARS]
            if "\n" not in line and len(line) < _KEY_HEADER_MAX_CHARS:
                return at  # the header is still arriving
            at = raw.find(_KEY_START, at + 1)
            continue
        finished = _KEY_END.search(raw, header.end())
        if finished is None:
            return at
        at = raw.find(_KEY_START, finished.end())
    return None


@dataclasses.dataclass
class _Stream:
    first: ModelDelta | None
    raw: str = ""
    done: int = 0
    """How much of ``raw`` was redacted and handed out (always just after a whitespace)."""

    def __post_init__(self) -> None:
        assert self.first is not None
        # later pieces of a call carry no id or name (the first one did)
        self.template = dataclasses.replace(self.first, text="", call_id=None, tool_name=None)
