"""Small inline SVG charts for the HTML report (no plotting library at run time): a histogram of
values and a horizontal bar chart of labelled values in [0, 1]."""

from __future__ import annotations

import math
import re
from html import escape

WIDTH = 420
BAR_H = 22
#: The longest label a bar chart shows whole (longer ones: :func:`chart_label`).
MAX_LABEL_CHARS = 40
#: About the width of one character of the charts' 11 px text.
CHAR_W = 7
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def histogram(values: list[float], *, unit: str, bins: int = 20, label: str = "") -> str:
    """An SVG histogram of ``values`` (an empty note when there are none)."""
    if not values:
        return f'<p class="empty">no {escape(label or unit)} recorded</p>'
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    bins = max(1, min(bins, len(set(values))))
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / span * bins))] += 1
    height, top, bottom = 140, 10, 22
    plot_h = height - top - bottom
    tallest = max(counts)
    width = (WIDTH - 20) / bins
    bars = []
    for i, count in enumerate(counts):
        h = plot_h * count / tallest
        lo = low + span * i / bins
        hi = low + span * (i + 1) / bins
        bars.append(
            f'<rect x="{10 + i * width:.1f}" y="{top + plot_h - h:.1f}" width="{width - 1:.1f}" '
            f'height="{h:.1f}"><title>{_fmt(lo)}-{_fmt(hi)} {escape(unit)}: {count}</title></rect>'
        )
    axis = (
        f'<text x="10" y="{height - 6}">{_fmt(low)} {escape(unit)}</text>'
        f'<text x="{WIDTH - 10}" y="{height - 6}" text-anchor="end">{_fmt(high)} '
        f"{escape(unit)}</text>"
    )
    return (
        f'<svg class="chart hist" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">'
        + "".join(bars)
        + axis
        + "</svg>"
    )


def chart_label(name: str, limit: int = MAX_LABEL_CHARS) -> str:
    """``name`` in at most ``limit`` characters, shortened in the middle (``…``) and never
    inside a number: a scorer's parameters end its name, and a label cut to ``judge:threshold=0.``
    said another threshold than the scorer's ``0.5``."""
    if len(name) <= limit:
        return name
    inside = {p for m in _NUMBER.finditer(name) for p in range(m.start() + 1, m.end())}
    cut_from = (limit - 1) // 2  # keep the head and the tail (the parameters), drop the middle
    while cut_from in inside:
        cut_from -= 1
    cut_to = len(name) - (limit - 1 - cut_from)
    while cut_to in inside:
        cut_to += 1
    return name[:cut_from] + "…" + name[cut_to:]


def bars(items: list[tuple[str, float | None, str]], *, label: str = "") -> str:
    """An SVG bar per ``(name, value in [0, 1], note)``; a None value draws no bar. The name
    column is as wide as the longest label (names over :data:`MAX_LABEL_CHARS` characters are
    shortened by :func:`chart_label`; the full name is the bar's tooltip)."""
    if not items:
        return '<p class="empty">none</p>'
    labels = [chart_label(name) for name, _, _ in items]
    name_w = max(130, CHAR_W * max(len(x) for x in labels) + 12)
    bar_w = WIDTH - 130 - 90
    width = name_w + bar_w + 90
    height = BAR_H * len(items) + 4
    rows = []
    for i, ((name, value, note), shown_name) in enumerate(zip(items, labels, strict=True)):
        y = 2 + i * BAR_H
        w = 0.0 if value is None or math.isnan(value) else bar_w * max(0.0, min(1.0, value))
        shown = "-" if value is None else f"{value:.3f}"
        rows.append(
            f'<text x="{name_w - 6}" y="{y + 15}" text-anchor="end">{escape(shown_name)}</text>'
            f'<rect class="track" x="{name_w}" y="{y + 3}" width="{bar_w}" height="{BAR_H - 8}"/>'
            f'<rect x="{name_w}" y="{y + 3}" width="{w:.1f}" height="{BAR_H - 8}">'
            f"<title>{escape(name)}: {shown} {escape(note)}</title></rect>"
            f'<text x="{name_w + bar_w + 6}" y="{y + 15}">{shown} {escape(note)}</text>'
        )
    return (
        f'<svg class="chart bars" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
        + "".join(rows)
        + "</svg>"
    )


__all__ = ["MAX_LABEL_CHARS", "bars", "chart_label", "histogram"]
