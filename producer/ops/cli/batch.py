"""``tether batch``: run a JSONL file of evaluation cases on the workers.

The CLI package (``producer/ops/cli/``) calls :func:`register` to add the command; the engine is
imported lazily so ``tether --help`` stays fast. ``python -m tether.producer.ops.cli.batch`` runs
the
command on its own (useful when only the batch command is needed, e.g. in tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # the settings (pydantic-settings) too: `tether --help` does not need them
    from tether.producer.ops.batch import BatchOptions, BatchSummary
    from tether.settings import Settings

#: Exit codes, as for every ``tether`` command: 2 usage (invalid cases, bad option), 1 a
#: service error, or (with ``--fail-on-error``) a case that failed or did not pass.
EXIT_INVALID = 2
EXIT_ERROR = 1
EXIT_FAILED_CASES = 1


def _settings() -> Settings:
    """Settings as the rest of the CLI reads them (a relative file:// store made absolute)."""
    try:
        from tether.producer.ops.cli.support import cli_settings
    except ImportError:  # the batch command used without the full CLI
        from tether.settings import load_settings

        return load_settings()
    return cli_settings()


def batch_command(
    cases: Annotated[Path, typer.Argument(help="JSONL file of cases, one JSON object a line.")],
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
    )
    summary = _run(cases, options)
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        render_summary(summary)
    if fail_on_error and (summary.failed or summary.not_passed):
        raise typer.Exit(EXIT_FAILED_CASES)


def _run(cases: Path, options: BatchOptions) -> BatchSummary:
    """Run the batch, turning a refusal or a service error into its exit code."""
    from tether.errors import TetherError, UsageError
    from tether.producer.client import Producer
    from tether.producer.ops.batch import run_batch_with
    from tether.producer.ops.batch.cases import CasesInvalid

    try:
        with Producer(_settings()) as producer:
            return run_batch_with(producer, cases, options)
    except CasesInvalid as exc:  # several lines, one per bad case: printed as they are
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_INVALID) from exc
    except TetherError as exc:
        typer.echo(" ".join(f"error: {exc.error_type}: {exc}".split()), err=True)
        raise typer.Exit(EXIT_INVALID if isinstance(exc, UsageError) else EXIT_ERROR) from exc


def register(app: typer.Typer) -> None:
    """Add the ``batch`` command to ``app``."""
    app.command("batch")(batch_command)


def main() -> None:
    """Run ``batch`` as a stand-alone command (``python -m tether.producer.ops.cli.batch``)."""
    app = typer.Typer(add_completion=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
