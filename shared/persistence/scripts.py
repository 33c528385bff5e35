"""Lua scripts inside pipelines, on a single Redis and on Redis Cluster alike.

redis-py runs a registered script inside a plain pipeline by asking ``SCRIPT EXISTS`` first
(a round trip per pipeline), and its cluster pipeline refuses ``evalsha``. Each of our scripts
touches one slot, so we queue the raw ``EVALSHA`` (a cluster client routes it by its keys) after
loading the scripts once per client (on every primary of a cluster), and reload and retry once
when the server answers ``NOSCRIPT`` (it restarted or failed over). Every pipeline that carries
a script is safe to send twice: the scripts are idempotent and the commands beside them are NX,
XX, expiries or announcements a reader deduplicates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

log = logging.getLogger(__name__)


def queue_script(
    pipe: Any, script: Script, keys: Sequence[str | bytes], args: Sequence[Any]
) -> None:
    """Add one call of ``script`` to ``pipe`` (a pipeline of :func:`run_pipeline`)."""
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


#: What names the namespace keys every tenant's producer may write (docs/trust-model.md: mark
#: its sessions active, announce a run it refused): ``<p>:{~active:<n>}`` and ``<p>:{~done:<n>}``.
SHARED_KEY_MARKERS = (":{~active:", ":{~done:")


def run_pipeline(
    client: redis.Redis,
    scripts: Sequence[Script],
    fill: Callable[[Any], None],
    *,
    lenient: int = 0,
) -> list[Any]:
    """Build a non-transactional pipeline with ``fill`` and execute it in one round trip, with
    ``scripts`` loaded first (once per client; once more after a ``NOSCRIPT``).

    redis-py's own script-in-pipeline path asks ``SCRIPT EXISTS`` before every pipeline: one
    more round trip per call, which on the worker's hot path is most of a run's Redis time.

    A command on a key every tenant may write (:data:`SHARED_KEY_MARKERS`) that finds a value of
    another type there (a tenant's ``SET`` on it) does not fail the call, whose scripts already
    committed: the stray value is deleted, the command sent again, and a warning logged.
    The first ``lenient`` replies are handed back as they are, errors included: commands that
    ride along and must not fail the call.
    """
    loaded = _loaded.setdefault(id(client), set())
    for attempt in (1, 2):
        for script in scripts:
            if script.sha not in loaded:
                client.script_load(script.script)  # on every primary of a cluster
                loaded.add(script.sha)
        pipe = client.pipeline(transaction=False)
        fill(pipe)
        commands = pipeline_commands(pipe)
        replies = list(pipe.execute(raise_on_error=False))
        if any(isinstance(r, NoScriptError) for r in replies):
            loaded.clear()  # the server restarted or failed over without them
            if attempt == 2:
                raise next(r for r in replies if isinstance(r, NoScriptError))
            continue
        for n, reply in enumerate(replies):
            if isinstance(reply, Exception) and n >= lenient:
                if len(commands) != len(replies):
                    raise reply  # which command failed is unknown: nothing to repair
                replies[n] = _repaired(client, commands[n], reply)
        return replies
    raise AssertionError("unreachable")


def send_shared(client: redis.Redis, *args: Any) -> Any:
    """One command on a shared key (:data:`SHARED_KEY_MARKERS`), repaired as
    :func:`run_pipeline` repairs it when a tenant left a value of the wrong type there."""
    return run_pipeline(client, [], lambda pipe: pipe.execute_command(*args))[0]


def pipeline_commands(pipe: Any) -> list[tuple[Any, ...]]:
    """The arguments of every command queued on ``pipe``, in order (read before it executes).

    A plain pipeline keeps them in ``command_stack``; redis-py's cluster pipeline in its
    execution strategy's ``command_queue`` (its ``command_stack`` stays empty)."""
    stack = pipe.command_stack
    if not stack:
        strategy = getattr(pipe, "_execution_strategy", None)
        stack = getattr(strategy, "command_queue", None) or []
    return [_args(c) for c in stack]


def stray_shared_key(args: tuple[Any, ...], error: Exception) -> Any:
    """The shared key (:data:`SHARED_KEY_MARKERS`) on which command ``args`` met a value of the
    wrong type, logged, for the caller to delete and send the command again.

    Raises:
        Exception: ``error`` itself, for any other failure.
    """
    key = args[1] if len(args) > 1 else b""
    name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    wrong_type = str(error).startswith("WRONGTYPE")
    if not (wrong_type and any(m in name for m in SHARED_KEY_MARKERS)):
        raise error
    log.warning(
        "%s held a value of the wrong type (a tenant credential may write there, docs/"
        "trust-model.md); deleted it so the index or feed works again",
        name,
    )
    return key


def _args(command: Any) -> tuple[Any, ...]:
    """A queued command's arguments (a plain pipeline keeps tuples, a cluster one objects)."""
    args = getattr(command, "args", None)
    return tuple(args if args is not None else command[0])


def _repaired(client: redis.Redis, args: tuple[Any, ...], error: Exception) -> Any:
    """The reply of ``args`` sent again after deleting a value of the wrong type a tenant left
    on a shared key; ``error`` raised for anything else."""
    client.delete(stray_shared_key(args, error))
    send: Any = client.execute_command  # untyped in redis-py
    return send(*args)


#: Script hashes known loaded, per client (a stale entry costs one NOSCRIPT retry).
_loaded: dict[int, set[str]] = {}
