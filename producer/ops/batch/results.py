"""The results file of a batch: one JSON line per finished case, appended as cases finish.

Each line is written with one ``write`` and flushed at once, so killing the producer loses
nothing already finished (a machine crash may lose the last second: the file is fsynced at most
once a second, and on close). A line cut short by a kill is dropped when the batch resumes; that
case is then re-attached to its runs through their request ids, so it is not run twice.

The file also serves as the resume state: :meth:`ResultsFile.open` reads it back, streaming, and
keeps only 8-byte hashes of the finished case ids (a sorted compact array, searched by bisection).
An exclusive ``flock`` stops two producers from writing one file.
"""

from __future__ import annotations

import bisect
import fcntl
import hashlib
import logging
import os
import time
from array import array
from collections.abc import Callable, Collection
from pathlib import Path
from typing import IO, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, JsonValue

from tether.errors import InvalidInput
from tether.producer.ops.batch.scoring.base import ScoreRecord

#: Version 1: one line per case (status, output, passed by the case's grader, latency, tokens,
#: run ids). Version 2 (epochs and scorers) adds: epoch, attempt, tags, input, expected,
#: scores (one record per scorer), score, scorers, usage, error_kind. Version 1 lines read as
#: version 2 lines of epoch 0 without scores. Later version 2 lines also carry ``tenant`` (an
#: optional field, so builds that predate it keep reading them: unknown fields are kept); lines
#: written before it read with ``tenant`` None.
RESULT_SCHEMA_VERSION: Literal[2] = 2

log = logging.getLogger(__name__)

#: What a run's ``error_type`` says about who must act (the ``tether.errors`` tree).
ERROR_KINDS = ("usage", "data", "conflict", "infrastructure", "agent", "model")


def error_kind(error_type: str | None) -> str | None:
    """The kind of a run's error by its class in :mod:`tether.errors` (None: not one of ours)."""
    if error_type is None:
        return None
    from tether import errors

    cls = getattr(errors, error_type, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.TetherError)):
        return None
    for kind, base in (
        ("model", errors.ModelError),
        ("agent", errors.AgentError),
        ("infrastructure", errors.InfrastructureError),
        ("conflict", errors.ConflictError),
        ("data", errors.DataError),
        ("usage", errors.UsageError),
    ):
        if issubclass(cls, base):
            return kind
    return None


class RunUsage(BaseModel):
    """Tokens a case's runs spent (every turn summed)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class CaseResult(BaseModel):
    """One line of a results file: one epoch of one case.

    ``status`` is the status of the case's last run (``FAILED`` when a turn failed, which ends
    the case). ``output`` is the final output; ``outputs`` lists every turn's output for
    multi-turn cases. ``scores`` holds one record per scorer that applied (``value`` in [0, 1],
    ``passed``, ``explanation``, ``metadata``, or ``error`` for a scoring error), ``score`` their
    mean; ``passed`` is True when every scorer passed, False when one did not, errored, or the
    run failed, and None when no scorer applied. ``latency_ms`` is measured by the producer from
    the first submission to the last result. ``error_kind`` classifies ``error_type``
    (``infrastructure``, ``model``, ``agent``, ``usage``, ``conflict``, ``data``; ``None`` for
    an error type Tether does not know).
    """

    # fields this version does not know (added by a newer build) are kept, so a retry that
    # rewrites the file does not drop them
    model_config = ConfigDict(frozen=True, extra="allow")

    v: Literal[1, 2] = RESULT_SCHEMA_VERSION
    batch_id: str
    id: str
    line: int
    session_id: str
    agent: str
    status: str
    output: str | None = None
    outputs: list[str | None] | None = None
    passed: bool | None = None
    grader: str | None = None
    latency_ms: int = 0
    steps: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    """What the case's runs cost at the workers' ``TETHER_MODEL_PRICES`` (None: unpriced)."""
    turns: int = 0
    error_type: str | None = None
    error: str | None = None
    run_ids: list[str] = []
    metadata: dict[str, JsonValue] | None = None
    # version 2
    epoch: int = 0
    attempt: int = 0
    tags: list[str] | None = None
    input: str | list[str] | None = None
    expected: JsonValue = None
    scores: dict[str, ScoreRecord] | None = None
    score: float | None = None
    scorers: list[str] | None = None
    usage: RunUsage | None = None
    error_kind: str | None = None
    tenant: str | None = None
    """The tenant the case ran in (None: a line written before lines carried it). The console
    serves a report only of a file whose lines are its tenant's (docs/trust-model.md)."""

    @property
    def errored(self) -> bool:
        """The run failed (an infrastructure, model or agent error), as opposed to grading."""
        return self.error_type is not None or self.status in ("FAILED", "CANCELLED")

    @property
    def scoring_errors(self) -> int:
        """How many scorers failed on this case."""
        return sum(1 for r in (self.scores or {}).values() if r.error is not None)


#: Fields left out of a line when empty (``passed``, ``output`` and ``error`` stay, as null).
_OPTIONAL = (
    "outputs",
    "metadata",
    "grader",
    "tags",
    "input",
    "expected",
    "scores",
    "score",
    "scorers",
    "usage",
    "error_kind",
    "cost_usd",
    "tenant",
)


def never_ran(result: CaseResult) -> bool:
    """The line's run was refused before its agent ran (a usage error: an unknown agent, an
    invalid input), so it holds no outcome of the case."""
    return result.errored and (result.error_kind or error_kind(result.error_type)) == "usage"


def dump_line(result: CaseResult) -> bytes:
    """One results line: empty optional fields left out, a newline at the end."""
    empty = {n for n in _OPTIONAL if getattr(result, n) is None}
    return result.model_dump_json(exclude=empty).encode() + b"\n"


def case_key(case_id: str, epoch: int = 0) -> int:
    """The 8-byte hash a finished case (epoch) is remembered by."""
    text = case_id if epoch == 0 else f"{case_id}\0e{epoch}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def read_results(path: Path) -> list[CaseResult]:
    """Every complete line of a results file (a trailing partial line is ignored).

    Raises:
        InvalidInput: the file is missing, or a line is not a result line.
    """
    if not path.is_file():
        raise InvalidInput(f"results file {path} does not exist; pass the file a batch wrote")
    results = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n") or not raw.strip():
                continue
            try:
                results.append(CaseResult.model_validate_json(raw))
            except pydantic.ValidationError as exc:
                raise InvalidInput(f"{path} line {number} is not a batch result line") from exc
    return results


class ResultsFile:
    """Append-only results of one batch, with the set of cases it already holds.

    Args:
        path: the results JSONL file (created when missing).
        batch_id: lines of any other batch make :meth:`open` refuse the file.
        fsync_interval_s: fsync at most this often (0: after every line).
        scorers: the batch's scorer names (``--scorer`` values); a line scored by others (its
            ``scorers`` less its own ``grader``) makes :meth:`open` refuse the file, since one
            summary would mix them. None: not checked.
    """

    def __init__(
        self,
        path: Path,
        batch_id: str,
        *,
        fsync_interval_s: float = 1.0,
        scorers: Collection[str] | None = None,
    ) -> None:
        self.path = path
        self.batch_id = batch_id
        self.scorers = None if scorers is None else frozenset(scorers)
        self.fsync_interval_s = fsync_interval_s
        self._fh: IO[bytes] | None = None
        self._done = array("Q")
        self._last_sync = time.monotonic()
        self.dropped_partial_line = False
        self._created = False
        self._appended = 0
        #: The batch whose lines :meth:`open` dropped: every one a run that never ran.
        self.replaced: str | None = None

    def open(self, on_existing: Callable[[CaseResult], None]) -> int:
        """Lock the file, read back its results (calling ``on_existing`` for each) and drop a
        trailing partial line. Returns how many results it holds.

        Raises:
            InvalidInput: another process holds the file, a line is not a result, or a line
                belongs to another batch or was scored by other scorers.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._created = not self.path.exists()
        fh = self.path.open("a+b")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            raise InvalidInput(
                f"results file {self.path} is being written by another batch process; "
                "wait for it to finish or choose another --out"
            ) from exc
        try:
            self._read_back(fh, on_existing)
        except BaseException:
            fh.close()
            raise
        self._fh = fh
        return len(self._done)

    def _read_back(self, fh: IO[bytes], on_existing: Callable[[CaseResult], None]) -> None:
        fh.seek(0)
        good_end = 0
        keys = array("Q")
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):  # cut short by a kill: the case is not finished
                self.dropped_partial_line = True
                break
            good_end += len(raw)
            if not raw.strip():
                continue
            try:
                result = CaseResult.model_validate_json(raw)
            except pydantic.ValidationError as exc:
                raise InvalidInput(
                    f"{self.path} line {number} is not a batch result line; "
                    "choose another --out for this batch"
                ) from exc
            if result.batch_id != self.batch_id:
                if self._replace_refused(fh, result.batch_id):
                    return
                raise InvalidInput(
                    f"{self.path} holds results of batch {result.batch_id!r}, not "
                    f"{self.batch_id!r}; pass --batch-id {result.batch_id} to resume that batch, "
                    "or choose another --out"
                )
            self._check_scorers(result, number)
            keys.append(case_key(result.id, result.epoch))
            on_existing(result)
        if self.dropped_partial_line:
            fh.truncate(good_end)
        self._done = array("Q", sorted(keys))

    def _replace_refused(self, fh: IO[bytes], other: str) -> bool:
        """Empty the file when it holds only runs of batch ``other`` that never ran (each was
        refused: an unknown agent, an invalid input), and say so: nothing in it is worth
        resuming, and it locked the corrected command out ("holds results of batch ...")."""
        fh.seek(0)
        refused: set[str] = set()
        for raw in fh:
            if not raw.strip() or not raw.endswith(b"\n"):
                continue
            try:
                line = CaseResult.model_validate_json(raw)
            except pydantic.ValidationError:
                return False
            if line.batch_id != other or not never_ran(line):
                return False
            refused.add(line.error_type or line.status)
        fh.seek(0)
        fh.truncate(0)
        self.replaced = other
        log.warning(
            "%s held only runs of batch %s that never ran (%s): replaced by batch %s",
            self.path,
            other,
            ", ".join(sorted(refused)),
            self.batch_id,
        )
        return True

    def _check_scorers(self, result: CaseResult, number: int) -> None:
        """Refuse a line scored by other scorers than this run's: resuming (or adding epochs)
        would put both in one summary, each mean over a different part of the cases."""
        if self.scorers is None:
            return
        theirs = frozenset(n for n in result.scorers or () if n != result.grader)
        if theirs == self.scorers:
            return

        def named(names: frozenset[str]) -> str:
            if not names:
                return "no --scorer (each case's grader)"
            return " ".join(f"--scorer {n}" for n in sorted(names))

        raise InvalidInput(
            f"{self.path} line {number} (case {result.id!r}, epoch {result.epoch}) was scored "
            f"with {named(theirs)}, but this run scores with {named(self.scorers)}; "
            "resuming would mix scorers in one summary. Pass the scorers of the file to resume "
            "it, or choose another --out to run the batch with these scorers"
        )

    def holds(self, case_id: str, epoch: int = 0) -> bool:
        """True when the file already has a result for epoch ``epoch`` of ``case_id``."""
        key = case_key(case_id, epoch)
        index = bisect.bisect_left(self._done, key)
        return index < len(self._done) and self._done[index] == key

    def append(self, result: CaseResult) -> None:
        """Write one result line and flush it to the OS."""
        if self._fh is None:
            raise RuntimeError("ResultsFile.open() was not called")
        # optional fields are left out when empty; passed/output/error stay (null) for clarity
        self._fh.write(dump_line(result))
        self._fh.flush()
        self._appended += 1
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_interval_s:
            os.fsync(self._fh.fileno())
            self._last_sync = now

    def close(self) -> None:
        """Flush, fsync and unlock; a file this batch created and never wrote a line to is
        removed (a batch that could not start, or was stopped before its first case ended,
        leaves no empty results file behind)."""
        if self._fh is not None:
            self._fh.flush()
            if self._created and not self._appended and self._fh.tell() == 0:
                self.path.unlink(missing_ok=True)  # still locked: no other batch opened it
            else:
                os.fsync(self._fh.fileno())
            self._fh.close()  # closing releases the flock
            self._fh = None


__all__ = [
    "ERROR_KINDS",
    "RESULT_SCHEMA_VERSION",
    "CaseResult",
    "ResultsFile",
    "RunUsage",
    "case_key",
    "dump_line",
    "error_kind",
    "never_ran",
    "read_results",
]
