"""Batch cases: the case model, and the JSONL cases file validated in one pass, streamed in another.

A cases file is read twice, line by line, and never held in memory: :func:`scan_cases` validates
every line (so a bad line stops the batch before anything is submitted), counts the cases and
hashes the content; :func:`iter_cases` then streams the valid cases to the engine.

Each line is a JSON object::

    {"id": "q1", "input": "2+2", "agent": "calculator", "expected": "4", "grader": "exact"}
    {"id": "q2", "input": ["remember milk", "recall"], "expected": "milk", "grader": "contains"}

The ids derived from a case (its session and request ids) are in
:mod:`tether.producer.ops.batch.ids`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from tether.errors import InvalidId, InvalidInput, UnknownAgent
from tether.ids import validate_id
from tether.runs.contract import MAX_METADATA_BYTES

#: The one key of a spooled line that stands for a source row that could not be read (a
#: malformed CSV row, :mod:`tether.producer.ops.batch.sources`): its value is the row's problem.
INVALID_ROW_KEY = "\u0000invalid row"

#: How many bad lines an error message lists (all are counted).
MAX_REPORTED_PROBLEMS = 20
MAX_CASE_ID_CHARS = 256
MAX_TURNS = 1000
MAX_TAGS = 32
MAX_TAG_CHARS = 64


class Grader(StrEnum):
    """How a case's final output is compared with ``expected`` (the built-in scorers; see
    :mod:`tether.producer.ops.batch.scoring.builtin`)."""

    EXACT = "exact"  # output == expected (no normalisation)
    CONTAINS = "contains"  # expected is a substring of output
    REGEX = "regex"  # re.search(expected, output) finds a match
    INCLUDES_ANY = "includes-any"  # one of the strings of expected is in output
    NUMERIC = "numeric"  # the last number of output equals expected
    JSON = "json"  # output parses as JSON equal to expected
    F1 = "f1"  # token F1 of output and expected (passes at 1.0)


#: The suffix :func:`tether.producer.ops.batch.ids.case_session_id` gives an epoch or a retry.
_UNIT_SUFFIX = re.compile(r":e\d+(r\d+)?$")


class BatchCase(BaseModel):
    """One evaluation case (one line of a cases file)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str = Field(min_length=1, max_length=MAX_CASE_ID_CHARS)
    input: str | list[str]
    session_id: str | None = None
    agent: str | None = Field(default=None, min_length=1, max_length=128)
    expected: JsonValue = None
    grader: Grader = Grader.EXACT
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @pydantic.field_validator("id", mode="before")
    @classmethod
    def _int_id(cls, value: Any) -> Any:
        # integer ids are common in evaluation sets; they name the same case as their text
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @pydantic.field_validator("grader", mode="before")
    @classmethod
    def _grader(cls, value: Any) -> Any:
        names = [g.value for g in Grader]
        if value not in names:
            raise ValueError(f"grader must be one of {', '.join(names)}, got {value!r}")
        return Grader(value)

    @pydantic.field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not 1 <= len(tag) <= MAX_TAG_CHARS:
                raise ValueError(f"a tag must be 1 to {MAX_TAG_CHARS} characters, got {tag!r}")
        # a tag given twice is the tag once (else the case would count twice in its statistics)
        return list(dict.fromkeys(value))

    @pydantic.field_validator("input")
    @classmethod
    def _turns(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not 1 <= len(value) <= MAX_TURNS:
            raise ValueError(f"a multi-turn input needs 1 to {MAX_TURNS} strings")
        return value

    @pydantic.field_validator("session_id")
    @classmethod
    def _session(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            validate_id(value)
        except InvalidId as exc:  # pydantic reports ValueErrors with the field's name
            raise ValueError(str(exc)) from exc
        if _UNIT_SUFFIX.search(value):
            # the suffix a batch adds for an epoch or a retry: case "s:e1" would run in epoch 1
            # of the case naming session "s", both in one session
            raise ValueError(
                f"session id {value!r} ends like an epoch or retry's session (':e<n>' or "
                "':e<n>r<m>', which the batch adds to a case's session_id); choose another"
            )
        return value

    @pydantic.field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        if len(json.dumps(value)) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes of JSON")
        return value

    @pydantic.model_validator(mode="after")
    def _grading(self) -> BatchCase:
        if self.expected is None and "grader" in self.model_fields_set:
            raise ValueError("'grader' is given without 'expected'")
        if isinstance(self.expected, str) and self.grader is Grader.REGEX:
            try:
                re.compile(self.expected)
            except re.error as exc:
                raise ValueError(f"'expected' is not a valid regex: {exc}") from exc
        return self

    @property
    def turns(self) -> list[str]:
        """The inputs, in order (one for a single-turn case)."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


@dataclass(frozen=True)
class NumberedCase:
    """A valid case with its line number in the file (1-based)."""

    line: int
    case: BatchCase


class CasesInvalid(InvalidInput):
    """Some lines of a cases file are invalid; the batch did not start."""

    def __init__(
        self, path: Path, problems: list[tuple[int, str]], count: int, unit: str = "line"
    ) -> None:
        self.path = path
        self.problems = problems
        self.count = count
        lines = "\n".join(f"  {unit} {n}: {msg}" for n, msg in problems)
        more = f"\n  ... and {count - len(problems)} more" if count > len(problems) else ""
        super().__init__(
            f"{path}: {count} invalid {unit}(s); the batch was not started. Fix them, or pass "
            f"--skip-invalid (skip_invalid=True) to run the valid cases only:\n{lines}{more}"
        )


@dataclass
class CasesScan:
    """What a validation pass over a cases file found."""

    path: Path
    valid: int = 0
    invalid: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)
    sha256: str = ""
    #: lines whose id repeats an earlier line's (skipped with ``skip_invalid``)
    duplicate_lines: set[int] = field(default_factory=set)
    #: the agents the valid cases run (their own, or the default), each once
    agents: set[str] = field(default_factory=set)

    def add_problem(self, line: int, message: str) -> None:
        """Count a bad line (listing the first :data:`MAX_REPORTED_PROBLEMS`)."""
        self.invalid += 1
        if len(self.problems) < MAX_REPORTED_PROBLEMS:
            self.problems.append((line, message))


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else str(err["msg"]))
    return "; ".join(parts)


def parse_case_line(
    text: str,
    *,
    default_agent: str | None,
    max_input_bytes: int | None = None,
    regex_expected: bool = False,
) -> BatchCase:
    """Parse and validate one line; with ``regex_expected`` (the batch scores with the
    ``regex`` scorer), ``expected`` must compile as a regular expression.

    Raises:
        ValueError: with a message saying what is wrong (no line number).
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    except RecursionError:
        raise ValueError("nested too deeply to be a case (pass the input as text)") from None
    if not isinstance(doc, dict):
        raise ValueError(f"a case must be a JSON object, got {type(doc).__name__}")
    if INVALID_ROW_KEY in doc:  # a source row that could not be read (a malformed CSV row)
        raise ValueError(str(doc[INVALID_ROW_KEY]))
    try:
        case = BatchCase.model_validate(doc)
    except pydantic.ValidationError as exc:
        raise ValueError(_describe(exc)) from exc
    if case.agent is None and default_agent is None:
        raise ValueError("no agent: give 'agent' in the case or a default with --agent")
    if max_input_bytes is not None:
        for n, turn in enumerate(case.turns):
            size = len(turn.encode("utf-8", "surrogatepass"))
            if size > max_input_bytes:
                raise ValueError(
                    f"input turn {n} is {size} bytes, over the limit of {max_input_bytes} "
                    "(TETHER_MAX_INPUT_BYTES)"
                )
    if regex_expected and case.expected is not None:
        expected = case.expected
        pattern = expected if isinstance(expected, str) else json.dumps(expected)
        try:  # the pattern the regex scorer searches with
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"'expected' is not a valid regex (--scorer regex): {exc}") from None
    return case


def check_agents(wanted: set[str], known: frozenset[str]) -> None:
    """Refuse a batch naming an agent the workers do not know: every case of it would fail,
    and it is a typo to fix, not a batch to keep (nothing is submitted or written).

    Raises:
        UnknownAgent: naming the first unknown agent and the known ones.
    """
    unknown = sorted(wanted - known)
    if not unknown:
        return
    name = unknown[0] if len(unknown[0]) <= 60 else unknown[0][:60] + "..."
    more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
    raise UnknownAgent(
        f"unknown agent {name!r}{more}; known agents: {', '.join(sorted(known))}. Fix --agent "
        "or the cases' 'agent', or register it with TETHER_AGENT_MODULES (here and on the "
        "workers) or the 'tether.agents' entry point; nothing was submitted"
    )


def _id_hash(case_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(case_id.encode(), digest_size=8).digest(), "big")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as fh:
        yield from enumerate(fh, start=1)


def decode_line(raw: bytes, number: int) -> str:
    """A line of a cases file as text, stripped (a UTF-8 BOM opening the file is dropped).

    Raises:
        ValueError: the line is not UTF-8 (nothing is replaced: the case would not be the
            author's).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line); "
            "save the file as UTF-8"
        ) from None
    if number == 1:
        text = text.removeprefix("\ufeff")
    return text.strip()


def scan_cases(
    path: Path,
    *,
    default_agent: str | None,
    max_input_bytes: int | None = None,
    regex_expected: bool = False,
) -> CasesScan:
    """Validate every line of ``path`` (streaming) and hash its content; ``regex_expected``:
    see :func:`parse_case_line` (pass the same to :func:`iter_cases`).

    Ids are checked for uniqueness through 8-byte hashes kept in a compact array (8 bytes a
    case); a second pass names the lines of the duplicates, only when there are some.
    """
    scan = CasesScan(path)
    digest = hashlib.sha256()
    hashes = array("Q")
    for number, raw in _lines(path):
        digest.update(raw)
        try:
            text = decode_line(raw, number)
            if not text:
                continue
            case = parse_case_line(
                text,
                default_agent=default_agent,
                max_input_bytes=max_input_bytes,
                regex_expected=regex_expected,
            )
        except ValueError as exc:
            scan.add_problem(number, str(exc))
            continue
        scan.valid += 1
        hashes.append(_id_hash(case.id))
        agent = case.agent or default_agent
        if agent:  # always one: a case without either is invalid above
            scan.agents.add(agent)
    scan.sha256 = digest.hexdigest()
    ordered = sorted(hashes)
    duplicated = {a for a, b in itertools.pairwise(ordered) if a == b}
    if duplicated:
        _report_duplicates(
            scan,
            duplicated,
            default_agent=default_agent,
            max_input_bytes=max_input_bytes,
            regex_expected=regex_expected,
        )
    scan.problems.sort()
    return scan


def _report_duplicates(
    scan: CasesScan,
    duplicated: set[int],
    *,
    default_agent: str | None,
    max_input_bytes: int | None,
    regex_expected: bool,
) -> None:
    first_line: dict[int, int] = {}
    numbered = iter_cases(
        scan.path,
        default_agent=default_agent,
        max_input_bytes=max_input_bytes,
        regex_expected=regex_expected,
    )
    for number, case in ((n.line, n.case) for n in numbered):
        key = _id_hash(case.id)
        if key not in duplicated:
            continue
        if key in first_line:
            scan.valid -= 1
            scan.duplicate_lines.add(number)
            scan.add_problem(number, f"id {case.id!r} is already used on line {first_line[key]}")
        else:
            first_line[key] = number


def iter_cases(
    path: Path,
    *,
    default_agent: str | None,
    max_input_bytes: int | None = None,
    skip_lines: frozenset[int] | set[int] = frozenset(),
    regex_expected: bool = False,
) -> Iterator[NumberedCase]:
    """Stream the valid cases of ``path``.

    Lines that fail validation, and ``skip_lines`` (the duplicates :func:`scan_cases` found),
    are skipped; ``regex_expected`` must be what :func:`scan_cases` was given, so the same
    lines are valid.
    """
    for number, raw in _lines(path):
        if number in skip_lines:
            continue
        try:
            text = decode_line(raw, number)
            if not text:
                continue
            case = parse_case_line(
                text,
                default_agent=default_agent,
                max_input_bytes=max_input_bytes,
                regex_expected=regex_expected,
            )
        except ValueError:
            continue
        yield NumberedCase(number, case)


def spool_cases(cases: Iterable[BatchCase | Mapping[str, Any] | str], target: Path) -> None:
    """Write an iterable of cases (models, dicts or JSON lines) to a JSONL file, streaming."""
    with target.open("w", encoding="utf-8") as fh:
        for item in cases:
            if isinstance(item, BatchCase):
                line = item.model_dump_json(exclude_defaults=True)
            elif isinstance(item, str):
                line = item.strip()
            else:
                line = json.dumps(dict(item), ensure_ascii=False)
            fh.write(line.replace("\n", " ") + "\n")


__all__ = [
    "BatchCase",
    "CasesInvalid",
    "CasesScan",
    "Grader",
    "NumberedCase",
    "check_agents",
    "iter_cases",
    "parse_case_line",
    "scan_cases",
    "spool_cases",
]
