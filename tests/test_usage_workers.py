"""Tokens, cost and tenant budgets on a real worker process (``tether worker --metrics-port``,
its own namespace and queue on the stack's Redis and bucket) whose model reports usage on every
call: the run result's usage and cost, the tenant's day, the Prometheus counters, a submission
refused by a spent budget (and the CLI's exit code 3), and a run stopped by its tenant's budget
after the step it was in, keeping its finished steps."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.spend_agents import CALL, CALL_USD, PRICED, PRICES, UNPRICED
from tests.support.stack import Stack, eventually, unique
from tests.test_cli import parallel
from tests.test_metrics import MeteredWorker, scrape, value
from tether.core.items import ToolOutput
from tether.dev.redis_server import free_port
from tether.errors import BudgetExceeded
from tether.producer.client import Producer

QUEUE = "spendq"
#: The capped tenant's tokens per day: a call is 1,100, so its run stops after its third call.
CAP_TOKENS = 2500
#: A tenant admitted one run per minute.
RATED = f"rated-{uuid.uuid4().hex[:6]}"


@dataclass
class Spending:
    producer: Producer
    worker: MeteredWorker
    env: dict[str, str]
    capped: str

    def metric(self, name: str, **labels: str) -> float:
        return value(scrape(f"http://127.0.0.1:{self.worker.metrics_port}/metrics"), name, **labels)


@pytest.fixture(scope="module")
def spending(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spending]:
    log_dir = tmp_path_factory.mktemp("spending")
    namespace = f"sp-{uuid.uuid4().hex[:8]}"
    capped = f"cap-{uuid.uuid4().hex[:6]}"
    env = dict(
        stack.env,
        TETHER_NAMESPACE=namespace,
        TETHER_QUEUE=QUEUE,
        TETHER_AGENT_MODULES="tests.support.spend_agents",
        TETHER_MODEL_PRICES=json.dumps(PRICES),
        TETHER_TENANT_BUDGETS=json.dumps(
            {capped: {"tokens_per_day": CAP_TOKENS}, RATED: {"runs_per_minute": 1}}
        ),
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # `tether worker` makes a fresh one
    worker = MeteredWorker(env, log_dir, free_port(), queue=QUEUE, name="uw")
    settings = stack.settings.model_copy(
        update={
            "namespace": namespace,
            "queue": QUEUE,
            "model_prices": env["TETHER_MODEL_PRICES"],
            "tenant_budgets": env["TETHER_TENANT_BUDGETS"],
        }
    )
    producer = Producer(settings)
    try:
        worker.start()
        yield Spending(producer, worker, env, capped)
    finally:
        producer.close()
        worker.stop()


def test_a_run_reports_its_usage_and_cost_and_its_tenant_day_and_metrics_sum_them(
    spending: Spending,
) -> None:
    tenant = unique("t")
    priced = spending.producer.run_async(unique(), "steps=2", agent="spender", tenant=tenant)
    result = priced.result(timeout=60)
    assert (result.status, result.output) == ("COMPLETED", "done 2")
    assert result.usage == CALL + CALL + CALL  # two tool steps and the answer
    assert result.cost_usd == pytest.approx(3 * CALL_USD)
    free = spending.producer.run_async(unique(), "steps=0", agent="unpriced", tenant=tenant)
    unpriced = free.result(timeout=60)
    assert unpriced.usage == CALL and unpriced.cost_usd is None  # unpriced, not free
    day = spending.producer.runs.tenant_usage.day(tenant)
    assert (day.runs, day.unpriced_runs, day.tokens) == (2, 1, 4 * 1100)
    assert (day.cached_tokens, day.reasoning_tokens) == (4 * 200, 4 * 50)
    assert day.cost_usd == pytest.approx(3 * CALL_USD)

    def counted() -> bool:
        return (
            spending.metric(
                "tether_model_tokens_total", model=UNPRICED, kind="input", tenant=tenant
            )
            == 1000
        )

    eventually(counted, timeout_s=30)  # counted right after the commit the producer hears of
    tokens = {
        kind: spending.metric("tether_model_tokens_total", model=PRICED, kind=kind, tenant=tenant)
        for kind in ("input", "output", "cached", "reasoning")
    }
    assert tokens == {"input": 3000, "output": 300, "cached": 600, "reasoning": 150}
    cost = spending.metric("tether_model_cost_usd_total", model=PRICED, tenant=tenant)
    assert cost == pytest.approx(3 * CALL_USD)
    assert spending.metric("tether_model_cost_usd_total", model=UNPRICED, tenant=tenant) == 0


def test_a_budget_stops_a_run_after_its_step_and_refuses_the_next_submission(
    spending: Spending, stack: Stack
) -> None:
    session, capped = unique(), spending.capped
    handle = spending.producer.run_async(session, "steps=6", agent="spender", tenant=capped)
    with pytest.raises(BudgetExceeded, match=f"tenant '{capped}'.*tokens_per_day=2500") as ended:
        handle.result(timeout=60)
    result = ended.value.result  # type: ignore[attr-defined]
    assert (result.status, result.error_type, result.steps) == ("FAILED", "BudgetExceeded", 3)
    # three calls (3,300 tokens) went over 2,500: it stopped at the boundary after the third
    assert result.usage == CALL + CALL + CALL
    head = stack.reader().read(session, tenant=capped)
    assert head is not None
    outputs = [i.output for i in head.memory.items if isinstance(i, ToolOutput)]
    assert outputs == ["worked 1", "worked 2", "worked 3"]  # its finished steps are kept
    assert spending.producer.runs.tenant_usage.day(capped).tokens == 3300

    with pytest.raises(BudgetExceeded, match=f"tenant '{capped}'.*tokens_per_day.*3300 tokens"):
        spending.producer.run_async(unique(), "steps=0", agent="spender", tenant=capped)
    shown, refused = parallel(
        spending.env,
        ["wait", result.run_id, "--json", "--tenant", capped],
        ["run", unique(), "hello", "--agent", "spender", "--tenant", capped],
    )
    assert shown.returncode == 3, shown.stderr  # the run ended BudgetExceeded
    doc = json.loads(shown.stdout)
    assert (doc["error_type"], doc["usage"]["input_tokens"]) == ("BudgetExceeded", 3000)
    assert doc["cost_usd"] == pytest.approx(3 * CALL_USD)
    assert refused.returncode == 3, refused.stderr  # the submission was refused
    assert "BudgetExceeded" in refused.stderr and "resets at" in refused.stderr


def test_the_console_shows_a_runs_and_a_sessions_tokens_and_cost(
    spending: Spending, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.testclient import TestClient

    from tether.producer.ops.console.app import create_app
    from tether.producer.ops.console.backends import open_backends
    from tether.producer.ops.console.config import ConsoleConfig

    tenant, session = unique("t"), unique()
    first = spending.producer.run_async(session, "steps=1", agent="spender", tenant=tenant)
    run = first.result(timeout=60)
    spending.producer.run_async(session, "steps=0", agent="spender", tenant=tenant).result(
        timeout=60
    )
    for name, text in spending.env.items():
        if name.startswith("AWS_"):  # the stack's moto credentials, as the console process has
            monkeypatch.setenv(name, text)
    app = create_app(open_backends(spending.producer.settings), ConsoleConfig(tenant=tenant))
    with TestClient(app, base_url="http://127.0.0.1") as client:  # a loopback Host
        run_page = client.get(f"/runs/{run.run_id}").text
        session_page = client.get(f"/sessions/{session}").text
    # the run: two calls; the session: its two runs, three calls
    assert '<dd class="tokens">2200 <span class="dim">(2000 in, 400 cached, 200 out' in run_page
    assert '<dd class="cost">$0.0026</dd>' in run_page
    assert '<dd class="tokens">3300 <span class="dim">(3000 in, 600 cached, 300 out' in session_page
    assert '<dd class="cost">$0.0039' in session_page


def test_the_asyncio_producer_refuses_a_submission_over_its_tenants_rate(
    spending: Spending,
) -> None:
    from tether.producer.client_aio import AsyncProducer

    async def submit_twice() -> str:
        async with AsyncProducer(spending.producer.settings) as producer:
            first = await producer.run_async(unique(), "steps=0", agent="spender", tenant=RATED)
            status = (await first.result(timeout=60)).status
            # the worker took the first run's place when it started it (#47: producers only
            # read the rate), so the minute's one place is gone
            with pytest.raises(BudgetExceeded, match=f"tenant '{RATED}'.*runs_per_minute=1"):
                await producer.run_async(unique(), "steps=0", agent="spender", tenant=RATED)
            return status

    assert asyncio.run(submit_twice()) == "COMPLETED"


def test_a_batch_sums_its_cases_tokens_and_cost(spending: Spending, tmp_path: Path) -> None:
    from tether.producer.ops.batch import run_batch

    cases = [{"id": f"c{n}", "input": f"steps={n}"} for n in range(3)]  # 1, 2 and 3 calls
    out = tmp_path / "results.jsonl"
    summary = run_batch(
        spending.producer, cases, agent="spender", tenant=unique("t"), concurrency=3, out=out
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["cost_usd"] for line in lines) == pytest.approx(
        [CALL_USD, 2 * CALL_USD, 3 * CALL_USD]
    )
    assert (summary.finished, summary.total_tokens, summary.unpriced_cases) == (3, 6 * 1100, 0)
    assert summary.total_cost_usd == pytest.approx(6 * CALL_USD)
