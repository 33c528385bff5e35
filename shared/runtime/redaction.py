"""Redaction of secrets from event payloads before anything is stored or published.

An :class:`~tether.runtime.agent.Agent` built with ``redact=`` applies that function to every text
of
every event its sessions append (user input, model output, tool arguments and results, error
messages...), before the event reaches memory, listeners (the live stream), the snapshot or the
archive; the distributed worker applies it to a run's recorded output and error message too.
Memory is written from the redacted event, so folding the stored log still gives the memory.

>>> redact = secret_redactor(["sk-live-123456"])
>>> redact("the key is sk-live-123456")
'the key is ***'
"""

from __future__ import annotations

import logging
import re
import traceback
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr
from pydantic_core import PydanticSerializationError

from tether.core.events import AgentEvent
from tether.errors import ConfigurationError

log = logging.getLogger(__name__)

TextRedactor = Callable[[str], str]
"""Maps a text to the same text with secrets masked (must be idempotent)."""

MASK = "***"
#: Shorter values would mask ordinary words; refuse them rather than mangle every event.
MIN_SECRET_CHARS = 6


def secret_redactor(secrets: Iterable[str | SecretStr | None], *, mask: str = MASK) -> TextRedactor:
    """A redactor replacing every occurrence of each secret value with ``mask``.

    ``None`` and empty values are ignored, so settings can be passed as they are.

    Raises:
        ConfigurationError: a secret is shorter than :data:`MIN_SECRET_CHARS` characters.
    """
    values: set[str] = set()
    for secret in secrets:
        text = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        if not text:
            continue
        if len(text) < MIN_SECRET_CHARS:
            raise ConfigurationError(
                f"a secret to redact has {len(text)} characters; redaction needs at least "
                f"{MIN_SECRET_CHARS} (shorter ones would mask ordinary text): use a longer secret"
            )
        values.add(text)
    ordered = sorted(values, key=len, reverse=True)  # a longer secret may contain a shorter one

    def redact(text: str) -> str:
        for value in ordered:
            if value in text:
                text = text.replace(value, mask)
        return text

    if not any(_JSON_ESCAPED.search(value) for value in ordered):
        # each value appears as it is in the JSON text of any string holding it
        _screens[redact] = lambda json_text: any(value in json_text for value in ordered)
    return redact


_screens: weakref.WeakKeyDictionary[TextRedactor, Callable[[str], bool]] = (
    weakref.WeakKeyDictionary()
)
"""Redactors that can tell from a payload's JSON text that they would change none of its texts
(see :func:`redact_event`): given that text, False only when no text in it holds a match."""


def _screen_of(redact: TextRedactor) -> Callable[[str], bool] | None:
    """``redact``'s screen, if it has one (a builtin such as ``str.lower`` has none: it cannot
    even be weakly referenced)."""
    try:
        return _screens.get(redact)
    except TypeError:
        return None


_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')
"""The characters JSON writes as escapes (a value holding one may not appear as it is)."""


#: Common credential formats, as a user might paste them into an input or a tool might echo them:
#: a well-known prefix followed by a long random-looking tail, so ordinary text is left alone.
#: (Bare 40-character AWS secret keys have no prefix to tell them from other text: pass them to
#: :func:`secret_redactor` when you know them.)
SECRET_PATTERNS: tuple[str, ...] = (
    r"\bsk-(?:proj-|live-|test-|ant-|svcacct-)?[A-Za-z0-9_\-]{20,}",  # OpenAI, Anthropic, Stripe
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"(?<=[Bb][Ee][Aa][Rr][Ee][Rr] )[A-Za-z0-9\-._~+/]{16,}=*",  # HTTP bearer tokens
    r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",  # GitHub tokens
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"\bAIza[0-9A-Za-z_\-]{35}\b",  # Google API keys
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)


#: A literal each match of :data:`SECRET_PATTERNS` holds, of characters JSON never escapes: a
#: text holding no match of this holds none of those, and neither does its JSON text.
_SECRET_ANCHORS = re.compile(
    r"sk-|AKIA|ASIA|[Bb][Ee][Aa][Rr][Ee][Rr] |gh[pousr]_|xox[abprs]-|AIza|PRIVATE KEY-----"
)


def pattern_redactor(
    patterns: Iterable[str] = SECRET_PATTERNS, *, mask: str = MASK
) -> TextRedactor:
    """A redactor masking every match of ``patterns`` (regular expressions)."""
    patterns = tuple(patterns)
    compiled = re.compile("|".join(f"(?:{p})" for p in patterns))

    def redact(text: str) -> str:
        return compiled.sub(mask, text) if text else text

    if patterns == SECRET_PATTERNS:
        _screens[redact] = lambda json_text: _SECRET_ANCHORS.search(json_text) is not None
    return redact


def chain(*redactors: TextRedactor) -> TextRedactor:
    """One redactor applying each of ``redactors`` in turn."""

    def redact(text: str) -> str:
        for each in redactors:
            text = each(text)
        return text

    screens = [_screen_of(each) for each in redactors]
    if all(screen is not None for screen in screens):
        found = [screen for screen in screens if screen is not None]
        _screens[redact] = lambda json_text: any(screen(json_text) for screen in found)
    return redact


#: Applied by every :class:`~tether.runtime.agent.Agent` unless it is built with ``redact=None``;
#: an agent's own ``redact=`` function runs after it.
DEFAULT_REDACTOR: TextRedactor = pattern_redactor()


def url_password(url: str | None) -> str | None:
    """The password in a ``redis://:pw@host`` or ``unix://...?password=pw`` URL, if any."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.password:
        return unquote(parts.password)
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if name.lower() == "password" and value:
            return unquote(value)
    return None


def settings_redactor(settings: Any, extra: Iterable[str | None] = ()) -> TextRedactor:
    """A redactor for the secrets a :class:`~tether.settings.Settings` holds (the OpenAI key,
    the broker and Redis passwords, the MCP servers' credentials), plus ``extra`` values.

    Secrets shorter than :data:`MIN_SECRET_CHARS` cannot be redacted safely; they are skipped
    with a warning (use longer ones).
    """
    values = []
    for secret in (
        settings.openai_api_key,
        url_password(settings.broker_url),
        url_password(settings.redis_url),
        *settings.mcp_secret_values(),
        *extra,
    ):
        text = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        if text and len(text) < MIN_SECRET_CHARS:
            log.warning(
                "a configured secret has fewer than %d characters and cannot be redacted",
                MIN_SECRET_CHARS,
            )
        elif text:
            values.append(text)
    return secret_redactor(values)


#: Deeper trees are left as they are: the request's validation refuses them (run metadata may be
#: 32 levels deep), and recursing into a hostile one would blow the stack first.
MAX_TREE_DEPTH = 64


def redact_tree(value: Any, redact: TextRedactor, *, depth: int = 0) -> Any:
    """``value`` (a JSON tree: run metadata, a settled call's text) with ``redact`` applied to
    every string in it, keys included (down to :data:`MAX_TREE_DEPTH` levels)."""
    if isinstance(value, str):
        return redact(value)
    if depth >= MAX_TREE_DEPTH:
        return value
    if isinstance(value, dict):
        return {
            redact_tree(k, redact, depth=depth + 1): redact_tree(v, redact, depth=depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_tree(v, redact, depth=depth + 1) for v in value]
    return value


def redact_event(event: AgentEvent, redact: TextRedactor) -> AgentEvent:
    """``event`` with ``redact`` applied to every text of its payload (the same object when
    nothing changed).

    A redactor built here (the credential patterns, secret values, chains of them) first looks
    at the payload's JSON text for what every match of it holds, and when nothing is there the
    event is returned without walking its texts: several times cheaper, and the common case."""
    screen = _screen_of(redact)
    if screen is not None:
        try:
            text = event.payload.model_dump_json()
        except PydanticSerializationError:  # a lone surrogate: the walk below copes, as ever
            text = None
        if text is not None and not screen(text):
            return event
    doc = event.payload.model_dump(mode="json")
    # the payload's own fields are the schema's names, and ``kind`` its type tag
    cleaned = {k: v if k == "kind" else _walk(v, redact) for k, v in doc.items()}
    if cleaned == doc:
        return event
    return event.model_copy(update={"payload": type(event.payload).model_validate(cleaned)})


_V = TypeVar("_V")


def mask_input(value: _V) -> _V:
    """``value`` with the default credential patterns masked when it is non-empty text, as
    every entry point stores a run's input (``TETHER_REDACT_INPUTS``); anything else as it is,
    for the validation after it to refuse with a clear error."""
    if isinstance(value, str) and value:
        masked: Any = DEFAULT_REDACTOR(value)
        return masked  # type: ignore[no-any-return]
    return value


def mask_metadata(value: _V) -> _V:
    """``value`` with the default credential patterns masked in every string of it (keys
    too) when it is a dict (run metadata); anything else as it is."""
    if isinstance(value, dict):
        masked: Any = redact_tree(value, DEFAULT_REDACTOR)
        return masked  # type: ignore[no-any-return]
    return value


#: Item types whose ``encrypted_content`` :func:`redact_event` leaves as it is: the model's
#: opaque state (URL-safe base64 that the next call must return byte for byte; about one
#: 2,000-character blob in 10,000 holds ``-sk-`` and 20 more such characters, which the ``sk-``
#: pattern would mask, breaking the conversation). Not text a person wrote. Only there: the same
#: key anywhere else (a tool's output, an item's fields) is redacted like any text.
OPAQUE_ITEM_TYPES = frozenset({"reasoning", "compaction"})


def _walk(value: Any, redact: TextRedactor) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        kind = value.get("type")  # a JSON Schema's may be a list: ["string", "null"]
        opaque = isinstance(kind, str) and kind in OPAQUE_ITEM_TYPES
        return {
            redact(k): v
            if opaque and k == "encrypted_content" and isinstance(v, str)
            else _walk(v, redact)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_walk(v, redact) for v in value]
    return value


_installed: list[TextRedactor] = []


def install_log_redaction(redact: TextRedactor) -> None:
    """Redact every log record of this process (any logger, any handler) with ``redact``.

    Installed as the log-record factory, so it also covers libraries that log what a server
    echoed back, and it is inherited by forked children (Celery's prefork pool). Calling it again
    replaces the redactor; it never stacks.
    """
    if _installed:
        _installed[0] = redact
        return
    _installed.append(redact)
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            current = _installed[0]
            message = record.getMessage()
            cleaned = current(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
            if record.exc_info and record.exc_info[1] is not None:
                text = "".join(traceback.format_exception(*record.exc_info))
                cleaned = current(text.rstrip("\n"))
                if cleaned != text.rstrip("\n"):
                    record.exc_text = cleaned
        except Exception:  # a log line must never fail because of redaction
            pass
        return record

    logging.setLogRecordFactory(factory)
