"""In-process blob backend: a dict guarded by a lock.

Values are immutable ``bytes``, so callers can never mutate stored state; tokens come from one
counter per backend, so every write gets a new, increasing integer version.
"""

from __future__ import annotations

import threading

from tether.errors import VersionConflict
from tether.persistence.blobs import Blob
from tether.persistence.objects import listing_order


class MemoryBlobs:
    """A thread-safe dict of key -> (bytes, token)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, Blob] = {}
        self._counter = 0

    def describe(self, key: str) -> str:
        return f"memory://{key}"

    def get(self, key: str) -> Blob | None:
        with self._lock:
            return self._objects.get(key)

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        data = bytes(data)
        with self._lock:
            current = self._objects.get(key)
            current_token = current.token if current is not None else None
            if current_token != expected:
                raise VersionConflict(
                    f"{self.describe(key)} is at version {current_token!r}, expected "
                    f"{expected!r}; reload it and retry"
                )
            self._counter += 1
            token = str(self._counter)
            self._objects[key] = Blob(data, token)
            return token

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._objects.pop(key, None) is not None

    def delete_many(self, keys: list[str]) -> int:
        with self._lock:
            return sum(self._objects.pop(key, None) is not None for key in keys)

    def list_names(self, prefix: str) -> list[str]:
        with self._lock:
            keys = list(self._objects)
        return sorted(
            rest
            for key in keys
            if key.startswith(prefix) and (rest := key[len(prefix) :]) and "/" not in rest
        )

    def list_children(
        self, prefix: str, leaf: str, *, rollup: str, after: str | None, limit: int
    ) -> list[str]:
        suffix = "/" + leaf
        with self._lock:
            keys = list(self._objects)
        children = [
            child
            for key in keys
            if key.startswith(prefix)
            and key.endswith(suffix)
            and (child := key[len(prefix) : -len(suffix)])
            and "/" not in child
        ]
        floor = None if after is None else listing_order(after)
        ordered = sorted(
            (c for c in children if floor is None or listing_order(c) > floor), key=listing_order
        )
        return ordered[:limit]
