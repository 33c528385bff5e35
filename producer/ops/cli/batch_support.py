"""Plumbing shared by the ``tether batch`` commands: their settings, their exit codes, the
agents they accept, the hint Ctrl-C prints (the same command resumes), and the guard that turns
a refused batch or a service error into one line and its exit code.

The group (:mod:`tether.producer.ops.cli.batch`) and its tools
(:mod:`~tether.producer.ops.cli.batch_tools`, :mod:`~tether.producer.ops.cli.batch_outputs`)
all import this module and none imports another, so the batch CLI reads bottom-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from tether.producer.ops.cli.support import EXIT_FAILED, EXIT_USAGE, exit_code_for

if TYPE_CHECKING:  # the settings (pydantic-settings) too: `tether --help` does not need them
    from tether.settings import Settings

#: The exit codes of every ``tether`` command (:mod:`tether.producer.ops.cli.support`): 2 usage
#: (invalid cases, bad option), 4 a service that did not answer, 1 (with ``--fail-on-error``) a
#: case that failed or did not pass.
EXIT_INVALID = EXIT_USAGE
EXIT_FAILED_CASES = EXIT_FAILED


def settings() -> Settings:
    """Settings as the rest of the CLI reads them (a relative file:// store made absolute)."""
    from tether.producer.ops.cli.support import cli_settings

    return cli_settings()


def known_agents(settings: Settings) -> frozenset[str] | None:
    """The agents a worker with these settings knows: the built-ins, the ``tether.agents``
    entry points and ``TETHER_AGENT_MODULES``, read here, as ``tether schedule add`` reads
    them. None when this process cannot tell: modules that do not import here (code only the
    workers have), said in a warning; the workers then judge each case's agent.

    Without ``TETHER_AGENT_MODULES`` the workers of ``tether up`` know the built-ins only: a
    typo used to run every case to failure and exit 0.
    """
    from tether.errors import ConfigurationError
    from tether.producer.ops.cli.support import warn_line
    from tether.runtime.registry import AgentRegistry

    try:
        return frozenset(AgentRegistry.default(settings.agent_modules).names())
    except (ConfigurationError, ImportError) as exc:
        warn_line(f"cannot check the batch's agents here ({exc}); the workers judge each case")
        return None


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


__all__ = [
    "EXIT_FAILED_CASES",
    "EXIT_INVALID",
    "known_agents",
    "resume_hint",
    "run_guarded",
    "settings",
]
