"""The persistent local stack of a project folder: what ``tether up`` starts and records, and
what ``tether down`` stops (the commands and what they print: :mod:`tether.producer.ops.cli.stack`).

``tether up`` starts, detached from the terminal, in the project folder (the working directory):

- a private, password-protected ``redis-server`` on a free loopback port (never 6379), with its
  append-only file under ``.tether/redis`` (queued runs survive ``down`` / ``up``);
- the local-directory store ``.tether/store`` (or, with ``--s3``, a moto S3 server and a
  ``tether`` bucket, saved to ``.tether/s3`` by ``down`` and put back by the next ``up --s3``:
  :mod:`tether.producer.ops.local_s3`);
- ``--workers N`` Celery worker processes, or with ``--autoscale MIN:MAX`` the autoscaling
  supervisor (``tether autoscale``, :mod:`tether.producer.ops.autoscale`), which starts and
  stops them on the queue's load;
- ``tether beat``, which fires the run schedules, when celery-redbeat is installed (the
  ``schedules`` extra; ``--no-beat`` to skip it);
- ``tether console`` when the console is installed (``--no-console`` to skip it).

It records each process (pid and start time) in ``.tether/stack.json``, writes the settings to
``.tether/env`` (``export`` lines, mode 0600: every later ``tether`` command run in the folder
reads it, below the environment and ``.env``; other shells ``source`` it), and logs to
``.tether/logs``. ``tether down`` stops exactly the recorded processes that still run with
their recorded start time, then removes ``.tether/env`` and ``.tether/stack.json`` (the store,
Redis' data and the logs stay).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tether.dev.redis_server import free_port
from tether.dev.workers import WorkerProcess
from tether.errors import ConfigurationError
from tether.producer.ops.local_procs import (
    ProcessRecord,
    is_running,
    record_of,
    spawn,
    start_redis,
    stop_all,
    wait_for_beat,
    wait_for_port,
    wait_for_workers,
)
from tether.producer.ops.local_s3 import (
    MOTO_ENV,
    S3_BUCKET,
    create_bucket,
    restore_bucket,
    save_bucket,
)
from tether.settings import LOCAL_ENV_FILE, Settings
from tether.settings.checks import mask_url

STATE_VERSION = 1
WORKER_READY_TIMEOUT_S = 90.0
CONSOLE_READY_TIMEOUT_S = 30.0
BEAT_READY_TIMEOUT_S = 30.0
#: ``tether console``'s own default port, used when free.
CONSOLE_DEFAULT_PORT = 8765
#: How long a worker may finish its run before ``down`` kills it (warm shutdown).
WORKER_STOP_TIMEOUT_S = 15.0
#: The autoscaler's own limit for its workers' warm shutdown, within ``WORKER_STOP_TIMEOUT_S``.
AUTOSCALER_STOP_TIMEOUT_S = 10.0
#: What the stack sets; the rest of the caller's environment reaches its services unchanged.
_STACK_KEYS = (
    "TETHER_BROKER_URL",
    "TETHER_REDIS_URL",
    "TETHER_STORE_URL",
    "TETHER_S3_ENDPOINT_URL",
)


@dataclass(frozen=True)
class StackPaths:
    """Where a project's local stack keeps its files."""

    project: Path

    @property
    def root(self) -> Path:
        """``.tether`` in the project folder."""
        return self.project / ".tether"

    @property
    def env_file(self) -> Path:
        """The settings of the stack (read by every ``tether`` command in the folder)."""
        return self.project / LOCAL_ENV_FILE

    @property
    def state_file(self) -> Path:
        """The processes of the stack."""
        return self.root / "stack.json"

    @property
    def logs(self) -> Path:
        """One log file per service."""
        return self.root / "logs"

    @property
    def s3(self) -> Path:
        """Where ``down`` saves the moto store of ``up --s3`` (its objects, one file each)."""
        return self.root / "s3"


class StackState(BaseModel):
    """What ``tether up`` started (``.tether/stack.json``; no secrets)."""

    model_config = ConfigDict(extra="ignore")

    v: int = STATE_VERSION
    project: str
    started_at_ms: int
    queue: str = "tether"
    console_url: str | None = None
    services: list[ProcessRecord] = []


@dataclass
class UpOptions:
    """Options of ``tether up``."""

    workers: int = 1
    concurrency: int = 1
    s3: bool = False
    console: bool = True
    beat: bool = True
    """Start ``tether beat`` (when celery-redbeat is installed)."""
    console_port: int | None = None
    console_actions: bool = False
    """Start the console with ``--actions`` (cancel, approve, reject, answer, fork)."""
    autoscale: tuple[int, int] | None = None
    """``(MIN, MAX)``: the supervisor runs the workers instead of ``workers`` fixed ones."""


@dataclass
class UpResult:
    """What ``tether up`` did."""

    state: StackState
    already_up: bool
    exports: list[tuple[str, str]] = field(default_factory=list)
    """``(variable, value)`` written to ``.tether/env``, secrets masked, for display."""


def beat_available() -> bool:
    """Whether ``tether beat`` can run here (celery-redbeat, the ``schedules`` extra)."""
    return importlib.util.find_spec("redbeat") is not None


def console_available() -> bool:
    """Whether ``tether console`` can run here (the ``console`` extra is installed)."""
    from tether.producer.ops.console import available

    return available()


def read_state(paths: StackPaths) -> StackState | None:
    """The recorded stack, or None when there is none (or its file is unreadable)."""
    try:
        return StackState.model_validate_json(paths.state_file.read_text())
    except (OSError, ValueError):
        return None


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _save_state(paths: StackPaths, state: StackState) -> None:
    _write_private(paths.state_file, state.model_dump_json(indent=2) + "\n")


def running_services(state: StackState) -> list[ProcessRecord]:
    """The recorded processes that still run (same pid and start time)."""
    return [s for s in state.services if is_running(s)]


# --- up -------------------------------------------------------------------------------------------


class LocalStack:
    """The local stack of one project folder."""

    def __init__(self, project: Path, settings: Settings) -> None:
        self.paths = StackPaths(project.resolve())
        self.settings = settings
        self.notes: list[str] = []
        """What ``down`` could not do (e.g. save a store whose server had died), to show."""

    def up(self, options: UpOptions, progress: Callable[[str], None] = lambda _: None) -> UpResult:
        """Start the stack, or report the one that is up (``already_up``).

        Raises:
            ConfigurationError: a service did not start (everything started is stopped again).
        """
        current = read_state(self.paths)
        if current is not None and running_services(current):
            return UpResult(current, already_up=True)
        self._forget()  # a stale record: nothing of it runs any more
        state = StackState(
            project=str(self.paths.project),
            started_at_ms=int(time.time() * 1000),
            queue=self.settings.queue,
        )
        try:
            exports = self._start_services(state, options, progress)
            self._write_env(exports)
        except BaseException:
            self.down()
            raise
        shown = [(k, mask_url(v) if "://" in v else v) for k, v in exports]
        return UpResult(state, already_up=False, exports=shown)

    def _start_services(
        self, state: StackState, options: UpOptions, progress: Callable[[str], None]
    ) -> list[tuple[str, str]]:
        logs = self.paths.logs
        base_env = {k: v for k, v in os.environ.items() if k not in _STACK_KEYS}
        base_env["PYTHONUNBUFFERED"] = "1"
        progress("starting redis-server")
        redis_rec, url = start_redis(
            self.paths.root / "redis",
            logs / "redis.log",
            password=secrets.token_hex(16),
            env=base_env,
        )
        self._add(state, redis_rec)
        exports = [("TETHER_BROKER_URL", url), ("TETHER_REDIS_URL", url)]
        exports += self._start_store(state, options, progress)
        env = {**base_env, **dict(exports)}
        # the workers, the beat and the console start side by side, then each is waited for:
        # their start is mostly Python's imports, which the machine's other cores do at the
        # same time (one after the other, `up` took their sum: ~4 s more on 2 cores)
        readiness: list[Callable[[], None]] = []
        if options.autoscale is not None:
            readiness.append(self._start_autoscaler(state, options, env, progress, url))
        else:
            readiness.append(self._start_workers(state, options, env, progress))
        if options.beat and beat_available():
            readiness.append(self._start_beat(state, env, progress, url))
        if options.console and console_available():
            readiness.append(self._start_console(state, options, env, progress))
        for ready in readiness:
            ready()
        return exports

    def _add(self, state: StackState, record: ProcessRecord) -> None:
        state.services.append(record)
        _save_state(self.paths, state)  # recorded at once: `down` can stop it whatever happens

    def _start_store(
        self, state: StackState, options: UpOptions, progress: Callable[[str], None]
    ) -> list[tuple[str, str]]:
        if not options.s3:
            store = self.paths.root / "store"
            store.mkdir(parents=True, exist_ok=True)
            return [("TETHER_STORE_URL", f"file://{store}")]
        from tether.dev.moto_server import MotoServer

        progress("starting moto S3")
        moto = MotoServer(self.paths.logs).start()
        assert moto.proc is not None
        port = int(moto.endpoint.rsplit(":", 1)[1])
        self._add(state, record_of("s3", "moto", moto.proc.pid, moto.log_path, port=port))
        create_bucket(moto.endpoint)
        restored = restore_bucket(moto.endpoint, self.paths.s3)
        if restored:
            progress(f"restored {restored} object(s) of the S3 store from {self.paths.s3}")
        return [
            ("TETHER_STORE_URL", f"s3://{S3_BUCKET}/sessions"),
            ("TETHER_S3_ENDPOINT_URL", moto.endpoint),
            *MOTO_ENV.items(),
        ]

    def _start_workers(
        self,
        state: StackState,
        options: UpOptions,
        env: dict[str, str],
        progress: Callable[[str], None],
    ) -> Callable[[], None]:
        """Spawn the workers; returns the wait until every one consumes."""
        progress(f"starting {options.workers} worker(s)")
        workers = [
            WorkerProcess(
                f"w{i + 1}",
                env,
                self.paths.logs,
                concurrency=options.concurrency,
                queue=self.settings.queue,
            )
            for i in range(options.workers)
        ]
        for worker in workers:
            worker.start(wait=False)
            assert worker.pid is not None
            self._add(state, record_of(worker.name, "worker", worker.pid, worker.log_path))

        def ready() -> None:
            for worker in workers:
                worker.wait_ready(WORKER_READY_TIMEOUT_S)

        return ready

    def _start_autoscaler(
        self,
        state: StackState,
        options: UpOptions,
        env: dict[str, str],
        progress: Callable[[str], None],
        redis_url: str,
    ) -> Callable[[], None]:
        """Spawn the supervisor; returns the wait until its minimum of workers consume."""
        assert options.autoscale is not None
        low, high = options.autoscale
        progress(f"starting the autoscaler ({low}..{high} workers)")
        argv = [
            sys.executable, "-m", "tether.producer.ops.cli", "autoscale",
            "--min", str(low), "--max", str(high), "--concurrency", str(options.concurrency),
            "--queue", self.settings.queue, "--log-dir", str(self.paths.logs),
            # it must have stopped its workers before `down` kills what is left
            "--stop-timeout-s", str(AUTOSCALER_STOP_TIMEOUT_S),
        ]  # fmt: skip
        record = spawn(
            "autoscaler", "autoscaler", argv, env=env,
            log_path=self.paths.logs / "autoscaler.log", cwd=self.paths.project,
        )  # fmt: skip
        self._add(state, record)
        return lambda: wait_for_workers(
            record, redis_url, self.settings, low, WORKER_READY_TIMEOUT_S
        )

    def _start_beat(
        self, state: StackState, env: dict[str, str], progress: Callable[[str], None], url: str
    ) -> Callable[[], None]:
        """Spawn the beat; returns the wait until it is registered."""
        progress("starting the beat (it fires the schedules)")
        argv = [sys.executable, "-m", "tether.producer.ops.cli", "beat"]
        record = spawn(
            "beat", "beat", argv, env=env, log_path=self.paths.logs / "beat.log",
            cwd=self.paths.project,
        )  # fmt: skip
        self._add(state, record)
        return lambda: wait_for_beat(record, url, self.settings, BEAT_READY_TIMEOUT_S)

    def _start_console(
        self,
        state: StackState,
        options: UpOptions,
        env: dict[str, str],
        progress: Callable[[str], None],
    ) -> Callable[[], None]:
        """Spawn the console (recorded at once: a failed `up` stops it with the rest); returns
        the wait until it listens."""
        port = options.console_port or _console_port()
        progress(f"starting the console on port {port}")
        first = self._spawn_console(options, env, port)
        self._add(state, first)

        def ready() -> None:
            record, bound = first, port
            try:
                wait_for_port(record, bound, CONSOLE_READY_TIMEOUT_S)
            except ConfigurationError:
                if options.console_port or is_running(record):
                    raise
                # the default port was taken between the probe and the console's bind (another
                # stack starting beside this one): any free port, once
                state.services.remove(record)
                bound = free_port()
                progress(f"starting the console on port {bound}")
                record = self._spawn_console(options, env, bound)
                self._add(state, record)
                wait_for_port(record, bound, CONSOLE_READY_TIMEOUT_S)
            state.console_url = f"http://127.0.0.1:{bound}/"
            _save_state(self.paths, state)

        return ready

    def _spawn_console(self, options: UpOptions, env: dict[str, str], port: int) -> ProcessRecord:
        argv = [sys.executable, "-m", "tether.producer.ops.cli", "console", "--port", str(port)]
        if options.console_actions:
            argv.append("--actions")
        return spawn(
            "console",
            "console",
            argv,
            env=env,
            log_path=self.paths.logs / "console.log",
            cwd=self.paths.project,
            port=port,
        )

    def _write_env(self, exports: list[tuple[str, str]]) -> None:
        header = [
            f"# Written by `tether up` for the local stack of {self.paths.project};",
            "# removed by `tether down`. Every `tether` command run in this folder reads it",
            "# (environment variables and .env win). Other shells: source this file.",
        ]
        lines = [f"export {k}={json.dumps(v)}" for k, v in exports]
        _write_private(self.paths.env_file, "\n".join(header + lines) + "\n")

    # --- down ---------------------------------------------------------------------------------

    def down(self) -> list[ProcessRecord]:
        """Stop what the recorded stack started (console and beat, workers, S3, Redis: in that
        order; a moto store is saved first) and forget it; returns the processes that were
        stopped."""
        state = read_state(self.paths)
        stopped: list[ProcessRecord] = []
        if state is not None:
            # consumers first, so no worker loses its Redis in the middle of a run, and the
            # beat before the workers, so no tick is submitted to a stack going down
            for kinds, timeout_s in (
                (("console", "beat"), 10.0),
                (("worker", "autoscaler"), WORKER_STOP_TIMEOUT_S),
                (("moto", "redis"), 10.0),
            ):
                group = [r for r in state.services if r.kind in kinds]
                if "moto" in kinds:
                    self._save_s3(state)
                stopped += stop_all(group, timeout_s=timeout_s)
        self._forget()
        return stopped

    def _save_s3(self, state: StackState) -> None:
        moto = next((r for r in state.services if r.kind == "moto"), None)
        if moto is None:
            return
        if not is_running(moto) or moto.port is None:
            self.notes.append(
                f"the S3 server had stopped: its objects since the last `tether down` are lost "
                f"({self.paths.s3} keeps the earlier ones); see {moto.log}"
            )
            return
        try:
            save_bucket(f"http://127.0.0.1:{moto.port}", self.paths.s3)
        except Exception as exc:  # boto3's and the filesystem's: say it, stop the stack anyway
            self.notes.append(f"the S3 store was not saved to {self.paths.s3}: {exc}")

    def _forget(self) -> None:
        for path in (self.paths.env_file, self.paths.state_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _console_port() -> int:
    """The console's own default port when it is free (a stable URL), else any free one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", CONSOLE_DEFAULT_PORT))
        except OSError:
            return free_port()
    return CONSOLE_DEFAULT_PORT
