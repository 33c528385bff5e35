"""Plumbing shared by the ``tether batch`` commands: their settings, their exit codes, and the
guard that turns a refused batch or a service error into one line and its exit code.

The group (:mod:`tether.producer.ops.cli.batch`) and its tools
(:mod:`~tether.producer.ops.cli.batch_tools`, :mod:`~tether.producer.ops.cli.batch_outputs`)
all import this module and none imports another, so the batch CLI reads bottom-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # the settings (pydantic-settings) too: `tether --help` does not need them
    from tether.settings import Settings

#: Exit codes, as for every ``tether`` command: 2 usage (invalid cases, bad option), 1 a
#: service error, or (with ``--fail-on-error``) a case that failed or did not pass.
EXIT_INVALID = 2
EXIT_ERROR = 1
EXIT_FAILED_CASES = 1


def settings() -> Settings:
    """Settings as the rest of the CLI reads them (a relative file:// store made absolute)."""
    try:
        from tether.producer.ops.cli.support import cli_settings
    except ImportError:  # the batch command used without the full CLI
        from tether.settings import load_settings

        return load_settings()
    return cli_settings()


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


__all__ = ["EXIT_ERROR", "EXIT_FAILED_CASES", "EXIT_INVALID", "run_guarded", "settings"]
