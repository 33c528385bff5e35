"""P20: two tenants share one fleet-wide model limit; one bursts, the other must not starve.

    python -m bench.fair_share            # the issue's sizes: A 1,000 runs, B 50 (~9 min)
    python -m bench.fair_share --quick    # a smoke run: A 100, B 10 (numbers mean little)

A private redis-server and moto S3, the test OpenAI server in its own process (it stamps each
request as it arrives), and 4 single-process workers running ``assistant`` runs (one model call
each) with ``TETHER_MODEL_LIMITS`` giving the model 300 requests per minute and nothing else: the
fair share's defaults (equal weights, 2 s of idle credit). A run's *queue wait* is from its
submission to its model request reaching the server (waiting for a worker and for the model's
budget both count). Variants, each on a fresh fleet and namespace:

- **B alone** (the baseline): tenant B submits its runs at once to an idle fleet;
- **B behind A's burst, a queue per tenant**: A submits its runs at once, B submits its own one
  second later; each tenant's producer has its own queue and the workers consume both (a worker
  takes from its queues in turn), so B's runs reach workers while A's backlog waits;
- **B behind A's burst, one shared queue**: the same on one queue: B's messages are behind A's
  in the broker, which hands them out in order (shown for what it is: no fleet-side admission
  can reach a message the broker has not handed out).

Targets (issue #47, P20): B's median queue wait at most 2x its wait alone; A's allowance used
at least 95% while B is idle (A's requests after B's last one, over the limit's rate).

Results: ``bench/results/p20.json`` and ``p20.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core import percentile
from bench.private_stack import private_redis_and_s3
from bench.report import command_line, host_info, now_iso
from bench.stack import BUCKET, bench_env, bench_settings
from tests.support.openai_fixture import OpenAIServer, start_openai_server
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer
from tether.producer.submission import run_spec

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "test-model"
RPM = 300
WORKERS = 4
B_AFTER_S = 1.0
TARGET_RATIO = 2.0
TARGET_USED_PCT = 95.0


@dataclass(frozen=True)
class Variant:
    """One P20 variant: who submits, and to which queues."""

    name: str
    a_runs: int
    b_runs: int
    queue_a: str
    queue_b: str


def _fleet(
    redis_url: str, s3: str, server: OpenAIServer, variant: Variant, log_dir: Path, ns: str
) -> WorkerFleet:
    queues = sorted({variant.queue_a, variant.queue_b})
    env = {
        **bench_env(redis_url, s3, queue=variant.queue_a),
        "TETHER_NAMESPACE": ns,
        "TETHER_OPENAI_BASE_URL": server.base_url,
        "TETHER_OPENAI_API_KEY": server.api_key,
        "TETHER_OPENAI_MODEL": MODEL,
        "TETHER_OPENAI_API": "chat",
        "TETHER_MODEL_LIMITS": json.dumps({MODEL: {"requests_per_minute": RPM}}),
    }
    return WorkerFleet(env, log_dir, count=WORKERS, queue=",".join(queues), prefix="p20w")


def _warm_up(redis_url: str, s3: str, variant: Variant, ns: str) -> None:
    """A few runs of a third tenant on every queue, awaited, then the model left idle: each
    worker process has run once (imports, clients) and the budget is fresh when P20 begins."""
    for queue in sorted({variant.queue_a, variant.queue_b}):
        settings = bench_settings(redis_url, s3, queue=queue, tenant="warm-up", namespace=ns)
        producer = Producer(settings)
        try:
            specs = [run_spec(f"{ns}-warm-{queue}-{n}", "warm up", agent="assistant")
                     for n in range(2 * WORKERS)]  # fmt: skip
            for handle in producer.submit_many(specs):
                handle.run_result(timeout=180)
        finally:
            producer.close()
    time.sleep(2 * 60 / RPM + 1.0)  # past the last warm-up call's turn


def _submit(producer: Producer, tenant: str, runs: int, ns: str) -> tuple[float, list[Any]]:
    """Submit ``runs`` runs of ``tenant`` at once; (when, handles)."""
    specs = [run_spec(f"{ns}-{tenant}-{n}", f"p20 {tenant} {n}", agent="assistant")
             for n in range(runs)]  # fmt: skip
    submitted_at = time.time()
    return submitted_at, producer.submit_many(specs)


def _arrivals(server: OpenAIServer) -> dict[str, list[float]]:
    """Each tenant's model requests' arrival stamps, sorted (its input names the tenant)."""
    out: dict[str, list[float]] = {"a": [], "b": []}
    for request in server.model_requests():
        for message in request.messages:
            text = message.get("content")
            if message.get("role") == "user" and isinstance(text, str) and text.startswith("p20"):
                out[text.split()[1]].append(request.received_at)
    return {tenant: sorted(stamps) for tenant, stamps in out.items()}


def run_variant(redis_url: str, s3: str, server: OpenAIServer, variant: Variant) -> dict[str, Any]:
    """Run one variant on a fleet of its own; its waits and the allowance A used."""
    ns = f"p20-{secrets.token_hex(3)}"
    server.reset()
    server.default_reply("shared fairly")
    log_dir = Path(tempfile.mkdtemp(prefix="p20-"))
    fleet = _fleet(redis_url, s3, server, variant, log_dir, ns)
    producers: dict[str, Producer] = {}
    try:
        fleet.start(timeout_s=180)
        _warm_up(redis_url, s3, variant, ns)
        server.reset()
        server.default_reply("shared fairly")
        for tenant, queue in (("a", variant.queue_a), ("b", variant.queue_b)):
            settings = bench_settings(
                redis_url, s3, queue=queue, tenant=f"team-{tenant}", namespace=ns
            )
            producers[tenant] = Producer(settings)
        load_before = os.getloadavg()
        submitted: dict[str, tuple[float, list[Any]]] = {}
        if variant.a_runs:
            submitted["a"] = _submit(producers["a"], "a", variant.a_runs, ns)
            time.sleep(B_AFTER_S)
        submitted["b"] = _submit(producers["b"], "b", variant.b_runs, ns)
        timeout_s = 120 + (variant.a_runs + variant.b_runs) * 60 / RPM * 2
        results = [h.run_result(timeout=timeout_s) for _, hs in submitted.values() for h in hs]
        load_after = os.getloadavg()
    finally:
        for producer in producers.values():
            producer.close()
        fleet.stop()
    completed = sum(1 for r in results if r.status is RunStatus.COMPLETED)
    arrivals = _arrivals(server)
    waits_b = [t - submitted["b"][0] for t in arrivals["b"]]
    out: dict[str, Any] = {
        "variant": variant.name,
        "a_runs": variant.a_runs,
        "b_runs": variant.b_runs,
        "queues": [variant.queue_a, variant.queue_b],
        "runs_completed": completed,
        "runs": len(results),
        "b_wait_s": _stats(waits_b),
        "load_avg_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "runs_put_back": sum(
            path.read_text(errors="replace").count("put back in its queue")
            for path in log_dir.glob("*.log")
        ),
    }
    if variant.a_runs:
        out["a_wait_s"] = _stats([t - submitted["a"][0] for t in arrivals["a"]])
        out["a_used_pct_while_b_idle"] = _used_after(arrivals["a"], max(arrivals["b"]))
    return out


def _used_after(stamps: list[float], since: float) -> float | None:
    """A's pace after ``since`` (B's last request), as a share of the limit's rate (%)."""
    after = [t for t in stamps if t > since]
    if len(after) < 10:
        return None  # B was not done before A: nothing to measure
    rate_per_s = (len(after) - 1) / (after[-1] - after[0])
    return round(100 * rate_per_s / (RPM / 60), 1)


def _stats(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "median": round(statistics.median(samples), 3),
        "p95": round(percentile(samples, 95), 3),
    }


def table(result: dict[str, Any]) -> str:
    """The markdown table of ``result``."""
    alone = result["variants"][0]["b_wait_s"]["median"]
    rows = [
        "| variant | B's queue wait, median / p95 | B's median vs alone | A's queue wait, "
        "median / p95 | A's allowance used while B is idle | runs completed | runs put back |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in result["variants"]:
        b, a = v["b_wait_s"], v.get("a_wait_s")
        used = v.get("a_used_pct_while_b_idle")
        a_wait = "-" if a is None else f"{a['median']:.1f} / {a['p95']:.1f} s"
        a_used = "-" if used is None else f"{used:.1f}%"
        rows.append(
            f"| {v['variant']} | {b['median']:.2f} / {b['p95']:.2f} s "
            f"| {b['median'] / alone:.2f}x | {a_wait} | {a_used} "
            f"| {v['runs_completed']} / {v['runs']} | {v['runs_put_back']} |"
        )
    return "\n".join(rows)


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    alone = result["variants"][0]["b_wait_s"]["median"]
    fair = result["variants"][1]
    ratio = fair["b_wait_s"]["median"] / alone
    used = fair.get("a_used_pct_while_b_idle")
    return {
        "b_median_ratio": {
            "value": round(ratio, 2),
            "target": f"<= {TARGET_RATIO}",
            "met": ratio <= TARGET_RATIO,
        },
        "a_used_pct_while_b_idle": {
            "value": used,
            "target": f">= {TARGET_USED_PCT}",
            "met": used is not None and used >= TARGET_USED_PCT,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fair_share", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="A 100 runs, B 10: a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where p20.json and p20.md go")
    parser.add_argument(
        "--no-shared-queue", action="store_true", help="skip the one-shared-queue variant"
    )
    args = parser.parse_args(argv)
    a_runs, b_runs = (100, 10) if args.quick else (1000, 50)
    variants = [
        Variant("B alone (baseline)", 0, b_runs, "p20a", "p20b"),
        Variant(f"B {B_AFTER_S:g} s after A's {a_runs:,}, a queue per tenant",
                a_runs, b_runs, "p20a", "p20b"),
    ]  # fmt: skip
    if not args.no_shared_queue:
        variants.append(
            Variant(f"B {B_AFTER_S:g} s after A's {a_runs:,}, one shared queue",
                    a_runs, b_runs, "p20", "p20")
        )  # fmt: skip
    command = command_line(argv, module="bench.fair_share")
    started = time.monotonic()
    result: dict[str, Any] = {"measure": "P20", "command": command, "when": now_iso()}
    server = start_openai_server("sk-p20-" + secrets.token_hex(8))
    try:
        with private_redis_and_s3(BUCKET, "p20-") as (redis_url, s3):
            result["variants"] = [run_variant(redis_url, s3, server, v) for v in variants]
    finally:
        server.close()
    result["setup"] = (
        f"{WORKERS} single-process workers consuming the variant's queues, agent 'assistant' "
        f"(one model call) against the test OpenAI server (own process), TETHER_MODEL_LIMITS "
        f"{RPM} requests/min, fair share defaults (equal weights, idle_credit_s 2); queue wait "
        "= the run's model request reaching the server minus its submission"
    )
    result["targets"] = _targets(result)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["machine"] = host_info(("celery", "redis"))
    args.out.mkdir(parents=True, exist_ok=True)
    name = "p20-quick" if args.quick else "p20"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"{name}.md").write_text(_markdown(result))
    print(_markdown(result))
    return 0


def _markdown(result: dict[str, Any]) -> str:
    t = result["targets"]
    ratio, used = t["b_median_ratio"], t["a_used_pct_while_b_idle"]
    machine = result["machine"]
    return (
        f"# P20: a fair share of a fleet-wide model limit\n\n"
        f"`{result['command']}` (reproduce), {result['when']}, commit {machine.get('git_commit')}, "
        f"{machine.get('cpu_count')} CPUs; wall time {result['wall_s']} s.\n\n"
        f"{result['setup']}.\n\n{table(result)}\n\n"
        f"- B's median vs alone (queue per tenant): {ratio['value']}x, target {ratio['target']}: "
        f"{'met' if ratio['met'] else 'missed'}\n"
        f"- A's allowance used while B is idle (queue per tenant): {used['value']}%, target "
        f"{used['target']}%: {'met' if used['met'] else 'missed'}\n"
        "- Load average (1 min) before / after each variant: "
        + "; ".join(
            f"{v['variant']}: {v['load_avg_1m_before_after'][0]} / "
            f"{v['load_avg_1m_before_after'][1]}"
            for v in result["variants"]
        )
        + "\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
