"""#29 item 2 (N2) on real workers: a write outside the lease never costs a run anything.

- An operator restores an older ``head.json`` while the Redis copy of the head still holds the
  newer one. The next run executes its calls on the cached head, loses its compare-and-set and is
  redone from the store at once (one more attempt, not a wait for the lease to expire: the fleet's
  lease TTL is 10 minutes here), and the redo's tool calls get the keys of the first try although
  the model gave them new call ids: no effect is applied twice.
- ``tether sessions drop-cache`` after the restore: the run reads the store, one attempt.
- A ``TetherSession`` (Agents SDK) write, then a worker run of the session: one attempt.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.own_fleet import own_fleet
from tests.support.stack import Stack, unique
from tether.integrations.openai_agents import TetherSession
from tether.persistence.objects import head_key
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.blob import BlobSnapshotStore
from tether.producer import Producer
from tether.settings import Settings

QUEUE = "effectq"
#: Far beyond every wait below: a retry that waited for the lease would never come in time.
LONG_LEASE_MS = 600_000


@pytest.fixture(scope="module")
def effects(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with own_fleet(
        stack,
        tmp_path_factory.mktemp("effects"),
        queue=QUEUE,
        agent_modules="tests.support.effect_agents",
        TETHER_LEASE_TTL_MS=str(LONG_LEASE_MS),
    ) as producer:
        yield producer


def _store(settings: Settings) -> BlobSnapshotStore:
    store, _ = open_storage(settings.store_url, endpoint_url=settings.s3_endpoint_url)
    assert isinstance(store, BlobSnapshotStore)
    return store


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _restored_session(producer: Producer, stack: Stack, tmp_path: Path) -> tuple[str, Path]:
    """A session run twice whose head as the first run left it was then written back, so the
    cache holds the second; and an empty directory for the effects of the next run."""
    sid, warm, work = unique("restored"), tmp_path / "warm", tmp_path / "work"
    warm.mkdir()
    work.mkdir()
    producer.run(sid, f"effect {warm} 1", agent="effects", timeout_s=60)
    store = _store(stack.settings)
    backup = store.blobs.get(head_key("default", sid))
    assert backup is not None
    producer.run(sid, f"effect {warm} 1", agent="effects", timeout_s=60)
    current = store.blobs.get(head_key("default", sid))
    assert current is not None
    store.blobs.put(head_key("default", sid), backup.data, expected=current.token)
    return sid, work


@pytest.fixture(autouse=True)
def _aws(monkeypatch: pytest.MonkeyPatch, stack: Stack) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, stack.env.get(name, "testing"))


def test_a_restore_behind_the_cache_is_redone_at_once_under_the_same_keys(
    effects: Producer, stack: Stack, tmp_path: Path
) -> None:
    sid, work = _restored_session(effects, stack, tmp_path)

    result = effects.run(sid, f"effect {work} 2", agent="effects", timeout_s=60, wait_s=60)

    assert result.status == "COMPLETED", result
    assert result.attempts == 2  # the try on the stale cached head, then at once from the store
    executions = _lines(work / "executions")
    assert len(executions) == 4  # 2 calls, executed on each try
    assert executions[:2] == executions[2:]  # the redo's calls under the first try's keys
    assert len(_lines(work / "applied")) == 2  # no effect applied twice: 2 intended, 2 applied
    head = stack.reader().read(sid)
    assert head is not None and len(head.applied) == 2  # the restored run + this one


def test_drop_cache_after_a_restore_makes_the_next_run_read_the_store(
    effects: Producer, stack: Stack, tmp_path: Path
) -> None:
    sid, work = _restored_session(effects, stack, tmp_path)
    script = Path(sys.executable).parent / "tether"
    done = subprocess.run(
        [str(script), "sessions", "drop-cache", sid],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"default/{sid}" in done.stdout

    result = effects.run(sid, f"effect {work} 2", agent="effects", timeout_s=60, wait_s=60)

    assert result.status == "COMPLETED", result
    assert result.attempts == 1
    assert len(_lines(work / "executions")) == 2


def test_a_tether_session_write_then_a_worker_run_takes_one_attempt(
    effects: Producer, stack: Stack, tmp_path: Path
) -> None:
    sid = unique("sdkwrite")
    effects.run(sid, f"effect {tmp_path} 1", agent="effects", timeout_s=60)  # the cache fills
    session = TetherSession.from_settings(sid, stack.settings)
    session.append_items([{"role": "user", "content": "a note written in-process"}])

    result = effects.run(sid, f"effect {tmp_path} 1", agent="effects", timeout_s=60, wait_s=60)

    assert result.status == "COMPLETED", result
    assert result.attempts == 1
    items = session.read_items()
    assert {"role": "user", "content": "a note written in-process"} in items  # kept, not lost
