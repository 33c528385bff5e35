"""Benchmark output: a markdown table, a JSON document, and the latency plot (PNG).

The JSON holds every number of the table plus the machine (CPU count, platform, Python, package
versions, Redis version), the exact command, the date and the git commit; the markdown is what
the README quotes.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.core import Measure, Stats, Target
from tether.persistence.redis_conn import redis_from_url

PACKAGES = ("tether", "celery", "kombu", "redis", "boto3", "botocore", "moto", "pydantic")
MD_NAME, JSON_NAME, PLOT_NAME = "latest.md", "latest.json", "latency.png"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            cwd=Path(__file__).resolve().parent.parent,
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        return None
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(redis_url: str) -> dict[str, Any]:
    """The machine and software the numbers come from."""
    client = redis_from_url(redis_url)
    try:
        redis_version = str(client.info("server").get("redis_version", "unknown"))
    finally:
        client.close()
    return host_info((*PACKAGES, "matplotlib"), redis_server=redis_version)


def host_info(packages: Sequence[str], **services: str) -> dict[str, Any]:
    """The machine, the versions of ``packages`` and the commit (no service asked: benchmarks
    that start none, such as :mod:`bench.cli_startup`, use it as it is)."""
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_gib": _mem_total_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": {name: _version(name) for name in packages},
        **services,
        "git_commit": commit + ("+dirty" if commit and dirty else ""),
        "load_average_1m_end": round(os.getloadavg()[0], 2),
    }


def command_line(argv: list[str] | None = None, *, module: str = "bench") -> str:
    """The command as typed (``python -m bench ...``, or ``python -m <module> ...``): the
    reproduce line every result file records."""
    return " ".join([f"python -m {module}", *(sys.argv[1:] if argv is None else argv)])


def _fmt(value: float, unit: str) -> str:
    if unit in ("runs/s", "req/s"):
        return f"{value:,.0f}"
    if unit == "MiB":
        return f"{value:.1f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _cell(stats: Stats | None, unit: str) -> str:
    if stats is None:
        return "-"
    if stats.n == 1:
        return f"{_fmt(stats.median, unit)} {unit}"
    return f"{_fmt(stats.median, unit)} / {_fmt(stats.p95, unit)} {unit}"


def _value(m: Measure) -> str:
    value = f"{m.value:.2f}x" if m.value_unit == "x" else f"{m.value:.2f} {m.value_unit}"
    tail = m.tail_value if m.tail_target is not None else None
    return value if tail is None else f"{value} (p{m.tail_percentile} {tail:.2f}x)"


def _target_json(target: Target | None) -> dict[str, Any] | None:
    if target is None:
        return None
    return {"op": target.op, "value": target.value, "unit": target.unit, "text": str(target)}


def _verdict(m: Measure) -> str:
    met = m.met
    return "info" if met is None else ("met" if met else "**missed**")


def header(meta: dict[str, Any], software: str) -> list[str]:
    """The first lines of a result page: date, command, commit, the machine (``software``: what
    ran on it) and its load at the start and the end."""
    machine = meta["machine"]
    return [
        f"Date: {meta['date']} · command: `{meta['command']}` · commit {machine['git_commit']}",
        "",
        f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), {software}. "
        f"Load average (1 min) at start / end: {meta.get('load_average_1m_start', '?')} / "
        f"{machine.get('load_average_1m_end', '?')}.",
        "",
    ]


def markdown(measures: list[Measure], meta: dict[str, Any]) -> str:
    """The result table with its date, command and machine, and one note per measure."""
    machine = meta["machine"]
    pkgs = machine["packages"]
    lines = [
        *header(
            meta,
            f"{machine['mem_total_gib']} GiB, {machine['platform']}; Python {machine['python']}; "
            f"redis-server {machine['redis_server']}; moto {pkgs['moto']} (S3 over HTTP, own "
            f"process); celery {pkgs['celery']}, redis-py {pkgs['redis']}, "
            f"boto3 {pkgs['boto3']}",
        ),
        "Cells are median / p95 (one number: a single pass). Every baseline ran in the same "
        "run, on the same Redis and S3 endpoint.",
        "",
        "| id | measure | Tether | baseline | result | target | |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in measures:
        lines.append(
            f"| {m.id} | {m.name} | {_cell(m.tether, m.unit)} | {_cell(m.baseline, m.unit)} | "
            f"{_value(m)} | {m.target_text} | {_verdict(m)} |"
        )
    lines.append("")
    for m in measures:
        lines.append(
            f"- **{m.id}**: result = {m.value_of}"
            + (f"; baseline = {m.baseline_name}" if m.baseline_name else "")
            + f". {m.note}."
        )
    p1 = next((m for m in measures if m.id == "P1"), None)
    if p1 is not None:
        lines.append(_requests_line(p1))
    errors = meta.get("errors") or {}
    for measure_id, error in errors.items():
        lines.append(f"- **{measure_id} failed**: {error}")
    return "\n".join(lines) + "\n"


def _requests_line(p1: Measure) -> str:
    """Per-run Redis commands and S3 requests of both sides (P1's counting phase)."""
    parts = []
    for side in ("tether", "hand-written"):
        prefix = f"{side} per run: "
        ops = {k[len(prefix) :]: v for k, v in p1.extra.items() if k.startswith(prefix)}
        if not ops:
            continue
        s3 = ", ".join(
            f"{k[3:]} {v:g}" for k, v in ops.items() if k.startswith("s3 ") and k != "s3 requests"
        )
        redis_ops = [
            (k[6:], v) for k, v in ops.items() if k.startswith("redis ") and k != "redis commands"
        ]
        top = sorted(redis_ops, key=lambda kv: -float(kv[1]))[:6]
        sent = [
            (k[5:], v) for k, v in ops.items() if k.startswith("sent ") and k != "sent commands"
        ]
        top_sent = sorted(
            (kv for kv in sent if kv[0] != "commands" and not kv[0].startswith("tether ")),
            key=lambda kv: -float(kv[1]),
        )
        top_sent = top_sent[:8]
        parts.append(
            f"{side}: {ops.get('sent commands', 0):g} Redis commands sent "
            f"(top: {', '.join(f'{k} {v:g}' for k, v in top_sent)}), "
            f"{ops.get('redis commands', 0):g} executed "
            f"(top: {', '.join(f'{k} {v:g}' for k, v in top)}), "
            f"{ops.get('s3 requests', 0):g} S3 requests ({s3 or 'none'})"
        )
    return (
        _own_line(p1) + "- **Requests per run** (sequential echo runs, every client and the idle "
        "polling of "
        "workers included; *sent* = commands clients sent (MONITOR: a script call counts once), "
        "*executed* = INFO commandstats (commands inside Lua scripts included); S3 from moto's "
        "request log): " + "; ".join(parts) + "."
    )


def _own_line(p1: Measure) -> str:
    """Tether's own Redis work per run (not the broker's), beside the hand-written task's."""
    x = p1.extra
    worker_rt = x.get("tether per run: worker round trips")
    if worker_rt is None:
        return ""
    return (
        f"- **Tether's own Redis work per 1-step run** (targets: <= 12 commands, <= 6 round "
        f"trips): worker {worker_rt:g} round trips, "
        f"{x.get('tether per run: worker commands', 0):g} commands "
        f"(counted in redis-py, `python -m bench.round_trips`); producer "
        f"{x.get('tether per run: producer round trips', 0):g} round trips, "
        f"{x.get('tether per run: producer commands', 0):g} commands (submit "
        f"{x.get('tether per run: producer submit round trips', 0):g} round trip); on the wire "
        f"(MONITOR, Tether's keys, idle sweeps excluded) "
        f"{x.get('tether per run: sent tether commands', 0):g} commands. The hand-written task "
        f"has none of its own: its "
        f"{x.get('hand-written per run: sent commands', 0):g} commands are Celery's broker "
        "and result backend (Tether's broker traffic is in the next line too).\n"
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: refuse them instead of writing an invalid document."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite number {value!r} in the benchmark results")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(measures: list[Measure], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: meta plus every measure (stats, result, target, verdict, series)."""
    rows = []
    for m in measures:
        row = asdict(m)
        row["target"] = _target_json(m.target)
        row["tail_target"] = _target_json(m.tail_target)
        if m.tail_target is not None:
            row["tail_value"] = m.tail_value
        row["met"] = m.met
        rows.append(row)
    document: dict[str, Any] = _finite({**meta, "measures": rows})
    return document


def plot_latency(measure: Measure, path: Path) -> Path:
    """Per-run latency against session length (P3's series), Tether vs the hand-written task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=90)
    styles = {
        "tether_notes_compact_ms": ("Tether, notes agent with compaction", "tab:blue"),
        "handwritten_ms": (
            "hand-written Celery task (S3 GET + PUT of one JSON blob)",
            "tab:orange",
        ),
    }
    for key, (label, color) in styles.items():
        values = measure.series.get(key)
        if not values:
            continue
        runs = list(range(1, len(values) + 1))
        ax.scatter(runs, values, s=3, alpha=0.25, color=color, linewidths=0)
        ax.plot(runs, _rolling_median(values, 25), color=color, linewidth=1.8, label=label)
    ax.set_xlabel("session length (runs so far in the session)")
    ax.set_ylabel("end-to-end latency per run (ms)")
    ax.set_title("Per-run latency against session length (dots: runs, line: rolling median)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _rolling_median(values: list[float], width: int) -> list[float]:
    out: list[float] = []
    for i in range(len(values)):
        window = sorted(values[max(0, i - width + 1) : i + 1])
        out.append(window[len(window) // 2])
    return out


_NUMBER_LIST = re.compile(r"\[\s+(-?[0-9][-0-9.e+,\s]*?)\s+\]")


def dump_json(document: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers on one line (small diffs between runs)."""
    text = json.dumps(document, indent=1, ensure_ascii=False)
    # the items keep their commas, so joining the tokens with spaces gives "[1, 2, 3]"
    return _NUMBER_LIST.sub(lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def write_reports(
    measures: list[Measure], meta: dict[str, Any], out_dir: Path, name: str = "latest"
) -> dict[str, Path]:
    """Write ``<name>.md``, ``<name>.json`` (latest.md, latest.json by default) and (when P3
    ran) latency.png into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / f"{name}.md", "json": out_dir / f"{name}.json"}
    paths["markdown"].write_text(markdown(measures, meta))
    document = to_json(measures, meta)
    paths["json"].write_text(dump_json(document))
    p3 = next((m for m in measures if m.id == "P3"), None)
    if p3 is not None and p3.series:
        paths["plot"] = plot_latency(p3, out_dir / PLOT_NAME)
    return paths


def now_iso() -> str:
    """The current UTC time, to the second."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()
