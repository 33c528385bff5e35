"""``tether batch report``: a results file as one self-contained HTML page.

The page has no outside reference (no CDN, no fonts, no images to fetch): the stylesheet and the
script are inline (:mod:`.report_assets`), the charts are inline SVG (:mod:`.report_svg`), and
the cases' transcripts are embedded as JSON (``<`` escaped, so no text closes the script). Every
recorded text is escaped with :func:`html.escape` or set with ``textContent``.
"""

from __future__ import annotations

import datetime
import json
from html import escape
from pathlib import Path
from typing import Any

from tether.producer.ops.batch.outputs.report_assets import CSS, JS
from tether.producer.ops.batch.outputs.report_data import ReportData
from tether.producer.ops.batch.outputs.report_svg import bars, histogram


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _card(value: str, label: str, ident: str = "") -> str:
    attr = f' id="{ident}"' if ident else ""
    return f'<div class="card"{attr}><b>{escape(value)}</b><span>{escape(label)}</span></div>'


def _summary(data: ReportData) -> str:
    s = data.summary
    overall: dict[str, Any] = s.metrics.get("overall", {})
    mean, stderr = overall.get("mean"), overall.get("stderr")
    cards = [
        _card(
            "-" if s.pass_rate is None else f"{s.pass_rate:.1%}",
            f"pass rate ({s.passed} of {s.graded} graded)",
            "pass-rate",
        ),
        _card(f"{_num(mean)} ± {_num(stderr)}", "mean score ± stderr"),
        _card(f"{s.cases or len({r['id'] for r in data.rows})} x {s.epochs}", "cases x epochs"),
        _card(f"{s.failed}", "errored runs"),
        _card(f"{s.total_tokens:,}", "tokens"),
        _card(
            f"{_num(s.latency_p50_ms, ',')} / {_num(s.latency_p95_ms, ',')} ms", "latency p50 / p95"
        ),
    ]
    for k, v in overall.get("pass_at_k", {}).items():
        cards.append(_card(f"{v:.3f}", f"pass@{k}"))
    if data.cost_usd is not None:
        cards.append(_card(f"${data.cost_usd:,.4f}", "cost"))
    if s.scorer_cost_usd:
        cards.append(_card(f"${s.scorer_cost_usd:,.4f}", "of it the judge's"))
    if s.scoring_errors:
        cards.append(_card(str(s.scoring_errors), "scoring errors"))
    return '<section class="cards" id="summary">' + "".join(cards) + "</section>"


def _breakdowns(data: ReportData) -> str:
    metrics = data.summary.metrics

    def items(group: dict[str, Any]) -> list[tuple[str, float | None, str]]:
        return [(n, m.get("mean"), f"({m.get('cases', 0)} cases)") for n, m in group.items()]

    panels = [
        ("Score by tag", bars(items(metrics.get("tags", {})), label="score by tag"), "by-tag"),
        (
            "Score by scorer",
            bars(items(metrics.get("scorers", {})), label="score by scorer"),
            "by-scorer",
        ),
        (
            "Latency",
            histogram([float(x) for x in data.latencies_ms], unit="ms", label="latency"),
            "latency",
        ),
        ("Cost", histogram(data.costs_usd, unit="USD", label="cost"), "cost"),
    ]
    return (
        '<section class="grid">'
        + "".join(
            f'<div class="panel" id="{ident}"><h2>{escape(title)}</h2>{body}</div>'
            for title, body, ident in panels
        )
        + "</section>"
    )


def _comparison(data: ReportData) -> str:
    c = data.comparison
    if c is None:
        return ""
    ci = "-" if c.ci95 is None else f"[{c.ci95[0]:+.3f}, {c.ci95[1]:+.3f}]"
    rows = [
        ("baseline", c.a.path),
        ("cases compared", f"{c.cases} (only in baseline {c.only_in_a}, only here {c.only_in_b})"),
        ("improved", str(len(c.improved))),
        ("regressed", str(len(c.regressed))),
        ("unchanged", str(c.unchanged)),
        ("mean score baseline / this", f"{_num(c.mean_a)} / {_num(c.mean_b)}"),
        ("difference (95% bootstrap CI)", f"{_num(c.mean_difference, '+.3f')} {ci}"),
        (
            "McNemar exact p",
            f"{c.mcnemar_p:.4g} ({c.a_only_passed} passed only in the baseline, "
            f"{c.b_only_passed} only here, {c.pairs} pairs)",
        ),
        (
            "latency mean baseline / this",
            f"{_num(c.a.latency_mean_ms, ',.0f')} / {_num(c.b.latency_mean_ms, ',.0f')} ms",
        ),
        ("tokens baseline / this", f"{c.a.tokens:,} / {c.b.tokens:,}"),
    ]
    if c.cost_difference_usd is not None:
        rows.append(
            (
                "cost baseline / this",
                f"${_num(c.a.cost_usd, ',.4f')} / ${_num(c.b.cost_usd, ',.4f')}",
            )
        )
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<h2>Against the baseline</h2><table id="comparison">{body}</table>'


def _options(values: list[str], everything: str) -> str:
    return f'<option value="">{escape(everything)}</option>' + "".join(
        f'<option value="{escape(v)}">{escape(v)}</option>' for v in values
    )


def _table(data: ReportData) -> str:
    tags = sorted({t for r in data.rows for t in r["tags"]})
    compare = data.comparison is not None
    head = ["case", "epoch", "outcome", "score", "tags", "latency ms", "tokens"]
    head += ["change"] if compare else []
    head += ["output", ""]
    header = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(_row(r, compare) for r in data.rows)
    return (
        f'<h2>Cases</h2>{_filters(tags, compare)}<table id="cases"><thead><tr>{header}</tr>'
        f"</thead><tbody>{body}</tbody></table>"
    )


def _filters(tags: list[str], compare: bool) -> str:
    """The search box and the outcome, tag (and change) selectors above the cases."""
    return (
        '<div class="filters"><input id="search" type="search" placeholder="search id, input, '
        'output" aria-label="search">'
        f'<select id="outcome" aria-label="outcome">'
        f"{_options(['passed', 'failed', 'errored', 'ungraded'], 'every outcome')}</select>"
        f'<select id="tag" aria-label="tag">{_options(tags, "every tag")}</select>'
        + (
            f'<select id="change" aria-label="change">'
            f"{_options(['improved', 'regressed', 'unchanged'], 'every change')}</select>"
            if compare
            else ""
        )
        + '<span id="shown"></span></div>'
    )


def _row(r: dict[str, Any], compare: bool) -> str:
    """One case's row, with the data the filters and the transcript dialog read."""
    search = " ".join(
        str(x) for x in (r["id"], r["input"], r["output"] or "", r["error"] or "")
    ).lower()
    change = r["change"] or ""
    cells = [
        f"<td>{escape(r['id'])}</td>",
        f'<td class="num">{r["epoch"]}</td>',
        f'<td><span class="badge {r["outcome"]}">{r["outcome"]}</span></td>',
        f'<td class="num">{_num(r["score"])}</td>',
        f"<td>{escape(', '.join(r['tags']))}</td>",
        f'<td class="num">{r["latency_ms"]:,}</td>',
        f'<td class="num">{r["tokens"]:,}</td>',
    ]
    if compare:
        cells.append(f'<td class="{change}">{escape(change)}</td>')
    cells.append(f'<td class="out">{escape(r["output"] or r["error"] or "")}</td>')
    cells.append('<td><button class="open" type="button">transcript</button></td>')
    return (
        f'<tr data-index="{r["index"]}" data-id="{escape(r["id"])}" '
        f'data-outcome="{r["outcome"]}" data-tags="{escape("|".join(r["tags"]))}" '
        f'data-change="{escape(change)}" data-search="{escape(search)}">' + "".join(cells) + "</tr>"
    )


DIALOG = (
    '<dialog id="transcript"><header><strong id="t-title"></strong>'
    '<button id="t-close" type="button">close</button></header>'
    '<div class="body" id="t-body"></div></dialog>'
)


def _embedded(data: ReportData) -> str:
    doc = {"rows": data.rows, "transcripts": data.transcripts}
    text = json.dumps(doc, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="report-data">{text}</script>'


def render_report(data: ReportData) -> str:
    """The whole HTML page."""
    made = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"Batch {data.batch_id}"
    sub = (
        f"{escape(data.path)} · agent {escape(', '.join(data.agents))} · "
        f"{len(data.rows)} result lines · made {made}"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><div class="sub">{sub}</div>'
        + _summary(data)
        + _comparison(data)
        + _breakdowns(data)
        + _table(data)
        + DIALOG
        + _embedded(data)
        + f"<script>{JS}</script></body></html>"
    )


def write_report(data: ReportData, out: Path) -> Path:
    """Write the page to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(data), encoding="utf-8")
    return out


__all__ = ["render_report", "write_report"]
