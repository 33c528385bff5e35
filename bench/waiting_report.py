"""The Markdown page of P15 (:mod:`bench.waiting`): the issue's three measures beside their
baselines, then the Redis bytes of a waiting run by kind of key, at rest."""

from __future__ import annotations

from typing import Any

#: The kinds of key the breakdown names (anything else is summed into "other").
_KINDS = (
    ("live events", ":events"),
    ("run record", ":run:<run>"),
    ("wait record", ":waits"),
    ("request id (dedup)", ":req:<req>"),
    ("run-id index", "/~runs:<n>}:<run>"),
    ("stream meta", ":meta"),
    ("fence, released", (":fence", ":released")),
    ("signal mailbox", ":signals"),
)


def _match(kind: str, suffix: str | tuple[str, ...]) -> bool:
    return kind.endswith(suffix)


def _breakdown(halves: list[dict[str, Any]]) -> list[str]:
    """One line per kind of key: its bytes per run in each column (timer, signal, completed)."""
    lines = []
    named: set[str] = set()
    for label, suffix in _KINDS:
        cells = []
        for c in halves:
            hits = {k: v for k, v in c["kinds"].items() if _match(k, suffix)}
            named.update(hits)
            cells.append(f"{sum(v['bytes_per_run'] for v in hits.values()):,}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    other = [
        sum(v["bytes_per_run"] for k, v in c["kinds"].items() if k not in named) for c in halves
    ]
    lines.append(
        "| other (head cache, deltas: none left at rest) | "
        + " | ".join(f"{o:,}" for o in other)
        + " |"
    )
    lines.append(
        "| **sum (`MEMORY USAGE`)** | "
        + " | ".join(f"**{c['bytes_per_run']:,}**" for c in halves)
        + " |"
    )
    lines.append(
        "| a session's sum, median / p95 | "
        + " | ".join(f"{c['session_bytes_median']:,} / {c['session_bytes_p95']:,}" for c in halves)
        + " |"
    )
    return lines


def markdown(doc: dict[str, Any]) -> str:
    r = doc["result"]
    idle, busy, done = r["idle_fleet"], r["fleet_while_all_wait"], r["completed"]
    host = doc["host"]
    timer, signal = r["census"]["nap"], r["census"]["sig"]
    return "\n".join(
        [
            f"# P15: runs waiting, half on timers, half on signals ({doc['when']})",
            "",
            f"`{doc['command']}`. Target: {doc['target']}.",
            "",
            f"Machine: {host['cpu_count']} cores ({host['cpu_model']}), "
            f"{host['mem_total_gib']} GiB, {host['platform']}, Python {host['python']}, "
            f"redis-server {r['redis_server']}"
            + "".join(f", `{k} {v}`" for k, v in r.get("redis_config", {}).items())
            + f"; commit {host['git_commit']}. Load average "
            f"(1 min): {doc['load_average_1m_start']} at the start, "
            f"{host['load_average_1m_end']} at the end (other sessions shared the machine).",
            "",
            "| measure | while all wait | baseline |",
            "|---|---|---|",
            f"| waiting runs: on timers + on signals (in the timers index) | "
            f"{r['timer_runs']:,} + {r['signal_runs']:,} ({r['parked_in_timers_index']:,}) | - |",
            f"| worker slots held (max over {busy['window_s']} s) | {busy['slots_held']} | "
            f"{idle['slots_held']} (idle fleet) |",
            f"| worker CPU, % of one core (2 workers) | {busy['cpu_pct_of_core']} | "
            f"{idle['cpu_pct_of_core']} (same fleet, no run) |",
            "| Redis bytes per run at rest (`MEMORY STATS` keyspace delta) | "
            f"**{r['info_bytes_per_waiting_run_at_rest']:,}** | "
            f"{done['info_bytes_per_run_at_rest']:,} (a completed 1-step run, "
            f"{done['runs']:,} of them) |",
            "| the same just after the runs (head cache and delta channel still there) | "
            f"{r['info_bytes_per_waiting_run_just_parked']:,} | "
            f"{done['info_bytes_per_run_just_applied']:,} |",
            f"| of which the wait: its record (timer / signal) + the timers index | "
            f"{r['wait_bytes_per_run']['nap']:,} / {r['wait_bytes_per_run']['sig']:,} + "
            f"{r['timers_index_bytes_per_run']:,} | - |",
            "",
            "At rest, by kind of key (`MEMORY USAGE` of every key, bytes per run; the "
            "namespace's shared keys, the timers index and the completion feeds among them, "
            f"add {r['census_shared_bytes_per_run']:,} per waiting run):",
            "",
            "| key | waiting on a timer | waiting on a signal | completed |",
            "|---|---|---|---|",
            *_breakdown([timer, signal, done["census"]]),
            "",
            "The keyspace's growth (`MEMORY STATS`: dataset and hash tables) is above the sum of "
            "`MEMORY USAGE`: the keyspace's hash tables (a bucket per key, a second for keys "
            "with a TTL) and what the server holds outside the keys.",
            "",
            f"Applying the runs took {r['apply_wall_s']['nap']} s (timers) and "
            f"{r['apply_wall_s']['sig']} s (signals) in this process (4 threads, moto S3 over "
            "HTTP).",
            "",
        ]
    )
