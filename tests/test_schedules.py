"""Run schedules: tick arithmetic, the missed-ticks policy, editing on a private redis-server,
the CLI's refusals, and a tick submitted twice (two beats) making one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from tests.support.redis_scan import flatten_redis
from tether.errors import InvalidInput, ScheduleExists, ScheduleNotFound, UnknownAgent
from tether.keys import RedisKeys
from tether.producer.client import Producer
from tether.producer.schedules import Schedules
from tether.producer.schedules.beat import build_beat_app
from tether.producer.schedules.model import Schedule, parse_schedule
from tether.producer.schedules.presence import BeatHeartbeat, new_presence
from tether.producer.schedules.scheduler import TetherScheduler
from tether.producer.schedules.store import (
    StoredSchedule,
    encode_definition,
    max_definition_bytes,
)
from tether.producer.schedules.ticks import first_last_tick, next_tick, plan_tick
from tether.settings import Settings

T0 = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)


def every(seconds: int, missed: str = "catch_up") -> Schedule:
    return parse_schedule(
        name="e", session_id="s", agent="echo", tenant="t", every_s=seconds, missed=missed
    )


def cron(expression: str, missed: str = "catch_up") -> Schedule:
    return parse_schedule(
        name="c", session_id="s", agent="echo", tenant="t", cron=expression, missed=missed
    )


# --- ticks ---------------------------------------------------------------------------------------


def test_interval_ticks_sit_on_a_grid_and_do_not_drift_with_lateness() -> None:
    schedule = every(5)
    start = first_last_tick(schedule, T0 + timedelta(seconds=7.9))
    assert start == T0 + timedelta(seconds=5)
    # fired 0.9 s late: the next tick is still on the grid
    plan = plan_tick(schedule, start, T0 + timedelta(seconds=10.9))
    assert plan.fire == plan.last == T0 + timedelta(seconds=10)
    assert plan.last is not None
    assert next_tick(schedule, plan.last) == T0 + timedelta(seconds=15)
    assert plan_tick(schedule, plan.last, T0 + timedelta(seconds=14.9)).fire is None


def test_cron_ticks_are_the_expressions_times() -> None:
    schedule = cron("*/5 * * * *")
    assert next_tick(schedule, T0 + timedelta(minutes=3, seconds=20)) == T0 + timedelta(minutes=5)
    assert next_tick(schedule, T0 + timedelta(minutes=5)) == T0 + timedelta(minutes=10)


@pytest.mark.parametrize("make", [lambda m: every(60, m), lambda m: cron("* * * * *", m)])
def test_missed_ticks_catch_up_once_for_the_latest_or_skip_all(
    make: Callable[[str], Schedule],
) -> None:
    now = T0 + timedelta(minutes=10, seconds=30)  # ticks 10:01 .. 10:10 are due: 10 of them
    caught = plan_tick(make("catch_up"), T0, now)
    assert (caught.fire, caught.last, caught.missed) == (T0 + timedelta(minutes=10),) * 2 + (9,)
    skipped = plan_tick(make("skip"), T0, now)
    assert (skipped.fire, skipped.last, skipped.missed) == (None, T0 + timedelta(minutes=10), 10)


def test_a_long_outage_of_a_minutely_cron_finds_the_latest_tick() -> None:
    now = T0 + timedelta(days=30, seconds=5)
    plan = plan_tick(cron("* * * * *"), T0, now)
    assert plan.fire == T0 + timedelta(days=30)


def test_the_request_id_names_the_schedule_and_its_tick_time() -> None:
    assert every(5).request_id(T0) == f"sched:e:{int(T0.timestamp())}"


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"cron": "61 * * * *"}, "'61 * * * *'"),
        ({"cron": "* * *"}, "'* * *'"),
        ({"every_s": 0}, "every_s=0"),
        ({}, "exactly one of"),
        ({"cron": "* * * * *", "every_s": 5}, "exactly one of"),
        ({"cron": "* * * * *", "name": "a:b"}, "'a:b'"),
        ({"cron": "* * * * *", "missed": "never"}, "missed='never'"),
    ],
)
def test_a_bad_schedule_is_one_error_naming_the_value(
    fields: dict[str, object], needle: str
) -> None:
    base: dict[str, object] = {"name": "n", "session_id": "s", "agent": "echo", "tenant": "t"}
    with pytest.raises(InvalidInput) as info:
        parse_schedule(**{**base, **fields})
    assert needle in str(info.value)


# --- editing on Redis ----------------------------------------------------------------------


def test_add_list_pause_resume_remove(redis_url: str) -> None:
    schedules = Schedules(Settings(broker_url=redis_url, redis_url=redis_url))
    view = schedules.add("digest", session_id="s-1", agent="echo", input="hi", every_s=60)
    assert view.next_tick is not None and view.last_tick is not None
    assert view.next_tick - view.last_tick == timedelta(seconds=60)
    with pytest.raises(ScheduleExists, match="'digest'"):
        schedules.add("digest", session_id="s-2", agent="echo", cron="0 7 * * *")
    schedules.add("morning", session_id="s-2", agent="echo", cron="0 7 * * *", missed="skip")
    assert [v.name for v in schedules.list()] == ["digest", "morning"]
    assert schedules.pause("digest").paused
    assert schedules.get("digest").paused and schedules.get("digest").as_dict()["next_tick"] is None
    assert not schedules.resume("digest").paused
    assert schedules.get("digest").schedule.input == "hi"  # the definition survives edits
    schedules.remove("digest")
    assert [v.name for v in schedules.list()] == ["morning"]
    with pytest.raises(ScheduleNotFound, match="'digest'"):
        schedules.remove("digest")


def test_a_pasted_secret_in_a_schedules_input_is_never_stored(redis_url: str) -> None:
    """The definition sits in Redis for as long as the schedule lives: its input is redacted
    before it is stored, as a run's input is before it is submitted."""
    pasted = "sk-proj-" + "Zq9" * 10
    schedules = Schedules(Settings(broker_url=redis_url, redis_url=redis_url))
    schedules.add("keyed", session_id="s-1", agent="echo", input=f"use {pasted}", every_s=60)
    assert schedules.get("keyed").schedule.input == "use ***"
    stored = b"".join(flatten_redis(redis.Redis.from_url(redis_url)).values())
    assert b"Zq9Zq9" not in stored and b"use ***" in stored
    raw = Schedules(Settings(broker_url=redis_url, redis_url=redis_url, redact_inputs=False))
    raw.add("verbatim", session_id="s-2", agent="echo", input=f"use {pasted}", every_s=60)
    assert raw.get("verbatim").schedule.input == f"use {pasted}"  # TETHER_REDACT_INPUTS=false


def test_an_unknown_agent_writes_nothing(redis_url: str) -> None:
    schedules = Schedules(Settings(broker_url=redis_url, redis_url=redis_url))
    with pytest.raises(UnknownAgent, match="'no-such-agent'"):
        schedules.add("x", session_id="s-1", agent="no-such-agent", every_s=5)
    assert redis.Redis.from_url(redis_url).keys("*") == []


def _env(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return {**env, "TETHER_BROKER_URL": redis_url, "TETHER_REDIS_URL": redis_url}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cron", "*/5 * * *"], "'*/5 * * *'"),
        (["--cron", "*/5 * * * *", "--agent", "nobody"], "'nobody'"),
    ],
)
def test_the_cli_refuses_bad_input_with_one_line_and_exit_2(
    redis_url: str, args: list[str], needle: str
) -> None:
    argv = ["schedule", "add", "nightly", "--session", "s-1", "--agent", "echo", *args]
    script = Path(sys.executable).parent / "tether"
    result = subprocess.run(
        [str(script), *argv], env=_env(redis_url), capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr, lines
    assert redis.Redis.from_url(redis_url).keys("*") == []


def _rewind(schedules: Schedules, name: str, by: timedelta) -> StoredSchedule:
    """Move ``name``'s last tick back by ``by`` (as a beat that was away would find it)."""
    stored = schedules.store.read(schedules.tenant, name)
    assert isinstance(stored, StoredSchedule) and stored.last_tick is not None
    schedules.store.record_tick(stored, stored.last_tick - by)
    again = schedules.store.read(schedules.tenant, name)
    assert isinstance(again, StoredSchedule)
    return again


def _beat(settings: Settings, producer: Producer) -> TetherScheduler:
    """A beat's scheduler in this process (no lock, no presence), submitting with ``producer``."""
    beat = TetherScheduler(app=build_beat_app(settings), lazy=True, settings=settings)
    beat.lock_key = None  # one loop of the beat, without taking its lock first
    beat._producer = producer
    return beat


def test_a_tick_fired_by_two_beats_is_one_run(redis_url: str) -> None:
    """Two schedulers without the lock fire the same due tick: the request id dedupes it."""
    settings = Settings(broker_url=redis_url, redis_url=redis_url, store_url="memory://")
    schedules = Schedules(settings)
    added = schedules.add("twice", session_id="s-twice", agent="echo", input="tick", every_s=3600)
    tick = added.last_tick  # the hour that began before now: made due by moving the state back
    assert tick is not None
    _rewind(schedules, "twice", timedelta(hours=1))
    with Producer(settings) as producer:
        beats = [_beat(settings, producer) for _ in range(2)]
        # both load the entry before either fires it, as two unlocked beats on one tick would
        entries = [beat.schedule["default/twice"] for beat in beats]
        assert all(entry.is_due()[0] for entry in entries)
        handles = [beat.apply_async(entry) for beat, entry in zip(beats, entries, strict=True)]
        run_ids = {h.run_id for h in handles if h is not None}
        assert len(run_ids) == 1 and None not in handles
        assert schedules.get("twice").last_run_id in run_ids
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        requests = client.keys("*{default/s-twice}:req:*")
        assert [r.rsplit(":req:", 1)[1] for r in requests] == [
            f"sched:twice:{int(tick.timestamp())}"
        ]


@pytest.mark.parametrize(
    "broken",
    [{"session_id": "bad session/../x"}, {"every_s": None, "cron": "61 * * * *"}, {"every_s": 0}],
    ids=["session-id", "cron", "interval"],
)
def test_a_stored_schedule_that_no_longer_validates_stops_neither_the_beat_nor_the_others(
    redis_url: str, broken: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    """A definition written by another version or by hand, or refused by a stricter check since:
    it is logged and not run, and the beat, ``schedule list`` and every other schedule go on
    (an id or cron that failed its check raised out of the beat's loop, which exited)."""
    settings = Settings(broker_url=redis_url, redis_url=redis_url, store_url="memory://")
    schedules = Schedules(settings)
    for name in ("bad", "good"):
        schedules.add(name, session_id=f"s-{name}", agent="echo", input="t", every_s=3600)
        _rewind(schedules, name, timedelta(hours=1))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    bad_key = schedules.keys.schedule("default", "bad")
    definition = json.loads(client.hget(bad_key, "definition") or "{}")
    definition["kwargs"].update(broken)
    client.hset(bad_key, "definition", json.dumps(definition))

    assert [view.name for view in schedules.list()] == ["good"]
    with pytest.raises(ScheduleNotFound, match="'bad' is not a valid schedule"):
        schedules.get("bad")
    with Producer(settings) as producer:
        beat = _beat(settings, producer)
        beat.tick()
        beat.tick()  # looked at again: logged once
    assert "schedule bad of tenant default is refused and not run (invalid" in caplog.text
    assert caplog.text.count("schedule bad of tenant default is refused") == 1
    assert beat.refusals.counts == {"invalid": 1}
    assert client.keys("*{default/s-good}:req:*") and not client.keys("*{default/s-bad}:req:*")
    schedules.remove("bad")  # a schedule that no longer reads is removed like any other
    assert client.exists(bad_key) == 0


def test_a_schedule_removed_while_the_beat_fires_it_stays_removed(redis_url: str) -> None:
    """The beat loads a due entry, ``schedule remove`` runs, then the beat fires the tick and
    records it: the record wrote the removed key back (its meta, and its score in the schedule
    set), and a schedule added again under the name kept that old last tick, so it was due at
    once and fired a run for a tick from before it existed."""
    settings = Settings(broker_url=redis_url, redis_url=redis_url, store_url="memory://")
    schedules = Schedules(settings)
    added = schedules.add("nightly", session_id="s-n", agent="echo", input="t", every_s=3600)
    assert added.last_tick is not None
    _rewind(schedules, "nightly", timedelta(hours=3))
    with Producer(settings) as producer:
        beat = _beat(settings, producer)
        loaded = beat.schedule["default/nightly"]
        assert loaded.is_due()[0]
        schedules.remove("nightly")
        beat.apply_async(loaded)  # its run is submitted: it was due when the beat looked

    client = redis.Redis.from_url(redis_url)
    key = schedules.keys.schedule("default", "nightly")
    assert not client.exists(key)
    assert client.zscore(schedules.keys.schedules("default"), "nightly") is None
    assert schedules.list() == []
    again = schedules.add("nightly", session_id="s-new", agent="echo", input="t", every_s=3600)
    assert again.last_tick is not None and again.last_tick >= added.last_tick
    with Producer(settings) as producer:
        assert "default/nightly" not in _beat(settings, producer).schedule  # not due


def test_schedule_add_warns_when_no_beat_is_alive(redis_url: str) -> None:
    """#50: nothing fired schedules unless `tether beat` ran, and `schedule add` said nothing.
    With no beat's presence record it warns (and still adds); with one, it does not."""
    script = Path(sys.executable).parent / "tether"
    argv = ["schedule", "add", "--session", "s-1", "--agent", "echo", "--every-s", "60"]

    def add(name: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(script), *argv[:2], name, *argv[2:]],
            env=_env(redis_url), capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    alone = add("unfired")
    assert "no beat is running" in alone.stderr and "tether beat" in alone.stderr
    client = redis.Redis.from_url(redis_url)
    keys = RedisKeys("tether")
    heartbeat = BeatHeartbeat(client, keys, new_presence).start()  # what a beat process writes
    try:
        assert [b.pid for b in Schedules(Settings(redis_url=redis_url)).beats()] == [os.getpid()]
        assert "no beat is running" not in add("fired").stderr
    finally:
        heartbeat.stop()
    assert client.zcard(keys.beats()) == 0  # withdrawn when it stops
    names = [v.name for v in Schedules(Settings(broker_url=redis_url, redis_url=redis_url)).list()]
    assert names == ["fired", "unfired"]


def test_migrate_moves_old_entries_into_their_tenants_keyspaces(redis_url: str) -> None:
    """Entries of the layout of before tenants owned schedules (``<ns>:{~sched}:<name>``, every
    tenant's in one place) are not run by the beat; ``tether schedule migrate`` moves each into
    the keyspace of the tenant it names, with its last tick, and leaves what it cannot move."""
    fixture = Path(__file__).parent / "fixtures" / "schedule_entry_v1.json"
    stored = json.loads(fixture.read_text())
    client = redis.Redis.from_url(redis_url)
    keys = RedisKeys("tether")
    legacy = {}
    for name, tenant in (("digest", "default"), ("theirs", "acme"), ("broken", "no/such")):
        definition = json.loads(stored["definition"])
        definition["name"] = definition["kwargs"]["name"] = name
        definition["kwargs"]["tenant"] = tenant
        legacy[name] = keys.beat_prefix() + name
        mapping = {"definition": json.dumps(definition), "meta": stored["meta"]}
        client.hset(legacy[name], mapping=mapping)
        client.zadd(keys.legacy_schedules(), {legacy[name]: 0})
    settings = Settings(broker_url=redis_url, redis_url=redis_url)
    Schedules(settings, tenant="acme").add("theirs", session_id="s-1", agent="echo", every_s=60)

    script = Path(sys.executable).parent / "tether"
    done = subprocess.run(
        [str(script), "schedule", "migrate"], env=_env(redis_url), capture_output=True,
        text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "moved: digest (tenant default)" in done.stdout
    assert "exists: theirs (tenant acme)" in done.stdout
    assert "invalid: broken (tenant -)" in done.stdout
    assert "1 of 3 schedule(s) moved" in done.stdout
    view = Schedules(settings).get("digest")
    assert view.last_tick == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)  # its state came along
    assert view.schedule.session_id == "s-news"
    assert not client.exists(legacy["digest"])
    assert {m.decode() for m in client.zrange(keys.legacy_schedules(), 0, -1)} == {
        legacy["theirs"],
        legacy["broken"],
    }
    assert Schedules(settings, tenant="acme").get("theirs").schedule.every_s == 60  # untouched


def test_junk_a_tenant_writes_into_its_schedules_stops_neither_the_beat_nor_its_list(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A tenant writes its keyspace as it likes: index members that name no schedule (an id
    check raised out of the beat's loop, which exited), an entry that is no JSON, one of
    another task, one naming another tenant and one over the size limit. Each is refused,
    logged once and counted by reason; the good schedule fires, and ``list`` shows it alone."""
    settings = Settings(
        broker_url=redis_url, redis_url=redis_url, store_url="memory://", max_input_bytes=100
    )
    schedules = Schedules(settings)
    schedules.add("good", session_id="s-good", agent="echo", input="t", every_s=3600)
    _rewind(schedules, "good", timedelta(hours=1))
    client = redis.Redis.from_url(redis_url)
    keys, index = schedules.keys, schedules.keys.schedules("default")
    theirs = parse_schedule(name="theirs", session_id="s-x", agent="echo", tenant="t2", every_s=1)
    entries = {
        "nojson": b"\xff{",
        "othertask": json.dumps({"task": "tether.canvas.run", "args": [], "kwargs": {}}),
        "theirs": encode_definition(theirs, enabled=True),
        "huge": "x" * (max_definition_bytes(100) + 1),
    }
    for name, definition in entries.items():
        client.hset(keys.schedule("default", name), "definition", definition)
    client.zadd(index, {**dict.fromkeys(entries, 0), "../x y": 0, "a:b": 0, "\xff": 0})
    with Producer(settings) as producer:
        beat = _beat(settings, producer)
        beat.tick()
        beat.tick()
    assert beat.refusals.counts == {
        "invalid": 3,  # the three members that name no schedule
        "not_a_schedule": 2,
        "other_tenant": 1,
        "too_large": 1,
    }
    assert caplog.text.count("schedule theirs of tenant default is refused") == 1
    assert client.keys("*{default/s-good}:req:sched:good:*")
    assert not client.keys("*{t2/*")  # nothing written for the tenant the body names
    assert [view.name for view in schedules.list()] == ["good"]
