"""Replay and rerun of runs recorded by real workers (redis-server, S3 over HTTP, Celery).

``tally`` (tests/support/replay_agents.py) runs three tool steps on a worker of this module's
fleet (its own queue, on the shared stack's Redis and S3), its tool and model counting their
executions in Redis. ``tether replay`` then re-executes the run offline in a CLI process; ``tether
rerun`` forks it before a step and a worker goes on from there: the counts show that nothing of
the steps before it ran again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.support.replay_agents import STEPS, effects_key
from tests.support.stack import Stack, unique
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.runs.rerun import RERUN_ATTRIBUTE

QUEUE = "replayq"


@pytest.fixture(scope="module")
def fleet_env(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One worker loading the replay agents, on its own queue; the env of CLIs beside it."""
    prefix = unique("replay")
    env = dict(
        stack.env,
        TETHER_AGENT_MODULES="tests.support.replay_agents",
        TETHER_QUEUE=QUEUE,
        COUNTER_REDIS_URL=stack.redis.url,
        COUNTER_PREFIX=prefix,
    )
    fleet = WorkerFleet(env, tmp_path_factory.mktemp("replay"), count=1, queue=QUEUE, prefix="rp")
    fleet.start()
    try:
        yield env
    finally:
        fleet.stop()


@pytest.fixture
def producer(live_stack: Stack, fleet_env: dict[str, str]) -> Iterator[Producer]:
    with Producer(live_stack.settings.model_copy(update={"queue": QUEUE})) as made:
        yield made


Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(
    fleet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Cli:
    """``tether ...`` in this process (what the console script runs: no start-up to pay), with
    the fleet's environment: its tool would count here too, were it run."""
    from tether.producer.ops.cli import run_cli

    for key, value in fleet_env.items():
        if key.startswith(("TETHER_", "AWS_", "COUNTER_")):
            monkeypatch.setenv(key, value)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = run_cli(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def stored_bytes(stack: Stack, session_id: str) -> dict[str, bytes]:
    """Every S3 object of a session (head, archive segments), by key."""
    client = stack.s3_client()
    return {
        key: client.get_object(Bucket=stack.bucket, Key=key)["Body"].read()
        for key in stack.s3_keys()
        if session_id in key
    }


def effects(stack: Stack, env: dict[str, str]) -> dict[str, int]:
    """Executions of ``mark`` per ``step:idempotency key``."""
    raw = stack.redis.client().hgetall(effects_key(env["COUNTER_PREFIX"]))
    return {k.decode(): int(v) for k, v in raw.items()}


def model_calls(stack: Stack, env: dict[str, str]) -> int:
    client: redis.Redis = stack.redis.client()
    return int(client.get(f"{env['COUNTER_PREFIX']}:model_calls") or 0)


def test_a_recorded_worker_run_replays_identically_and_a_new_version_diverges(
    live_stack: Stack,
    fleet_env: dict[str, str],
    producer: Producer,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sid = unique("replay")
    producer.run(sid, "warm up", agent="tally", wait_s=60)  # the replayed run has a past
    result = producer.run(sid, "count to three", agent="tally", wait_s=60)
    assert result.status is RunStatus.COMPLETED and result.output == f"marked {STEPS}"
    before = (effects(live_stack, fleet_env), model_calls(live_stack, fleet_env))
    versions = "tests.support.replay_agents:"

    code, out, err = cli("replay", result.run_id)
    assert code == 0, err
    assert "identical (4 steps" in out
    code, out, err = cli("replay", result.run_id, "--agent", versions + "tally_renamed")
    assert code == 1, err
    assert "diverged at step 0" in out and "tools [stamp]" in out
    # played back: no tool ran and no model was asked
    assert (effects(live_stack, fleet_env), model_calls(live_stack, fleet_env)) == before

    args = ("--agent", versions + "tally_shifted", "--model", "agent", "--json")
    code, out, err = cli("replay", result.run_id, *args)

    assert code == 1, err
    divergence = json.loads(out)["divergence"]
    assert divergence["step"] == 0
    assert divergence["expected"] == 'model answer calling mark({"n": 1})'
    assert divergence["actual"] == 'model answer calling mark({"n": 2})'
    assert effects(live_stack, fleet_env) == before[0]  # still no tool ran
    # the one model asked is tally_shifted's own (--model agent), once per recorded step
    assert model_calls(live_stack, fleet_env) == before[1] + STEPS + 1

    # with its session and agent given, a replay needs the store only: no Redis at all
    for name in ("TETHER_REDIS_URL", "TETHER_BROKER_URL"):
        monkeypatch.setenv(name, "redis://127.0.0.1:1/0")  # nothing listens on port 1
    code, out, err = cli("replay", result.run_id, "--session", sid, "--agent", "tally")
    assert code == 0, err
    assert "identical (4 steps" in out


def test_rerun_from_a_step_forks_and_goes_on_there_on_a_worker(
    live_stack: Stack, fleet_env: dict[str, str], producer: Producer, cli: Cli
) -> None:
    sid, fork_id = unique("source"), unique("fork")
    earlier = effects(live_stack, fleet_env)  # other tests' runs count in the same hash
    original = producer.run(sid, "count to three", agent="tally", wait_s=60)
    assert original.status is RunStatus.COMPLETED
    reader = live_stack.reader()
    store = reader.store
    head_before = store.load("default", sid)
    assert head_before is not None
    source_events = reader.events(sid)
    source_bytes = stored_bytes(live_stack, sid)
    assert source_bytes  # its head at least
    done = effects(live_stack, fleet_env)
    asked = model_calls(live_stack, fleet_env)
    assert sorted(key.split(":")[0] for key in done if key not in earlier) == ["0", "1", "2"]

    code, out, err = cli(
        "rerun", original.run_id, "--from-step", "2", "--session", fork_id, "--json"
    )
    assert code == 0, err
    info = json.loads(out)
    result = producer.handle(info["run_id"]).result(timeout=60)

    assert result.status is RunStatus.COMPLETED and result.output == f"marked {STEPS}"
    # steps 0 and 1 were kept as recorded: one more tool call (step 2), two more model calls
    later = effects(live_stack, fleet_env)
    new = {key: count for key, count in later.items() if key not in done}
    assert sorted(key.split(":")[0] for key in new) == ["2"]
    assert all(later[key] == count for key, count in done.items())  # none ran again
    assert model_calls(live_stack, fleet_env) == asked + 2
    # the fork: the source's events up to the end of step 1, then its origin, then the new run
    fork_events = reader.events(fork_id)
    at = info["at_seq"]
    kept = [e.model_dump(exclude={"session_id"}) for e in fork_events if e.seq <= at]
    assert kept == [e.model_dump(exclude={"session_id"}) for e in source_events if e.seq <= at]
    assert fork_events[at - 1].type is EventType.STEP_END and fork_events[at - 1].step == 1
    assert fork_events[at].type is EventType.SESSION_FORKED
    new_run = [e for e in fork_events if e.run_id == info["run_id"]]
    assert new_run and min(e.step for e in new_run) == 2
    assert [e.step for e in new_run if e.type is EventType.STEP_START] == [2, 3]
    assert reader.verify(fork_id).ok
    head = store.load("default", fork_id)
    assert head is not None
    assert head.snapshot.metadata.parent_session_id == sid
    mark = head.snapshot.metadata.attributes[RERUN_ATTRIBUTE]
    assert isinstance(mark, dict)
    assert (mark["source_run_id"], mark["from_step"]) == (original.run_id, 2)
    # the original is untouched: the same stored bytes, version and history
    assert stored_bytes(live_stack, sid) == source_bytes
    head_after = store.load("default", sid)
    assert head_after is not None and head_after.version == head_before.version
    assert head_after.snapshot == head_before.snapshot
    assert reader.events(sid) == source_events


def test_rerun_with_wait_names_the_fork_before_the_answer(producer: Producer, cli: Cli) -> None:
    """With ``--wait`` the fork's session and run id were never printed: only the answer."""
    sid, fork_id = unique("source"), unique("fork")
    original = producer.run(sid, "count to three", agent="tally", wait_s=60)
    assert original.status is RunStatus.COMPLETED

    code, out, err = cli(
        "rerun", original.run_id, "--from-step", "2", "--session", fork_id, "--wait",
        "--wait-s", "60",
    )  # fmt: skip

    assert code == 0, err
    assert out.strip() == f"marked {STEPS}"  # stdout is the answer alone
    named = f"rerun of {original.run_id} from step 2: session {fork_id}, run "
    lines = err.strip().splitlines()  # the fork first, then how the run ended
    assert len(lines) == 2 and lines[0].startswith(named), err
    first, finished = lines
    new_run = first.removeprefix(named)
    assert new_run != original.run_id and f"run {new_run} " in finished
    assert producer.handle(new_run).result(timeout=5).session_id == fork_id


def test_bad_input_is_one_clear_error_exit_2_and_nothing_written(
    live_stack: Stack, producer: Producer, cli: Cli
) -> None:
    sid, purged = unique("bad"), unique("purged")
    run = producer.run(sid, "count to three", agent="tally", wait_s=60)
    gone = producer.run(purged, "count to three", agent="tally", wait_s=60)
    reader = live_stack.reader()
    reader.store.delete("default", purged)  # purged: its record stays, its events are gone
    reader.archive.delete_session("default", purged)  # type: ignore[union-attr]
    keys_before = sorted(live_stack.s3_keys())
    fork_id = unique("never")
    cases = [
        (("replay", "run-doesnotexist"), ("RunNotFound", "'run-doesnotexist'")),
        (("replay", gone.run_id), ("RunNotFound", gone.run_id, "is gone")),
        (
            ("replay", run.run_id, "--agent", "tests.support.nope:tally"),
            ("ConfigurationError", "'tests.support.nope:tally'", "does not import"),
        ),
        (
            ("rerun", run.run_id, "--from-step", "9", "--session", fork_id),
            ("InvalidInput", "--from-step 9 is out of range", "1 to 3"),
        ),
        (
            ("rerun", run.run_id, "--from-step", "0", "--session", fork_id),
            ("InvalidInput", "--from-step 0 is out of range"),
        ),
        (("rerun", "run-doesnotexist", "--from-step", "1"), ("RunNotFound",)),
    ]

    for argv, needles in cases:
        code, out, err = cli(*argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and out == "", (argv, code, out, err)
        assert all(needle in lines[0] for needle in needles), (argv, lines[0])
    assert sorted(live_stack.s3_keys()) == keys_before  # nothing written
    assert reader.store.load("default", fork_id) is None
