"""The outcome: :class:`SoakReport` holds what one soak measured and the verdict, written as
``soak.json`` and ``soak.md`` (:func:`write_report`, :func:`format_markdown`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.soak.audit import Audit
from bench.soak.config import MIB, SoakConfig
from bench.soak.kills import Kill
from bench.soak.sampling import STREAM_KINDS, Sample


@dataclass
class SoakReport:
    """Everything one soak measured, and the verdict."""

    config: SoakConfig
    checkpoints: list[Sample]
    series: list[Sample]
    kills: list[Kill]
    audit: Audit
    duration_s: float
    stream_repairs: int = 0

    @property
    def memory_ratio(self) -> float:
        first, last = self.checkpoints[0], self.checkpoints[-1]
        return last.used_memory / first.used_memory if first.used_memory else float("inf")

    @property
    def keys_ratio(self) -> float:
        first, last = self.checkpoints[0], self.checkpoints[-1]
        return last.keys / first.keys if first.keys else float("inf")

    @property
    def windows_filled_at_first_checkpoint(self) -> bool:
        """Whether the first checkpoint came after the time-based windows filled (else the
        memory ratio compares a filling Redis with a full one)."""
        window_s = max(self.config.result_ttl_s, self.config.stream_retention_s)
        return self.checkpoints[0].elapsed_s >= window_s

    @property
    def memory_ok(self) -> bool:
        return self.memory_ratio <= self.config.max_memory_ratio

    @property
    def s3_ok(self) -> bool:
        return self.audit.s3_ok(self.config.sessions, len(self.kills))

    @property
    def ok(self) -> bool:
        return self.memory_ok and self.audit.runs_ok and self.s3_ok

    def failures(self) -> list[str]:
        out = []
        if not self.memory_ok:
            out.append(
                f"Redis memory at 100% is {self.memory_ratio:.2f}x the memory at 10% "
                f"(limit {self.config.max_memory_ratio}x)"
            )
        if not self.audit.runs_ok:
            a = self.audit
            out.append(
                f"runs: {a.unresolved} unresolved, {a.lost} lost, {a.duplicated} duplicated, "
                f"{a.out_of_order} sessions out of order, statuses {a.statuses}"
            )
        if not self.s3_ok:
            out.append(
                f"S3: {self.audit.s3_objects_found} objects found, "
                f"{self.audit.s3_objects_expected} expected; "
                f"{len(self.audit.s3_sessions_bad)} sessions unexplained, "
                f"{len(self.audit.s3_stray)} stray objects"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "checkpoints": [_sample_json(s) for s in self.checkpoints],
            "series": [_sample_json(s) for s in self.series],
            "kills": [asdict(k) for k in self.kills],
            "audit": asdict(self.audit),
            "duration_s": round(self.duration_s, 1),
            "stream_repairs": self.stream_repairs,
            "memory_ratio": round(self.memory_ratio, 3),
            "keys_ratio": round(self.keys_ratio, 3),
            "windows_filled_at_first_checkpoint": self.windows_filled_at_first_checkpoint,
            "ok": self.ok,
            "failures": self.failures(),
        }


def _sample_json(sample: Sample) -> dict[str, Any]:
    out = asdict(sample)
    out["runs_per_s"] = round(sample.runs_per_s, 1)
    return out


def format_markdown(report: SoakReport, command: str) -> str:
    """``soak.md``: the checkpoint table, the census, and the verdict."""
    c = asdict(report.config)
    a = report.audit
    rate = c["rate_per_s"]
    offered = f"offered at {rate:g} runs/s" if rate else "offered as fast as the workers take"
    lines = [
        f"# Soak: {c['runs']:,} runs over {c['sessions']:,} sessions",
        "",
        f"Command: `{command}`. {c['workers']} prefork workers (`-c {c['concurrency']}`), "
        f"window {c['window']} unresolved runs, {offered}, "
        f"`TETHER_RESULT_TTL_S={c['result_ttl_s']}`, "
        f"`TETHER_STREAM_RETENTION_S={c['stream_retention_s']}`, a worker SIGKILLed every "
        f"{c['kill_every_s']:g} s ({len(report.kills)} kills). At each checkpoint submitting "
        "pauses until every submitted run resolved, then Redis is sampled (the settle).",
        "",
        "| checkpoint | runs | elapsed | used_memory | dataset | keys | worker RSS | runs/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in report.checkpoints:
        rss = " + ".join(f"{v / 1024:.0f}" for v in s.worker_rss_kib.values()) or "-"
        lines.append(
            f"| {s.label} | {s.runs_done:,} | {s.elapsed_s:.0f} s | {s.used_memory / MIB:.2f} MiB "
            f"| {s.used_memory_dataset / MIB:.2f} MiB | {s.keys:,} | {rss} MiB "
            f"| {s.runs_per_s:.1f} |"
        )
    caveat = (
        ""
        if report.windows_filled_at_first_checkpoint
        else " (the 10% checkpoint came before the 60 s windows filled: not yet meaningful)"
    )
    lines += [
        "",
        f"- Redis memory 100% / 10%: **{report.memory_ratio:.2f}x** "
        f"(limit {c['max_memory_ratio']}x){caveat}; keys 100% / 10%: {report.keys_ratio:.2f}x",
        f"- S3 objects: expected {a.s3_objects_expected:,} ({a.s3_heads:,} heads found for "
        f"{c['sessions']:,} sessions + {a.s3_segments_expected:,} segments by the archiving "
        f"rule), found {a.s3_objects_found:,}; sessions off the rule because of a kill: "
        f"{len(a.s3_sessions_off_rule)}; unexplained: {len(a.s3_sessions_bad)}; stray objects: "
        f"{len(a.s3_stray)}",
        f"- Runs: {a.resolved:,} resolved of {c['runs']:,}, statuses {a.statuses}, "
        f"{a.retried} needed more than one attempt; lost {a.lost}, duplicated {a.duplicated}, "
        f"sessions out of order {a.out_of_order}",
        f"- Kills: {len(report.kills)} (restart times "
        f"{[k.restart_s for k in report.kills]} s); live streams repaired: "
        f"{report.stream_repairs}",
        f"- Wall time {report.duration_s:.0f} s; verdict: **{'PASS' if report.ok else 'FAIL'}**"
        + ("" if report.ok else " (" + "; ".join(report.failures()) + ")"),
        "",
        "## Key census (keys / MiB / stream entries)",
        "",
    ]
    kinds = sorted({k for s in report.checkpoints for k in s.census})
    lines.append("| kind | " + " | ".join(s.label for s in report.checkpoints) + " |")
    lines.append("|---|" + "---|" * len(report.checkpoints))
    for kind in kinds:
        cells = []
        for s in report.checkpoints:
            k = s.census.get(kind)
            if k is None:
                cells.append("-")
                continue
            entries = f" / {k.entries:,} entries" if kind in STREAM_KINDS else ""
            cells.append(f"{k.keys:,} / {k.bytes / MIB:.2f}{entries}")
        lines.append(f"| `{kind}` | " + " | ".join(cells) + " |")
    if report.series:
        lines += [
            "",
            f"## Every {c['sample_every_s']:g} s",
            "",
            "| elapsed | runs | used_memory | dataset | client buffers | keys |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {s.elapsed_s:.0f} s | {s.runs_done:,} | {s.used_memory / MIB:.2f} MiB "
            f"| {s.used_memory_dataset / MIB:.2f} MiB | {s.mem_clients_normal / MIB:.2f} MiB "
            f"| {s.keys:,} |"
            for s in report.series
        ]
    return "\n".join(lines) + "\n"


def write_report(report: SoakReport, out: Path, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {"command": command, **report.to_json()}
    (out / "soak.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / "soak.md").write_text(format_markdown(report, command))
