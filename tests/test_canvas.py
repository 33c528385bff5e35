"""Runs in Celery's canvas on real workers: group, chord, chain (issue #17).

The canvas is driven from a separate process configured like a user's (the stack's ``TETHER_*``
environment), so the worker app's configuration there is exactly what a user gets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from typing import Any

from tests.support.redis_scan import flatten_redis
from tests.support.stack import Stack, unique
from tether.core.results import RunStatus
from tether.persistence.redis_conn import redis_from_url

CLIENT = textwrap.dedent(
    """
    import json, sys
    from celery import chain, chord, group
    from tether.errors import InvalidInput
    from tether.worker.canvas import tether_collect, tether_run

    plan = json.loads(sys.argv[1])
    out = {}
    if plan["kind"] == "fan-out":
        sessions = plan["sessions"]
        first = [tether_run.s(sessions[i % 10], f"remember g{i}", agent="notes")
                 for i in range(50)]
        out["group"] = group(first).apply_async().get(timeout=180)
        second = [tether_run.s(sessions[i % 10], f"remember c{i}", agent="notes")
                  for i in range(50)]
        out["chord"] = chord(second)(tether_collect.s()).get(timeout=180)
    elif plan["kind"] == "chain":
        a, b = plan["sessions"]
        steps = chain(tether_run.s(a, "remember x", agent="notes"), tether_run.s(b, agent="echo"),
                      tether_run.s(session_id=b, agent="echo"))
        out["chain"] = steps.apply_async().get(timeout=120)
    elif plan["kind"] == "once":
        sid = plan["sessions"][0]
        sig = dict(args=(sid, "remember once"), kwargs={"agent": "notes"}, task_id="canvas-fixed-1")
        first = tether_run.apply_async(**sig).get(timeout=60)
        again = tether_run.apply_async(**sig).get(timeout=60)  # a redelivered message
        out["results"] = [first, again]
        out["failed"] = tether_run.delay(sid, "hi", agent="no-such-agent").get(timeout=60)
        try:
            tether_run.delay("bad/id", "hi", agent="echo")
        except InvalidInput as exc:
            out["invalid"] = str(exc)
    elif plan["kind"] == "secret":
        sid, key = plan["sessions"][0], plan["key"]
        out["results"] = [
            tether_run.delay(sid, f"remember {key}", agent="notes", metadata={"k": key}).get(
                timeout=60),
            tether_run.apply_async(kwargs={"session_id": sid, "input": f"also {key}",
                                           "agent": "echo"}).get(timeout=60),
        ]
    elif plan["kind"] == "tenant":  # TETHER_TENANT of this process names the tenant
        sid = plan["sessions"][0]
        out["single"] = tether_run.delay(sid, "remember tenant-only", agent="notes").get(
            timeout=60)
        steps = chain(tether_run.s(sid, "recall", agent="notes"), tether_run.s(sid, agent="echo"))
        out["chain"] = steps.apply_async().get(timeout=120)
    print(json.dumps(out))
    """
)


def run_client(
    stack: Stack, kind: str, sessions: list[str], env: dict[str, str] | None = None, **plan: str
) -> dict[str, Any]:
    """Drive the canvas from a fresh process with the stack's environment (and ``env``)."""
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, json.dumps({"kind": kind, "sessions": sessions, **plan})],
        env={**stack.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def recall(stack: Stack, session_id: str) -> list[str]:
    output = stack.producer.run(session_id, "recall", agent="notes", wait_s=60).output or ""
    return output.splitlines()


def test_group_and_chord_of_50_runs_over_10_sessions_keep_session_order(
    live_stack: Stack,
) -> None:
    sessions = [unique("canvas") for _ in range(10)]
    out = run_client(live_stack, "fan-out", sessions)

    grouped = out["group"]
    assert len(grouped) == 50
    assert [r["status"] for r in grouped] == [RunStatus.COMPLETED.value] * 50
    assert [r["output"] for r in grouped] == [f"noted: g{i}" for i in range(50)]
    assert [r["session_id"] for r in grouped] == [sessions[i % 10] for i in range(50)]

    summary = out["chord"]
    assert summary["count"] == 50 and summary["ok"] is True
    assert summary["by_status"] == {RunStatus.COMPLETED.value: 50}
    assert summary["outputs"] == [f"noted: c{i}" for i in range(50)]

    # each session applied its runs in the order they were given in the group, then the chord
    for k, sid in enumerate(sessions):
        expected = [f"g{i}" for i in range(k, 50, 10)] + [f"c{i}" for i in range(k, 50, 10)]
        assert recall(live_stack, sid) == expected
    reader = live_stack.reader()
    for sid in sessions:
        assert reader.verify(sid).ok


def test_chain_passes_the_previous_output_along(live_stack: Stack) -> None:
    a, b = unique("chain-a"), unique("chain-b")
    out = run_client(live_stack, "chain", [a, b])
    last = out["chain"]
    assert last["session_id"] == b and last["status"] == RunStatus.COMPLETED.value
    assert last["output"] == "echo: echo: noted: x"
    assert recall(live_stack, a) == ["x"]


def test_a_redelivered_canvas_task_applies_once_and_failures_are_results(
    live_stack: Stack,
) -> None:
    sid = unique("canvas-once")
    out = run_client(live_stack, "once", [sid])
    first, again = out["results"]
    assert first["run_id"] == again["run_id"] == "run-canvas-fixed-1"
    assert first["request_id"] == "canvas:canvas-fixed-1"
    assert recall(live_stack, sid) == ["once"]  # applied once
    failed = out["failed"]
    assert failed["status"] == RunStatus.FAILED.value and failed["error_type"] == "UnknownAgent"
    assert "session id" in out["invalid"]


def test_a_pasted_secret_in_a_canvas_run_is_never_stored(live_stack: Stack) -> None:
    """A signature's input and metadata are masked before the run is registered and before
    the task message reaches the broker, as the producer masks a run's (TETHER_REDACT_INPUTS)."""
    sid, key = unique("canvas-secret"), "sk-proj-" + uuid.uuid4().hex + uuid.uuid4().hex
    out = run_client(live_stack, "secret", [sid], key=key)
    assert [r["status"] for r in out["results"]] == [RunStatus.COMPLETED.value] * 2
    assert [r["output"] for r in out["results"]] == ["noted: ***", "echo: also ***"]
    redis = redis_from_url(live_stack.env["TETHER_REDIS_URL"])
    try:
        stored = list(flatten_redis(redis).items())
    finally:
        redis.close()
    s3 = live_stack.s3_client()
    stored += [
        (k.encode(), s3.get_object(Bucket=live_stack.bucket, Key=k)["Body"].read())
        for k in live_stack.s3_keys()
        if sid in k
    ]
    assert any(sid.encode() in k for k, _ in stored)  # the scan saw this session's keys
    assert [k for k, data in stored if key[8:40].encode() in data] == []


def test_a_signature_runs_for_the_tenant_of_the_process_that_applies_it(live_stack: Stack) -> None:
    """A process with ``TETHER_TENANT=acme`` registered its signature for acme, but the task
    message did not say so, and the worker built the run with its own ``TETHER_TENANT``: the
    input went into another tenant's session of the same name (and acme's run stayed queued).
    The message now names the tenant, a chain's later steps inherit it, and the worker refuses
    a message without one."""
    sid = unique("canvas-tenant")
    out = run_client(live_stack, "tenant", [sid], env={"TETHER_TENANT": "acme-canvas"})
    single, last = out["single"], out["chain"]
    assert (single["tenant"], single["output"]) == ("acme-canvas", "noted: tenant-only")
    assert last["tenant"] == "acme-canvas"
    assert last["output"] == "echo: tenant-only"  # the chain recalled acme's memory
    default = live_stack.producer.settings.tenant
    assert default != "acme-canvas"
    assert not any("tenant-only" in line for line in recall(live_stack, sid))  # not default's


def test_a_chain_step_after_a_failed_run_names_that_run_and_its_error() -> None:
    import pytest

    from tether.errors import InvalidInput
    from tether.settings import Settings
    from tether.worker.canvas import canvas_request

    failed = {
        "run_id": "run-1",
        "session_id": "s-1",
        "status": "FAILED",
        "output": None,
        "error_type": "UnknownAgent",
        "error_message": "agent 'writer' is not registered",
    }
    with pytest.raises(InvalidInput) as refused:
        canvas_request((failed, "s-2"), {"agent": "echo"}, "task-1", Settings())
    message = str(refused.value)
    assert "the previous run run-1 (session s-1) ended FAILED" in message
    assert "UnknownAgent: agent 'writer' is not registered" in message
    with pytest.raises(InvalidInput, match=r"needs an input: tether_run.s\(session_id, input"):
        canvas_request(("s-2",), {"agent": "echo"}, "task-2", Settings())
