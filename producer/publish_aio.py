"""Publishing run messages for :class:`~tether.producer.client_aio.AsyncProducer` (asyncio
only: the blocking producer publishes on its caller's thread with
:func:`~tether.producer.publish.publish_runs`).

Celery (kombu) has no asyncio client, so :class:`BackgroundPublisher` gives each asyncio
producer one daemon thread that publishes whatever the event loop handed it since its last
publish, as one batch on one connection: the loop never waits on the broker, and no thread is
made per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from celery import Celery

from tether.producer.publish import publish_runs
from tether.producer.submission import Message

#: Messages the publisher thread publishes between two pauses. Publishing is CPU work under the
#: GIL (about 0.3 ms a message): in one go, 200 messages kept the event loop from running for
#: 50-100 ms on a busy 2-core machine; a pause every chunk lets the loop's thread in.
PUBLISH_CHUNK = 20
PUBLISH_PAUSE_S = 0.002


@dataclass
class _Job:
    messages: list[Message]
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[None]


def _finish(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():  # the caller stopped waiting
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


class BackgroundPublisher:
    """Publishes run messages from one daemon thread on behalf of an event loop.

    Args:
        app: returns the Celery app to publish with (called on the publisher thread, so
            building it, and its first connection, never block the loop).
    """

    def __init__(self, app: Callable[[], Celery]) -> None:
        self._app = app
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    async def publish(self, messages: list[Message]) -> None:
        """Publish ``messages``; returns once the broker took them.

        Raises:
            RuntimeError: the publisher was closed.
            Exception: what publishing raised (kombu's ``OperationalError`` when the broker
                cannot be reached).
        """
        if not messages:
            return
        loop = asyncio.get_running_loop()
        job = _Job(messages, loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise RuntimeError("this producer was closed; make a new one to submit runs")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tether-publisher", daemon=True
                )
                self._thread.start()
            self._jobs.put(job)
        await job.done

    def close(self, timeout_s: float = 5.0) -> None:
        """Publish what was handed over, then stop the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._jobs.put(None)
        if thread is not None:
            thread.join(timeout=timeout_s)

    def _next_batch(self) -> tuple[list[_Job], bool]:
        """Every job waiting now (blocks for the first); and whether to stop after them."""
        first = self._jobs.get()
        if first is None:
            return [], True
        jobs = [first]
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return jobs, False
            if job is None:
                return jobs, True
            jobs.append(job)

    def _run(self) -> None:
        stop = False
        while not stop:
            jobs, stop = self._next_batch()
            if not jobs:
                continue
            error: BaseException | None = None
            try:
                messages = [m for job in jobs for m in job.messages]
                publish_runs(self._app(), messages, chunk=PUBLISH_CHUNK, pause_s=PUBLISH_PAUSE_S)
            except Exception as exc:  # handed to every caller of the batch
                error = exc
            for job in jobs:
                with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits
                    job.loop.call_soon_threadsafe(_finish, job.done, error)
