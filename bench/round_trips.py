"""Round trips and commands a run costs Tether's own code, counted where they are sent.

``MONITOR`` (:mod:`bench.counting`) sees every command but not how they were batched: a pipeline
of five commands is one round trip. Here redis-py itself is counted in this process: every
``send_packed_command`` is one round trip (a command or a whole pipeline written at once), and
every packed command is one command. The worker's side is measured on an in-process runtime
built exactly as a Celery worker builds it (:func:`tether.worker.engine.services.build_services`:
the
one-script claimer, the Redis queue, stream and leases), driving the calls the ``tether.run``
task makes for each message (:func:`tether.worker.engine.cycle.drain` with the carried request).

    python -m bench.round_trips            # 100 sequential 1-step runs on a private stack
    python -m bench.round_trips --usage    # runs whose model reports usage (counted per tenant)
    python -m bench.round_trips --usage --budgets   # ... priced, under a tenant budget
    python -m bench.round_trips --scripts  # what runs inside each script (MONITOR), per run
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.connection import AbstractConnection

from bench.agents import PRICED_MODEL
from bench.counting import script_names
from bench.private_stack import private_redis_and_s3, production_runtime
from tether.ids import new_id
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runs.usage.policy import admit_submission
from tether.worker.engine.claim import Carried
from tether.worker.engine.cycle import drain


@dataclass
class Tally:
    """Round trips and commands counted while :func:`counting` was active (one thread's)."""

    round_trips: int = 0
    commands: int = 0
    names: dict[str, int] = field(default_factory=dict)


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    tallies: dict[str, Tally] = field(default_factory=dict)
    active: bool = False
    marker: bytes = b"tether:"
    """Only commands naming a key of this namespace count (the broker's have their own)."""


_state = _State()
_installed = False


def _tally() -> Tally:
    name = threading.current_thread().name
    with _state.lock:
        return _state.tallies.setdefault(name, Tally())


def _ours(args: tuple[Any, ...]) -> bool:
    marker = _state.marker
    return any(marker in (a if isinstance(a, bytes) else str(a).encode()) for a in args[1:])


def _note(args: tuple[Any, ...]) -> None:
    if not _ours(args):
        return
    tally = _tally()
    tally.commands += 1
    raw = args[0] if args else b"?"
    name = (raw.decode() if isinstance(raw, bytes) else str(raw)).lower()
    tally.names[name] = tally.names.get(name, 0) + 1


def _install() -> None:
    """Wrap redis-py's connection once (counting only while :func:`counting` is active)."""
    global _installed
    if _installed:
        return
    send_packed: Callable[..., Any] = AbstractConnection.send_packed_command
    send_command: Callable[..., Any] = AbstractConnection.send_command
    pack_commands: Callable[..., Any] = AbstractConnection.pack_commands

    def counted_send_packed(self: Any, command: Any, check_health: bool = True) -> None:
        if _state.active:
            chunks = [command] if isinstance(command, (bytes, str)) else command
            data = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
            if _state.marker in data:
                _tally().round_trips += 1
        send_packed(self, command, check_health)

    def counted_send_command(self: Any, *args: Any, **kw: Any) -> None:
        if _state.active:
            _note(args)
        send_command(self, *args, **kw)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        if _state.active:
            for cmd in commands:
                _note(tuple(cmd))
        return pack_commands(self, commands)

    AbstractConnection.send_packed_command = counted_send_packed  # type: ignore[method-assign]
    AbstractConnection.send_command = counted_send_command  # type: ignore[method-assign]
    AbstractConnection.pack_commands = counted_pack_commands  # type: ignore[method-assign]
    _installed = True


@contextlib.contextmanager
def counting(namespace: str = "tether") -> Iterator[dict[str, Tally]]:
    """Count this process's Redis round trips and commands on keys of ``namespace``, per
    thread, within the block."""
    _install()
    with _state.lock:
        _state.tallies = {}
        _state.marker = f"{namespace}:".encode()
        _state.active = True
    try:
        yield _state.tallies
    finally:
        with _state.lock:
            _state.active = False


def _request(i: int, agent: str, feed: str) -> RunRequest:
    """The ``i``-th run of a profile: one of ten sessions, announced on a producer's ``feed``."""
    return RunRequest(
        run_id=new_id("run"), request_id=new_id("req"), tenant="t",
        session_id=f"s-{i % 10}", agent=agent, input=f"hello {i}", reply_to=feed,
    )  # fmt: skip


def worker_path(
    redis_url: str,
    s3_endpoint: str,
    bucket: str,
    runs: int,
    *,
    usage: bool = False,
    budgets: bool = False,
) -> dict[str, float]:
    """Per sequential 1-step ``echo`` run (``usage``: ``priced-echo``, whose model reports
    tokens; ``budgets``: priced, its tenant under a budget): the producer's submit and the
    worker's drain, each as round trips and commands on Tether's Redis (the broker's publish
    is not Tether's)."""
    overrides: dict[str, Any] = {"agent_modules": ["bench.agents"]} if usage else {}
    if budgets:
        overrides |= {
            "model_prices": json.dumps({PRICED_MODEL: PRICE}),
            "tenant_budgets": json.dumps({"t": {"usd_per_day": 1e6, "runs_per_minute": 10**6}}),
        }
    rt = production_runtime(redis_url, s3_endpoint, bucket, **overrides)
    settings = rt.settings
    agent = "priced-echo" if usage else "echo"
    feed = "p-" + uuid.uuid4().hex  # announced on a producer's own feed, as a Producer asks
    submit_rts = submit_cmds = drain_rts = drain_cmds = 0
    names: dict[str, int] = {}

    def one(i: int) -> tuple[Tally, Tally]:
        request = _request(i, agent, feed)
        with counting(settings.namespace) as tallies:
            admit_submission(rt.runs.tenant_usage, settings, [request])  # as a Producer does
            submit(rt.runs, request, on=settings.queue)
        submitted = sum_tallies(tallies)
        with counting(settings.namespace) as tallies:
            drain(rt, "t", request.session_id, carried=Carried(request, settings.queue))
        return submitted, sum_tallies(tallies)

    for i in range(20):  # warm-up: connections, scripts
        one(i)
    for i in range(20, 20 + runs):
        submitted, drained = one(i)
        submit_rts += submitted.round_trips
        submit_cmds += submitted.commands
        drain_rts += drained.round_trips
        drain_cmds += drained.commands
        for name, n in drained.names.items():
            names[name] = names.get(name, 0) + n
    out = {
        "producer submit round trips": submit_rts / runs,
        "producer submit commands": submit_cmds / runs,
        "worker round trips": drain_rts / runs,
        "worker commands": drain_cmds / runs,
    }
    out |= {f"worker {name}": n / runs for name, n in sorted(names.items())}
    return {k: round(v, 2) for k, v in out.items()}


STOP = "round-trips-monitor-stop"


def inside_scripts(
    redis_url: str, s3_endpoint: str, bucket: str, runs: int
) -> dict[str, dict[str, float]]:
    """Per sequential 1-step ``echo`` run (producer and worker, warm), with ``MONITOR``: the
    commands clients sent (``sent``), and by script the commands it ran inside Redis (a script
    called twice in a run counts its commands twice)."""
    rt = production_runtime(redis_url, s3_endpoint, bucket)
    settings = rt.settings
    feed = "p-" + uuid.uuid4().hex

    def one(i: int) -> None:
        request = _request(i, "echo", feed)
        admit_submission(rt.runs.tenant_usage, settings, [request])
        submit(rt.runs, request, on=settings.queue)
        drain(rt, "t", request.session_id, carried=Carried(request, settings.queue))

    for i in range(20):  # warm-up: connections, scripts
        one(i)
    names = script_names()
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    ready = threading.Event()

    def watch() -> None:
        client = redis.Redis.from_url(redis_url)
        script = ""
        with client.monitor() as monitor:  # type: ignore[no-untyped-call]
            ready.set()
            for event in monitor.listen():
                words = str(event["command"]).split(" ")
                if words[0].upper() == "ECHO" and STOP in event["command"]:
                    break
                if event.get("client_type") == "lua":
                    counts[script][words[0].upper()] += 1
                    continue
                counts["sent"][words[0].upper()] += 1
                if words[0].upper() == "EVALSHA":
                    script = names.get(words[1], words[1][:8])
        client.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(10)
    for i in range(20, 20 + runs):
        one(i)
    rt.runs.client.echo(STOP)
    thread.join(30)
    return {
        script: {word: round(n / runs, 2) for word, n in counter.most_common()}
        for script, counter in counts.items()
    }


#: USD per million tokens of the priced runs.
PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}


def sum_tallies(tallies: dict[str, Tally]) -> Tally:
    """Every thread's counts added up."""
    total = Tally()
    for tally in list(tallies.values()):
        total.round_trips += tally.round_trips
        total.commands += tally.commands
        for name, n in tally.names.items():
            total.names[name] = total.names.get(name, 0) + n
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.round_trips", description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--usage", action="store_true", help="a model that reports tokens")
    parser.add_argument("--budgets", action="store_true", help="priced, under a tenant budget")
    parser.add_argument("--scripts", action="store_true", help="commands inside each script")
    args = parser.parse_args(argv)
    with private_redis_and_s3("rt-bucket", "tether-round-trips-") as (redis_url, endpoint):
        if args.scripts:
            by_script = inside_scripts(redis_url, endpoint, "rt-bucket", args.runs)
            for script, words in by_script.items():
                print(f"{script:20s} {sum(words.values()):6.2f}  {words}")
            return 0
        measured = worker_path(
            redis_url, endpoint, "rt-bucket", args.runs, usage=args.usage, budgets=args.budgets
        )
        for name, value in measured.items():
            print(f"{name:40s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
