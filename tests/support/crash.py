"""Crash a worker in-process at a named commit step, then recover it the way a second one would.

A :class:`SimulatedCrash` is a ``BaseException``: no handler in the cycle catches it, just as no
handler runs when a process dies. Once the crash fires, the dead worker's backends are switched
off (:class:`Powered`), so even its ``finally`` blocks cannot reach storage: its lease stays held
until it expires, as a killed worker's would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tether.runs.commit import CommitStep, Phase, StepContext, install_probe
from tether.runs.leases.base import LeaseManager
from tether.runs.queue.base import RunQueue
from tether.runs.runtime import Runtime
from tether.runtime.registry import AgentRegistry
from tether.settings import Settings


class SimulatedCrash(BaseException):
    """The worker process died here."""


class PowerSwitch:
    """One worker's power: off after its crash."""

    def __init__(self) -> None:
        self.dead = False


class Powered:
    """A backend proxy that refuses every call once its worker is dead."""

    def __init__(self, target: Any, switch: PowerSwitch) -> None:
        self._target = target
        self._switch = switch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._switch.dead:
                raise SimulatedCrash(f"dead worker called {name}")
            return attr(*args, **kwargs)

        return call


@dataclass
class Backends:
    """One deployment's shared state: what survives a worker's death."""

    name: str
    store: Any
    archive: Any
    stream: Any
    leases: LeaseManager
    runs: RunQueue
    hint: Any
    expire_lease: Callable[[str, str], None]
    """Make the session's lease expire now (the TTL passing, without waiting for it)."""


def worker_runtime(
    backends: Backends,
    worker_id: str,
    *,
    switch: PowerSwitch | None = None,
    archive_batch_events: int = 1,
) -> Runtime:
    """A worker's runtime over ``backends`` (behind ``switch`` when given)."""
    switch = switch or PowerSwitch()

    def wrap(target: Any) -> Any:
        return Powered(target, switch)

    return Runtime(
        settings=Settings(lease_ttl_ms=60_000, max_attempts=3, queue="tether"),
        runs=wrap(backends.runs),
        store=wrap(backends.store),
        archive=wrap(backends.archive),
        stream=wrap(backends.stream),
        leases=wrap(backends.leases),
        registry=AgentRegistry.default(entry_points_enabled=False),
        worker_id=worker_id,
        archive_hint=wrap(backends.hint),
        wake=lambda tenant, session_id: None,
        archive_batch_events=archive_batch_events,
    )


@contextmanager
def crash_at(
    step: CommitStep, phase: Phase, worker_id: str, switch: PowerSwitch
) -> Iterator[list[StepContext]]:
    """Kill ``worker_id`` the first time it reaches ``phase`` of ``step``; yields where it died."""
    fired: list[StepContext] = []
    lock = threading.Lock()

    def probe(ctx: StepContext) -> None:
        if ctx.worker_id != worker_id or ctx.step is not step or ctx.phase != phase:
            return
        with lock:
            if fired:
                return
            fired.append(ctx)
            switch.dead = True
        raise SimulatedCrash(f"{worker_id} died {phase} {step}")

    uninstall = install_probe(probe)
    try:
        yield fired
    finally:
        uninstall()
