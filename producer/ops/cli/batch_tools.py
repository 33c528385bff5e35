"""``tether batch retry RESULTS`` and ``tether batch compare A B`` (the batch group's tools)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.producer.ops.cli.batch_support import known_agents, resume_hint, run_guarded
from tether.producer.ops.cli.support import EXIT_FAILED

if TYPE_CHECKING:
    from tether.producer.ops.batch.compare import Comparison

#: ``compare --fail-if-regressed`` exits with this on a significant regression (a check failed).
EXIT_REGRESSED = EXIT_FAILED


def retry_command(
    results: Annotated[Path, typer.Argument(help="The results file of a batch.")],
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, max=10_000, help="Max runs in flight.")
    ] = 8,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Tenant (default: TETHER_TENANT).")
    ] = None,
    scorer: Annotated[
        list[str] | None,
        typer.Option("--scorer", "-s", help="Scorers (default: those the batch ran with)."),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Run the retried cases with this agent instead."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON (no progress bar).")
    ] = False,
) -> None:
    """Run the errored cases of RESULTS again (not failed grading); keep the rest.

    An interrupted retry resumes when run again. --agent corrects the agent of a batch run
    with the wrong one.
    """
    from tether.producer.ops.batch import BatchOptions
    from tether.producer.ops.batch.retry import retry_batch
    from tether.producer.ops.batch.summary import render_summary

    options = BatchOptions(
        agent=agent,
        concurrency=concurrency,
        tenant=tenant,
        progress=not as_json,
        scorers=tuple(scorer or ()),
    )

    def retry(producer: Any) -> Any:
        checked = replace(options, known_agents=known_agents(producer.settings))
        return retry_batch(producer, results, checked)

    with resume_hint():
        summary = run_guarded(retry)
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        render_summary(summary)
        typer.echo(f"retried {summary.retried} errored case(s)")


def compare_command(
    a: Annotated[Path, typer.Argument(help="Results file A (the baseline).")],
    b: Annotated[Path, typer.Argument(help="Results file B (the candidate).")],
    scorer: Annotated[
        str | None,
        typer.Option("--scorer", "-s", help="Compare this scorer's values (default: score)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.")] = 0,
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="Bootstrap resamples.")
    ] = 10_000,
    fail_if_regressed: Annotated[
        bool,
        typer.Option(
            "--fail-if-regressed",
            help="Exit 1 when B is significantly worse (McNemar's exact test at --alpha; the "
            "bootstrap interval when there are only scores).",
        ),
    ] = False,
    alpha: Annotated[
        float,
        typer.Option(
            "--alpha", min=0.0001, max=0.5, help="Significance level of --fail-if-regressed."
        ),
    ] = 0.05,
    fail_if_any_regressed: Annotated[
        bool,
        typer.Option(
            "--fail-if-any-regressed", help="Exit 1 when any single case scored lower (noisy)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compare two batches of the same cases (A the baseline, B the candidate).

    Per-case changes, the bootstrap interval of the mean score difference, McNemar's exact test,
    latency, tokens and cost.
    """
    from tether.producer.ops.batch.compare import compare_results, significant_regression

    comparison: Comparison = run_guarded(
        lambda _: compare_results(a, b, scorer=scorer, resamples=resamples, seed=seed),
        producer=False,
    )
    verdict = significant_regression(comparison, alpha) if fail_if_regressed else None
    if as_json:
        doc = comparison.to_dict()
        if verdict is not None:
            doc["gate"] = verdict.to_dict()
        typer.echo(json.dumps(doc, indent=2))
    else:
        render_comparison(comparison)
        if verdict is not None:
            what = "significant regression" if verdict.regressed else "no significant regression"
            typer.echo(f"--fail-if-regressed: {what}: {verdict.reason}")
    if verdict is not None and verdict.regressed:
        raise typer.Exit(EXIT_REGRESSED)
    if fail_if_any_regressed and comparison.regressed:
        raise typer.Exit(EXIT_REGRESSED)


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _ids(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")


def render_comparison(c: Comparison, console: Any = None) -> None:
    """Print a comparison as a table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"compare {c.a.path} → {c.b.path}", show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value")
    table.add_row(
        "cases compared", f"{c.cases:,} (only in A {c.only_in_a}, only in B {c.only_in_b})"
    )
    table.add_row("[green]improved[/]", f"{len(c.improved):,}  {_ids(c.improved)}")
    table.add_row("[red]regressed[/]", f"{len(c.regressed):,}  {_ids(c.regressed)}")
    table.add_row("unchanged", f"{c.unchanged:,}")
    table.add_row(f"mean {c.scorer or 'score'} A / B", f"{_num(c.mean_a)} / {_num(c.mean_b)}")
    ci = "-" if c.ci95 is None else f"[{c.ci95[0]:+.3f}, {c.ci95[1]:+.3f}]"
    table.add_row("difference B - A (95% CI)", f"{_num(c.mean_difference, '+.3f')} {ci}")
    table.add_row(
        "McNemar exact p",
        f"{c.mcnemar_p:.4g} ({c.a_only_passed} passed only in A, "
        f"{c.b_only_passed} only in B, {c.pairs} pairs)",
    )
    table.add_row(
        "latency mean A / B",
        f"{_num(c.a.latency_mean_ms, ',.0f')} / {_num(c.b.latency_mean_ms, ',.0f')} ms",
    )
    table.add_row("tokens A / B", f"{c.a.tokens:,} / {c.b.tokens:,}")
    if c.cost_difference_usd is not None:
        table.add_row(
            "cost A / B", f"${_num(c.a.cost_usd, ',.4f')} / ${_num(c.b.cost_usd, ',.4f')}"
        )
    (console or Console()).print(table)


def register(app: typer.Typer) -> None:
    """Add ``retry`` and ``compare`` to the batch group."""
    app.command("retry")(retry_command)
    app.command("compare")(compare_command)


__all__ = ["compare_command", "register", "render_comparison", "retry_command"]
