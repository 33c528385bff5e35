"""Racing writers for the Agents SDK session's tests: threads that start at once, each on a
session object of its own (as separate processes would be)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def append_in_threads(
    open_session: Callable[[], Any],
    item: Callable[[int, int], dict[str, Any]],
    *,
    writers: int,
    per_writer: int,
) -> None:
    """``writers`` threads, each appending ``item(writer, n)`` for n in range(per_writer), one
    item per call, after a barrier; the first error of any thread is raised here."""
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(w: int) -> None:
        session = open_session()
        barrier.wait()
        try:
            for n in range(per_writer):
                session.append_items([item(w, n)])
        except BaseException as exc:  # surfaced below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
