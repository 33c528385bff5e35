"""Tether producer: the client SDK (:class:`Producer`, :class:`RunHandle`, and for asyncio
:class:`AsyncProducer`, :class:`AsyncRunHandle`) and the CLI.

Names are imported on first use, so ``tether --help`` does not pay for Celery's import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.producer.aio import AsyncProducer
    from tether.producer.aio_handle import AsyncRunHandle
    from tether.producer.client import Producer, RunSpec
    from tether.producer.handle import RunHandle

__all__ = ["AsyncProducer", "AsyncRunHandle", "Producer", "RunHandle", "RunSpec"]


def __getattr__(name: str) -> Any:
    if name in ("Producer", "RunSpec"):
        from tether.producer import client

        return getattr(client, name)
    if name == "RunHandle":
        from tether.producer.handle import RunHandle

        return RunHandle
    if name == "AsyncProducer":
        from tether.producer.aio import AsyncProducer

        return AsyncProducer
    if name == "AsyncRunHandle":
        from tether.producer.aio_handle import AsyncRunHandle

        return AsyncRunHandle
    raise AttributeError(f"module 'tether.producer' has no attribute {name!r}")
