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
import os
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, JsonValue

from tether.errors import InvalidInput

RESULT_SCHEMA_VERSION = 1


class CaseResult(BaseModel):
    """One line of a results file.

    ``status`` is the status of the case's last run (``FAILED`` when a turn failed, which ends
    the case). ``output`` is the final output; ``outputs`` lists every turn's output for
    multi-turn cases. ``passed`` is None when the case has no ``expected`` value.
    ``latency_ms`` is measured by the producer from the first submission to the last result.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
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


def case_key(case_id: str) -> int:
    """The 8-byte hash a finished case is remembered by."""
    return int.from_bytes(hashlib.blake2b(case_id.encode(), digest_size=8).digest(), "big")


class ResultsFile:
    """Append-only results of one batch, with the set of cases it already holds.

    Args:
        path: the results JSONL file (created when missing).
        batch_id: lines of any other batch make :meth:`open` refuse the file.
        fsync_interval_s: fsync at most this often (0: after every line).
    """

    def __init__(self, path: Path, batch_id: str, *, fsync_interval_s: float = 1.0) -> None:
        self.path = path
        self.batch_id = batch_id
        self.fsync_interval_s = fsync_interval_s
        self._fh: IO[bytes] | None = None
        self._done = array("Q")
        self._last_sync = time.monotonic()
        self.dropped_partial_line = False

    def open(self, on_existing: Callable[[CaseResult], None]) -> int:
        """Lock the file, read back its results (calling ``on_existing`` for each) and drop a
        trailing partial line. Returns how many results it holds.

        Raises:
            InvalidInput: another process holds the file, a line is not a result, or a line
                belongs to another batch.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
                raise InvalidInput(
                    f"{self.path} holds results of batch {result.batch_id!r}, not "
                    f"{self.batch_id!r}; pass --batch-id {result.batch_id} to resume that batch, "
                    "or choose another --out"
                )
            keys.append(case_key(result.id))
            on_existing(result)
        if self.dropped_partial_line:
            fh.truncate(good_end)
        self._done = array("Q", sorted(keys))

    def holds(self, case_id: str) -> bool:
        """True when the file already has a result for ``case_id``."""
        key = case_key(case_id)
        index = bisect.bisect_left(self._done, key)
        return index < len(self._done) and self._done[index] == key

    def append(self, result: CaseResult) -> None:
        """Write one result line and flush it to the OS."""
        if self._fh is None:
            raise RuntimeError("ResultsFile.open() was not called")
        # optional fields are left out when empty; passed/output/error stay (null) for clarity
        empty = {n for n in ("outputs", "metadata", "grader") if getattr(result, n) is None}
        self._fh.write(result.model_dump_json(exclude=empty).encode() + b"\n")
        self._fh.flush()
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_interval_s:
            os.fsync(self._fh.fileno())
            self._last_sync = now

    def close(self) -> None:
        """Flush, fsync and unlock."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()  # closing releases the flock
            self._fh = None


__all__ = ["CaseResult", "ResultsFile", "case_key"]
