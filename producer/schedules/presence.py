"""Beat presence: which beats run, which of them fires the schedules, and what they refused.

Like a worker's (:mod:`tether.runs.presence`): every beat process writes a
:class:`BeatPresence` record every :data:`~tether.runs.presence.HEARTBEAT_INTERVAL_S` from a
thread of its own (so a beat waiting for the lock is seen too), with an expiry of a few
heartbeats, and deletes it when it stops. Keys (:mod:`tether.keys`): ``<ns>:{~beats}:<beat_id>``
and the index zset ``<ns>:{~beats}``. ``tether status`` lists them; ``tether schedule add`` warns
when there is none. A tenant's credential cannot read them (they are the operator's).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import cast

import pydantic
import redis
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.presence import HEARTBEAT_INTERVAL_S, ttl_ms, worker_id_for

log = logging.getLogger("tether.schedules")


class BeatPresence(BaseModel):
    """What one beat process says about itself (schema version ``v``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = 1
    beat_id: str = Field(description="``<host>:<pid>``.")
    hostname: str
    pid: int
    started_at_ms: int
    last_seen_ms: int
    ticking: bool = Field(
        default=False, description="It holds the beat lock: it fires the schedules now."
    )
    tenants: int = Field(default=0, description="Tenants with schedules it knows of.")
    fired: int = Field(default=0, description="Ticks whose runs it submitted.")
    refused: dict[str, int] = Field(
        default_factory=dict,
        description="Entries it refused to run, by reason (not_a_schedule, invalid, "
        "other_tenant, too_large, submit_refused).",
    )

    def age_s(self, now_ms: int | None = None) -> float:
        """Seconds since its last heartbeat."""
        return max(0.0, ((now_ms or _now_ms()) - self.last_seen_ms) / 1000)


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_presence() -> BeatPresence:
    """The record of this process, as it starts."""
    now = _now_ms()
    return BeatPresence(
        beat_id=worker_id_for(),
        hostname=socket.gethostname(),
        pid=os.getpid(),
        started_at_ms=now,
        last_seen_ms=now,
    )


class BeatHeartbeat:
    """A daemon thread that writes ``snapshot()`` every ``interval_s`` until :meth:`stop`, which
    withdraws the record. A failed write (Redis away) is logged and retried at the next one."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        snapshot: Callable[[], BeatPresence],
        *,
        interval_s: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self._client = client
        self._keys = keys
        self._snapshot = snapshot
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tether-beat-presence", daemon=True)
        self._beat_id: str | None = None

    def start(self) -> BeatHeartbeat:
        """Write now (the beat is seen at once), then every ``interval_s``."""
        try:
            self.beat()
        except TetherError as exc:
            log.warning("beat presence not written: %s", exc)
        self._thread.start()
        return self

    def beat(self) -> None:
        """Write the current record once."""
        record = self._snapshot().model_copy(update={"last_seen_ms": _now_ms()})
        self._beat_id = record.beat_id
        expiry_ms = ttl_ms(self._interval_s)
        with translate_errors(describe_client(self._client)):
            pipe = self._client.pipeline(transaction=False)
            pipe.set(self._keys.beat(record.beat_id), record.model_dump_json(), px=expiry_ms)
            pipe.zadd(self._keys.beats(), {record.beat_id: record.last_seen_ms})
            pipe.zremrangebyscore(self._keys.beats(), "-inf", record.last_seen_ms - 10 * expiry_ms)
            pipe.execute()

    def stop(self) -> None:
        """Stop writing and withdraw the record (else it expires by itself)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._beat_id is None:
            return
        try:
            with translate_errors(describe_client(self._client)):
                pipe = self._client.pipeline(transaction=False)
                pipe.delete(self._keys.beat(self._beat_id))
                pipe.zrem(self._keys.beats(), self._beat_id)
                pipe.execute()
        except TetherError as exc:
            log.warning("beat presence not withdrawn: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.beat()
            except TetherError as exc:
                log.warning("beat presence not written: %s", exc)
            except Exception:
                log.exception("beat presence failed unexpectedly")


def list_beats(client: redis.Redis, keys: RedisKeys) -> list[BeatPresence]:
    """Every live beat (its record has not expired), the one firing the schedules first.

    Raises:
        PermissionDenied: the credential may not read the beats' keys (a tenant's).
        StreamUnavailable: Redis could not be reached.
    """
    with translate_errors(describe_client(client)):
        ids = cast("list[bytes]", client.zrange(keys.beats(), 0, -1))
        if not ids:
            return []
        docs = cast("list[bytes | None]", client.mget([keys.beat(i.decode()) for i in ids]))
    beats = []
    for doc in docs:
        if doc is None:
            continue
        try:
            beats.append(BeatPresence.model_validate_json(doc))
        except pydantic.ValidationError:
            log.warning("ignoring an unreadable beat presence record")
    return sorted(beats, key=lambda b: (not b.ticking, b.started_at_ms, b.beat_id))
