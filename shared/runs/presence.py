"""Worker presence: who consumes which queue, right now, as Redis sees it.

Every worker process group (a Celery main process and its pool) writes a
:class:`WorkerPresence` record every :data:`HEARTBEAT_INTERVAL_S` from its main process, with an
expiry of :data:`TTL_HEARTBEATS` heartbeats, and deletes it on a clean shutdown. A worker that
dies without a word (SIGKILL, OOM, a lost host) disappears once its record expires.

Readers (producers, ``tether status``, the console) call :func:`list_workers`,
:func:`workers_for_queue` and :func:`queue_depth`; they never need Celery. Keys (see
:mod:`tether.keys`): ``<ns>:{~workers}:<worker_id>`` holds the JSON record with a PX expiry, and
the zset ``<ns>:{~workers}`` indexes worker ids by their last heartbeat, so listing is one
``ZRANGEBYSCORE`` and one ``MGET`` (no ``SCAN``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

import pydantic
import redis
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 2.0
#: A record outlives this many missed heartbeats (a busy Redis or a GC pause is no death).
TTL_HEARTBEATS = 3
#: kombu's Redis transport keeps priorities 3, 6 and 9 in lists beside the queue's own.
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_\-.:]")


class WorkerPresence(BaseModel):
    """What one worker process group says about itself (schema version ``v``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = 1
    worker_id: str = Field(description="``<host>:<main pid>``: unique per worker process group.")
    node: str = Field(description="The Celery node name, e.g. ``w1@host``.")
    hostname: str
    pid: int = Field(description="The main process id.")
    queues: tuple[str, ...] = Field(description="The queues it consumes.")
    concurrency: int | None = Field(default=None, description="Pool processes or threads.")
    started_at_ms: int
    last_seen_ms: int = Field(description="Time of the heartbeat that wrote this record.")
    runs_done: int = Field(
        default=0,
        description="Run messages (``tether.run`` tasks) it finished since it started; a run "
        "message drains its session, so this counts runs in the common case of one at a time.",
    )
    current_runs: tuple[str, ...] = Field(
        default=(),
        description="Run ids of the run messages and canvas runs it is executing now (a drain "
        "names none: it applies whatever its session queued).",
    )
    busy: int = Field(default=0, description="Tasks it is executing now (runs and drains).")

    def age_s(self, now_ms: int | None = None) -> float:
        """Seconds since its last heartbeat."""
        return max(0.0, ((now_ms or _now_ms()) - self.last_seen_ms) / 1000)


def _now_ms() -> int:
    return int(time.time() * 1000)


def worker_id_for(hostname: str | None = None, pid: int | None = None) -> str:
    """``<host>:<pid>`` with characters a key must not carry replaced by ``-``."""
    host = _UNSAFE_ID_CHARS.sub("-", hostname or socket.gethostname())[:100].lstrip(".") or "host"
    return f"{host}:{pid if pid is not None else os.getpid()}"


def ttl_ms(interval_s: float = HEARTBEAT_INTERVAL_S) -> int:
    """The expiry of a record written every ``interval_s``."""
    return int(interval_s * TTL_HEARTBEATS * 1000)


# --- writing ------------------------------------------------------------------------------------


def announce(
    client: redis.Redis, keys: RedisKeys, record: WorkerPresence, *, expiry_ms: int
) -> None:
    """Write (or refresh) ``record``; it expires after ``expiry_ms`` unless written again."""
    with translate_errors(describe_client(client)):
        pipe = client.pipeline(transaction=False)
        pipe.set(keys.worker(record.worker_id), record.model_dump_json(), px=expiry_ms)
        pipe.zadd(keys.workers(), {record.worker_id: record.last_seen_ms})
        # the index forgets workers whose records expired long ago (a cheap, bounded trim)
        pipe.zremrangebyscore(keys.workers(), "-inf", record.last_seen_ms - 10 * expiry_ms)
        pipe.execute()


def withdraw(client: redis.Redis, keys: RedisKeys, worker_id: str) -> None:
    """Remove a worker's record at once (a clean shutdown)."""
    with translate_errors(describe_client(client)):
        pipe = client.pipeline(transaction=False)
        pipe.delete(keys.worker(worker_id))
        pipe.zrem(keys.workers(), worker_id)
        pipe.execute()


class Heartbeat:
    """A daemon thread that announces ``snapshot()`` every ``interval_s`` until stopped.

    ``snapshot`` returns the current record (its ``last_seen_ms`` is set here). A failed write
    (Redis away) is logged and retried at the next beat. :meth:`stop` withdraws the record.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        snapshot: Callable[[], WorkerPresence],
        *,
        interval_s: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self._client = client
        self._keys = keys
        self._snapshot = snapshot
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tether-heartbeat", daemon=True)
        self.worker_id: str | None = None

    def start(self) -> Heartbeat:
        """Announce now (so the worker is visible at once), then every ``interval_s``."""
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        """Announce the current record once."""
        record = self._snapshot().model_copy(update={"last_seen_ms": _now_ms()})
        self.worker_id = record.worker_id
        announce(self._client, self._keys, record, expiry_ms=ttl_ms(self._interval_s))

    def stop(self) -> None:
        """Stop beating and withdraw the record."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.worker_id is not None:
            try:
                withdraw(self._client, self._keys, self.worker_id)
            except TetherError as exc:  # it expires by itself
                log.warning("presence record not withdrawn: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.beat()
            except TetherError as exc:
                log.warning("heartbeat failed: %s", exc)
            except Exception:
                log.exception("heartbeat failed unexpectedly")


# --- reading -----------------------------------------------------------------------------------


def list_workers(client: redis.Redis, keys: RedisKeys) -> list[WorkerPresence]:
    """Every live worker (its record has not expired), oldest start first.

    Raises:
        StreamUnavailable: Redis could not be reached.
    """
    with translate_errors(describe_client(client)):
        ids = cast("list[bytes]", client.zrange(keys.workers(), 0, -1))
        if not ids:
            return []
        docs = cast("list[bytes | None]", client.mget(record_keys(keys, ids)))
    return presences(docs)


def record_keys(keys: RedisKeys, ids: Sequence[bytes | str]) -> list[str]:
    """The presence records of the worker ids of the index (the ``MGET`` of a listing)."""
    return [keys.worker(_decode(i)) for i in ids]


def presences(docs: Sequence[bytes | None]) -> list[WorkerPresence]:
    """The live workers among the records of a listing, oldest start first (an expired record
    is None: that worker stopped beating)."""
    workers = []
    for doc in docs:
        if doc is None:
            continue
        try:
            workers.append(WorkerPresence.model_validate_json(doc))
        except pydantic.ValidationError:
            log.warning("ignoring an unreadable worker presence record")
    return sorted(workers, key=lambda w: (w.started_at_ms, w.worker_id))


def workers_for_queue(client: redis.Redis, keys: RedisKeys, queue: str) -> list[WorkerPresence]:
    """The live workers that consume ``queue``."""
    return [w for w in list_workers(client, keys) if queue in w.queues]


def queue_depth(client: redis.Redis, namespace: str, queues: Sequence[str]) -> dict[str, int]:
    """Messages waiting in each broker queue, not yet taken by a worker.

    ``client`` must be connected to the broker's Redis (a Redis broker only; with RabbitMQ ask
    the broker itself).

    The Celery broker keys are ``<namespace>-celery:<queue>`` (see
    :func:`tether.runs.celery_config.celery_config`), one list per priority.
    """
    names = [(q, f"{namespace}-celery:{q}{sfx}") for q in queues for sfx in PRIORITY_SUFFIXES]
    with translate_errors(describe_client(client)):
        pipe = client.pipeline(transaction=False)
        for _, key in names:
            pipe.llen(key)
        lengths = pipe.execute()
    depth = dict.fromkeys(queues, 0)
    for (queue, _), length in zip(names, lengths, strict=True):
        depth[queue] += int(length)
    return depth


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
