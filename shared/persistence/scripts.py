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

from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError


def queue_script(
    pipe: Any, script: Script, keys: Sequence[str | bytes], args: Sequence[Any]
) -> None:
    """Add one call of ``script`` to ``pipe`` (a pipeline of :func:`run_pipeline`)."""
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def run_pipeline(
    client: redis.Redis, scripts: Sequence[Script], fill: Callable[[Any], None]
) -> list[Any]:
    """Build a non-transactional pipeline with ``fill`` and execute it in one round trip, with
    ``scripts`` loaded first (once per client; once more after a ``NOSCRIPT``).

    redis-py's own script-in-pipeline path asks ``SCRIPT EXISTS`` before every pipeline: one
    more round trip per call, which on the worker's hot path is most of a run's Redis time.
    """
    loaded = _loaded.setdefault(id(client), set())
    for attempt in (1, 2):
        for script in scripts:
            if script.sha not in loaded:
                client.script_load(script.script)  # on every primary of a cluster
                loaded.add(script.sha)
        pipe = client.pipeline(transaction=False)
        fill(pipe)
        try:
            return list(pipe.execute())
        except NoScriptError:
            loaded.clear()  # the server restarted or failed over without them
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


#: Script hashes known loaded, per client (a stale entry costs one NOSCRIPT retry).
_loaded: dict[int, set[str]] = {}
