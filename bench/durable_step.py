"""P21: a durable 10-step run at equal durability: Tether against DBOS and LangGraph-SQLite.

    bench/peers/make-venv.sh                      # once: the peers in their own venv (.venv-peers)
    python -m bench.durable_step                  # 200 runs of each side, alternated
    python -m bench.durable_step --reps 20 --warmup 3 --out /tmp/p21   # a smoke run

Every side promises the same thing: a step that was acknowledged survives a power cut, so every
side fsyncs each commit, and every side writes to one directory on one disk (``--dir``; a fresh
directory under it per run):

- **Tether**: the ``steps10`` agent (:mod:`bench.agents`: ten tool steps, then the answer) with
  ``durability="step"`` (a checkpoint at every step boundary), submitted by a ``Producer`` and
  run by one prefork Celery worker (one pool process). Its state Redis runs with
  ``appendonly yes`` and ``appendfsync always`` (each write is on disk before Redis answers);
  the store is a ``file://`` directory (every head write fsynced). Two Tether sides run, each
  with its own Redis and worker: ``tether`` (the broker on the state Redis, so it fsyncs too)
  and ``tether-split`` (the broker on a second Redis without persistence: the run record in the
  state Redis is the source of truth, see ``docs/durability.md``).
- **DBOS** (``bench/peers/durable_peers.py``): a ``@DBOS.workflow()`` of ten ``@DBOS.step()``
  calls, on DBOS's default SQLite system database (rollback journal, ``synchronous=FULL``:
  fsync at every commit).
- **LangGraph**: a ten-step ``StateGraph`` compiled with ``SqliteSaver`` and invoked with
  ``durability="sync"`` (WAL, ``synchronous=FULL``: the WAL is fsynced at every commit).
- **The agent shapes** (``dbos-agent``, ``langgraph-agent``): the same work as Tether's side, as
  each peer's docs build a tool-calling agent: the scripted model's decision and the tool's
  result each committed (DBOS: a ``@DBOS.step()`` per model call and per tool call; LangGraph:
  an ``agent`` node and the prebuilt ``ToolNode`` routed by ``tools_condition``), 21 commits
  for ten tool steps and the answer. The ``tick`` peers above commit one string per step and
  call no model: half the commits of Tether's run, so they are reported but the target is read
  against the agent shapes (``TARGET_PEERS``).

Each repetition runs one run of every side, the order rotating from one repetition to the next;
every run starts a fresh session / workflow / thread. The peers run in-process (their call is
timed inside the peer's process), Tether from the producer's ``run`` to the ``RunResult`` in
hand (broker, worker and completion feed included). Results: median and p95 of each side and the
ratios, in ``bench/results/p21.json`` and ``p21.md`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agents import STEPS10_ANSWER
from bench.core import Stats, check_result
from bench.report import command_line, host_info, now_iso
from bench.stack import AGENT_MODULE, REPO_ROOT
from tether.dev.redis_server import RedisServer
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer
from tether.settings import Settings

RESULTS = REPO_ROOT / "bench" / "results"
PEERS_PYTHON = REPO_ROOT / ".venv-peers" / "bin" / "python"
PEERS_SCRIPT = REPO_ROOT / "bench" / "peers" / "durable_peers.py"
RESULT_TIMEOUT_S = 120.0
#: The state Redis of the durable configuration (docs/durability.md gives the same lines).
DURABLE_REDIS = {"appendonly": "yes", "appendfsync": "always"}
TARGET_MEDIAN_X = 0.8
TARGET_P95_X = 1.0
#: The peers doing the work Tether's side does (a durable model decision and a durable tool
#: result per step); the target is read against them, the tick peers are for information.
TARGET_PEERS = ("dbos-agent", "langgraph-agent")
PEERS = ("dbos", "langgraph", *TARGET_PEERS)

Side = Callable[[], float]
"""One run of a side; its wall time in seconds."""


@dataclass
class TetherSide:
    """One Tether configuration: its Redis servers, one worker, a producer."""

    name: str
    state: RedisServer
    broker: RedisServer | None
    fleet: WorkerFleet
    producer: Producer

    def run(self) -> float:
        """One durable 10-step run on a fresh session, timed from submit to the result."""
        session_id = f"p21-{uuid.uuid4().hex[:12]}"
        started = time.perf_counter()
        result = self.producer.run(
            session_id, "go", agent="steps10", durability="step", wait_s=RESULT_TIMEOUT_S
        )
        elapsed_s = time.perf_counter() - started
        check_result(result, STEPS10_ANSWER)
        return elapsed_s

    def close(self) -> None:
        """Stop the worker, the producer and the servers."""
        for step in (self.producer.close, self.fleet.stop, self.state.close):
            with contextlib.suppress(Exception):
                step()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.broker.close()


def start_tether(
    name: str,
    data_dir: Path,
    log_dir: Path,
    *,
    split_broker: bool,
    tree: Path | None = None,
    deltas: bool = True,
) -> TetherSide:
    """A Tether side: the state Redis with its AOF in ``data_dir`` (fsync at every write), the
    store in ``data_dir/store``, the broker on the state Redis or on a Redis of its own;
    ``tree``: the worker imports ``tether`` from that directory (see ``--base-tree``)."""
    redis_dir = data_dir / f"{name}-redis"
    redis_dir.mkdir(parents=True)
    state = RedisServer(unix_socket=False, extra_config={**DURABLE_REDIS, "dir": str(redis_dir)})
    state.start()
    broker = RedisServer(unix_socket=False).start() if split_broker else None
    broker_url = broker.url if broker is not None else state.url
    store_url = f"file://{data_dir / f'{name}-store'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
    path = env.get("PYTHONPATH")
    env.update(
        {
            "TETHER_BROKER_URL": broker_url,
            "TETHER_REDIS_URL": state.url,
            "TETHER_STORE_URL": store_url,
            "TETHER_QUEUE": "p21",
            "TETHER_AGENT_MODULES": json.dumps([AGENT_MODULE]),
            "PYTHONPATH": os.pathsep.join(
                [*([str(tree)] if tree else []), str(REPO_ROOT), *([path] if path else [])]
            ),
            "PYTHONUNBUFFERED": "1",
            **({} if deltas else {"TETHER_DELTA_MAX_LEN": "0"}),
        }
    )
    fleet = WorkerFleet(env, log_dir, count=1, queue="p21", prefix=name).start()
    settings = Settings(
        broker_url=broker_url,
        redis_url=state.url,
        store_url=store_url,
        queue="p21",
        agent_modules=[AGENT_MODULE],
    )
    return TetherSide(name, state, broker, fleet, Producer(settings))


class PeerProcess:
    """One peer (one of ``PEERS``) in the peers' venv, driven one run per line."""

    def __init__(self, peer: str, data_dir: Path, log_dir: Path) -> None:
        if not PEERS_PYTHON.exists():
            raise SystemExit(f"{PEERS_PYTHON} is missing: run bench/peers/make-venv.sh first")
        self.peer = peer
        self._log = (log_dir / f"{peer}.log").open("wb")
        self.proc = subprocess.Popen(
            [str(PEERS_PYTHON), str(PEERS_SCRIPT), peer, str(data_dir / peer)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        if self._line() != "ready":
            raise SystemExit(f"the {peer} peer did not start; see {log_dir / peer}.log")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def run(self) -> float:
        """One run; the peer's own timing of it, in seconds."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        answer = self._line()
        try:
            return float(answer)
        except ValueError:
            raise SystemExit(f"the {self.peer} peer answered {answer!r}") from None

    def close(self) -> None:
        """Ask the peer to stop; kill it if it does not."""
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def alternate(sides: dict[str, Side], reps: int, warmup: int) -> dict[str, list[float]]:
    """Run every side once per repetition, the order rotating; times (ms) after ``warmup``."""
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(warmup + reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            elapsed_ms = sides[name]() * 1000
            if rep >= warmup:
                times[name].append(elapsed_ms)
    return times


@contextlib.contextmanager
def started_sides(
    base_dir: Path,
    variants: list[str],
    base_tree: Path | None = None,
    peers: tuple[str, ...] = PEERS,
) -> Iterator[dict[str, Side]]:
    """Every side, started in one fresh directory of ``base_dir``; stopped after. A Tether
    variant is ``tether[-split][-nodeltas][-base]``: ``split`` puts the broker on a Redis of its
    own, ``nodeltas`` turns live pieces off (``TETHER_DELTA_MAX_LEN=0``), ``base`` runs the
    worker on ``base_tree``."""
    data_dir = Path(tempfile.mkdtemp(prefix="tether-p21-", dir=base_dir))
    log_dir = data_dir / "logs"
    log_dir.mkdir()
    closers: list[Callable[[], None]] = []
    sides: dict[str, Side] = {}
    try:
        for variant in variants:
            base = variant.endswith("-base")
            if base and base_tree is None:
                raise SystemExit(f"variant {variant} needs --base-tree")
            parts = variant.split("-")
            tree = base_tree if base else None
            side = start_tether(
                variant,
                data_dir,
                log_dir,
                split_broker="split" in parts,
                tree=tree,
                deltas="nodeltas" not in parts,
            )
            closers.append(side.close)
            sides[variant] = side.run
        for peer in peers:
            process = PeerProcess(peer, data_dir, log_dir)
            closers.append(process.close)
            sides[peer] = process.run
        yield sides
    except BaseException:
        print(f"the sides' data and logs are kept in {data_dir}", file=sys.stderr)
        raise
    else:
        for close in reversed(closers):
            close()
        closers = []
        shutil.rmtree(data_dir, ignore_errors=True)
    finally:
        for close in reversed(closers):
            close()


def summary(times: dict[str, list[float]]) -> dict[str, Any]:
    """Each side's median and p95, and each Tether side's ratios to each peer."""
    stats = {name: Stats.of(values) for name, values in times.items()}
    sides = {
        name: {"n": s.n, "median_ms": round(s.median, 2), "p95_ms": round(s.p95, 2)}
        for name, s in stats.items()
    }
    ratios: dict[str, dict[str, float]] = {}
    peers = [name for name in stats if name in PEERS]
    for name in (n for n in stats if n.startswith("tether")):
        for peer in peers:
            ratios[f"{name}/{peer}"] = {
                "median_x": round(stats[name].median / stats[peer].median, 3),
                "p95_x": round(stats[name].p95 / stats[peer].p95, 3),
            }
    return {"sides": sides, "ratios": ratios}


def markdown(document: dict[str, Any]) -> str:
    """The result page: the sides, the ratios against the targets, the machine."""
    machine = document["machine"]
    lines = [
        f"Date: {document['date']} · command: `{document['command']}` · commit "
        f"{machine['git_commit']}",
        "",
        f"Machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), {machine['platform']}; "
        f"Python {machine['python']}; redis-server {machine['redis_server']}; "
        + ", ".join(f"{k} {v}" for k, v in document["peers"].items())
        + f". Load average (1 min) at start / end: {document['load_average_1m_start']} / "
        f"{machine['load_average_1m_end']}. Every side on one disk ({document['disk']}).",
        "",
        f"{document['reps']} runs of each side (after {document['warmup']} warm-up), alternated.",
        "",
        "| side | median | p95 |",
        "|---|---|---|",
    ]
    for name, s in document["sides"].items():
        lines.append(f"| {name} | {s['median_ms']:.1f} ms | {s['p95_ms']:.1f} ms |")
    lines += ["", "| ratio | median | p95 | target |", "|---|---|---|---|"]
    for name, r in document["ratios"].items():
        if name.split("/")[1] not in TARGET_PEERS:
            lines.append(f"| {name} | {r['median_x']:.2f}x | {r['p95_x']:.2f}x | info |")
            continue
        met = r["median_x"] <= TARGET_MEDIAN_X and r["p95_x"] <= TARGET_P95_X
        lines.append(
            f"| {name} | {r['median_x']:.2f}x | {r['p95_x']:.2f}x | "
            f"<= {TARGET_MEDIAN_X}x median, <= {TARGET_P95_X}x p95: "
            f"{'met' if met else '**missed**'} |"
        )
    return "\n".join(lines) + "\n"


def _peer_versions() -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({p: m.version(p) for p in "
        "('dbos', 'langgraph', 'langgraph-checkpoint-sqlite')}))"
    )
    out = subprocess.run([str(PEERS_PYTHON), "-c", code], capture_output=True, text=True)
    return dict(json.loads(out.stdout)) if out.returncode == 0 else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durable_step", description=__doc__)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--variants", default="tether,tether-split")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"any of {', '.join(PEERS)}")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="p21")
    parser.add_argument(
        "--base-tree",
        type=Path,
        help="a directory holding another build's `tether` package (e.g. main's, laid out by "
        "`git archive`): the variants ending in -base run their worker on it, for a before/after "
        "in one run",
    )
    args = parser.parse_args(argv)
    load_start = round(os.getloadavg()[0], 2)
    peers = tuple(args.peers.split(","))
    if unknown := set(peers) - set(PEERS):
        parser.error(f"unknown peers {sorted(unknown)}: choose among {', '.join(PEERS)}")
    with started_sides(args.dir, args.variants.split(","), args.base_tree, peers) as sides:
        times = alternate(sides, args.reps, args.warmup)
    disk = subprocess.run(
        ["df", "--output=source", str(args.dir)], capture_output=True, text=True
    ).stdout.split()[-1:]
    document: dict[str, Any] = {
        "id": "P21",
        "date": now_iso(),
        "command": command_line(argv, module="bench.durable_step"),
        "reps": args.reps,
        "warmup": args.warmup,
        "disk": disk[0] if disk else "unknown",
        "peers": _peer_versions(),
        "load_average_1m_start": load_start,
        **summary(times),
        "samples_ms": {k: [round(v, 3) for v in vs] for k, vs in times.items()},
        "machine": host_info(("celery", "redis"), redis_server=_redis_version()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(document))
    print(markdown(document))
    return 0


def _redis_version() -> str:
    from tether.dev.redis_server import find_redis_server_binary, server_version

    return ".".join(map(str, server_version(find_redis_server_binary())))


if __name__ == "__main__":
    raise SystemExit(main())
