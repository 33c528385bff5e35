"""The embedded default: a private Redis, a local store and two real workers, torn down surely.

:class:`EmbeddedStack` starts what the settings do not provide:

- no ``TETHER_BROKER_URL`` / ``TETHER_REDIS_URL``: a private, password-protected
  ``redis-server`` on a free loopback port (its files in a fresh temporary directory);
- no ``TETHER_STORE_URL``: the local-directory store under ``<base_dir>/store``;
- unless told not to: worker processes (``python -m celery -A tether.worker.app worker``), each in
its
  own process group, logging to ``<base_dir>/logs``.

Teardown (:meth:`EmbeddedStack.close`) stops the workers (warm shutdown, then SIGKILL of the
whole group) and the Redis server; it runs on normal exit, on exceptions, and, through
:class:`SignalGuard`, on SIGINT, SIGTERM and SIGHUP. Spawning happens inside
:meth:`SignalGuard.critical` so that a signal can never land between starting a process and
recording it. Only SIGKILL of this process can leave the children behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType

from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerProcess
from tether.persistence.redis_conn import redact_url
from tether.producer.ops.cli.support import require_shared_storage, resolve_store_url
from tether.settings import Settings

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_STOP_TIMEOUT_S = 10.0


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGINT, SIGTERM or SIGHUP arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


class SignalGuard:
    """Turns SIGINT/SIGTERM/SIGHUP into :class:`Interrupted`, deferred inside critical sections.

    Install it from the main thread (``with SignalGuard() as guard``); elsewhere it does nothing.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._pending: int | None = None
        self._previous: dict[int, object] = {}
        self._active = False
        self.received: int | None = None
        """The last signal received (kept: see :meth:`check`)."""

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._active:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)  # type: ignore[arg-type]
            self._active = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if self._depth > 0 or _in_finalizer(frame):
            # in a finalizer Python would print the exception as "Exception ignored" with its
            # traceback and drop it: :meth:`check` raises it at the next point of the flow
            self._pending = signum
            return
        raise Interrupted(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal arrived: its own exception can be lost, since
        the handler runs wherever the main thread is, and Python ignores an exception raised
        in a finalizer (``__del__``) or a weakref callback. Call it at points of the normal
        flow (a lost SIGINT made ``tether demo`` run to the end and exit 0).

        Raises:
            Interrupted: a signal was received.
        """
        if self.received is not None:
            raise Interrupted(self.received)

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """Delay signals until the block is over (then raise :class:`Interrupted`)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            pending, self._pending = self._pending, None
            if self._depth == 0 and pending is not None:
                raise Interrupted(pending)

    @contextlib.contextmanager
    def ignored(self) -> Iterator[None]:
        """Ignore these signals during the block (teardown must not be cut short)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)


class EmbeddedStack:
    """What ``tether demo`` needs, started on demand and stopped surely.

    Args:
        settings: the user's settings; fields they set explicitly are used as given.
        base_dir: where the local store and worker logs go (default store ``<base_dir>/store``).
        worker_count: how many worker processes to start (0: use workers already running).
        guard: the signal guard of the calling command.
    """

    def __init__(
        self,
        settings: Settings,
        base_dir: Path,
        *,
        worker_count: int = 2,
        guard: SignalGuard | None = None,
    ) -> None:
        self.base_dir = base_dir.resolve()
        self.guard = guard or SignalGuard()
        self.user_settings = settings
        self.settings = settings
        self.redis: RedisServer | None = None
        self.workers: list[WorkerProcess] = []
        self.worker_count = worker_count
        self.env: dict[str, str] = {}
        self._closed = False
        self._lock = threading.Lock()

    # --- what to start -------------------------------------------------------------------------

    @property
    def embedded_redis(self) -> bool:
        """True when the settings name no Redis, so a private one is started."""
        return not ({"broker_url", "redis_url"} & self.user_settings.model_fields_set)

    @property
    def embedded_store(self) -> bool:
        """True when the settings name no store, so the local directory store is used."""
        return "store_url" not in self.user_settings.model_fields_set

    def describe(self) -> dict[str, str]:
        """Where things are, safe to print (passwords redacted)."""
        return {
            "redis": ("embedded " if self.embedded_redis else "")
            + redact_url(self.settings.effective_redis_url),
            "store": ("embedded " if self.embedded_store else "") + self.settings.store_url,
            "logs": str(self.base_dir / "logs"),
        }

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> EmbeddedStack:
        """Start Redis (if needed) and the workers, and wait until the workers consume."""
        updates: dict[str, str] = {}
        if self.embedded_store:
            updates["store_url"] = f"file://{self.base_dir / 'store'}"
        else:
            updates["store_url"] = resolve_store_url(self.user_settings.store_url)
            require_shared_storage(updates["store_url"])
        atexit.register(self.close)
        if self.embedded_redis:
            with self.guard.critical():
                server = RedisServer(port=0, unix_socket=False, password=secrets.token_hex(16))
                self.redis = server
                server.start()
            updates["broker_url"] = updates["redis_url"] = server.url
        elif "broker_url" not in self.user_settings.model_fields_set:
            updates["broker_url"] = self.user_settings.effective_redis_url
        self.settings = self.user_settings.model_copy(update=updates)
        self.env = self._worker_env()
        self._start_workers()
        return self

    def _worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "TETHER_BROKER_URL": self.settings.effective_broker_url,
                "TETHER_REDIS_URL": self.settings.effective_redis_url,
                "TETHER_STORE_URL": self.settings.store_url,
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _start_workers(self) -> None:
        log_dir = self.base_dir / "logs"
        for index in range(self.worker_count):
            worker = WorkerProcess(f"w{index + 1}", self.env, log_dir, queue=self.settings.queue)
            with self.guard.critical():
                self.workers.append(worker)
                worker.start(wait=False)
        for worker in self.workers:
            worker.wait_ready(timeout_s=90.0)

    def close(self) -> None:
        """Stop the workers and Redis; idempotent, and never cut short by a signal."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with self.guard.ignored():
            for worker in self.workers:
                worker.signal(signal.SIGTERM)
            for worker in self.workers:
                worker.stop(timeout_s=WORKER_STOP_TIMEOUT_S)
            if self.redis is not None:
                self.redis.close()
        atexit.unregister(self.close)

    def __enter__(self) -> EmbeddedStack:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- which worker ran what -----------------------------------------------------------------

    def worker_label(self, worker_id: str | None) -> str:
        """``w1``/``w2`` for a run's ``worker`` field (``host:pid:thread``), else ``host:pid``."""
        if not worker_id:
            return "?"
        parts = worker_id.split(":")
        pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        if pid is not None:
            parent = parent_pid(pid)
            for worker in self.workers:
                if worker.pid is not None and worker.pid in (pid, parent):
                    return worker.name
        return ":".join(parts[:2])


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (Linux ``/proc``; None elsewhere or when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a ``__del__`` (the garbage collector's, at any depth)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False
