"""``tether batch export RESULTS`` and ``tether batch report RESULTS``: a finished batch as an
Inspect AI log, or as a self-contained HTML report, each with the cases' transcripts read from
the stored sessions (``TETHER_STORE_URL``)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.producer.ops.cli.batch_support import run_guarded, settings

if TYPE_CHECKING:
    from tether.producer.ops.batch.results import CaseResult


class ExportFormat(StrEnum):
    """What ``export`` writes."""

    INSPECT = "inspect"


TENANT = typer.Option("--tenant", help="Tenant of the batch's sessions (default: TETHER_TENANT).")
NO_TRANSCRIPTS = typer.Option(
    "--no-transcripts", help="Do not read the sessions (no store needed; no transcripts)."
)


def _transcripts(tenant: str | None, enabled: bool) -> Any:
    """``events_of(result)``: the line's events (none when disabled)."""
    from tether.producer.ops.batch.outputs.transcripts import case_events, reader_from_settings

    if not enabled:
        return lambda _result: []
    current = settings()
    reader = reader_from_settings(current)
    who = tenant or current.tenant
    return lambda result: case_events(reader, result, who)


def export_command(
    results: Annotated[Path, typer.Argument(help="The results file of a batch.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The log to write (run.eval).")],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="The log format.")] = (
        ExportFormat.INSPECT
    ),
    tenant: Annotated[str | None, TENANT] = None,
    no_transcripts: Annotated[bool, NO_TRANSCRIPTS] = False,
) -> None:
    """Write RESULTS as an Inspect AI eval log (`inspect view` shows it)."""
    from tether.producer.ops.batch.outputs.inspect_log import write_inspect_log
    from tether.producer.ops.batch.outputs.transcripts import to_messages
    from tether.producer.ops.batch.results import read_results

    def work(_: object) -> Path:
        lines = read_results(results)
        events_of = _transcripts(tenant, not no_transcripts)

        def messages_of(result: CaseResult) -> Any:
            return to_messages(events_of(result))

        return write_inspect_log(lines, messages_of, out)

    written = run_guarded(work, producer=False)
    typer.echo(f"wrote {written} ({fmt.value})")


def report_command(
    results: Annotated[Path, typer.Argument(help="The results file of a batch.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The page to write (report.html).")],
    compare: Annotated[
        Path | None,
        typer.Option("--compare", help="A baseline results file of the same cases."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the compare bootstrap.")] = 0,
    tenant: Annotated[str | None, TENANT] = None,
    no_transcripts: Annotated[bool, NO_TRANSCRIPTS] = False,
) -> None:
    """Write RESULTS as one self-contained HTML page: summary, charts, cases, transcripts."""
    from tether.producer.ops.batch.outputs.report_data import build_report_data
    from tether.producer.ops.batch.outputs.report_html import write_report

    def work(_: object) -> Path:
        events_of = _transcripts(tenant, not no_transcripts)
        data = build_report_data(results, events_of, compare_to=compare, seed=seed)
        return write_report(data, out)

    written = run_guarded(work, producer=False)
    typer.echo(f"wrote {written}")


def register(app: typer.Typer) -> None:
    """Add ``export`` and ``report`` to the batch group."""
    app.command("export")(export_command)
    app.command("report")(report_command)


__all__ = ["export_command", "register", "report_command"]
