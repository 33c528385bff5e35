"""Tether producer: the client SDK (:class:`Producer`, :class:`RunHandle`, and for asyncio
:class:`AsyncProducer`, :class:`AsyncRunHandle`), with the operator tools (CLI, console, batch
evaluation, local stack, admin) apart in :mod:`tether.producer.ops`.

Names are imported on first use, so ``tether --help`` does not pay for Celery's import. This
module is the package's face for users: the package's own modules import each name from the
module that defines it, never from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.producer.client import Producer
    from tether.producer.client_aio import AsyncProducer
    from tether.producer.handle import RunHandle
    from tether.producer.handle_aio import AsyncRunHandle
    from tether.producer.ops.batch import run_batch
    from tether.producer.schedules import Schedules
    from tether.producer.submission import RunSpec
    from tether.runs.options import RunOptions, RunOptionsKwargs

__all__ = [
    "AsyncProducer",
    "AsyncRunHandle",
    "Producer",
    "RunHandle",
    "RunOptions",
    "RunOptionsKwargs",
    "RunSpec",
    "Schedules",
    "run_batch",
]


def __getattr__(name: str) -> Any:
    if name == "Producer":
        from tether.producer.client import Producer

        return Producer
    if name == "RunSpec":
        from tether.producer.submission import RunSpec

        return RunSpec
    if name == "RunHandle":
        from tether.producer.handle import RunHandle

        return RunHandle
    if name == "AsyncProducer":
        from tether.producer.client_aio import AsyncProducer

        return AsyncProducer
    if name == "AsyncRunHandle":
        from tether.producer.handle_aio import AsyncRunHandle

        return AsyncRunHandle
    if name in ("RunOptions", "RunOptionsKwargs"):  # the options every submit takes
        from tether.runs import options

        return getattr(options, name)
    if name == "Schedules":  # scheduled runs (the `schedules` extra: celery-redbeat)
        from tether.producer.schedules import Schedules

        return Schedules
    if name == "run_batch":
        from tether.producer.ops.batch import run_batch

        return run_batch
    raise AttributeError(f"module 'tether.producer' has no attribute {name!r}")
