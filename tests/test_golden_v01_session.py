"""A session written by the 0.1 release must keep working with the current code.

``tests/fixtures/session_v01/`` is a ``file://`` store + archive written by the 0.1 code
(``tests/fixtures/make_v01_session.py``, run against the 0.1 checkout; never regenerated to make
a test pass). It holds one ``calculator`` session of five runs: the first three archived as one
segment, the last two still in the head's outbox, and one applied-request record per run.

Every test works on a private copy, so the committed files are never modified. The expected
keys and format markers are spelled out literally (not taken from the current code's
constants): they are the wire format 0.1 deployments have on disk.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tether import Agent, SessionLogReader
from tether.core.events import EventType
from tether.core.fold import project_events
from tether.errors import VersionConflict
from tether.persistence.archives.base import EventArchive
from tether.persistence.storage_url import open_storage
from tether.persistence.stores.base import SnapshotStore
from tether.runtime.demo_agents import calculator_agent
from tether.runtime.session import AgentSession

FIXTURE = Path(__file__).parent / "fixtures" / "session_v01"
TENANT = "acme"
SESSION_ID = "golden-v01"
SESSION_DIR = f"v1/{TENANT}/{SESSION_ID}"
HEAD_KEY = f"{SESSION_DIR}/head.json"
V01_SEGMENT_KEY = f"{SESSION_DIR}/events/00000000000000000001-00000000000000000044.json"
#: The 0.1 segment name: zero-padded inclusive sequence range.
SEGMENT_KEY_RE = re.compile(rf"{re.escape(SESSION_DIR)}/events/(\d{{20}})-(\d{{20}})\.json")
V01_LAST_SEQ = 74
V01_ARCHIVED_SEQ = 44
#: The five 0.1 runs: request id -> the calculator's answer.
V01_OUTPUTS = {
    "req-v01-1": "5",
    "req-v01-2": "20",
    "req-v01-3": "3",
    "req-v01-4": "1024",
    "req-v01-5": "2.5",
}


@dataclass
class Storage:
    """A private copy of the fixture, opened with the current code."""

    root: Path
    store: SnapshotStore
    archive: EventArchive

    def reader(self) -> SessionLogReader:
        return SessionLogReader(self.store, self.archive)

    def agent(self) -> Agent:
        """The same demo agent that wrote the session, on this storage."""
        agent = calculator_agent()
        agent.store, agent.archive = self.store, self.archive
        return agent

    def keys(self) -> set[str]:
        """Every stored object key (lock and temporary files of the backend excluded)."""
        return {
            path.relative_to(self.root).as_posix()
            for path in self.root.rglob("*")
            if path.is_file() and not path.name.startswith(".")
        }

    def object(self, key: str) -> dict[str, object]:
        loaded: dict[str, object] = json.loads((self.root / key).read_bytes())
        return loaded


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    root = tmp_path / "store"
    shutil.copytree(FIXTURE, root)
    store, archive = open_storage(f"file://{root}")
    return Storage(root, store, archive)


def resume_and_run(storage: Storage, text: str) -> tuple[AgentSession, str]:
    """Resume the 0.1 session with the current code, run ``text``, save; (session, output)."""
    session = storage.agent().resume_session(SESSION_ID, tenant=TENANT)
    result = session.run(text)
    session.save()
    assert result.output is not None
    return session, result.output


def test_fixture_has_a_segment_an_outbox_a_tool_call_and_applied_records(
    storage: Storage,
) -> None:
    # guards the other tests: they are only meaningful if the fixture covers each case
    assert storage.keys() == {HEAD_KEY, V01_SEGMENT_KEY}
    # the head as stored (reader.read() gives the whole history, not the outbox)
    stored = storage.store.load(TENANT, SESSION_ID)
    assert stored is not None
    head = stored.snapshot
    assert (head.last_seq, head.archived_seq) == (V01_LAST_SEQ, V01_ARCHIVED_SEQ)
    outbox = [e.seq for e in head.events]
    assert outbox == list(range(V01_ARCHIVED_SEQ + 1, V01_LAST_SEQ + 1))
    archived = storage.archive.read(TENANT, SESSION_ID)
    assert [e.seq for e in archived] == list(range(1, V01_ARCHIVED_SEQ + 1))
    tool_calls = [e for e in archived + head.events if e.type is EventType.TOOL_CALL]
    assert len(tool_calls) == len(V01_OUTPUTS)
    assert {r.request_id: r.output for r in head.applied} == V01_OUTPUTS


def test_reader_reads_and_verifies_the_v01_session(storage: Storage) -> None:
    reader = storage.reader()

    assert reader.list_session_ids(TENANT) == [SESSION_ID]
    report = reader.verify(SESSION_ID, tenant=TENANT)
    assert report.ok, report.problems
    assert (report.event_count, report.last_seq) == (V01_LAST_SEQ, V01_LAST_SEQ)
    head = reader.read(SESSION_ID, tenant=TENANT)
    assert head is not None and head.schema_version == 1
    events = reader.events(SESSION_ID, tenant=TENANT)
    assert [e.seq for e in events] == list(range(1, V01_LAST_SEQ + 1))
    assert reader.project(SESSION_ID, tenant=TENANT) == head.memory


def test_v01_session_resumes_keeps_its_applied_records_and_takes_a_saved_run(
    storage: Storage,
) -> None:
    stale = storage.agent().resume_session(SESSION_ID, tenant=TENANT)
    v01_version = stale.version
    assert v01_version is not None
    # a redelivered 0.1 request must still be recognised as applied
    for request_id, output in V01_OUTPUTS.items():
        record = stale.find_applied(request_id)
        assert record is not None and record.output == output

    session, output = resume_and_run(storage, "6 * 7")

    assert output == "42"
    stored = storage.store.load(TENANT, SESSION_ID)
    assert stored is not None
    assert stored.version == session.version != v01_version
    # compare-and-set: a session still based on the 0.1 head may no longer save
    with pytest.raises(VersionConflict):
        stale.save()
    head = stored.snapshot
    events = storage.reader().events(SESSION_ID, tenant=TENANT)
    assert [e.seq for e in events] == list(range(1, head.last_seq + 1))
    assert head.last_seq == session.last_seq > V01_LAST_SEQ
    assert project_events(events) == head.memory
    # the fold is the whole conversation: the 0.1 runs and the new one
    contents = [getattr(item, "content", None) for item in head.memory.items]
    assert contents[0] == "2 + 3" and contents[-1] == "42"
    assert storage.reader().verify(SESSION_ID, tenant=TENANT).ok


def test_wire_names_unchanged_after_a_run_with_the_current_code(storage: Storage) -> None:
    v01_segment = (storage.root / V01_SEGMENT_KEY).read_bytes()
    v01_head = storage.object(HEAD_KEY)

    resume_and_run(storage, "1 + 1")

    # the head stays where 0.1 readers look, in the same envelope and schema version
    head = storage.object(HEAD_KEY)
    for obj in (v01_head, head):
        assert (obj["tether"], obj["envelope"]) == ("head", 1)
    body = head["body"]
    assert isinstance(body, dict) and body["schema_version"] == 1
    # segments are immutable: the 0.1 one is untouched, and every segment (the new one too)
    # is named like 0.1 named them, tiling the history without gaps
    assert (storage.root / V01_SEGMENT_KEY).read_bytes() == v01_segment
    segment_keys = storage.keys() - {HEAD_KEY}
    ranges = []
    for key in segment_keys:
        match = SEGMENT_KEY_RE.fullmatch(key)
        assert match is not None, f"segment key {key!r} is not in the 0.1 format"
        ranges.append((int(match.group(1)), int(match.group(2))))
    ranges.sort()
    assert ranges[0] == (1, V01_ARCHIVED_SEQ)
    assert len(ranges) > 1, "the new run did not archive; this test needs a new segment"
    for (_, last), (first, _) in itertools.pairwise(ranges):
        assert first == last + 1
    # the head is written first and its outbox archived after it, so the newest segment ends
    # at the head's last_seq while the head itself still says archived_seq=44
    first, last = ranges[-1]
    assert last == body["last_seq"]
    new_segment = storage.object(f"{SESSION_DIR}/events/{first:020d}-{last:020d}.json")
    assert (new_segment["tether"], new_segment["envelope"]) == ("segment", 1)
