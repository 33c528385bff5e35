"""How the console writes times and durations."""

from __future__ import annotations

from datetime import UTC, datetime


def fmt_time(ms: int | None) -> str:
    """A timestamp in ms as UTC ``YYYY-MM-DD HH:MM:SS``."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(ms: float | None) -> str:
    """A duration in ms, readable."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"
