"""Coalescing of concurrent asyncio calls: what many coroutines ask in one event-loop turn goes
out as one batch (one Redis round trip), so ``asyncio.gather`` over hundreds of runs costs a
few round trips and a few connections, not hundreds. Asyncio only: a thread has no loop turns
(the blocking producer batches what one caller hands it, ``submit_many``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class TurnBatcher(Generic[T, R]):
    """Runs ``flush`` over the items of every :meth:`submit` made while the previous flush was
    in flight (or in the same loop turn), in call order.

    Args:
        flush: takes the items of a batch, returns one answer per item, in order.
    """

    def __init__(self, flush: Callable[[list[T]], Awaitable[list[R]]]) -> None:
        self._flush = flush
        self._pending: list[tuple[list[T], asyncio.Future[list[R]]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, items: list[T]) -> list[R]:
        """The answers for ``items`` (what ``flush`` raised, when it failed)."""
        done: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        self._pending.append((items, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        return await done

    async def _run(self) -> None:
        await asyncio.sleep(0)  # let the callers of this turn join
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                answers = await self._flush([item for items, _ in batch for item in items])
            except Exception as exc:  # each caller of the batch sees the failure
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            start = 0
            for items, done in batch:
                if not done.done():  # a caller that stopped waiting gets nothing
                    done.set_result(answers[start : start + len(items)])
                start += len(items)
