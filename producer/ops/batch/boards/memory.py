"""The in-process batch board (tests, and a producer without Redis)."""

from __future__ import annotations

import threading

from tether.producer.ops.batch.boards.base import BatchRecord


class MemoryBatchBoard:
    """Records in a dict; nothing expires."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], BatchRecord] = {}
        self._lock = threading.Lock()

    def put(self, record: BatchRecord) -> None:
        with self._lock:
            self._records[(record.tenant, record.batch_id)] = record

    def get(self, tenant: str, batch_id: str) -> BatchRecord | None:
        with self._lock:
            return self._records.get((tenant, batch_id))

    def list(self, tenant: str, *, limit: int = 100) -> list[BatchRecord]:
        with self._lock:
            mine = [r for (t, _), r in self._records.items() if t == tenant]
        return sorted(mine, key=lambda r: (-r.updated_at_ms, r.batch_id))[:limit]


__all__ = ["MemoryBatchBoard"]
