"""An Agents SDK session journaled by the first build with journals must keep working.

``tests/fixtures/journal_v1/`` (written by ``tests/fixtures/make_journal_v1.py``, never
regenerated to make a test pass) holds one session whose ``head.json`` carries envelope version 2
and whose ``.head.json.log`` is a ``TLOG2`` journal: no whole head yet, three patches. Every test
works on a private copy. The format markers are spelled out literally: they are what
deployments have on disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tether import SessionLogReader
from tether.integrations.openai_agents import TetherSession
from tether.persistence.storage_url import open_storage

FIXTURE = Path(__file__).parent / "fixtures" / "journal_v1"
SESSION_DIR = Path("v1") / "acme" / "golden-journal"


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "store")
    return tmp_path / "store"


def session(root: Path) -> TetherSession:
    store, archive = open_storage(f"file://{root}")
    return TetherSession("golden-journal", store=store, archive=archive, tenant="acme")


def test_the_fixture_is_a_journal_of_three_patches() -> None:
    head = (FIXTURE / SESSION_DIR / "head.json").read_bytes()
    log = (FIXTURE / SESSION_DIR / ".head.json.log").read_bytes()
    assert head.startswith(b'{"tether":"head","envelope":2,')
    assert log.startswith(b"TLOG2 ")
    assert log.count(b"\0TLOGPAT") == 3 and log.count(b"\0TLOGREC") == 0
    assert log.count(b'{"patch":1,') == 3


def test_it_reads_verifies_and_goes_on(root: Path) -> None:
    said = ["first", "second", "third", "fourth"]
    assert [i["content"] for i in session(root).read_items()] == said
    reader = SessionLogReader(*open_storage(f"file://{root}"))
    assert reader.verify("golden-journal", tenant="acme").ok
    assert [e.seq for e in reader.events("golden-journal", tenant="acme")] == [1, 2, 3, 4]
    writer = session(root)
    writer.append_items([{"role": "user", "content": "fifth"}])
    writer.remove_last_item()  # a whole head on top of the old patches
    writer.append_items([{"role": "user", "content": "sixth"}])
    assert [i["content"] for i in session(root).read_items()] == [*said, "sixth"]
    assert reader.verify("golden-journal", tenant="acme").ok
