"""#19, written as the attack: tenant B, holding only a run id of tenant A's, can neither read,
wait on, follow nor cancel A's run, through the Python API (sync and asyncio) and the CLI; an
id never reveals that A's run exists. On the real stack (workers, redis-server, S3 over HTTP)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tests.support.stack import Stack, unique
from tether.errors import RunNotFound
from tether.producer import AsyncProducer, Producer
from tether.runs.queue.base import CancelOutcome


@pytest.fixture
def alice_and_bob(live_stack: Stack) -> tuple[Producer, Producer]:
    alice = Producer(live_stack.settings.model_copy(update={"tenant": "alice"}))
    bob = Producer(live_stack.settings.model_copy(update={"tenant": "bob"}))
    yield alice, bob  # type: ignore[misc]
    alice.close()
    bob.close()


def test_bob_cannot_read_or_follow_alices_finished_run(
    alice_and_bob: tuple[Producer, Producer],
) -> None:
    alice, bob = alice_and_bob
    secret = alice.run(unique("a"), "remember alice-secret", agent="notes", wait_s=60)
    assert secret.tenant == "alice"
    stolen = bob.handle(secret.run_id)
    with pytest.raises(RunNotFound):
        stolen.result(timeout=30)
    assert "alice-secret" not in repr(stolen.run_result(timeout=0).model_dump())
    assert stolen.session_id is None and stolen.tenant == "bob"  # learns nothing of alice's
    assert list(stolen.events(idle_timeout_s=1)) == []
    # alice herself still reads it, by handle and by explicit tenant
    assert alice.handle(secret.run_id).result(timeout=30).output == "noted: alice-secret"
    assert bob.handle(secret.run_id, tenant="alice").result(timeout=30).output is not None


def test_bob_cannot_cancel_alices_queued_run(
    alice_and_bob: tuple[Producer, Producer],
) -> None:
    alice, bob = alice_and_bob
    sid = unique("a-queue")
    blocker = alice.run_async(sid, "sleep 2", agent="sleepy")
    queued = alice.run_async(sid, "remember still-mine", agent="notes")
    assert bob.cancel(queued.run_id) is CancelOutcome.UNKNOWN  # as if it did not exist
    assert blocker.result(timeout=60).status == "COMPLETED"
    assert queued.result(timeout=60).output == "noted: still-mine"  # not cancelled


def test_async_producer_is_scoped_too(
    live_stack: Stack, alice_and_bob: tuple[Producer, Producer]
) -> None:
    alice, _ = alice_and_bob
    run = alice.run(unique("a-async"), "remember x", agent="notes", wait_s=60)

    async def attack() -> tuple[CancelOutcome, BaseException | None]:
        async with AsyncProducer(live_stack.settings.model_copy(update={"tenant": "bob"})) as bob:
            outcome = await bob.cancel(run.run_id)
            try:
                await bob.handle(run.run_id).result(timeout=30)
            except RunNotFound as exc:
                return outcome, exc
            return outcome, None

    outcome, error = asyncio.run(attack())
    assert outcome is CancelOutcome.UNKNOWN
    assert isinstance(error, RunNotFound)


@pytest.mark.parametrize("command", ["wait", "cancel"])
def test_cli_wait_and_cancel_refuse_another_tenants_run(
    live_stack: Stack, alice_and_bob: tuple[Producer, Producer], command: str
) -> None:
    alice, _ = alice_and_bob
    run = alice.run(unique("a-cli"), "remember cli-secret", agent="notes", wait_s=60)
    env = dict(live_stack.env, TETHER_TENANT="bob")
    as_bob = subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", command, run.run_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert as_bob.returncode == 2, as_bob.stderr
    assert "RunNotFound" in as_bob.stderr and "cli-secret" not in as_bob.stdout + as_bob.stderr
    unknown = subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", command, "run-does-not-exist"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # another tenant's run and a run that does not exist read the same (but for the id)
    assert unknown.returncode == as_bob.returncode
    assert unknown.stderr.replace("run-does-not-exist", "ID") == as_bob.stderr.replace(
        run.run_id, "ID"
    )
    as_alice = subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli", command, run.run_id, "--tenant", "alice"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if command == "wait":
        assert as_alice.returncode == 0 and "cli-secret" in as_alice.stdout
    else:
        assert as_alice.returncode == 1  # it had finished: nothing to cancel, but it was found
