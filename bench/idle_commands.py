"""``python -m bench.idle_commands``: the Redis commands an idle fleet sends, per second.

    python -m bench.idle_commands                 # tether up (1 worker, no console), 10 s
    python -m bench.idle_commands --workers 2 --seconds 30

Starts the embedded default (``tether up --no-console``) in a temporary folder, lets it settle,
then counts with MONITOR what every client sends while no run exists (the sweepers' recovery
scan, the timers probe, the workers' presence, Celery's broker polling), and what scripts run
inside Redis; ``tether down`` at the end. What a fleet costs Redis doing nothing: it grows with
the workers, not with the work, and it is in every per-run count of P1's extras (divided by the
runs per second of that measurement).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

SETTLE_S = 3.0


def _env_url(folder: Path) -> str:
    """The Redis URL ``tether up`` wrote for the stack of ``folder``."""
    for line in (folder / ".tether" / "env").read_text().splitlines():
        if line.startswith("export TETHER_REDIS_URL="):
            return line.split("=", 1)[1].strip('"')
    raise SystemExit("tether up wrote no TETHER_REDIS_URL")


def count(url: str, seconds: float) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Commands clients sent and commands scripts ran, by name, over ``seconds``."""
    sent: collections.Counter[str] = collections.Counter()
    in_scripts: collections.Counter[str] = collections.Counter()
    client = redis.Redis.from_url(url)
    stop_at = time.monotonic() + seconds
    with client.monitor() as monitor:  # type: ignore[no-untyped-call]
        for event in monitor.listen():
            if time.monotonic() >= stop_at:
                break
            word = str(event["command"]).split(" ", 1)[0].upper()
            (in_scripts if event.get("client_type") == "lua" else sent)[word] += 1
    client.close()
    return sent, in_scripts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_commands", description=__doc__)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    cli = [sys.executable, "-m", "tether.producer.ops.cli"]
    with tempfile.TemporaryDirectory(prefix="tether-idle-") as tmp:
        folder = Path(tmp)
        up = [*cli, "up", "--no-console", "--workers", str(args.workers)]
        subprocess.run(up, cwd=folder, check=True, capture_output=True)
        try:
            time.sleep(SETTLE_S)
            sent, in_scripts = count(_env_url(folder), args.seconds)
        finally:
            subprocess.run([*cli, "down"], cwd=folder, check=False, capture_output=True)
    total_sent, total_scripts = sum(sent.values()), sum(in_scripts.values())
    print(
        f"{args.workers} idle worker(s), {args.seconds:g} s: "
        f"{total_sent / args.seconds:.1f} commands sent per s, "
        f"{(total_sent + total_scripts) / args.seconds:.1f} executed per s"
    )
    for word, n in sent.most_common(10):
        print(f"  {n / args.seconds:7.1f}  {word}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
