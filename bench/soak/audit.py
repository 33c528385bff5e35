"""The audit of the end state: every run resolved COMPLETED, each session's head remembers
exactly its facts once each in order, and the bucket holds exactly the objects the archiving
rule (or a kill) explains."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench.soak.config import REMEMBER, TENANT
from bench.soak.stack import SoakStack
from bench.soak.workload import Plan, Tracker
from bench.stack import BUCKET, FAKE_AWS, STORE_PREFIX
from tether.core.items import UserMessage
from tether.core.results import RunStatus
from tether.core.snapshot import SessionSnapshot
from tether.persistence.objects import HEAD_NAME, parse_segment_name
from tether.persistence.storage_url import open_storage


@dataclass
class Audit:
    """What the end state says about the runs and the bucket."""

    resolved: int = 0
    completed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    unresolved: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    missing_heads: int = 0
    problems: list[str] = field(default_factory=list)
    s3_heads: int = 0
    s3_segments_expected: int = 0
    s3_objects_expected: int = 0
    s3_objects_found: int = 0
    s3_segments_found: int = 0
    s3_stray: list[str] = field(default_factory=list)
    s3_sessions_off_rule: list[str] = field(default_factory=list)
    """Sessions whose segments differ from the rule in the way a kill explains (see bench.soak)."""
    s3_sessions_bad: list[str] = field(default_factory=list)
    """Sessions whose segments no rule or kill explains (gaps, overlaps, missing, extra)."""

    @property
    def runs_ok(self) -> bool:
        return (
            self.unresolved == 0
            and self.lost == 0
            and self.duplicated == 0
            and self.out_of_order == 0
            and self.missing_heads == 0
            and set(self.statuses) <= {RunStatus.COMPLETED.value}
        )

    def s3_ok(self, sessions: int, kills: int) -> bool:
        """One head per session, nothing stray, and every session's segments either as the
        rule cuts them or as a kill explains (no more such sessions than kills)."""
        return (
            self.s3_heads == sessions
            and not self.s3_stray
            and not self.s3_sessions_bad
            and len(self.s3_sessions_off_rule) <= kills
        )


def recalled(head: SessionSnapshot) -> list[str]:
    """The facts a ``notes`` session remembers, in order (its user messages)."""
    return [
        item.content[len(REMEMBER) :]
        for item in head.memory.items
        if isinstance(item, UserMessage) and item.content.startswith(REMEMBER)
    ]


def rule_segments(head: SessionSnapshot, batch: int) -> list[tuple[int, int]]:
    """The segments the archiving rule cuts at the head's commit points (one per run)."""
    points = sorted({r.last_seq for r in head.applied if r.last_seq > 0})
    out: list[tuple[int, int]] = []
    archived = 0
    for point in points:
        if point - archived >= batch:
            out.append((archived + 1, point))
            archived = point
    return out


def explained_by_kill(head: SessionSnapshot, found: list[tuple[int, int]], batch: int) -> bool:
    """Whether ``found`` is what the rule gives when some writers died between their head PUT
    and their segment PUT: segments tile 1.. without gaps, each ends at a commit point, holds at
    least ``batch`` events, and the archive reaches at least the head's ``archived_seq`` (the
    last outbox may be left in the head)."""
    points = {r.last_seq for r in head.applied}
    expect_first = 1
    for first, last in found:
        if first != expect_first or last not in points or last - first + 1 < batch:
            return False
        expect_first = last + 1
    return expect_first - 1 >= head.archived_seq


def audit(stack: SoakStack, plan: Plan, tracker: Tracker, batch: int) -> Audit:
    """Judge the end state (see the bench.soak docstring)."""
    result = Audit(
        resolved=tracker.completed,
        statuses=dict(tracker.statuses),
        retried=tracker.retried,
        unresolved=plan.runs - tracker.completed,
        completed=tracker.statuses.get(RunStatus.COMPLETED.value, 0),
        problems=list(tracker.problems),
    )
    store, _archive = open_storage(
        f"s3://{BUCKET}/{STORE_PREFIX}",
        endpoint_url=stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=FAKE_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS["AWS_SECRET_ACCESS_KEY"],
    )

    def load(sid: str) -> SessionSnapshot | None:
        stored = store.load(TENANT, sid)
        return stored.snapshot if stored is not None else None

    with ThreadPoolExecutor(8) as pool:
        heads = dict(zip(plan.session_ids, pool.map(load, plan.session_ids), strict=True))
    for sid, facts in plan.expected().items():
        head = heads[sid]
        if head is None:
            result.missing_heads += 1
            result.lost += len(facts)
            continue
        got = recalled(head)
        want, have = Counter(facts), Counter(got)
        result.lost += sum((want - have).values())
        result.duplicated += sum((have - want).values())
        if got != facts and want == have:
            result.out_of_order += 1
    _audit_bucket(stack, plan, heads, batch, result)
    return result


def _audit_bucket(
    stack: SoakStack,
    plan: Plan,
    heads: dict[str, SessionSnapshot | None],
    batch: int,
    result: Audit,
) -> None:
    client = stack.s3_client()
    prefix = f"{STORE_PREFIX}/v1/{TENANT}/"
    found_heads: set[str] = set()
    segments: dict[str, list[tuple[int, int]]] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            result.s3_objects_found += 1
            rest = key[len(prefix) :] if key.startswith(prefix) else None
            parts = rest.split("/") if rest is not None else []
            sid = parts[0] if parts else ""
            if sid not in heads:
                result.s3_stray.append(key)
            elif parts[1:] == [HEAD_NAME]:
                found_heads.add(sid)
            elif len(parts) == 3 and parts[1] == "events" and parse_segment_name(parts[2]):
                seg = parse_segment_name(parts[2])
                assert seg is not None
                segments.setdefault(sid, []).append((seg[0], seg[1]))
            else:
                result.s3_stray.append(key)
    result.s3_heads = len(found_heads)
    result.s3_segments_found = sum(len(v) for v in segments.values())
    for sid in plan.session_ids:
        head = heads[sid]
        found = sorted(segments.get(sid, []))
        if head is None:
            if found:
                result.s3_sessions_bad.append(f"{sid}: segments without a head")
            continue
        expected = rule_segments(head, batch)
        result.s3_segments_expected += len(expected)
        if found == expected:
            continue
        if explained_by_kill(head, found, batch):
            result.s3_sessions_off_rule.append(f"{sid}: rule {expected}, found {found}")
        else:
            result.s3_sessions_bad.append(f"{sid}: rule {expected}, found {found}")
    result.s3_objects_expected = len(plan.session_ids) + result.s3_segments_expected
