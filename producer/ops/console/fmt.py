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


def fmt_usd(usd: float | None) -> str:
    """A cost in USD, readable ("unpriced" when the model has no price)."""
    if usd is None:
        return "unpriced"
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.6f}".rstrip("0").rstrip(".")
