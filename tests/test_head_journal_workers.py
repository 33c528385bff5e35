"""#29 item 8 (P13) on real processes: an Agents SDK session appends to a local store as patches
of the head's journal, a Celery worker runs the same session (folding the patches as it loads,
writing its commit as a whole head into the journal), and the SDK session goes on after it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tether import SessionLogReader
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.integrations.openai_agents import TetherSession
from tether.persistence.storage_url import open_storage
from tether.producer.client import Producer
from tether.settings import Settings

SESSION = "s-journal"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_worker_runs_on_a_journaled_head_and_the_sdk_session_goes_on(
    redis_url: str, tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    store_url = f"file://{store_dir}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(
        {
            "TETHER_BROKER_URL": redis_url,
            "TETHER_REDIS_URL": redis_url,
            "TETHER_STORE_URL": store_url,
            "TETHER_QUEUE": "journal",
        }
    )
    settings = Settings(
        broker_url=redis_url, redis_url=redis_url, store_url=store_url, queue="journal"
    )
    session = TetherSession.from_settings(SESSION, settings)
    for n in range(4):
        session.append_items([user(f"sdk{n}")])
    journal = store_dir / "v1" / "default" / SESSION / ".head.json.log"
    assert journal.read_bytes().count(b"\0TLOGPAT") == 3  # the first append created the head

    with WorkerFleet(env, tmp_path, count=1, queue="journal"), Producer(settings) as producer:
        result = producer.run(SESSION, "from the worker", agent="echo", wait_s=60)
    assert result.status == RunStatus.COMPLETED, result.error_message
    assert result.attempts == 1
    # the worker's commit went into the journal as a whole head, after the patches
    log = journal.read_bytes()
    assert log.rindex(b"\0TLOGREC") > log.rindex(b"\0TLOGPAT")

    session.append_items([user("after")])  # its live head is stale: conflict, reread, patch
    assert journal.read_bytes().rindex(b"\0TLOGPAT") > journal.read_bytes().rindex(b"\0TLOGREC")
    said = [i["content"] for i in session.read_items() if i.get("role") == "user"]
    assert said == ["sdk0", "sdk1", "sdk2", "sdk3", "from the worker", "after"]
    reader = SessionLogReader(*open_storage(store_url))
    report = reader.verify(SESSION)
    assert report.ok, report.problems
