"""Plumbing shared by the CLI commands: settings, storage, error lines and exit codes.

Exit codes of ``tether``, one meaning each (the ``EXIT_*`` constants below; docs/cli.md lists
them, and ``tests/test_exit_codes.py`` holds the two equal):

- 0: success.
- 1: what was asked for failed: a run failed or was cancelled, a check or verification failed,
  a replay diverged, a comparison found a significant regression.
- 2: a usage or configuration error (:class:`~tether.errors.UsageError`: bad setting, invalid
  id, unknown agent, unknown or existing session, bad command-line option).
- 3: a tenant's budget refused the submission, or ended the run
  (:class:`~tether.errors.BudgetExceeded`, ``TETHER_TENANT_BUDGETS``).
- 4: a service did not answer: Redis, the broker or the store
  (:class:`~tether.errors.InfrastructureError`), or ``tether status`` found one down.
- 5: ``tether console`` could not listen: its address is in use.
- 124: gave up waiting for a run (``--wait-s``); the run itself goes on.
- 130 / 143 (128 + signal number): interrupted by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import unquote, urlsplit

import typer

from tether.errors import (
    AddressInUse,
    BudgetExceeded,
    ConfigurationError,
    InfrastructureError,
    TetherError,
    UsageError,
)

# Every command module imports this one while `tether --help` builds the command tree: what it
# imports at the top, every command pays. Settings (pydantic-settings, ~0.15 s) and the storage
# modules (boto3, redis-py) are imported by the functions that use them.
if TYPE_CHECKING:
    from tether.persistence.archives.base import EventArchive
    from tether.persistence.reader import SessionLogReader
    from tether.persistence.stores.base import SnapshotStore
    from tether.producer.client import Producer
    from tether.settings import Settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_UNAVAILABLE = 4
EXIT_ADDRESS_IN_USE = 5
EXIT_WAIT_TIMEOUT = 124
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass
class CliState:
    """Options of the top-level ``tether`` command, and the arguments it was given."""

    debug: bool = False
    argv: list[str] | None = None
    """The arguments after ``tether`` (what "run the same command again" repeats)."""

    def command_line(self) -> str:
        """The command as typed (``tether batch cases.jsonl --agent echo``), quoted for a
        shell."""
        import shlex

        return shlex.join(["tether", *(sys.argv[1:] if self.argv is None else self.argv)])


STATE = CliState()


@contextmanager
def ctrl_c_stops() -> Iterator[None]:
    """Ctrl-C (SIGINT) interrupts the block even if this process was started with SIGINT
    ignored, as a shell starts its background jobs and some CI runners and test harnesses start
    every command. For commands that follow forever (``tail``), whose one way out is Ctrl-C: an
    inherited ``SIG_IGN`` would leave them running after it. A handler the caller installed
    (``tether`` used as a library) is kept; off the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def one_line(text: str) -> str:
    """``text`` on one line (messages may embed logs or pydantic details)."""
    return " ".join(text.split())


def exit_code_for(exc: BaseException) -> int:
    """The process exit code for an error (see the module docstring)."""
    if isinstance(exc, AddressInUse):
        return EXIT_ADDRESS_IN_USE
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, BudgetExceeded):
        return EXIT_BUDGET
    if isinstance(exc, InfrastructureError):
        return EXIT_UNAVAILABLE
    if isinstance(exc, TimeoutError):
        return EXIT_WAIT_TIMEOUT
    return EXIT_FAILED


def error_line(exc: BaseException) -> str:
    """``error: <Class>: <message>`` on one line."""
    name = exc.error_type if isinstance(exc, TetherError) else type(exc).__name__
    return one_line(f"error: {name}: {exc}")


def warn_line(message: str) -> None:
    """``warning: <message>`` on one line on stderr (stdout keeps only the answer)."""
    typer.echo(one_line(f"warning: {message}"), err=True)


def cli_settings() -> Settings:
    """Settings (environment, ``.env``, the project's ``.tether/env``: see
    :mod:`tether.settings.files`) with a relative ``file://`` store made absolute; validated
    before any service is touched.

    Raises:
        SettingsError: one line naming the variable, its value (secrets masked) and the fix.
    """
    from tether.settings import load_settings
    from tether.settings.files import export_stack_aws_env

    settings = load_settings()
    export_stack_aws_env()
    absolute = resolve_store_url(settings.store_url)
    if absolute != settings.store_url:
        settings = settings.model_copy(update={"store_url": absolute})
    return settings


def cli_producer(
    settings: Settings | None = None,
    *,
    broker: bool = False,
    ids: dict[str, str | None] | None = None,
) -> Producer:
    """A producer on ``settings`` (default: :func:`cli_settings`), once the command's ``ids``
    (kind to value, e.g. ``{"session id": ...}``; None values skipped) are valid and Redis and,
    for a command that publishes runs (``broker``), the broker answered one short check
    (:mod:`tether.producer.ops.reachability`): bad input is refused before any service is
    looked at (exit 2, never an unreachable Redis), a service that does not answer fails the
    command within seconds, naming it and its setting (exit 4), and one slow to answer is named
    while the command waits, instead of the clients' silent retries.

    Raises:
        InvalidId: an id of ``ids`` is malformed.
        StreamUnavailable, BrokerUnavailable: the service did not answer.
    """
    from tether.ids import validate_id
    from tether.producer.client import Producer
    from tether.producer.ops.reachability import check_services

    for kind, value in (ids or {}).items():
        if value is not None:
            validate_id(value, kind=kind)
    settings = settings or cli_settings()
    check_services(settings, broker=broker, notice=warn_line)
    return Producer(settings)


def resolve_store_url(url: str, base: Path | None = None) -> str:
    """``file://./dir`` or ``file://dir`` (relative to ``base``, default the working directory)
    as an absolute ``file:///...`` URL; any other URL unchanged."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file" or parts.netloc in ("", "localhost"):
        return url
    relative = unquote(parts.netloc + parts.path)
    root = (base or Path.cwd()) / relative
    return f"file://{os.path.normpath(root)}"


def open_store(settings: Settings) -> tuple[SnapshotStore, EventArchive]:
    """The snapshot store and event archive named by the settings.

    Raises:
        StoreNotConfigured: a ``file://`` store whose directory does not exist.
    """
    from tether.persistence.writer_storage import open_writer_storage

    url = resolve_store_url(settings.store_url)
    require_existing_store(url)
    # every write of a command (fork, delete, purge...) drops the session's cached head
    return open_writer_storage(settings, url=url)


def require_existing_store(url: str) -> None:
    """Refuse a ``file://`` store whose directory does not exist: a command reading it showed
    "0 sessions" for a typo'd path. Workers create it on their first write (a new deployment's
    first run); a command reads or edits sessions, so it names the URL instead.

    Raises:
        StoreNotConfigured: naming ``TETHER_STORE_URL`` and where a store usually is.
    """
    from tether.errors import StoreNotConfigured

    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        return
    root = Path(unquote(parts.path))
    if not root.is_dir():
        raise StoreNotConfigured(
            f"TETHER_STORE_URL={url}: no such directory ({root} does not exist), so no session "
            "was ever stored there. Fix the URL (`tether config` shows it; `tether up` uses "
            ".tether/store of its project), or run a session first: workers create the "
            "directory on their first write"
        )


def open_reader(settings: Settings) -> SessionLogReader:
    """An offline reader over the store and archive of the settings."""
    from tether.persistence.reader import SessionLogReader

    store, archive = open_store(settings)
    return SessionLogReader(store, archive)


def require_shared_storage(store_url: str) -> None:
    """Refuse a store that worker processes cannot share (``memory://``)."""
    if store_url.startswith("memory:"):
        raise ConfigurationError(
            "TETHER_STORE_URL=memory:// lives inside one process, so workers and this command "
            "would not see the same sessions; use file:///abs/path or s3://bucket/prefix"
        )


def read_limited(source: str, max_bytes: int, *, flag: str) -> tuple[bytes, str]:
    """The bytes of file ``source`` (``-``: standard input), never read past one byte over
    ``max_bytes``, and how a message names where they came from (``flag source``).

    Raises:
        InvalidInput: the file cannot be read.
        InputTooLarge: more than ``max_bytes`` (``TETHER_MAX_INPUT_BYTES``).
    """
    from tether.errors import InputTooLarge, InvalidInput

    where = "standard input" if source == "-" else f"{flag} {source}"
    try:
        if source == "-":
            data = sys.stdin.buffer.read(max_bytes + 1)
        else:
            with open(source, "rb") as fh:
                data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InvalidInput(f"{where} cannot be read ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise InputTooLarge(
            f"{where} holds more than {max_bytes} bytes, over the limit of "
            f"{max_bytes}; send large material by reference or raise TETHER_MAX_INPUT_BYTES"
        )
    return data, where


def run_input(text: str | None, input_file: str | None, max_input_bytes: int) -> str:
    """A run's input: the ``INPUT`` argument, or ``--input-file F`` (``-``: standard input), for
    inputs a command line cannot carry (Linux refuses one argument over 128 KiB: "Argument list
    too long").

    Raises:
        InvalidInput: both or neither given, a file that does not read as UTF-8 text.
        InputTooLarge: more than ``max_input_bytes`` (``TETHER_MAX_INPUT_BYTES``), before the
            whole file is read.
    """
    from tether.errors import InvalidInput

    if text is not None and input_file is not None:
        raise InvalidInput("give the run's input as INPUT or with --input-file, not both")
    if input_file is None:
        if text is None:
            raise InvalidInput("no input: give INPUT, or --input-file FILE (- reads stdin)")
        return text
    data, where = read_limited(input_file, max_input_bytes, flag="--input-file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at byte {exc.start + 1}); "
            "save it as UTF-8"
        ) from None


# --- options shared by several commands -------------------------------------------------------

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
FollowOption = Annotated[
    bool,
    typer.Option(
        "--follow",
        help="A run that pauses on the fleet (a timer...) is followed into the run that goes on "
        "with it, to the end; --wait-s covers the whole chain.",
    ),
]

TenantOption = Annotated[
    str | None, typer.Option("--tenant", help="Tenant (default: TETHER_TENANT).")
]
InputFileOption = Annotated[
    str | None,
    typer.Option(
        "--input-file",
        metavar="FILE",
        help="Read the input from FILE (- for standard input) instead of INPUT.",
    ),
]
