"""Tether producer: the client SDK (:class:`Producer`, :class:`RunHandle`) and the CLI."""

from producer.client import Producer, RunSpec
from producer.handle import RunHandle

__all__ = ["Producer", "RunHandle", "RunSpec"]
