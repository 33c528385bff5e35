"""``tether batch``: run a dataset of evaluation cases on the workers; retry and compare.

``tether batch CASES ...`` (short for ``tether batch run CASES ...``) runs a batch,
``tether batch retry RESULTS`` runs its errored cases again, ``tether batch compare A B``
compares two batches (:mod:`tether.producer.ops.cli.batch_tools`). The CLI package
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

from tether.producer.ops.cli import batch_outputs, batch_tools

if TYPE_CHECKING:  # the settings (pydantic-settings) too: `tether --help` does not need them
    from tether.producer.ops.batch import BatchOptions, BatchSummary
    from tether.producer.ops.batch.sources import DatasetOptions
    from tether.settings import Settings

#: Exit codes, as for every ``tether`` command: 2 usage (invalid cases, bad option), 1 a
#: service error, or (with ``--fail-on-error``) a case that failed or did not pass.
EXIT_INVALID = 2
EXIT_ERROR = 1
EXIT_FAILED_CASES = 1


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


def settings() -> Settings:
    """Settings as the rest of the CLI reads them (a relative file:// store made absolute)."""
    try:
        from tether.producer.ops.cli.support import cli_settings
    except ImportError:  # the batch command used without the full CLI
        from tether.settings import load_settings

        return load_settings()
    return cli_settings()


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


ScorerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        "-s",
        help="Scorer (repeatable): exact, contains, regex, includes-any, numeric[:tol=X], "
        "json[:field=a.b|schema=FILE], f1, judge[:rubric=FILE,model=M], or module:function.",
    ),
]


@batch_app.command("run")
def batch_command(
    cases: Annotated[
        Path,
        typer.Argument(help="Cases: JSONL, CSV, Parquet, or a saved Hugging Face dataset."),
    ],
    agent: Annotated[
        str | None, typer.Option("--agent", "-a", help="Agent of cases that name none.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, max=10_000, help="Max runs in flight.")
    ] = 8,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Results JSONL (default: <cases>.results.jsonl)."),
    ] = None,
    batch_id: Annotated[
        str | None,
        typer.Option("--batch-id", help="Batch id (default: derived from the file's content)."),
    ] = None,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="Skip bad lines instead of refusing to start.")
    ] = False,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Tenant (default: TETHER_TENANT).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON (no progress bar).")
    ] = False,
    fail_on_error: Annotated[
        bool,
        typer.Option(
            "--fail-on-error", help="Exit 1 when any case failed or did not pass its grader."
        ),
    ] = False,
    scorer: ScorerOption = None,
    epochs: Annotated[
        int, typer.Option("--epochs", min=1, max=1000, help="Runs of each case (fresh sessions).")
    ] = 1,
    input_field: Annotated[
        str | None, typer.Option("--input-field", help="Dataset field of the input.")
    ] = None,
    target_field: Annotated[
        str | None, typer.Option("--target-field", help="Dataset field of the expected value.")
    ] = None,
    id_field: Annotated[
        str | None, typer.Option("--id-field", help="Dataset field of the case id.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="First N rows.")] = None,
    sample: Annotated[
        int | None, typer.Option("--sample", min=1, help="N rows drawn at random (--seed).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --sample.")] = 0,
    filters: Annotated[
        list[str] | None,
        typer.Option("--filter", help="Keep rows with key=value (tag=x: tagged x); repeatable."),
    ] = None,
) -> None:
    """Run every case of CASES on the workers, write one result line per case, print a summary.

    Running the same command again resumes: finished cases are skipped, cases still in flight are
    re-attached, and nothing is applied twice.
    """
    from tether.producer.ops.batch import BatchOptions
    from tether.producer.ops.batch.summary import render_summary

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
    summary = run_guarded(lambda producer: _run(producer, cases, options))
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        render_summary(summary)
    if fail_on_error and (summary.failed or summary.not_passed):
        raise typer.Exit(EXIT_FAILED_CASES)


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


def known_agents(settings: Settings) -> frozenset[str] | None:
    """The agents a worker with these settings knows (built-ins, entry points,
    ``TETHER_AGENT_MODULES``); None when this process cannot tell what the workers know, and
    the workers then judge each case: no ``TETHER_AGENT_MODULES`` here (a producer's machine
    often has no agent code: the workers' modules would be refused as unknown), or modules
    that do not import here."""
    from tether.errors import ConfigurationError
    from tether.runtime.registry import AgentRegistry

    if not settings.agent_modules:
        return None

    try:
        return frozenset(AgentRegistry.default(settings.agent_modules).names())
    except (ConfigurationError, ImportError):  # a module or entry point only workers have
        return None


def run_guarded(work: Any, *, producer: bool = True) -> Any:
    """Run ``work(producer)``, turning a refusal or a service error into its exit code."""
    from tether.errors import TetherError, UsageError
    from tether.producer.ops.batch.cases import CasesInvalid

    try:
        if not producer:
            return work(None)
        from tether.producer.client import Producer

        with Producer(settings()) as made:
            return work(made)
    except CasesInvalid as exc:  # several lines, one per bad case: printed as they are
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_INVALID) from exc
    except TetherError as exc:
        typer.echo(" ".join(f"error: {exc.error_type}: {exc}".split()), err=True)
        raise typer.Exit(EXIT_INVALID if isinstance(exc, UsageError) else EXIT_ERROR) from exc


batch_tools.register(batch_app)
batch_outputs.register(batch_app)


def register(app: typer.Typer) -> None:
    """Add the ``batch`` group to ``app``."""
    app.add_typer(batch_app, name="batch")


def main() -> None:
    """Run ``batch`` as a stand-alone command (``python -m tether.producer.ops.cli.batch``)."""
    batch_app()


if __name__ == "__main__":
    main()
