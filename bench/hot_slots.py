"""Writes per Redis Cluster slot while runs go through: is any slot hot?

Every master of a cluster is watched with ``MONITOR`` (which shows the commands scripts run
too), each write command's key is mapped to its hash slot, and the slots are compared: the
busiest slot against the mean over the slots written. A key that every run writes (a
namespace-wide feed, a tenant's one counter) makes its slot the busiest by far, and caps a
cluster at one shard's throughput whatever the number of shards.

The runs go through the in-process engine built as a Celery worker builds it
(:func:`tether.worker.engine.services.build_services`), submitted as a Producer submits them
(:func:`tether.runs.usage.policy.admit_submission` then ``submit``), each announced on one of
``producers`` producers' feeds; no broker (Celery's broker is not on the cluster).

    python -m bench.hot_slots --cluster redis+cluster://127.0.0.1:7000 --runs 2000 --priced
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.crc import key_slot

from tether.ids import new_id
from tether.keys import (
    DONE_SHARDS,
    FEED_SHARDS,
    QUEUED_SHARDS,
    RUN_INDEX_SHARDS,
    USAGE_SHARDS,
    RedisKeys,
)
from tether.runs.contract import RunRequest
from tether.runs.queue.base import submit
from tether.runs.usage.policy import admit_submission
from tether.settings import Settings
from tether.worker.engine.claim import Carried
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import build_services

#: Commands that write their first key (what a slot's write load is counted in).
WRITES = frozenset(
    [
        "append",
        "decr",
        "decrby",
        "del",
        "expire",
        "expireat",
        "getdel",
        "getex",
        "hdel",
        "hincrby",
        "hincrbyfloat",
        "hmset",
        "hset",
        "hsetnx",
        "incr",
        "incrby",
        "incrbyfloat",
        "linsert",
        "lmove",
        "lpop",
        "lpush",
        "lrem",
        "lset",
        "ltrim",
        "persist",
        "pexpire",
        "pexpireat",
        "psetex",
        "rpop",
        "rpoplpush",
        "rpush",
        "sadd",
        "set",
        "setex",
        "setnx",
        "spop",
        "srem",
        "unlink",
        "xack",
        "xadd",
        "xdel",
        "xtrim",
        "zadd",
        "zincrby",
        "zpopmin",
        "zrem",
        "zremrangebyrank",
        "zremrangebyscore",
    ]
)


@dataclass
class SlotCounts:
    """Write commands per slot, and per key pattern (for the report)."""

    slots: Counter[int] = field(default_factory=Counter)
    keys: Counter[str] = field(default_factory=Counter)
    #: The key patterns written in each slot (what makes a busy slot busy).
    kinds: dict[int, Counter[str]] = field(default_factory=dict)

    def add(self, command: str) -> None:
        """Count one ``MONITOR`` command line (its arguments as redis-py gives them)."""
        try:
            parts = shlex.split(command)
        except ValueError:
            parts = command.split()
        if len(parts) < 2 or parts[0].lower() not in WRITES:
            return
        key, slot = parts[1], key_slot(parts[1].encode())
        self.slots[slot] += 1
        self.keys[_pattern(key)] += 1
        self.kinds.setdefault(slot, Counter())[_pattern(key)] += 1

    def summary(self) -> dict[str, Any]:
        """The busiest slot against the mean over the slots written, and the top key patterns."""
        counts = list(self.slots.values())
        mean = statistics.fmean(counts)
        busiest_slot, busiest = self.slots.most_common(1)[0]
        return {
            "slots written": len(counts),
            "writes": sum(counts),
            "mean writes per slot": round(mean, 1),
            "busiest slot": busiest_slot,
            "busiest slot writes": busiest,
            "busiest / mean": round(busiest / mean, 2),
            "top key patterns": self.keys.most_common(12),
            "busiest slots": [
                (slot, n, self.kinds[slot].most_common(3)) for slot, n in self.slots.most_common(5)
            ],
        }


def _pattern(key: str) -> str:
    """A key with its session's and run's ids blanked: what kind of key it is."""
    head, brace, rest = key.partition("{")
    tag, _, tail = rest.partition("}")
    if not brace:
        return key
    if "/~" in tag:  # a tenant's shared key: its queued index, its run-id index...
        return f"{head}{{t/~{tag.split('/~')[1]}}}" + tail.split(":")[0] * 0
    if tag.startswith("~"):
        kind = tag.split("/")[0].split(":")[0]
        return f"{head}{{{kind}...}}" + ":".join(
            p if "-" not in p else "*" for p in tail.split(":")
        )
    return f"{head}{{T/S}}" + ":".join(p.split(":")[0] for p in tail.split(":")[:2])


@dataclass
class Watch:
    """``MONITOR`` on every master, counting writes per slot until closed."""

    clients: list[redis.Redis]
    counts: SlotCounts = field(default_factory=SlotCounts)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Start watching; returns once every master's MONITOR is on."""
        ready = [threading.Event() for _ in self.clients]
        for client, on in zip(self.clients, ready, strict=True):
            thread = threading.Thread(target=self._watch, args=(client, on), daemon=True)
            thread.start()
            self._threads.append(thread)
        for on in ready:
            on.wait(10)

    def _watch(self, client: redis.Redis, ready: threading.Event) -> None:
        with client.monitor() as monitor:  # type: ignore[no-untyped-call]
            ready.set()
            connection = monitor.connection
            assert connection is not None
            while not self._stop.is_set():
                try:
                    if not connection.can_read(timeout=0.2):
                        continue
                    command = monitor.next_command()["command"]
                except (redis.ConnectionError, redis.TimeoutError, TimeoutError):
                    return
                with self._lock:
                    self.counts.add(command)

    def close(self) -> None:
        """Stop watching (the MONITOR connections close)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(5)


def runs_over_producers(
    cluster_url: str,
    store_url: str,
    *,
    runs: int,
    producers: int,
    sessions: int,
    agent: str = "echo",
    tenant: str = "t",
    **overrides: Any,
) -> None:
    """``runs`` 1-step runs of ``agent`` over ``sessions`` sessions round robin, submitted by
    ``producers`` producers (run ``n`` announced on producer ``n % producers``'s feed), each
    drained at once by the in-process engine."""
    settings = Settings(
        redis_url=cluster_url,
        broker_url="redis://127.0.0.1:9/0",  # unused: no Celery message is sent
        store_url=store_url,
        namespace=f"hot-{new_id('n')[-6:]}",
        **overrides,
    )
    rt = build_services(lambda tenant, session_id: None, settings)
    feeds = [f"p{n}-{new_id('p')[-8:]}" for n in range(producers)]
    names = list(
        _session_ids(sessions, tenant, _shared_slots(RedisKeys(settings.namespace), tenant, feeds))
    )
    for n in range(runs):
        request = RunRequest(
            run_id=new_id("run"),
            request_id=new_id("req"),
            tenant=tenant,
            session_id=names[n % sessions],
            agent=agent,
            input=f"hello {n}",
            reply_to=feeds[n % producers],
        )
        admit_submission(rt.runs.tenant_usage, settings, [request])
        submit(rt.runs, request, on=settings.queue)
        drain(rt, tenant, request.session_id, carried=Carried(request, settings.queue))


def _shared_slots(keys: RedisKeys, tenant: str, feeds: list[str]) -> set[int]:
    """The slots of every sharded key outside the sessions' own: the active and queued indexes,
    the run-id index, the completion feeds' shards, the tenants index, the tenant's usage."""
    names = [*keys.active_shards(), keys.tenants(), *keys.tenant_usage(tenant, "20260101")]
    names += [keys.usage_shard(tenant, "20260101", n)[0] for n in range(USAGE_SHARDS)]
    names += [keys.tenant_queued_shard(tenant, n) for n in range(QUEUED_SHARDS)]
    names += [f"{{{tenant}/~runs:{n}}}" for n in range(RUN_INDEX_SHARDS)]
    names += [keys.done(n) for n in range(DONE_SHARDS)]
    for feed in feeds:
        name = keys.feed(tenant, feed)
        names += [keys.producer_done(name, n) for n in range(FEED_SHARDS)]
    return {key_slot(name.encode()) for name in names}


def _session_ids(count: int, tenant: str, avoid: set[int]) -> Iterator[str]:
    """``count`` session ids whose slots differ from each other's and from ``avoid`` (two
    sessions in one slot, or a session in a shared key's slot, are the cluster's own hashing,
    not a hot key of ours: they would double that slot whatever Tether writes)."""
    taken: set[int] = set(avoid)
    found = 0
    while found < count:
        session_id = new_id("s")
        slot = key_slot(("{" + tenant + "/" + session_id + "}").encode())
        if slot not in taken:
            taken.add(slot)
            found += 1
            yield session_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hot_slots", description=__doc__)
    parser.add_argument("--cluster", required=True, help="redis+cluster:// URL of the cluster")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument(
        "--priced", action="store_true", help="a model that reports tokens at a price (usage)"
    )
    args = parser.parse_args(argv)
    priced: dict[str, Any] = {}
    if args.priced:
        from bench.agents import PRICED_MODEL

        price = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}
        priced = dict(
            agent="priced-echo",
            agent_modules=["bench.agents"],
            model_prices=json.dumps({PRICED_MODEL: price}),
        )
    from tether.persistence.redis_conn import redis_from_url

    cluster = redis_from_url(args.cluster)
    nodes = [
        redis.Redis(host=n.host, port=n.port)
        for n in cluster.get_primaries()  # type: ignore[attr-defined]
    ]
    watch = Watch(nodes)
    watch.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs_over_producers(
                args.cluster,
                f"file://{tmp}",
                runs=args.runs,
                producers=args.producers,
                sessions=args.sessions,
                **priced,
            )
    finally:
        watch.close()
    for name, value in watch.counts.summary().items():
        print(f"{name:24s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
