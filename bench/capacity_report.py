"""The capacity model: from the per-run costs :mod:`bench.capacity_model` measured, what a given
load needs (Redis shards and memory, workers, S3 requests and their monthly price).

    python -m bench.capacity_report                  # reads bench/results/capacity.json,
                                                     # writes bench/results/capacity.md
    python -m bench.capacity_report --runs-per-day 1e7 --sessions 1e6 --run-s 5

Every figure is a formula over a measured cost and a stated assumption (the ``Load`` fields);
the page gives each with both, so a reader can redo it with their own numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tether.runs.queue.base import DONE_MAX_LEN

RESULTS = Path(__file__).resolve().parent / "results"
DAY_S = 86_400
MONTH_DAYS = 30
GB = 1e9
#: AWS list prices, S3 Standard, US East (N. Virginia), read 2026-12-07 (USD)
PUT_PER_1K = 0.005  # PUT, COPY, POST, LIST
GET_PER_1K = 0.0004  # GET, SELECT and all other requests
STORAGE_PER_GB_MONTH = 0.023  # first 50 TB


@dataclass(frozen=True)
class Load:
    """What the deployment must carry, and the assumptions the page states."""

    runs_per_day: float = 10_000_000
    sessions: float = 1_000_000
    peak_factor: float = 3.0
    """Peak runs/s over the day's mean."""
    run_s: float = 5.0
    """Mean wall time of one run (a real model's latency dominates; the bench's is ms)."""
    result_ttl_days: float = 7.0
    """TETHER_RESULT_TTL_S in days (the default is 7)."""
    stream_days: float = 30.0
    """Days of events a session's live stream holds (default settings: no time bound)."""
    shard_data_gb: float = 25.0
    """Data a shard may hold (the rest of its memory is headroom for forks and buffers)."""
    shard_cpu: float = 0.5
    """Share of its one core a shard may use at the peak."""
    worker_cpu: float = 0.7
    """Share of a core a worker process may use at the peak."""

    @property
    def mean_rate(self) -> float:
        return self.runs_per_day / DAY_S

    @property
    def peak_rate(self) -> float:
        return self.mean_rate * self.peak_factor


def _kind_class(kind: str, row: dict[str, float]) -> str:
    """What a kind of key grows with:

    - ``run``: one key per run, living TETHER_RESULT_TTL_S (the run record and its companions);
    - ``tenant_day``: a tenant's day, one member per run (the run ids its usage counted), living
      its own TTL;
    - ``feed``: a completion stream, one entry per run, capped at ``DONE_MAX_LEN`` entries;
    - ``stream``: a session's live events;
    - ``session``: one key per session, no TTL;
    - ``transient``: one key per session with a TTL, rewritten by each run;
    - ``fixed``: the rest (the broker's bindings, worker presence)."""
    if "<run>" in kind:
        return "run"
    if "<day>:runs" in kind:
        return "tenant_day"
    if kind.endswith(":done") or "{~done" in kind:  # also the sharded feeds, {~done:<n>}
        return "feed"
    if "<session>" in kind and kind.endswith(":events"):
        return "stream"
    if "<session>" in kind:
        return "transient" if row["with_ttl"] > 0 else "session"
    return "fixed"


def redis_memory(measured: dict[str, Any], load: Load) -> dict[str, Any]:
    """Bytes per unit of each class, measured, and what the load holds resident."""
    runs, sessions = measured["runs_total"], measured["sessions_total"]
    per: dict[str, float] = dict.fromkeys(("run", "stream", "session", "feed", "fixed"), 0.0)
    transient: list[tuple[str, float, float]] = []  # kind, bytes per key, ttl
    tenant_day = 0.0  # bytes held by one day's runs, with their TTL
    for kind, row in measured["redis_census"].items():
        cls = _kind_class(kind, row)
        if cls == "transient":
            transient.append((kind, row["bytes"] / row["keys"], row["max_ttl_s"]))
        elif cls == "tenant_day":
            days = max(1.0, math.ceil(row["max_ttl_s"] / DAY_S))
            tenant_day += load.runs_per_day * days * row["bytes"] / runs
        elif cls == "fixed":
            per["fixed"] += row["bytes"]
        else:
            per[cls] += row["bytes"] / (sessions if cls == "session" else runs)
    runs_per_session_day = load.runs_per_day / load.sessions
    resident = {
        "run": load.runs_per_day * load.result_ttl_days * per["run"],
        "stream": load.sessions * runs_per_session_day * load.stream_days * per["stream"],
        "session": load.sessions * per["session"],
        "transient": sum(
            min(load.sessions, load.mean_rate * max(ttl, 1.0)) * size for _k, size, ttl in transient
        ),
        "tenant_day": tenant_day,
        "feed": min(load.runs_per_day * load.result_ttl_days, DONE_MAX_LEN) * per["feed"],
        "fixed": per["fixed"],
    }
    return {"bytes_per": per, "transient": transient, "resident": resident}


def _per_run(workload: dict[str, Any], name: str) -> float:
    net = workload.get(name + "_net_of_idle")
    return float(workload[name] if net is None else net)


def redis_shards(measured: dict[str, Any], load: Load, workload: str) -> dict[str, Any]:
    """Shards for memory and for CPU, and the command and byte rates."""
    w = measured["workloads"][workload]
    memory = redis_memory(measured, load)
    total = sum(memory["resident"].values())
    cpu = load.peak_rate * _per_run(w, "redis_cpu_s")
    return {
        **memory,
        "total_bytes": total,
        "shards_for_memory": math.ceil(total / (load.shard_data_gb * GB)),
        "redis_cores_at_peak": cpu,
        "shards_for_cpu": math.ceil(cpu / load.shard_cpu),
        "commands_per_s_mean": load.mean_rate * _per_run(w, "redis_commands"),
        "commands_per_s_peak": load.peak_rate * _per_run(w, "redis_commands"),
        "bytes_in_per_s_peak": load.peak_rate * _per_run(w, "redis_in_bytes"),
        "bytes_out_per_s_peak": load.peak_rate * _per_run(w, "redis_out_bytes"),
    }


def workers(measured: dict[str, Any], load: Load, workload: str) -> dict[str, Any]:
    """CPU cores and run slots (Little's law) at the peak, and the memory of the slots."""
    w = measured["workloads"][workload]
    cores = load.peak_rate * _per_run(w, "worker_cpu_s") / load.worker_cpu
    slots = load.peak_rate * load.run_s
    child_mib = max(measured["worker_rss_mib"]["pool_child"])
    return {
        "worker_cpu_s_per_run": _per_run(w, "worker_cpu_s"),
        "cores_at_peak": cores,
        "slots_at_peak": slots,
        "pool_child_rss_mib": child_mib,
        "slot_memory_gib": slots * child_mib / 1024,
        "producer_cpu_s_per_run": _per_run(w, "producer_cpu_s"),
    }


def s3(measured: dict[str, Any], load: Load, workload: str) -> dict[str, Any]:
    """Requests per run (GET head counted once per run: in production a session's runs are
    further apart than the head cache's TTL), per month, their price, and the storage."""
    w = measured["workloads"][workload]
    requests = dict(w["s3_requests"])
    measured_get = requests.get("GET head", 0.0)
    requests["GET head"] = max(measured_get, 1.0)
    puts = sum(v for k, v in requests.items() if not k.startswith(("GET", "HEAD")))
    gets = sum(v for k, v in requests.items() if k.startswith(("GET", "HEAD")))
    month_runs = load.runs_per_day * MONTH_DAYS
    census = measured["s3_census"]
    head_bytes = census.get("head", {}).get("bytes", 0) / measured["sessions_total"]
    segment_bytes = census.get("segment", {}).get("bytes", 0) / measured["runs_total"]
    heads_gb = load.sessions * head_bytes / GB
    segments_gb_month = month_runs * segment_bytes / GB
    return {
        "requests_per_run": requests,
        "measured_get_head_per_run": measured_get,
        "put_per_run": puts,
        "get_per_run": gets,
        "put_per_s_peak": load.peak_rate * puts,
        "get_per_s_peak": load.peak_rate * gets,
        "puts_per_month": month_runs * puts,
        "gets_per_month": month_runs * gets,
        "put_usd_month": month_runs * puts / 1000 * PUT_PER_1K,
        "get_usd_month": month_runs * gets / 1000 * GET_PER_1K,
        "head_bytes_per_session": head_bytes,
        "segment_bytes_per_run": segment_bytes,
        "put_bytes_per_run": head_bytes + segment_bytes,
        "heads_gb": heads_gb,
        "segments_gb_per_month": segments_gb_month,
        "storage_usd_first_month": (heads_gb + segments_gb_month) * STORAGE_PER_GB_MONTH,
        "storage_usd_month_12": (heads_gb + 12 * segments_gb_month) * STORAGE_PER_GB_MONTH,
    }


def model(document: dict[str, Any], load: Load, workload: str = "assistant") -> dict[str, Any]:
    """The whole model for ``load`` on ``workload``'s costs, with the recommended retention
    (run records and live streams kept one day) beside the defaults."""
    measured = document["measured"]
    short = Load(**{**asdict(load), "result_ttl_days": 1.0, "stream_days": 1.0})
    return {
        "load": asdict(load),
        "workload": workload,
        "redis_defaults": redis_shards(measured, load, workload),
        "redis_one_day": redis_shards(measured, short, workload),
        "workers": workers(measured, load, workload),
        "s3": s3(measured, load, workload),
    }


def _n(value: float, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits, thousands separated."""
    if value == 0:
        return "0"
    rounded = round(value, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{rounded:,.0f}" if abs(rounded) >= 100 else f"{rounded:,g}"


def measured_table(document: dict[str, Any]) -> list[str]:
    """The per-run costs of each workload, as measured (net of the idle stack's rate)."""
    m = document["measured"]
    names = list(m["workloads"])
    rows = [
        ("Redis commands executed (all clients, scripts' inside)", "redis_commands", 1),
        ("Redis bytes in", "redis_in_bytes", 1),
        ("Redis bytes out", "redis_out_bytes", 1),
        ("Redis server CPU (ms)", "redis_cpu_s", 1000),
        ("worker CPU, all worker processes (ms)", "worker_cpu_s", 1000),
        ("producer CPU (ms)", "producer_cpu_s", 1000),
    ]
    lines = [
        "| per run | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for label, key, scale in rows:
        cells = [_n(_per_run(m["workloads"][w], key) * scale) for w in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    kinds = sorted({k for w in names for k in m["workloads"][w]["s3_requests"]})
    for kind in kinds:
        cells = [_n(m["workloads"][w]["s3_requests"].get(kind, 0.0)) for w in names]
        lines.append(f"| S3 {kind} | " + " | ".join(cells) + " |")
    seconds = [
        f"{m['workloads'][w]['runs']} runs in {m['workloads'][w]['seconds']} s" for w in names
    ]
    lines.append("| workload | " + " | ".join(seconds) + " |")
    return lines


def census_table(document: dict[str, Any]) -> list[str]:
    """The Redis keys left at the end, by kind, and the class the model gives each."""
    m = document["measured"]
    lines = ["| key kind | keys | bytes | bytes/key | with TTL | longest TTL left (s) | class |"]
    lines.append("|---|---|---|---|---|---|---|")
    for kind, row in m["redis_census"].items():
        lines.append(
            f"| `{kind}` | {row['keys']:.0f} | {row['bytes']:,.0f} | "
            f"{row['bytes'] / row['keys']:,.0f} | {row['with_ttl']:.0f} | "
            f"{row['max_ttl_s']:,.0f} | {_kind_class(kind, row)} |"
        )
    return lines


def _gb(value: float) -> str:
    return f"{_n(value / GB)} GB"


def redis_rows(r: dict[str, Any], label: str, load: Load) -> list[str]:
    """The Redis lines of the model for one retention choice."""
    per, res = r["bytes_per"], r["resident"]
    return [
        f"| Redis memory, run records ({label}) | runs/day x TTL days x {_n(per['run'])} B "
        f"| {_gb(res['run'])} |",
        f"| Redis memory, live streams ({label}) | sessions x runs/session/day x days kept x "
        f"{_n(per['stream'])} B | {_gb(res['stream'])} |",
        f"| Redis memory, per-session keys | sessions x {_n(per['session'])} B "
        f"| {_gb(res['session'])} |",
        f"| Redis memory, keys with a TTL rewritten by each run | min(sessions, runs/s x TTL) x "
        f"bytes/key, per kind | {_gb(res['transient'])} |",
        f"| Redis memory, the run ids a tenant's usage counted | runs/day x TTL days x bytes/run "
        f"| {_gb(res['tenant_day'])} |",
        f"| Redis memory, completion feeds | min(runs kept, {DONE_MAX_LEN:,}) x "
        f"{_n(per['feed'])} B per feed pair | {_gb(res['feed'])} |",
        f"| **Redis memory, total ({label})** | the sum | **{_gb(r['total_bytes'])}** |",
        f"| Redis shards for memory ({label}) | total / {load.shard_data_gb:g} GB per shard "
        f"| **{r['shards_for_memory']}** |",
    ]


def model_table(result: dict[str, Any], load: Load) -> list[str]:
    """The model: each quantity, its formula and its value."""
    d, short, w, s = (
        result["redis_defaults"],
        result["redis_one_day"],
        result["workers"],
        result["s3"],
    )
    lines = ["| quantity | formula | value |", "|---|---|---|"]
    lines += [
        f"| runs/s, mean / peak | runs/day / 86,400; x {load.peak_factor:g} "
        f"| {_n(load.mean_rate)} / {_n(load.peak_rate)} |",
        f"| Redis commands/s, mean / peak | runs/s x commands/run "
        f"| {_n(d['commands_per_s_mean'])} / {_n(d['commands_per_s_peak'])} |",
        f"| Redis network at the peak, in / out | runs/s x bytes/run "
        f"| {_n(d['bytes_in_per_s_peak'] / 1e6)} / {_n(d['bytes_out_per_s_peak'] / 1e6)} MB/s |",
        f"| Redis CPU at the peak | runs/s x server CPU/run "
        f"| {_n(d['redis_cores_at_peak'])} cores |",
        f"| Redis shards for CPU | CPU / {load.shard_cpu:g} core per shard "
        f"| {d['shards_for_cpu']} |",
    ]
    lines += redis_rows(d, f"defaults: {load.result_ttl_days:g} d, {load.stream_days:g} d", load)
    lines += redis_rows(short, "1 d, 1 d", load)
    lines += [
        f"| worker CPU at the peak | runs/s x {_n(w['worker_cpu_s_per_run'] * 1000)} ms / "
        f"{load.worker_cpu:g} | {_n(w['cores_at_peak'])} cores |",
        f"| runs in flight at the peak | runs/s x {load.run_s:g} s per run (Little's law) "
        f"| {_n(w['slots_at_peak'])} |",
        f"| their memory as prefork children | in flight x {_n(w['pool_child_rss_mib'])} MiB "
        f"| {_n(w['slot_memory_gib'])} GiB |",
        f"| S3 PUT/s, GET/s at the peak | runs/s x {_n(s['put_per_run'])}, x "
        f"{_n(s['get_per_run'])} | {_n(s['put_per_s_peak'])}, {_n(s['get_per_s_peak'])} |",
        f"| S3 PUT requests a month | runs/day x 30 x {_n(s['put_per_run'])} "
        f"| {_n(s['puts_per_month'] / 1e6)} M: **${s['put_usd_month']:,.0f}** |",
        f"| S3 GET requests a month | runs/day x 30 x {_n(s['get_per_run'])} "
        f"| {_n(s['gets_per_month'] / 1e6)} M: **${s['get_usd_month']:,.0f}** |",
        f"| S3 storage, heads | sessions x {_n(s['head_bytes_per_session'])} B "
        f"| {_n(s['heads_gb'])} GB |",
        f"| S3 storage, event archive | + runs/day x 30 x {_n(s['segment_bytes_per_run'])} B a "
        f"month | {_n(s['segments_gb_per_month'])} GB more each month |",
        f"| S3 storage price | GB x ${STORAGE_PER_GB_MONTH} | ${s['storage_usd_first_month']:,.0f}"
        f" the first month, ${s['storage_usd_month_12']:,.0f} the 12th |",
    ]
    return lines


def markdown(document: dict[str, Any], load: Load) -> str:
    """The page: where the numbers come from, what was measured, the model."""
    result = model(document, load)
    machine = document["machine"]
    lines = [
        f"# Capacity model ({document['date']})",
        "",
        f"`{document['command']}` in {document['duration_s']} s on {machine['cpu_count']} CPUs "
        f"({machine['cpu_model']}), load average (1 min) {document['load_average_1m_start']} "
        f"at the start and {machine['load_average_1m_end']} at the end (`/proc/loadavg` at the "
        f"end: {document['uptime']}); commit {machine['git_commit']}. The model: "
        f"`python -m bench.capacity_report` (workload `{result['workload']}`).",
        "",
        "## Measured, per run (net of the idle stack)",
        "",
        *measured_table(document),
        "",
        "## Redis keys at the end",
        "",
        *census_table(document),
        "",
        f"## The model: {_n(load.runs_per_day)} runs a day over {_n(load.sessions)} sessions",
        "",
        *model_table(result, load),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Read ``capacity.json``, write ``capacity.md`` beside it, print it."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.capacity_report", description=__doc__)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--runs-per-day", type=float, default=Load.runs_per_day)
    parser.add_argument("--sessions", type=float, default=Load.sessions)
    parser.add_argument("--run-s", type=float, default=Load.run_s)
    parser.add_argument("--peak-factor", type=float, default=Load.peak_factor)
    args = parser.parse_args(argv)
    load = Load(
        runs_per_day=args.runs_per_day,
        sessions=args.sessions,
        run_s=args.run_s,
        peak_factor=args.peak_factor,
    )
    document = json.loads((args.results / "capacity.json").read_text())
    text = markdown(document, load)
    (args.results / "capacity.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
