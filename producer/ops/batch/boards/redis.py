"""The batch board in Redis: one JSON record per batch with an expiry, and a per-tenant index
(keys from :class:`tether.keys.RedisKeys`: ``batches`` and ``batch``)."""

from __future__ import annotations

import pydantic
import redis

from tether.keys import RedisKeys
from tether.producer.ops.batch.boards.base import BatchRecord


class RedisBatchBoard:
    """Records as strings with a PX expiry of ``ttl_s``; the index is pruned as it is read."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.ttl_ms = ttl_s * 1000

    def put(self, record: BatchRecord) -> None:
        index = self.keys.batches(record.tenant)
        pipe = self.client.pipeline(transaction=False)  # both keys share one slot
        pipe.set(
            self.keys.batch(record.tenant, record.batch_id),
            record.model_dump_json(),
            px=self.ttl_ms,
        )
        pipe.zadd(index, {record.batch_id: record.updated_at_ms})
        pipe.zremrangebyscore(index, "-inf", record.updated_at_ms - self.ttl_ms)
        pipe.pexpire(index, self.ttl_ms)
        pipe.execute()

    def get(self, tenant: str, batch_id: str) -> BatchRecord | None:
        raw = self.client.get(self.keys.batch(tenant, batch_id))
        return _parse(raw)

    def list(self, tenant: str, *, limit: int = 100) -> list[BatchRecord]:
        index = self.keys.batches(tenant)
        members = self.client.zrevrange(index, 0, limit - 1)
        ids = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        if not ids:
            return []
        raws = self.client.mget([self.keys.batch(tenant, i) for i in ids])
        records, gone = [], []
        for batch_id, raw in zip(ids, raws, strict=True):
            record = _parse(raw)
            if record is None:
                gone.append(batch_id)
            else:
                records.append(record)
        if gone:  # expired records leave the index too
            self.client.zrem(index, *gone)
        return records


def _parse(raw: object) -> BatchRecord | None:
    if not isinstance(raw, bytes | str):
        return None
    try:
        return BatchRecord.model_validate_json(raw)
    except pydantic.ValidationError:
        return None  # a record of a newer, incompatible layout: not shown


__all__ = ["RedisBatchBoard"]
