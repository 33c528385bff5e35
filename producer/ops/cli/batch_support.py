"""Plumbing shared by the ``tether batch`` commands: their settings, their exit codes, and the
guard that turns a refused batch or a service error into one line and its exit code.

The group (:mod:`tether.producer.ops.cli.batch`) and its tools
(:mod:`~tether.producer.ops.cli.batch_tools`, :mod:`~tether.producer.ops.cli.batch_outputs`)
all import this module and none imports another, so the batch CLI reads bottom-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # the settings (pydantic-settings) too: `tether --help` does not need them
    from tether.settings import Settings

from tether.producer.ops.cli.support import EXIT_FAILED, EXIT_USAGE, exit_code_for

#: The exit codes of every ``tether`` command (:mod:`tether.producer.ops.cli.support`): 2 usage
#: (invalid cases, bad option), 4 a service that did not answer, 1 (with ``--fail-on-error``) a
#: case that failed or did not pass.
EXIT_INVALID = EXIT_USAGE
EXIT_FAILED_CASES = EXIT_FAILED


def settings() -> Settings:
    """Settings as the rest of the CLI reads them (a relative file:// store made absolute)."""
    from tether.producer.ops.cli.support import cli_settings

    return cli_settings()


@contextmanager
def resume_hint() -> Iterator[None]:
    """On Ctrl-C, say how to go on: the same command resumes exactly (finished cases are kept
    in the results file, cases in flight are re-attached to their runs, nothing runs twice)."""
    try:
        yield
    except KeyboardInterrupt:
        from tether.producer.ops.cli.support import STATE

        typer.echo(
            "interrupted: finished cases are kept in the results file; to resume (nothing "
            f"finished runs again), run the same command: {STATE.command_line()}",
            err=True,
        )
        raise


def run_guarded(work: Any, *, producer: bool = True) -> Any:
    """Run ``work(producer)``, turning a refusal or a service error into its exit code."""
    from tether.errors import TetherError
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
        raise typer.Exit(exit_code_for(exc)) from exc


__all__ = ["EXIT_FAILED_CASES", "EXIT_INVALID", "resume_hint", "run_guarded", "settings"]
