"""No hot key (#51): 2,000 runs over 3 producers on the 3-master Redis Cluster, every master
watched with ``MONITOR`` (which shows the commands scripts run too), each write command mapped
to its key's slot: the busiest slot takes at most 1.5 times the mean over the slots written.

Before the completion feeds were sharded, the namespace feed ``{~done}`` alone took one write
per run (2,110 writes against a mean of 312: 6.8 times, ``python -m bench.hot_slots``), and each
producer's feed a third of them; any fleet-wide key does the same, whatever the number of
masters.

The runs go through the in-process engine built as a Celery worker builds it (the broker is not
on the cluster), 10 runs on each of 200 sessions (picked in distinct slots: two sessions hashing
to one slot is the cluster's own spread, not a key of ours, and so is a session in the slot of
one of our shards). The agent's model reports tokens at a price, so every run is counted into
its tenant's usage too (sharded by run id since #51)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.agents import PRICED_MODEL
from bench.hot_slots import Watch, runs_over_producers
from tether.dev.redis_cluster import RedisClusterProcesses

pytestmark = pytest.mark.slow

RUNS = 2000
PRODUCERS = 3
SESSIONS = 200


def test_no_slot_takes_more_than_1_5x_the_mean_write_load(
    redis_cluster: RedisClusterProcesses, cluster_url: str, tmp_path: Path
) -> None:
    watch = Watch([redis_cluster.node_client(n) for n in range(len(redis_cluster.nodes))])
    watch.start()
    try:
        runs_over_producers(
            cluster_url,
            f"file://{tmp_path}",
            runs=RUNS,
            producers=PRODUCERS,
            sessions=SESSIONS,
            agent="priced-echo",
            agent_modules=["bench.agents"],
            model_prices=json.dumps(
                {PRICED_MODEL: {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}}
            ),
        )
    finally:
        watch.close()
    summary = watch.counts.summary()
    assert summary["writes"] >= RUNS * 20, summary  # the watch saw the runs' writes
    assert summary["busiest / mean"] <= 1.5, summary
