"""``python -m bench.publish``: the performance tables of the README and of
``docs/performance.md``, generated from the committed results in ``bench/results`` (never
pasted by hand).

    python -m bench.publish            # rewrite the generated blocks, copy the plots
    python -m bench.publish --check    # exit 1 when a page differs from what the JSON gives

A generated block sits between two marker comments, so the prose around it stays as written:
``<!-- perf:begin -->`` / ``<!-- perf:end -->`` in README.md (the compact table), and
``<!-- perf:begin NAME -->`` / ``<!-- perf:end NAME -->`` in docs/performance.md (``latest``,
``soak``, ``scaling``, ``cli``, ``earlier``). What goes in them:

- ``bench/results/latest.json`` (``python -m bench``): the README's table, one row per
  measure, and the full report in the docs; the measures of :data:`SUPPLEMENTS` (run on their
  own, e.g. ``p10.json``) join the README's table;
- every other benchmark document (``bench/results/**/*.json`` with ``measures``: partial and
  earlier runs, e.g. ``durability/latest.json``), newest first, in the docs;
- ``bench/results/soak*.json`` (``python -m bench.soak``) and ``bench/results/scaling.json``
  (``python -m bench.scaling``): a summary line in the README, their tables in the docs;
- ``bench/results/cli_startup.json`` (``python -m bench.cli_startup``): its rows (C1, C2) in
  the README's table with a line naming their source, its table in the docs (``cli``);
- the plots (``latency.png``, ``scaling.png``) are copied to ``docs/img/perf/`` (the docs site
  only serves what is under ``docs/``).

``tests/test_perf_docs.py`` runs the check, so a table cannot drift from its JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cli_startup import JSON_NAME as CLI_JSON
from bench.cli_startup import markdown as cli_markdown
from bench.core import Measure, Stats, Target
from bench.report import JSON_NAME, PLOT_NAME, _fmt, markdown

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("bench") / "results"
README = Path("README.md")
PERF_PAGE = Path("docs") / "performance.md"
PLOT_DIR = Path("docs") / "img" / "perf"
SCALING_JSON, SCALING_PLOT = "scaling.json", "scaling.png"
#: Documents run on their own whose rows join latest.json's in the README (with their command).
SUPPLEMENTS = (
    RESULTS / "p10.json",
    RESULTS / "p10f.json",
    RESULTS / "p11.json",
    RESULTS / "p13.json",
    RESULTS / "p14.json",
)
#: Rows of committed documents withdrawn after they were published: kept in their JSON (the
#: record of what was measured) but no longer shown as figures; each page says why instead.
WITHDRAWN = {
    (RESULTS / JSON_NAME, "P11"): (
        "withdrawn (#51): its Inspect side ran on mockllm with a list of every reply as the "
        "judge model's argument, which Inspect recorded in every sample, so Inspect's time grew "
        "with the square of the samples; the fair P11 (both sides over HTTP to one server) is in "
        "`bench/results/p11.json`"
    ),
}
MIB = 1024 * 1024
#: A census kind of key is listed in the docs when it held at least this much at a checkpoint.
CENSUS_MIN_BYTES = MIB // 2

_MEASURE_FIELDS = {f.name for f in dataclasses.fields(Measure)}


class PublishError(RuntimeError):
    """A page lacks its markers, or a result file is missing or malformed."""


# --- reading the results ---------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRun:
    """One benchmark document (``python -m bench``): where it is, its meta and its measures."""

    path: Path
    meta: dict[str, Any]
    measures: list[Measure]

    @property
    def date(self) -> str:
        return str(self.meta.get("date", ""))


def _measure(row: dict[str, Any]) -> Measure:
    """A :class:`Measure` back from its JSON row (what :func:`bench.report.to_json` wrote)."""
    fields = {k: v for k, v in row.items() if k in _MEASURE_FIELDS}
    fields["tether"] = Stats(**row["tether"])
    fields["baseline"] = Stats(**row["baseline"]) if row.get("baseline") else None
    fields["target"] = _target(row.get("target"))
    fields["tail_target"] = _target(row.get("tail_target"))
    return Measure(**fields)


def _target(target: dict[str, Any] | None) -> Target | None:
    return Target(target["op"], target["value"], target.get("unit", "x")) if target else None


def _load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PublishError(f"cannot read {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise PublishError(f"{path} does not hold a JSON object")
    return document


def bench_runs(root: Path) -> list[BenchRun]:
    """Every benchmark document of ``python -m bench`` under ``bench/results``, newest first."""
    runs = []
    for path in sorted((root / RESULTS).rglob("*.json")):
        if path == root / RESULTS / CLI_JSON:
            continue  # measures too, but of `python -m bench.cli_startup`: see cli_run()
        run = _bench_run(root, path)
        if run is not None:
            runs.append(run)
    return sorted(runs, key=lambda r: (r.date, str(r.path)), reverse=True)


def _bench_run(root: Path, path: Path) -> BenchRun | None:
    document = _load(path)
    if "measures" not in document:
        return None
    meta = {k: v for k, v in document.items() if k != "measures"}
    relative = path.relative_to(root)
    withdrawn = {
        row["id"]: WITHDRAWN[relative, row["id"]]
        for row in document["measures"]
        if (relative, row["id"]) in WITHDRAWN
    }
    if withdrawn:
        meta["withdrawn"] = withdrawn
    measures = [_measure(row) for row in document["measures"] if row["id"] not in withdrawn]
    return BenchRun(relative, meta, measures)


def cli_run(root: Path) -> BenchRun | None:
    """``cli_startup.json`` (``python -m bench.cli_startup``), when there is one."""
    path = root / RESULTS / CLI_JSON
    return _bench_run(root, path) if path.is_file() else None


def latest_run(runs: Sequence[BenchRun]) -> BenchRun:
    """The run of ``bench/results/latest.json`` (what ``python -m bench`` writes)."""
    for run in runs:
        if run.path == RESULTS / JSON_NAME:
            return run
    raise PublishError(f"{RESULTS / JSON_NAME} is missing: run `python -m bench` first")


def soak_reports(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``soak*.json``, the largest soak first."""
    found = [(p.relative_to(root), _load(p)) for p in sorted((root / RESULTS).glob("soak*.json"))]
    return sorted(found, key=lambda item: -int(item[1].get("config", {}).get("runs", 0)))


def scaling_report(root: Path) -> dict[str, Any] | None:
    """``scaling.json``, when there is one."""
    path = root / RESULTS / SCALING_JSON
    return _load(path) if path.is_file() else None


# --- formatting ------------------------------------------------------------------------------


def _stats_cell(stats: Stats | None, unit: str, *, p99: bool = False) -> str:
    """``median / p95`` (with ``p99``: ``median / p95 / p99``); one number for a single pass."""
    if stats is None:
        return "-"
    if stats.n == 1:
        return f"{_fmt(stats.median, unit)} {unit}"
    parts = [stats.median, stats.p95, *([stats.p99] if p99 else [])]
    return " / ".join(_fmt(v, unit) for v in parts) + f" {unit}"


def _result_cell(m: Measure, *, tails: bool = False) -> str:
    """The measure's result; with ``tails``, the p95 and p99 ratios beside it (P1); else the
    ratio its tail target bounds, when it has one (P13's p95)."""
    value = f"{m.value:.2f}x" if m.value_unit == "x" else f"{m.value:.2f} {m.value_unit}"
    tail = m.tail_value
    if not tails and m.tail_target is not None and tail is not None:
        return f"{value} (p{m.tail_percentile} {tail:.2f}x)"
    if not tails or m.value_unit != "x" or m.baseline is None or m.baseline.n == 1:
        return value
    ratios = (("p95", m.tether.p95 / m.baseline.p95), ("p99", m.tether.p99 / m.baseline.p99))
    return f"{value} ({', '.join(f'{name} {ratio:.2f}x' for name, ratio in ratios)})"


def _verdict(m: Measure) -> str:
    return {None: "info", True: "met", False: "**missed**"}[m.met]


def _mib(value: float) -> str:
    return f"{value / MIB:.2f}"


def _count(value: Any) -> str:
    return f"{int(value):,}"


# --- README.md -------------------------------------------------------------------------------


def readme_block(
    latest: BenchRun,
    soaks: Sequence[tuple[Path, dict[str, Any]]],
    scaling: dict[str, Any] | None,
    supplements: Sequence[BenchRun] = (),
    cli: BenchRun | None = None,
) -> str:
    """The README's compact table: one row per measure of ``latest.json``, of the
    ``supplements`` (unless latest has it too) and of ``cli_startup.json``, then one line each
    for the worker's per-run cost, the largest soak, the scaling curve and where the CLI rows
    come from."""
    cpus = latest.meta.get("machine", {}).get("cpu_count", "?")
    own = {m.id for m in latest.measures}
    extra = [(run, [m for m in run.measures if m.id not in own]) for run in supplements]
    sources = "".join(
        f"; {', '.join(m.id for m in ms)} from `{run.path}` (`{run.meta.get('command', '?')}`)"
        for run, ms in extra
        if ms
    )
    lines = [
        f"From `{latest.path}` (`{latest.meta.get('command', 'python -m bench')}`, {cpus} CPUs)"
        f"{sources}. Cells are median / p95, P1's median / p95 / p99.",
        "",
        "| id | measure | Tether | baseline | result | target | |",
        "|---|---|---|---|---|---|---|",
    ]
    cli_measures = sorted(cli.measures, key=_measure_order) if cli is not None else []
    rows = [*latest.measures, *(m for _run, ms in extra for m in ms)]
    for m in [*sorted(rows, key=_measure_order), *cli_measures]:
        full = m.id == "P1" and m.tether.n > 1
        baseline = _stats_cell(m.baseline, m.unit, p99=full)
        if m.baseline is not None and m.baseline_name:
            baseline += f", {m.baseline_name}"
        lines.append(
            f"| {m.id} | {m.name} | {_stats_cell(m.tether, m.unit, p99=full)} | {baseline} | "
            f"{_result_cell(m, tails=full)} | {m.target_text} | {_verdict(m)} |"
        )
    notes = [_per_run_line(latest), _soak_line(soaks), _scaling_line(scaling), _cli_line(cli)]
    lines += ["", *(f"- {n}" for n in notes if n)]
    return "\n".join(lines)


def _measure_order(m: Measure) -> tuple[int, str]:
    """P1, P2, ..., P4, P4w, ..., P10: by number, then suffix."""
    match = re.fullmatch(r"P(\d+)(.*)", m.id)
    return (int(match.group(1)), match.group(2)) if match else (1 << 30, m.id)


def _per_run_line(latest: BenchRun) -> str:
    p1 = next((m for m in latest.measures if m.id == "P1"), None)
    if p1 is None or "tether per run: worker round trips" not in p1.extra:
        return ""
    x = p1.extra
    line = (
        f"Per 1-step run Tether's worker makes {x['tether per run: worker round trips']:g} "
        f"Redis round trips ({x.get('tether per run: worker commands', 0):g} commands) and "
        f"the producer {x.get('tether per run: producer round trips', 0):g} round trips"
    )
    if "tether per run: s3 requests" in x:
        line += f"; S3: {x['tether per run: s3 requests']:g} requests per run"
        if "hand-written per run: s3 requests" in x:
            line += f" (hand-written task: {x['hand-written per run: s3 requests']:g})"
    return line + "."


def _soak_line(soaks: Sequence[tuple[Path, dict[str, Any]]]) -> str:
    if not soaks:
        return ""
    path, soak = soaks[0]
    c, a = soak.get("config", {}), soak.get("audit", {})
    return (
        f"Soak (`{path}`): {_count(c.get('runs', 0))} runs over {_count(c.get('sessions', 0))} "
        f"sessions, {len(soak.get('kills', []))} SIGKILLs: {a.get('lost', '?')} lost, "
        f"{a.get('duplicated', '?')} duplicated, {a.get('out_of_order', '?')} sessions out of "
        f"order; Redis memory {soak.get('memory_ratio', 0):.2f}x between the first and the last "
        f"checkpoint (limit {c.get('max_memory_ratio', '?')}x): "
        f"{'PASS' if soak.get('ok') else 'FAIL'}."
    )


def _scaling_line(scaling: dict[str, Any] | None) -> str:
    if scaling is None:
        return ""
    single = [p for p in scaling.get("points", []) if p.get("shards") == 1]
    if not single:
        return ""
    rates = " / ".join(f"{p['runs_per_s']:g}" for p in single)
    workers = " / ".join(str(p["workers"]) for p in single)
    return f"Scaling (`{RESULTS / SCALING_JSON}`): {rates} runs/s with {workers} worker processes."


def _cli_line(cli: BenchRun | None) -> str:
    if cli is None or not cli.measures:
        return ""
    first = cli.measures[0]
    base = first.baseline
    ids = ", ".join(m.id for m in cli.measures)
    costs = "; ".join(
        f"{m.id} {float(m.extra.get('median_difference_ms', 0)):+.1f} ms" for m in cli.measures
    )
    line = (
        f"{ids} (`{cli.path}`, `{cli.meta.get('command', 'python -m bench.cli_startup')}`): "
        f"{first.tether.n} fresh processes of each command, taking turns with `python -c pass`"
    )
    if base is not None:
        line += f" ({_fmt(base.median, first.unit)} {first.unit} median)"
    return f"{line}; over it, median: {costs}."


# --- docs/performance.md ---------------------------------------------------------------------


def latest_block(latest: BenchRun, plot: bool) -> str:
    """The full report of ``latest.json`` (as ``bench/results/latest.md`` renders it)."""
    lines = [f"From `{latest.path}`.", "", markdown(latest.measures, latest.meta).rstrip()]
    lines += [f"- **{id_}**: {why}." for id_, why in latest.meta.get("withdrawn", {}).items()]
    if plot:
        lines += ["", f"![Per-run latency against session length](img/perf/{PLOT_NAME})"]
    return "\n".join(lines)


def earlier_block(runs: Sequence[BenchRun], latest: BenchRun) -> str:
    """Every other benchmark document, newest first."""
    parts = []
    for run in runs:
        if run is latest:
            continue
        ids = ", ".join(m.id for m in run.measures)
        parts.append(f"### {ids}: `{run.path}`\n\n{markdown(run.measures, run.meta).rstrip()}")
    return "\n\n".join(parts) if parts else "No other benchmark results are committed."


def cli_block(cli: BenchRun | None) -> str:
    """The CLI start table (as ``bench/results/cli_startup.md`` renders it)."""
    if cli is None:
        return "No CLI start results are committed."
    return f"From `{cli.path}`.\n\n{cli_markdown(cli.measures, cli.meta).rstrip()}"


def soak_block(soaks: Sequence[tuple[Path, dict[str, Any]]]) -> str:
    """One summary per soak: its checkpoints, the audit and the verdict."""
    if not soaks:
        return "No soak results are committed."
    return "\n\n".join(_soak_summary(path, soak) for path, soak in soaks)


def _soak_summary(path: Path, soak: dict[str, Any]) -> str:
    c, a = soak.get("config", {}), soak.get("audit", {})
    checkpoints = soak.get("checkpoints", [])
    kills = soak.get("kills", [])
    verdict = "PASS" if soak.get("ok") else "FAIL"
    rate = c.get("rate_per_s")
    offered = f"offered at {rate:g} runs/s" if rate else "offered as fast as the workers take"
    lines = [
        f"### {verdict}: {_count(c.get('runs', 0))} runs over {_count(c.get('sessions', 0))} "
        f"sessions (`{path}`)",
        "",
        f"`{soak.get('command', '?')}`: {c.get('workers', '?')} prefork workers "
        f"(`-c {c.get('concurrency', '?')}`), {offered}, `TETHER_RESULT_TTL_S="
        f"{c.get('result_ttl_s', '?')}`, `TETHER_STREAM_RETENTION_S="
        f"{c.get('stream_retention_s', '?')}`, a worker SIGKILLed every "
        f"{c.get('kill_every_s', 0):g} s ({len(kills)} kills); wall time "
        f"{soak.get('duration_s', 0):.0f} s.",
        "",
        "| checkpoint | runs | elapsed | Redis used_memory | keys | live run records | worker RSS "
        "| runs/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in checkpoints:
        rss = " + ".join(f"{v / 1024:.0f}" for v in s.get("worker_rss_kib", {}).values()) or "-"
        records = s.get("census", {}).get("run", {}).get("keys")
        lines.append(
            f"| {s['label']} | {_count(s['runs_done'])} | {s['elapsed_s']:.0f} s | "
            f"{_mib(s['used_memory'])} MiB | {_count(s['keys'])} | "
            f"{'-' if records is None else _count(records)} | {rss} MiB | "
            f"{s['runs_per_s']:.1f} |"
        )
    lines += [
        "",
        f"- Redis memory last / first checkpoint: **{soak.get('memory_ratio', 0):.2f}x** "
        f"(limit {c.get('max_memory_ratio', '?')}x); keys {soak.get('keys_ratio', 0):.2f}x.",
        f"- Runs: {_count(a.get('completed', 0))} completed of {_count(c.get('runs', 0))}; "
        f"lost {a.get('lost', '?')}, duplicated {a.get('duplicated', '?')}, sessions out of "
        f"order {a.get('out_of_order', '?')}; {a.get('retried', '?')} needed more than one "
        "attempt.",
        f"- S3: {_count(a.get('s3_objects_expected', 0))} objects expected "
        f"({_count(a.get('s3_heads', 0))} heads + {_count(a.get('s3_segments_expected', 0))} "
        f"segments by the archiving rule), {_count(a.get('s3_objects_found', 0))} found; "
        f"sessions off the rule after a kill: {len(a.get('s3_sessions_off_rule', []))}, "
        f"unexplained: {len(a.get('s3_sessions_bad', []))}, stray objects: "
        f"{len(a.get('s3_stray', []))}.",
    ]
    census = _census_line(checkpoints)
    if census:
        lines.append(census)
    if kills:
        restarts = [k["restart_s"] for k in kills]
        lines.append(
            f"- Worker restarts after a kill: {min(restarts):g}-{max(restarts):g} s; live "
            f"streams repaired: {soak.get('stream_repairs', 0)}."
        )
    failures = soak.get("failures") or []
    lines.append(f"- Verdict: **{verdict}**" + (f" ({'; '.join(failures)})" if failures else ""))
    return "\n".join(lines)


def _census_line(checkpoints: Sequence[dict[str, Any]]) -> str:
    """The kinds of key that held at least :data:`CENSUS_MIN_BYTES` at some checkpoint."""
    kinds = sorted(
        {
            kind
            for s in checkpoints
            for kind, k in s.get("census", {}).items()
            if k.get("bytes", 0) >= CENSUS_MIN_BYTES
        }
    )
    if not kinds:
        return ""
    labels = " / ".join(s["label"] for s in checkpoints)
    cells = []
    for kind in kinds:
        sizes = [s.get("census", {}).get(kind, {}).get("bytes") for s in checkpoints]
        cells.append(f"`{kind}` " + " / ".join("-" if b is None else _mib(b) for b in sizes))
    return f"- Largest kinds of key, MiB at {labels}: " + ", ".join(cells) + "."


def scaling_block(scaling: dict[str, Any] | None, plot: bool) -> str:
    """The scaling curve's table (and plot)."""
    if scaling is None:
        return "No scaling results are committed."
    lines = [
        f"`{scaling.get('command', '?')}` ({scaling.get('date', '?')}, "
        f"{scaling.get('machine', '?')}; `{RESULTS / SCALING_JSON}`):",
        "",
        "| worker processes | Redis shards (state) | runs | wall (s) | runs/s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['workers']} | {p['shards']} | {p['runs']} | {p['wall_s']} | {p['runs_per_s']} |"
        for p in scaling.get("points", [])
    ]
    if plot:
        lines += ["", f"![runs/s for 1, 2, 4 worker processes](img/perf/{SCALING_PLOT})"]
    return "\n".join(lines)


# --- the pages -------------------------------------------------------------------------------


def _markers(name: str | None) -> tuple[str, str]:
    suffix = f" {name}" if name else ""
    return f"<!-- perf:begin{suffix} -->", f"<!-- perf:end{suffix} -->"


def replace_blocks(text: str, blocks: dict[str | None, str], where: Path) -> str:
    """``text`` with the content between each pair of markers replaced by ``blocks[name]``."""
    for name, content in blocks.items():
        begin, end = _markers(name)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
        found = list(pattern.finditer(text))
        if len(found) != 1:
            raise PublishError(
                f"{where} must hold the markers {begin} ... {end} once (found {len(found)} pairs)"
            )
        start, stop = found[0].span()
        text = f"{text[:start]}{begin}\n{content.rstrip()}\n{end}{text[stop:]}"
    return text


def expected(root: Path = ROOT) -> dict[Path, str | bytes]:
    """What every generated file should hold, by path relative to ``root``."""
    runs = bench_runs(root)
    latest = latest_run(runs)
    soaks = soak_reports(root)
    scaling = scaling_report(root)
    cli = cli_run(root)
    plots: dict[Path, str | bytes] = {}
    for name in (PLOT_NAME, SCALING_PLOT):
        source = root / RESULTS / name
        if source.is_file():
            plots[PLOT_DIR / name] = source.read_bytes()
    out: dict[Path, str | bytes] = {}
    readme = (root / README).read_text()
    supplements = [run for run in runs if run.path in SUPPLEMENTS]
    block = readme_block(latest, soaks, scaling, supplements, cli)
    out[README] = replace_blocks(readme, {None: block}, README)
    page = (root / PERF_PAGE).read_text()
    out[PERF_PAGE] = replace_blocks(
        page,
        {
            "latest": latest_block(latest, PLOT_DIR / PLOT_NAME in plots),
            "soak": soak_block(soaks),
            "scaling": scaling_block(scaling, PLOT_DIR / SCALING_PLOT in plots),
            "cli": cli_block(cli),
            "earlier": earlier_block(runs, latest),
        },
        PERF_PAGE,
    )
    out.update(plots)
    return out


def _differs(target: Path, content: str | bytes) -> bool:
    if not target.is_file():
        return True
    if isinstance(content, bytes):
        return target.read_bytes() != content
    return target.read_text() != content


def stale(root: Path = ROOT) -> list[Path]:
    """The generated files that differ from what the committed results give."""
    return [path for path, content in expected(root).items() if _differs(root / path, content)]


def publish(root: Path = ROOT) -> list[Path]:
    """Rewrite the generated files that differ; return them."""
    changed = []
    for path, content in expected(root).items():
        target = root / path
        if not _differs(target, content):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check``, compare) the generated blocks; 1 when stale or broken."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.publish", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the project folder")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.check:
            differ = stale(args.root)
            for path in differ:
                print(f"{path} is stale: run `python -m bench.publish`", file=sys.stderr)
            return 1 if differ else 0
        changed = publish(args.root)
    except PublishError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("rewrote " + ", ".join(map(str, changed)) if changed else "already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
