"""Step checkpoints on Redis: one hash per session (field = run id), fenced in one Lua script.

Key ``<p>:{t/s}:ckpt`` (see :mod:`tether.keys`) sits in the session's hash slot beside the fence
counter it is checked against. The hash expires with the run records (``result_ttl_s``), so a
checkpoint of a run that never finished cannot outlive it.
"""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.ids import validate_id
from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.checkpoints.memory import fenced_out

SAVE = load("checkpoint_save")


class RedisCheckpointStore:
    """:class:`~tether.worker.engine.checkpoints.base.CheckpointStore` on Redis."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, ttl_s: int) -> None:
        self._client = client
        self._keys = keys
        self._ttl_s = ttl_s
        self._where = describe_client(client)
        self._save = client.register_script(SAVE.source)

    def save(self, tenant: str, session_id: str, checkpoint: Checkpoint) -> None:
        """Record the checkpoint unless a newer lease was granted."""
        k = self._keys
        validate_id(checkpoint.run_id, kind="run id")
        with translate_errors(self._where):
            keys = SAVE.keys(
                checkpoints=k.checkpoints(tenant, session_id), fence=k.fence(tenant, session_id)
            )
            argv = SAVE.argv(
                run_id=checkpoint.run_id,
                writer_fence=checkpoint.fence,
                checkpoint=checkpoint.model_dump_json(),
                ttl_s=self._ttl_s,
            )
            reply = SAVE.reply(cast(Any, self._save(keys=keys, args=argv)))
        if not int(reply["saved"]):
            raise fenced_out(tenant, session_id, checkpoint.fence, int(reply["fence"]))

    def load(self, tenant: str, session_id: str, run_id: str) -> Checkpoint | None:
        """The run's newest checkpoint."""
        validate_id(run_id, kind="run id")
        with translate_errors(self._where):
            raw = self._client.hget(self._keys.checkpoints(tenant, session_id), run_id)
        return Checkpoint.model_validate_json(cast(bytes, raw)) if raw else None

    def clear(self, tenant: str, session_id: str, run_id: str) -> None:
        """Forget the run's checkpoint."""
        validate_id(run_id, kind="run id")
        with translate_errors(self._where):
            self._client.hdel(self._keys.checkpoints(tenant, session_id), run_id)
