"""What a run writes to the durable state Redis: commands by name and by caller, and disk syncs.

    python -m bench.durable_count                  # 30 1-step echo runs, 30 durable 10-step runs
    python -m bench.durable_count --runs 10 --out /tmp/count

P21's Tether side (:func:`bench.durable_step.start_tether`: the state Redis on ``appendfsync
always``, the broker on it, one prefork worker, a producer in this process) runs the runs one
after the other while

- ``MONITOR`` on the state Redis records every command: the ones clients sent and the ones
  scripts ran inside the server (a script's commands are counted under the script, by name);
  each connection is attributed to the process holding it (this process: ``producer``; the
  worker's main process and its pool child), and a command touching no ``tether:`` key is the
  broker's (Celery's);
- ``strace`` on the redis-server counts its ``fdatasync`` calls: with ``appendfsync always`` one
  per event-loop turn that wrote, so commands answered in one turn share a sync.

The same window with no run (as long as the runs took) gives the idle commands (the sweeper,
heartbeats, the broker's polling), subtracted from each table. Results: ``durable_count.md``
and ``.json`` in ``--out`` (default ``bench/results``, ``--name`` to change the stem).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.agents import STEPS10_ANSWER
from bench.core import check_result
from bench.counting import script_names
from bench.durable_step import RESULT_TIMEOUT_S, RESULTS, TetherSide, start_tether
from bench.report import command_line, host_info, now_iso

Tally = collections.Counter[tuple[str, str]]
"""(caller, command) -> count."""


def _socket_owners() -> dict[int, int]:
    """Local TCP port -> pid, for this machine's established connections."""
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True)
    owners: dict[int, int] = {}
    for line in out.stdout.splitlines():
        fields = line.split()
        match = re.search(r"pid=(\d+)", line)
        if len(fields) >= 3 and match:
            owners[int(fields[2].rsplit(":", 1)[1])] = int(match.group(1))
    return owners


class Monitor:
    """``MONITOR`` on one Redis in a thread; tallies (caller, command) while ``active``."""

    def __init__(self, url: str, roles: Callable[[int], str], shas: dict[str, str]) -> None:
        import redis

        self._client = redis.Redis.from_url(url)
        self._roles = roles
        self._shas = shas
        self.active = False
        self.tally: Tally = collections.Counter()
        self._script: tuple[str, str] | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        with self._client.monitor() as monitor:
            for line in monitor.listen():
                if self._stop:
                    return
                self._take(line)

    def _take(self, line: dict[str, Any]) -> None:
        words = str(line.get("command", "")).split()
        if not words:
            return
        command = words[0].lower()
        if line.get("client_type") == "lua":
            # MONITOR shows a script's line, then the commands it ran (Redis is single-threaded:
            # nothing comes in between)
            if self.active and self._script is not None:
                caller, name = self._script
                self.tally[(caller, f"  {name}: {command}")] += 1
            return
        self._script = None
        if not self.active or command in ("info", "monitor"):
            return
        port = int(line.get("client_port") or 0)
        ours = any(w.startswith("tether:") for w in words[1:])
        caller = self._roles(port) + ("" if ours or command.startswith("eval") else " (broker)")
        if command in ("evalsha", "eval") and len(words) > 1:
            name = self._shas.get(words[1], words[1][:8])
            self._script = (caller, name)
            self.tally[(caller, f"evalsha {name}")] += 1
        else:
            self.tally[(caller, command)] += 1

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(Exception):
            self._client.ping()  # wakes the listener so it sees the stop
        self._thread.join(timeout=5)


@contextlib.contextmanager
def syncs_counted(pid: int) -> Iterator[Callable[[], int]]:
    """``strace`` on redis-server ``pid``: a function answering the fdatasync/fsync calls seen
    so far."""
    log = Path(tempfile.mkstemp(prefix="tether-strace-")[1])
    proc = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=fdatasync,fsync", "-o", str(log), "-p", str(pid)],
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # strace attaches

    def count() -> int:
        return sum(1 for ln in log.read_text().splitlines() if "sync(" in ln)

    try:
        yield count
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.unlink(missing_ok=True)


def one_step(side: TetherSide) -> None:
    session_id = f"cnt1-{uuid.uuid4().hex[:12]}"
    result = side.producer.run(session_id, "x", agent="echo", wait_s=RESULT_TIMEOUT_S)
    check_result(result, "echo: x")


def ten_step(side: TetherSide) -> None:
    session_id = f"cnt10-{uuid.uuid4().hex[:12]}"
    result = side.producer.run(
        session_id, "go", agent="steps10", durability="step", wait_s=RESULT_TIMEOUT_S
    )
    check_result(result, STEPS10_ANSWER)


def measure(
    side: TetherSide, monitor: Monitor, syncs: Callable[[], int], run: Callable[[], None], n: int
) -> dict[str, Any]:
    """Per-run commands (idle subtracted) and syncs of ``n`` runs of ``run``."""
    for _ in range(3):  # warm-up: scripts loaded, connections open
        run()
    monitor.tally.clear()
    synced = syncs()
    monitor.active = True
    started = time.monotonic()
    for _ in range(n):
        run()
    elapsed_s = time.monotonic() - started
    monitor.active = False
    busy, busy_syncs = monitor.tally.copy(), syncs() - synced
    monitor.tally.clear()
    synced = syncs()
    monitor.active = True
    time.sleep(elapsed_s)
    monitor.active = False
    idle, idle_syncs = monitor.tally.copy(), syncs() - synced
    rows = {
        f"{caller} | {cmd}": round((busy[(caller, cmd)] - idle.get((caller, cmd), 0)) / n, 2)
        for caller, cmd in busy
    }
    sent = sum(v for k, v in rows.items() if not k.split(" | ")[1].startswith("  "))
    inner = sum(v for k, v in rows.items() if k.split(" | ")[1].startswith("  "))
    executed = sent + inner
    return {
        "runs": n,
        "ms_per_run": round(elapsed_s * 1000 / n, 2),
        "sent_per_run": round(sent, 2),
        "executed_per_run": round(executed, 2),
        "fsyncs_per_run": round((busy_syncs - idle_syncs) / n, 2),
        "idle_fsyncs_per_run_window": round(idle_syncs / n, 2),
        "idle_commands_per_run_window": round(sum(idle.values()) / n, 2),
        "rows": dict(sorted(rows.items())),
    }


def markdown(document: dict[str, Any]) -> str:
    lines = [
        f"Date: {document['date']} · command: `{document['command']}` · commit "
        f"{document['machine']['git_commit']}",
        "",
        "Per run, on P21's Tether side (state Redis on `appendfsync always`, the broker on it; "
        "MONITOR, idle window subtracted; *sent* = commands clients sent, *executed* = sent + "
        "the commands scripts ran; fsyncs = redis-server's fdatasync calls, strace).",
        "",
    ]
    for title, m in document["counts"].items():
        lines += [
            f"### {title}: {m['runs']} runs, {m['ms_per_run']} ms each",
            "",
            f"{m['sent_per_run']} sent, {m['executed_per_run']} executed, "
            f"{m['fsyncs_per_run']} fsyncs per run (idle window: "
            f"{m['idle_commands_per_run_window']} commands, {m['idle_fsyncs_per_run_window']} "
            "fsyncs, already subtracted).",
            "",
            "| caller | command (script: inner command) | per run |",
            "|---|---|---|",
        ]
        for key, value in m["rows"].items():
            if abs(value) >= 0.05:
                caller, command = key.split(" | ")
                lines.append(f"| {caller} | {command.strip()} | {value} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durable_count", description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="durable_count")
    args = parser.parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="tether-count-", dir=args.dir))
    (data_dir / "logs").mkdir()
    side = start_tether("tether", data_dir, data_dir / "logs", split_broker=False)
    me = os.getpid()
    owners: dict[int, int] = {}

    def role(port: int) -> str:
        if port not in owners:
            owners.update(_socket_owners())
        pid = owners.get(port)
        if pid == me:
            return "producer"
        worker = side.fleet.workers[0].pid
        return "worker" if pid == worker else "worker pool" if pid else "?"

    monitor = Monitor(side.state.url, role, script_names())
    counts: dict[str, Any] = {}
    try:
        assert side.state.pid is not None
        with syncs_counted(side.state.pid) as syncs:
            counts["1-step echo run"] = measure(
                side, monitor, syncs, lambda: one_step(side), args.runs
            )
            counts["10-step durable run (steps10, durability=step)"] = measure(
                side, monitor, syncs, lambda: ten_step(side), args.runs
            )
    finally:
        monitor.close()
        side.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    document = {
        "date": now_iso(),
        "command": command_line(argv, module="bench.durable_count"),
        "counts": counts,
        "machine": host_info(("celery", "redis")),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(document))
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
