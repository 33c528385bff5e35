"""What one soak does: :class:`SoakConfig` (the command-line options) with the check that
refuses sizes the audit cannot judge, and the constants the other modules share (the tenant,
the agent, its ``remember`` prefix, the key namespace)."""

from __future__ import annotations

from dataclasses import dataclass

from tether.core.snapshot import MAX_APPLIED_RECORDS
from tether.persistence.saving import ARCHIVE_BATCH_EVENTS

TENANT = "default"
NAMESPACE = "tether"
AGENT = "notes"
REMEMBER = "remember "
MIB = 1024 * 1024


@dataclass(frozen=True)
class SoakConfig:
    """What one soak does (the command-line options)."""

    runs: int = 100_000
    sessions: int = 5_000
    kill_every_s: float = 60.0
    max_kills: int | None = None
    window: int = 300
    workers: int = 2
    # 2 pool children per worker: a run mostly waits on S3 and Redis, and 2 x 2 measured ~25%
    # more runs/s than 2 x 1 on 2 CPUs (moto's own CPU is the first bottleneck)
    concurrency: int = 2
    result_ttl_s: int = 60
    stream_retention_s: int = 60
    archive_batch_events: int = ARCHIVE_BATCH_EVENTS
    sample_every_s: float = 30.0
    checkpoints: tuple[float, ...] = (0.1, 0.5, 1.0)
    max_memory_ratio: float = 1.2
    rate_per_s: float | None = 30.0
    """Runs offered per second (None: as fast as the workers take them). Everything per run
    lives one TTL, so Redis holds about ``rate x TTL`` runs' worth: a fixed offered rate makes
    the checkpoints compare like with like (30/s is below what 2 CPUs sustain under kills)."""
    stall_timeout_s: float = 300.0
    """Give up waiting when no run resolved for this long (the rest count as unresolved)."""
    seed: int = 19

    def check(self) -> None:
        """Refuse sizes the audit cannot judge."""
        if self.runs < 1 or self.sessions < 1 or self.runs % self.sessions:
            raise SystemExit(f"--runs {self.runs} must be a positive multiple of --sessions")
        if self.runs // self.sessions > MAX_APPLIED_RECORDS:
            # the expected S3 count is derived from the heads' applied records, which keep the
            # newest MAX_APPLIED_RECORDS runs only
            raise SystemExit(
                f"at most {MAX_APPLIED_RECORDS} runs per session; use --sessions >= "
                f"{-(-self.runs // MAX_APPLIED_RECORDS)}"
            )
        if self.rate_per_s is not None and self.rate_per_s <= 0:
            raise SystemExit("--rate-per-s must be > 0 (omit it for as fast as possible)")
        if self.window < 1 or self.workers < 1 or self.concurrency < 1:
            raise SystemExit("--window, --workers and --concurrency must be >= 1")
