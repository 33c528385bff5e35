"""Pure units of usage and cost: pricing a usage (cached input at its own price, unknown models
unpriced), the per-model tally of a session's events, the price and budget settings (their bad
values: tests/test_settings_validation.py), and the batch summary's cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.core.events import (
    AgentEvent,
    EventType,
    ModelRequestPayload,
    ModelResponsePayload,
    Usage,
)
from tether.errors import ConfigurationError
from tether.models.prices import spend_of, usage_by_model
from tether.settings import load_settings
from tether.settings.budgets import TenantBudget, TenantBudgets
from tether.settings.prices import ModelPrice, ModelPrices

A_PRICE = {"input_usd_per_mtok": 2.0, "output_usd_per_mtok": 8.0, "cached_input_usd_per_mtok": 0.5}
PRICES = json.dumps({"m-a": A_PRICE})


def test_cost_prices_uncached_cached_and_output_tokens() -> None:
    prices = ModelPrices.parse(PRICES)
    usage = Usage(input_tokens=1_000_000, output_tokens=250_000, cached_tokens=400_000)
    # 600k uncached at 2.0 + 400k cached at 0.5 + 250k output at 8.0
    assert prices.cost_usd("m-a", usage) == pytest.approx(1.2 + 0.2 + 2.0)
    no_cache_price = ModelPrice(input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)
    assert no_cache_price.cost_usd(usage) == pytest.approx(2.0 + 2.0)  # cached at input price
    assert prices.cost_usd("m-a", Usage()) == 0.0


def test_a_model_without_a_price_is_unpriced_not_free() -> None:
    prices = ModelPrices.parse(PRICES)
    assert prices.cost_usd("m-other", Usage(input_tokens=10)) is None
    assert prices.cost_usd(None, Usage(input_tokens=10)) is None
    spend = spend_of(
        prices,
        {"m-a": Usage(input_tokens=1_000_000), "m-other": Usage(input_tokens=7, output_tokens=3)},
    )
    assert (spend.cost_usd, spend.unpriced_tokens, spend.tokens) == (2.0, 10, 1_000_010)


def _event(seq: int, kind: EventType, payload: object) -> AgentEvent:
    return AgentEvent(
        session_id="s",
        tenant="t",
        seq=seq,
        type=kind,
        payload=payload,
        ts_ms=1,  # type: ignore[arg-type]
    )


def test_usage_by_model_pairs_each_response_with_its_request() -> None:
    call = Usage(input_tokens=5, output_tokens=2, total_tokens=7)
    events = [
        _event(1, EventType.MODEL_REQUEST, ModelRequestPayload(model="m-a", item_count=1)),
        _event(2, EventType.MODEL_RESPONSE, ModelResponsePayload(text="x", usage=call)),
        _event(3, EventType.MODEL_REQUEST, ModelRequestPayload(model="m-b", item_count=2)),
        _event(4, EventType.MODEL_RESPONSE, ModelResponsePayload(text="y", usage=call)),
        _event(5, EventType.MODEL_REQUEST, ModelRequestPayload(model="m-a", item_count=3)),
        _event(6, EventType.MODEL_RESPONSE, ModelResponsePayload(text="z", usage=call)),
    ]
    assert usage_by_model(events) == {"m-a": call + call, "m-b": call}


def test_budgets_fall_back_to_the_star_entry_and_an_empty_one_is_no_budget() -> None:
    budgets = TenantBudgets.parse(
        '{"acme": {"usd_per_day": 5}, "*": {"runs_per_minute": 60}, "open": {}}'
    )
    assert budgets.for_tenant("acme") == TenantBudget(usd_per_day=5)
    assert budgets.for_tenant("other") == TenantBudget(runs_per_minute=60)
    assert budgets.for_tenant("open") is None  # its own entry, with no limit
    assert TenantBudgets.parse("").for_tenant("acme") is None


def test_settings_read_prices_and_budgets_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "budgets.json"
    path.write_text(json.dumps({"acme": {"tokens_per_day": 10}}))
    monkeypatch.setenv("TETHER_TENANT_BUDGETS", f"@{path}")
    monkeypatch.setenv("TETHER_MODEL_PRICES", PRICES)
    settings = load_settings()
    assert TenantBudgets.parse(settings.tenant_budgets).for_tenant("acme") == TenantBudget(
        tokens_per_day=10
    )
    with pytest.raises(ConfigurationError, match="TETHER_TENANT_BUDGETS file"):
        TenantBudgets.parse("@/nonexistent/b.json")


def test_the_batch_summary_sums_cost_and_counts_unpriced_cases() -> None:
    from tether.producer.ops.batch.results import CaseResult
    from tether.producer.ops.batch.summary import SummaryStats, build_summary

    stats = SummaryStats()
    common = {"batch_id": "b", "session_id": "s", "agent": "a", "status": "COMPLETED"}
    stats.add(CaseResult(id="1", line=1, tokens=1100, cost_usd=0.25, **common))
    stats.add(CaseResult(id="2", line=2, tokens=1100, cost_usd=0.5, **common))
    stats.add(CaseResult(id="3", line=3, tokens=900, **common))  # its model has no price
    stats.add(CaseResult(id="4", line=4, **common))  # no tokens: not unpriced either
    fields = {
        "batch_id": "b", "out": "o", "total": 4, "resumed": 0, "invalid_skipped": 0, "runs": 4,
        "wall_s": 1.0, "concurrency": 1, "max_in_flight": 1,
    }  # fmt: skip
    summary = build_summary(stats, **fields)
    assert (summary.total_tokens, summary.unpriced_cases) == (3100, 1)
    assert summary.total_cost_usd == pytest.approx(0.75)
    assert summary.to_dict()["total_cost_usd"] == pytest.approx(0.75)


def test_the_human_lines_show_tokens_and_cost_or_unpriced() -> None:
    from tether.core.results import RunStatus
    from tether.producer.ops.console.fmt import fmt_usd
    from tether.producer.ops.render import result_line
    from tether.runs.contract import RunResult

    base = RunResult(
        run_id="r", request_id="r", session_id="s", tenant="t", status=RunStatus.COMPLETED
    )
    used = base.model_copy(update={"usage": Usage(input_tokens=3000, output_tokens=300)})
    assert "tokens" not in result_line(base).plain
    assert result_line(used).plain.endswith(", attempts 0, 3,300 tokens)")
    priced = used.model_copy(update={"cost_usd": 0.0039})
    assert result_line(priced).plain.endswith(", 3,300 tokens, $0.0039)")
    assert (fmt_usd(None), fmt_usd(0.0), fmt_usd(0.00021), fmt_usd(12.5)) == (
        "unpriced",
        "$0",
        "$0.00021",
        "$12.50",
    )
