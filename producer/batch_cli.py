"""``tether batch``: run a JSONL file of evaluation cases on the workers.

The CLI module (``producer/cli.py``) calls :func:`register` to add the command; the engine is
imported lazily so ``tether --help`` stays fast. ``python -m producer.batch_cli`` runs the command
on its own (useful when only the batch command is needed, e.g. in tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from shared.settings import Settings, load_settings

#: Exit codes, as for every ``tether`` command: 2 usage (invalid cases, bad option), 1 a
#: service error, or (with ``--fail-on-error``) a case that failed or did not pass.
EXIT_INVALID = 2
EXIT_ERROR = 1
EXIT_FAILED_CASES = 1


def _settings() -> Settings:
    """Settings as the rest of the CLI reads them (a relative file:// store made absolute)."""
    try:
        from producer.cli_support import cli_settings
    except ImportError:  # the batch command used without the full CLI
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
    from producer.batch import run_batch
    from producer.batch_cases import CasesInvalid
    from producer.batch_summary import render_summary
    from producer.client import Producer
    from shared.errors import TetherError, UsageError

    try:
        with Producer(_settings()) as producer:
            summary = run_batch(
                producer,
                cases,
                agent=agent,
                concurrency=concurrency,
                out=out,
                batch_id=batch_id,
                skip_invalid=skip_invalid,
                tenant=tenant,
                progress=not as_json,
            )
    except CasesInvalid as exc:  # several lines, one per bad case: printed as they are
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_INVALID) from exc
    except TetherError as exc:
        typer.echo(" ".join(f"error: {exc.error_type}: {exc}".split()), err=True)
        raise typer.Exit(EXIT_INVALID if isinstance(exc, UsageError) else EXIT_ERROR) from exc
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        render_summary(summary)
    if fail_on_error and (summary.failed or summary.not_passed):
        raise typer.Exit(EXIT_FAILED_CASES)


def register(app: typer.Typer) -> None:
    """Add the ``batch`` command to ``app``."""
    app.command("batch")(batch_command)


def main() -> None:
    """Run ``batch`` as a stand-alone command (``python -m producer.batch_cli``)."""
    app = typer.Typer(add_completion=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
