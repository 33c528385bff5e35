"""The live progress bar of a batch (rich, on stderr): done and failed counts, runs/s, ETA; and
the hook that keeps the batch's progress record (the console's Batches page) up to date."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _RunsPerSecond(ProgressColumn):
    """Runs (turns) finished per second since this invocation started."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        runs = int(task.fields.get("runs", 0))
        rate = runs / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:6.1f} runs/s", style="cyan")


class BatchProgress:
    """A progress bar, or nothing when ``enabled`` is False.

    Args:
        batch_id: shown as the description.
        total: valid cases in the batch.
        completed: cases already finished by an earlier invocation.
        failed: how many of those failed.
        enabled: show the bar.
        console: where to draw (default: stderr, so stdout stays clean for ``--json``).
        on_case: called after every finished case (with or without a bar).
    """

    def __init__(
        self,
        *,
        batch_id: str,
        total: int,
        completed: int,
        failed: int,
        enabled: bool,
        console: Console | None = None,
        on_case: Callable[[], None] | None = None,
    ) -> None:
        self._on_case = on_case
        self._failed = failed
        self._runs = 0
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("[green]done {task.completed:.0f}[/] [red]failed {task.fields[failed]}"),
                _RunsPerSecond(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TimeElapsedColumn(),
                console=console or Console(stderr=True),
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._progress.add_task(
                batch_id, total=total, completed=completed, failed=failed, runs=0
            )

    def __enter__(self) -> BatchProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def run_done(self) -> None:
        """One run (turn) finished."""
        self._runs += 1
        if self._progress is not None:
            self._progress.update(self._task, runs=self._runs)

    def case_done(self, *, failed: bool) -> None:
        """One case finished."""
        self._failed += int(failed)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, failed=self._failed)
        if self._on_case is not None:
            self._on_case()


__all__ = ["BatchProgress"]
