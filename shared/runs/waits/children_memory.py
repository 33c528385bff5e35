"""The child book in memory (tests, in-process cycles): the behaviour of
:class:`~tether.runs.waits.children_redis.RedisChildBook`, one lock."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tether.core.children import ChildEnd
from tether.runs.waits.children import Family, SpawnedChild


class InMemoryChildBook:
    """:class:`~tether.runs.waits.children.ChildBook` in dicts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spawned: dict[tuple[str, str], dict[str, SpawnedChild]] = {}
        self._ended: dict[tuple[str, str], dict[str, ChildEnd]] = {}

    def spawned(self, tenant: str, parent_session_id: str, spawns: Sequence[SpawnedChild]) -> None:
        with self._lock:
            for child in spawns:
                family = self._spawned.setdefault((tenant, parent_session_id), {})
                family[child.child.run_id] = child

    def ended(
        self, tenant: str, parent_session_id: str, end: ChildEnd, *, vouched: bool = False
    ) -> bool:
        with self._lock:
            known = end.run_id in self._spawned.get((tenant, parent_session_id), {})
            if not (known or vouched):
                return False
            self._ended.setdefault((tenant, parent_session_id), {}).setdefault(end.run_id, end)
            return True

    def family(self, tenant: str, parent_session_id: str) -> Family:
        with self._lock:
            key = (tenant, parent_session_id)
            return Family(dict(self._spawned.get(key, {})), dict(self._ended.get(key, {})))

    def forget(self, tenant: str, parent_session_id: str, child_run_ids: Sequence[str]) -> None:
        with self._lock:
            key = (tenant, parent_session_id)
            for run_id in child_run_ids:
                self._spawned.get(key, {}).pop(run_id, None)
                self._ended.get(key, {}).pop(run_id, None)

    def clear(self) -> None:
        """Forget everything (what a Redis flush does)."""
        with self._lock:
            self._spawned.clear()
            self._ended.clear()
