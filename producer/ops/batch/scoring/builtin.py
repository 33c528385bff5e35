"""The built-in scorers: exact, contains, regex, includes-any, numeric, json and f1.

Each compares a case's final output with its ``expected`` value and returns 1.0 or 0.0 (f1: the
token overlap), with an explanation. A run without output scores 0. Options come from the
``--scorer`` value (``numeric:tol=0.01``, ``json:field=answer.value``, ``f1:threshold=0.8``);
:mod:`tether.producer.ops.batch.scoring.specs` parses them.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from tether.errors import InvalidInput
from tether.producer.ops.batch.scoring.base import Sample, Score

# a sign directly after a digit is a dash ("10-20" is 10 and 20), not the next number's sign
_NUMBER = re.compile(
    r"(?:(?<!\d)[-+])?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
)
_MINUS_SIGN = str.maketrans({"\u2212": "-"})  # U+2212, the typographic minus
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)

BuiltinFn = Callable[[Sample], Score]


def _text(value: Any) -> str:
    """``expected`` as text: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _verdict(ok: bool, why: str) -> Score:
    return Score(value=1.0 if ok else 0.0, explanation=why)


def _no_output() -> Score:
    return Score(value=0.0, explanation="the run produced no output")


@lru_cache(maxsize=256)
def _pattern(expected: str) -> re.Pattern[str]:
    return re.compile(expected)


def exact(sample: Sample) -> Score:
    """``output == expected`` (no trimming or case folding)."""
    if sample.output is None:
        return _no_output()
    expected = _text(sample.case.expected)
    ok = sample.output == expected
    return _verdict(ok, "output equals expected" if ok else f"output is not {expected!r}")


def contains(sample: Sample) -> Score:
    """``expected`` is a substring of the output."""
    if sample.output is None:
        return _no_output()
    expected = _text(sample.case.expected)
    ok = expected in sample.output
    return _verdict(ok, f"{expected!r} {'found' if ok else 'not found'} in output")


def regex(sample: Sample) -> Score:
    """``re.search(expected, output)`` finds a match (anchor with ``^...$`` for a full match)."""
    if sample.output is None:
        return _no_output()
    found = _pattern(_text(sample.case.expected)).search(sample.output)
    if found is None:
        return _verdict(False, "no match")
    return _verdict(True, f"matched {found.group(0)[:200]!r}")


def includes_any(sample: Sample) -> Score:
    """One of the strings of ``expected`` (a list, or one string) is in the output."""
    if sample.output is None:
        return _no_output()
    raw = sample.case.expected
    options = [_text(x) for x in raw] if isinstance(raw, list) else [_text(raw)]
    for option in options:
        if option in sample.output:
            return _verdict(True, f"found {option!r}")
    return _verdict(False, f"none of {len(options)} expected strings found")


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators allowed), or None.

    A ``-`` or ``+`` right before the digits is the number's sign unless it follows a digit
    (``10-20`` reads 10 and 20, so 20); the minus sign U+2212 is a ``-``."""
    found = [m.group(0) for m in _NUMBER.finditer(text.translate(_MINUS_SIGN))]
    if not found:
        return None
    return float(found[-1].replace(",", ""))


def numeric(*, tol: float = 0.0, rel: float = 0.0) -> BuiltinFn:
    """The last number in the output is within ``tol`` (absolute) or ``rel`` (relative to
    ``expected``) of ``expected``."""

    def score(sample: Sample) -> Score:
        if sample.output is None:
            return _no_output()
        target = _number(sample.case.expected)
        got = last_number(sample.output)
        if got is None:
            return _verdict(False, "no number in output")
        diff = abs(got - target)
        allowed = max(tol, rel * abs(target))
        ok = diff <= allowed
        return _verdict(
            ok, f"read {got:g}; |{got:g} - {target:g}| = {diff:g} {'<=' if ok else '>'} {allowed:g}"
        )

    return score


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected must be a number for the numeric scorer, got {value!r}")
    return float(value)


def parse_json_output(output: str) -> Any:
    """The output as JSON (a surrounding ```json fence is allowed). Raises ValueError."""
    text = output.strip()
    fenced = _FENCE.match(text)
    try:
        return json.loads(fenced.group(1) if fenced else text)
    except RecursionError:  # a model's output may nest past the parser's stack
        raise ValueError("the output is JSON nested too deeply to score") from None


def _at(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise KeyError(part)
    return doc


def json_equal(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal as JSON: ``true`` is not ``1`` and ``false`` is not
    ``0`` (Python's ``==`` says they are), at any depth; ``1`` and ``1.0`` are the same number,
    and object keys compare regardless of order. Iterative, so any depth is fine."""
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if not (isinstance(x, bool) and isinstance(y, bool) and x is y):
                return False
        elif isinstance(x, dict) or isinstance(y, dict):
            if not (isinstance(x, dict) and isinstance(y, dict)) or x.keys() != y.keys():
                return False
            pending.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) or isinstance(y, list):
            if not (isinstance(x, list) and isinstance(y, list)) or len(x) != len(y):
                return False
            pending.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def _same(value: Any, expected: Any) -> bool:
    if json_equal(value, expected):
        return True
    if isinstance(expected, str):  # a JSON value written as text in a cases file
        try:
            return json_equal(value, json.loads(expected))
        except (ValueError, RecursionError):
            return False
    return False


def json_match(*, field: str | None = None, schema: str | None = None) -> BuiltinFn:
    """The output parses as JSON and: matches a JSON schema (``schema=file``), has ``expected``
    at a dotted path (``field=a.b``), or else equals ``expected``."""
    validator = _schema_validator(schema) if schema is not None else None

    def score(sample: Sample) -> Score:
        if sample.output is None:
            return _no_output()
        try:
            doc = parse_json_output(sample.output)
        except ValueError as exc:
            return _verdict(False, f"output is not JSON: {exc}")
        if validator is not None:
            problems = sorted(validator.iter_errors(doc), key=str)
            if problems:
                return _verdict(False, f"schema: {problems[0].message}")
            if field is None:
                return _verdict(True, "output matches the schema")
        if field is not None:
            try:
                value = _at(doc, field)
            except KeyError:
                return _verdict(False, f"output has no field {field!r}")
            ok = _same(value, sample.case.expected)
            return _verdict(ok, f"{field} = {json.dumps(value)[:200]}")
        ok = _same(doc, sample.case.expected)
        return _verdict(ok, "output JSON equals expected" if ok else "output JSON differs")

    return score


def _schema_validator(path: str) -> Any:
    try:
        import jsonschema
    except ImportError as exc:
        raise InvalidInput(
            "the json scorer's schema= option needs jsonschema; pip install 'tether[eval]'"
        ) from exc
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        cls = jsonschema.validators.validator_for(doc)
        cls.check_schema(doc)
    except (OSError, ValueError, jsonschema.SchemaError) as exc:
        raise InvalidInput(
            f"json scorer schema {path!r} is not a readable JSON schema: {exc}"
        ) from exc
    return cls(doc)


def normalize_tokens(text: str) -> list[str]:
    """SQuAD's normalisation: lower case, no punctuation, no articles, split on whitespace."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return text.split()


def token_f1(prediction: str, reference: str) -> float:
    """Token F1 of two texts after :func:`normalize_tokens` (both empty: 1.0)."""
    pred, ref = normalize_tokens(prediction), normalize_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1(sample: Sample) -> Score:
    """Token F1 between output and ``expected`` (a list: the best of its references)."""
    if sample.output is None:
        return _no_output()
    raw = sample.case.expected
    references = [_text(x) for x in raw] if isinstance(raw, list) else [_text(raw)]
    best = max(references, key=lambda r: token_f1(sample.output or "", r))
    value = token_f1(sample.output, best)
    return Score(value=value, explanation=f"token F1 {value:.3f} against {best[:120]!r}")


__all__ = [
    "contains",
    "exact",
    "f1",
    "includes_any",
    "json_equal",
    "json_match",
    "last_number",
    "normalize_tokens",
    "numeric",
    "parse_json_output",
    "regex",
    "token_f1",
]
