"""``python -m bench.soak``: many runs over many sessions with retention on, under worker kills.

    python -m bench.soak                          # full size: 100,000 runs over 5,000 sessions
    python -m bench.soak --runs 5000 --sessions 500 --kill-every-s 20

Issue #19's soak. A private stack (redis-server, moto S3 in its own process, ``--workers``
prefork workers) runs with retention on: ``TETHER_RESULT_TTL_S`` and
``TETHER_STREAM_RETENTION_S`` at 60 s. One producer submits ``remember <fact>`` runs of the
``notes`` agent (deterministic, no compaction) round robin over the sessions, keeping at most
``--window`` runs unresolved, while a killer SIGKILLs a worker every ``--kill-every-s`` seconds
(never the last one serving) and restarts it.

Measured at 10%, 50% and 100% of the runs resolved: Redis ``used_memory`` and
``used_memory_dataset``, ``DBSIZE``, a census of the keys by kind (count, ``MEMORY USAGE``,
stream entries), each worker's RSS (main process plus pool children) and the throughput. At
each checkpoint submitting pauses until every submitted run resolved (a few seconds: one
window), then the sample is taken: every checkpoint is then the same state, nothing queued or
running and the last retention window of runs in Redis, whatever the checkpoint. A lighter
sample (memory, key count) is taken every ``--sample-every-s`` while the soak goes on.

Then the audit: every handle resolved COMPLETED; each session's head (read from S3, as the
offline reader does) remembers exactly its facts, once each, in submission order; and the bucket
holds exactly the expected objects: one head per session plus the archive segments that the
archiving rule (:func:`tether.persistence.saving.should_archive`) cuts at the session's commit
points (the ``applied`` records of its head). A worker killed between a head PUT and the segment
PUT that follows leaves that outbox to the next writer, which archives it together with its own
run as one larger segment (or, after the session's last run, leaves it in the head): such
sessions are listed and must not outnumber the kills.

Writes ``soak.json`` and ``soak.md`` to ``--out`` and exits 1 when a condition fails: Redis
memory at 100% above ``--max-memory-ratio`` (1.2) times the memory at 10%, a run lost,
duplicated, reordered or not completed, or an S3 object count that the rule does not explain.
The memory ratio only means something once the 10% checkpoint comes after the 60 s windows
filled (about 10,000 runs at full size); the report says when it did not.

The package, one job a module: :mod:`~bench.soak.config` (the options and constants),
:mod:`~bench.soak.stack` (the private stack), :mod:`~bench.soak.kills` (the killer),
:mod:`~bench.soak.workload` (the runs and their handles), :mod:`~bench.soak.sampling` (the
Redis and RSS samples), :mod:`~bench.soak.audit` (the end-state verdict),
:mod:`~bench.soak.report` (``soak.json`` and ``soak.md``), :mod:`~bench.soak.run` (one soak from
start to audit) and :mod:`~bench.soak.__main__` (the command line).
"""

from __future__ import annotations

from bench.soak.config import SoakConfig
from bench.soak.report import SoakReport, format_markdown, write_report
from bench.soak.run import run_soak
from bench.soak.sampling import key_kind

__all__ = [
    "SoakConfig",
    "SoakReport",
    "format_markdown",
    "key_kind",
    "run_soak",
    "write_report",
]
