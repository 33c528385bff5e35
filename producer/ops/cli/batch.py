"""``tether batch``: the group, and its ``run`` command (a dataset of evaluation cases on the
workers).

``tether batch CASES ...`` (short for ``tether batch run CASES ...``) runs a batch; the group's
other commands live below it: ``retry`` and ``compare`` in
:mod:`~tether.producer.ops.cli.batch_tools`, ``export`` and ``report`` in
:mod:`~tether.producer.ops.cli.batch_outputs`, and what they all share (settings, exit codes, the
error guard) in :mod:`~tether.producer.ops.cli.batch_support`. The CLI package
(``producer/ops/cli/``) calls :func:`register` to add the group; the engine is imported lazily so
``tether --help`` stays fast. ``python -m tether.producer.ops.cli.batch`` runs the group on its
own (useful when only the batch commands are needed, e.g. in tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from tether.producer.ops.cli.batch_outputs import register as add_outputs
from tether.producer.ops.cli.batch_support import (
    EXIT_FAILED_CASES,
    known_agents,
    resume_hint,
    run_guarded,
)
from tether.producer.ops.cli.batch_tools import register as add_tools

if TYPE_CHECKING:  # the settings (pydantic-settings) too: `tether --help` does not need them
    from tether.producer.ops.batch import BatchOptions, BatchSummary
    from tether.producer.ops.batch.sources import DatasetOptions


class _RunByDefault(TyperGroup):
    """``tether batch CASES ...`` means ``tether batch run CASES ...``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's vendored click
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


batch_app = typer.Typer(
    cls=_RunByDefault,
    no_args_is_help=True,
    add_completion=False,
    help="Run a dataset of cases on the workers (tether batch CASES), retry errored cases, "
    "compare two batches.",
)


def _dataset(
    input_field: str | None,
    target_field: str | None,
    id_field: str | None,
    limit: int | None,
    sample: int | None,
    seed: int,
    filters: list[str],
) -> DatasetOptions:
    from tether.producer.ops.batch.sources import DatasetOptions, parse_filter

    return DatasetOptions(
        input_field=input_field,
        target_field=target_field,
        id_field=id_field,
        limit=limit,
        sample=sample,
        seed=seed,
        filters=tuple(parse_filter(f) for f in filters),
    )


# The run command's surface, one alias per option so the command itself reads as its steps.
CasesArgument = Annotated[
    Path, typer.Argument(help="Cases: JSONL, CSV, Parquet, or a saved Hugging Face dataset.")
]
AgentOption = Annotated[
    str | None, typer.Option("--agent", "-a", help="Agent of cases that name none.")
]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", "-c", min=1, max=10_000, help="Max runs in flight.")
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Results JSONL (default: <cases>.results.jsonl)."),
]
BatchIdOption = Annotated[
    str | None,
    typer.Option("--batch-id", help="Batch id (default: derived from the file's content)."),
]
SkipInvalidOption = Annotated[
    bool, typer.Option("--skip-invalid", help="Skip bad lines instead of refusing to start.")
]
TenantOption = Annotated[
    str | None, typer.Option("--tenant", help="Tenant (default: TETHER_TENANT).")
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the summary as JSON (no progress bar).")
]
FailOnErrorOption = Annotated[
    bool,
    typer.Option("--fail-on-error", help="Exit 1 when any case failed or did not pass its grader."),
]
ScorerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        "-s",
        help="Scorer (repeatable): exact, contains, regex, includes-any, numeric[:tol=X], "
        "json[:field=a.b|schema=FILE], f1, judge[:rubric=FILE,model=M], or module:function.",
    ),
]
EpochsOption = Annotated[
    int, typer.Option("--epochs", min=1, max=1000, help="Runs of each case (fresh sessions).")
]
# the dataset's options: which rows of CASES, and which of their fields, make the cases
InputFieldOption = Annotated[
    str | None, typer.Option("--input-field", help="Dataset field of the input.")
]
TargetFieldOption = Annotated[
    str | None, typer.Option("--target-field", help="Dataset field of the expected value.")
]
IdFieldOption = Annotated[
    str | None, typer.Option("--id-field", help="Dataset field of the case id.")
]
LimitOption = Annotated[int | None, typer.Option("--limit", min=1, help="First N rows.")]
SampleOption = Annotated[
    int | None, typer.Option("--sample", min=1, help="N rows drawn at random (--seed).")
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of --sample.")]
FilterOption = Annotated[
    list[str] | None,
    typer.Option("--filter", help="Keep rows with key=value (tag=x: tagged x); repeatable."),
]


@batch_app.command("run")
def batch_command(
    cases: CasesArgument,
    agent: AgentOption = None,
    concurrency: ConcurrencyOption = 8,
    out: OutOption = None,
    batch_id: BatchIdOption = None,
    skip_invalid: SkipInvalidOption = False,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    fail_on_error: FailOnErrorOption = False,
    scorer: ScorerOption = None,
    epochs: EpochsOption = 1,
    input_field: InputFieldOption = None,
    target_field: TargetFieldOption = None,
    id_field: IdFieldOption = None,
    limit: LimitOption = None,
    sample: SampleOption = None,
    seed: SeedOption = 0,
    filters: FilterOption = None,
) -> None:
    """Run every case of CASES on the workers, write one result line per case, print a summary.

    Running the same command again resumes: finished cases are skipped, cases still in flight are
    re-attached, and nothing is applied twice.
    """
    from tether.producer.ops.batch import BatchOptions

    options = BatchOptions(
        agent=agent,
        concurrency=concurrency,
        out=out,
        batch_id=batch_id,
        skip_invalid=skip_invalid,
        tenant=tenant,
        progress=not as_json,
        epochs=epochs,
        scorers=tuple(scorer or ()),
        dataset=_dataset(input_field, target_field, id_field, limit, sample, seed, filters or []),
    )
    with resume_hint():
        summary = run_guarded(lambda producer: _run(producer, cases, options))
    _report(summary, as_json=as_json)
    if fail_on_error and (summary.failed or summary.not_passed):
        raise typer.Exit(EXIT_FAILED_CASES)


def _report(summary: BatchSummary, *, as_json: bool) -> None:
    """Print the summary: JSON for a program, a table for a person."""
    from tether.producer.ops.batch.summary import render_summary

    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        render_summary(summary)


def _run(producer: Any, cases: Path, options: BatchOptions) -> BatchSummary:
    from dataclasses import replace

    from tether.producer.ops.batch import run_batch_with
    from tether.producer.ops.cli.support import warn_line
    from tether.producer.worker_watch import warn_if_unconsumed

    # the CLI refuses an unknown agent up front (exit 2), as 'tether schedule add' does
    known = known_agents(producer.settings)
    # no silent hang, as 'tether run' warns: the batch waits for workers that never come
    warn_if_unconsumed(producer, warn_line)
    return run_batch_with(producer, cases, replace(options, known_agents=known))


add_tools(batch_app)
add_outputs(batch_app)


def register(app: typer.Typer) -> None:
    """Add the ``batch`` group to ``app``."""
    app.add_typer(batch_app, name="batch")


def main() -> None:
    """Run ``batch`` as a stand-alone command (``python -m tether.producer.ops.cli.batch``)."""
    import sys

    from tether.producer.ops.cli.support import STATE

    STATE.argv = ["batch", *sys.argv[1:]]
    batch_app()


if __name__ == "__main__":
    main()
