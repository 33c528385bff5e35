"""Times the garbage collector's pauses in a process, for :mod:`bench.tail_profile`.

:func:`install` adds a ``gc.callbacks`` hook that notes every full (generation 2) collection and
every collection of at least :data:`MIN_LOGGED_MS`, one JSON line each (pid, generation, start on
the wall clock, duration, objects collected), in ``<dir>/gc-<pid>.jsonl``: the wall clock, so
pauses of a worker's processes line up with the runs the benchmark client timed.

A worker installs it when this module is one of its ``TETHER_AGENT_MODULES`` and
``BENCH_GC_LOG_DIR`` is set (the registry imports agent modules in the worker's main process,
before the pool forks, so every pool child inherits the hook). It registers no agent.
"""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path
from typing import Any, TextIO

#: Collections of younger generations shorter than this are counted, not logged one by one.
MIN_LOGGED_MS = 1.0
ENV_DIR = "BENCH_GC_LOG_DIR"

TETHER_AGENTS: dict[str, Any] = {}


class _Probe:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._start_ns = 0
        self._wall_start = 0.0
        self._out: TextIO | None = None
        self._pid = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start_ns = time.perf_counter_ns()
            self._wall_start = time.time()
            return
        elapsed_ms = (time.perf_counter_ns() - self._start_ns) / 1e6
        generation = info.get("generation", 0)
        if generation < 2 and elapsed_ms < MIN_LOGGED_MS:
            return
        record = {
            "pid": os.getpid(),
            "gen": generation,
            "t0": self._wall_start,
            "ms": round(elapsed_ms, 3),
            "collected": info.get("collected", 0),
        }
        self._file().write(json.dumps(record) + "\n")

    def _file(self) -> TextIO:
        if self._out is None or self._pid != os.getpid():  # a forked child writes its own file
            self._pid = os.getpid()
            path = self.directory / f"gc-{self._pid}.jsonl"
            self._out = path.open("a", buffering=1)  # line-buffered: a child may exit abruptly
        return self._out


def install(directory: Path) -> None:
    """Log this process's (and its forked children's) collections under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    if not any(isinstance(cb, _Probe) for cb in gc.callbacks):
        gc.callbacks.append(_Probe(directory))


def read_pauses(directory: Path) -> list[dict[str, Any]]:
    """Every logged collection under ``directory``, oldest first."""
    pauses: list[dict[str, Any]] = []
    for path in sorted(directory.glob("gc-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                pauses.append(json.loads(line))
    return sorted(pauses, key=lambda p: p["t0"])


if os.environ.get(ENV_DIR):  # only in a process the tail profile started with it set
    install(Path(os.environ[ENV_DIR]))
