"""The child book in memory (tests, in-process cycles): the behaviour of
:class:`~tether.runs.waits.children_redis.RedisChildBook`, one lock."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tether.core.children import ChildEnd
from tether.runs.waits.children import ChildLink, Family, SpawnedChild


class InMemoryChildBook:
    """:class:`~tether.runs.waits.children.ChildBook` in dicts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spawned: dict[tuple[str, str], dict[str, SpawnedChild]] = {}
        self._ended: dict[tuple[str, str], dict[str, ChildEnd]] = {}
        self._links: dict[tuple[str, str], ChildLink] = {}

    def spawned(
        self, tenant: str, parent_session_id: str, spawns: Sequence[tuple[SpawnedChild, ChildLink]]
    ) -> None:
        with self._lock:
            for child, link in spawns:
                family = self._spawned.setdefault((tenant, parent_session_id), {})
                family[child.child.run_id] = child
                self._links[(tenant, child.child.session_id)] = link

    def link_of(self, tenant: str, child_session_id: str) -> ChildLink | None:
        with self._lock:
            return self._links.get((tenant, child_session_id))

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

    def clear(self) -> None:
        """Forget everything (what a Redis flush does)."""
        with self._lock:
            self._spawned.clear()
            self._ended.clear()
            self._links.clear()
