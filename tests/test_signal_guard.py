"""``SignalGuard`` (the embedded stack's signal handling): a signal whose exception is lost
still stops the caller at its next checkpoint.

The handler runs wherever the main thread is; when that is a finalizer (``__del__``), Python
prints "Exception ignored" and drops the exception. ``tests/test_demo.py`` saw it happen under
load: the SIGINT landed in a Redis connection pool's ``__del__``, and ``tether demo`` ran to
the end and exited 0. Here the handler is invoked inside a finalizer deliberately.
"""

from __future__ import annotations

import gc
import signal
import sys
from typing import Any

import pytest

from tether.producer.ops.embedded import Interrupted, SignalGuard


# the exception dropped in the finalizer is the point: pytest reports it as unraisable
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_signal_lost_in_a_finalizer_is_raised_at_the_next_checkpoint() -> None:
    with SignalGuard() as guard:
        guard.check()  # nothing received: no-op

        class Finalized:
            def __del__(self) -> None:
                guard._handle(signal.SIGINT, None)  # what a signal arriving here does

        Finalized()
        gc.collect()
        with pytest.raises(Interrupted, match="interrupted by SIGINT") as caught:
            guard.check()
        assert caught.value.signum == signal.SIGINT


def test_a_signal_in_a_critical_section_is_raised_at_its_end() -> None:
    with SignalGuard() as guard, pytest.raises(Interrupted, match="SIGTERM"):
        with guard.critical():
            guard._handle(signal.SIGTERM, None)  # deferred, not raised here
        pytest.fail("the end of the critical section raises")


def test_a_signal_in_a_finalizer_prints_no_traceback_and_stops_at_the_next_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tests/test_demo.py`` saw "Exception ignored in ConnectionPool.__del__" and a traceback
    on stderr: the handler now defers a signal that lands in a finalizer."""
    dropped: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    with SignalGuard() as guard:

        class Finalized:
            def __del__(self) -> None:
                guard._handle(signal.SIGINT, sys._getframe())  # the frame a signal would see

        Finalized()
        gc.collect()
        assert dropped == []
        with pytest.raises(Interrupted, match="interrupted by SIGINT"):
            guard.check()
