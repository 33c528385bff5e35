"""One soak from start to verdict: start the stack, submit the runs under kills with a settle
and a sample at each checkpoint, then audit (:func:`run_soak`)."""

from __future__ import annotations

import random
import secrets
import sys
import time
from pathlib import Path

from bench.soak.audit import audit
from bench.soak.config import MIB, SoakConfig
from bench.soak.kills import Killer
from bench.soak.report import SoakReport
from bench.soak.sampling import Sample, Sampler, take_sample
from bench.soak.stack import open_soak_stack
from bench.soak.workload import Plan, Tracker, submit


def run_soak(config: SoakConfig, log_dir: Path) -> SoakReport:
    """Start a stack, run the workload under kills, sample, audit; see the bench.soak docstring."""
    config.check()
    rng = random.Random(config.seed)
    prefix = f"soak-{secrets.token_hex(3)}"
    plan = Plan(prefix, [f"{prefix}-{n:05d}" for n in range(config.sessions)], config.runs)
    with open_soak_stack(config, log_dir) as stack:
        tracker = Tracker(config.window)
        started = time.monotonic()
        killer = Killer(stack.workers, config.kill_every_s, config.max_kills, rng, started)
        sampler = Sampler(stack, tracker, config.sample_every_s, started)
        killer.start()
        sampler.start()
        checkpoints: list[Sample] = []
        submitted = 0
        try:
            for fraction in config.checkpoints:
                target = max(1, round(config.runs * fraction))
                # the settle: submitting pauses at the checkpoint until the window drained, so
                # every checkpoint is the same state (nothing queued or running, the last
                # retention window of runs in Redis) at exactly its number of runs
                reached = submit(
                    stack,
                    plan,
                    tracker,
                    range(submitted, target),
                    config.stall_timeout_s,
                    config.rate_per_s,
                )
                submitted = target
                reached = reached and tracker.wait_for(target, config.stall_timeout_s)
                if fraction >= 1.0 or not reached:
                    killer.finish()  # measure the end with every worker serving
                checkpoints.append(
                    take_sample(
                        stack,
                        f"{fraction:.0%}",
                        tracker.completed,
                        started,
                        with_census=True,
                    )
                )
                _progress(checkpoints[-1])
                if not reached:
                    break
        finally:
            killer.finish()
            sampler.stop.set()
            sampler.join()
        duration_s = time.monotonic() - started
        result = audit(stack, plan, tracker, config.archive_batch_events)
        repairs = sum(
            w.log_path.read_text(errors="replace").count("repairing the live stream")
            for w in stack.workers
            if w.log_path.exists()
        )
    return SoakReport(
        config=config,
        checkpoints=checkpoints,
        series=sampler.samples,
        kills=killer.kills,
        audit=result,
        duration_s=duration_s,
        stream_repairs=repairs,
    )


def _progress(sample: Sample) -> None:
    print(
        f"[soak] {sample.label}: {sample.runs_done} runs in {sample.elapsed_s:.0f} s "
        f"({sample.runs_per_s:.1f}/s), used_memory {sample.used_memory / MIB:.1f} MiB, "
        f"{sample.keys} keys",
        file=sys.stderr,
        flush=True,
    )
