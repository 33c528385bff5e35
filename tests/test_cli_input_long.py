"""The long variant of tests/test_cli_input.py's node names: two real ``tether worker``
processes started alike in one folder announce two node names (Celery's default,
``celery@<host>``, was one name for both)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import eventually, unique
from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.presence import list_workers


def _env(redis_url: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return {**env, "TETHER_REDIS_URL": redis_url, **more}


@pytest.mark.slow
def test_two_workers_started_alike_in_one_folder_get_two_node_names(
    redis_url: str, tmp_path: Path
) -> None:
    namespace = unique("nodes")
    env = _env(redis_url, TETHER_NAMESPACE=namespace, TETHER_STORE_URL=f"file://{tmp_path}")
    command = [sys.executable, "-m", "tether.producer.ops.cli", "worker", "-P", "solo"]
    logs = [(tmp_path / f"w{i}.log").open("wb") for i in range(2)]
    workers = [
        subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        for log in logs
    ]
    client = redis_from_url(redis_url)
    try:
        keys = RedisKeys(namespace)
        eventually(lambda: len(list_workers(client, keys)) == 2, timeout_s=60)
        nodes = {w.node for w in list_workers(client, keys)}
        assert len(nodes) == 2 and all(n.startswith("tether-") for n in nodes), nodes
    finally:
        client.close()
        for worker in workers:
            worker.terminate()
        for worker, log in zip(workers, logs, strict=True):
            worker.wait(timeout=30)
            log.close()
