"""The autoscaling policy, a pure function: scale out on backlog or wait, scale in after an idle
period, hysteresis and cooldown, bounds; and the command line's validation of its knobs."""

from __future__ import annotations

import pytest

from tether.errors import UsageError
from tether.producer.ops.autoscale.policy import Load, PolicyState, ScalePolicy, decide
from tether.producer.ops.cli.autoscale import make_policy, parse_bounds

POLICY = ScalePolicy(min_workers=1, max_workers=4, idle_s=10, cooldown_s=2, max_wait_s=5)


def test_a_burst_goes_straight_to_the_maximum() -> None:
    decision = decide(POLICY, Load(queued=400, busy_slots=1), 1, PolicyState(), now_s=100)
    assert decision.desired == 4
    assert decision.reason.startswith("scale out")
    assert decision.state.changed_at_s == 100


def test_scale_out_asks_for_the_slots_the_work_needs() -> None:
    decision = decide(POLICY, Load(queued=2, busy_slots=1), 1, PolicyState(), now_s=0)
    assert decision.desired == 3  # two waiting and one running: three slots


def test_per_slot_backlog_counts_every_slot_of_a_worker() -> None:
    wide = POLICY.model_copy(update={"slots_per_worker": 4})
    # 3 queued on 4 free slots: no backlog to speak of, and nobody waited long
    steady = decide(wide, Load(queued=3, busy_slots=1, oldest_age_s=0.5), 1, PolicyState(), 0)
    assert steady.desired == 1
    out = decide(wide, Load(queued=9, busy_slots=4), 1, PolicyState(), 0)
    assert out.desired == 4  # ceil((9 + 4) / 4)


def test_a_small_queue_scales_out_once_its_oldest_run_waited_too_long() -> None:
    fresh = decide(POLICY, Load(queued=1, busy_slots=1, oldest_age_s=1.0), 1, PolicyState(), 0)
    assert fresh.desired == 1  # backlog 1 per slot is not above 1, and it waited 1 s
    stale = decide(POLICY, Load(queued=1, busy_slots=1, oldest_age_s=6.0), 1, PolicyState(), 0)
    assert stale.desired == 2
    assert "oldest 6.0 s" in stale.reason


def test_at_zero_workers_one_queued_message_of_unknown_age_starts_one() -> None:
    """``--min 0``: one canvas message (no submission time, so no age) gave a backlog of 1 per
    slot, not above 1, and no wait: no worker ever started, and the run waited for good."""
    scale_to_zero = POLICY.model_copy(update={"min_workers": 0})
    decision = decide(scale_to_zero, Load(queued=1, busy_slots=0), 0, PolicyState(), now_s=0)
    assert decision.desired == 1 and decision.reason.startswith("scale out")


def test_never_beyond_the_maximum() -> None:
    decision = decide(POLICY, Load(queued=1000, busy_slots=4), 4, PolicyState(), now_s=0)
    assert decision.desired == 4 and decision.reason == "steady"


def test_cooldown_holds_the_count_after_a_change() -> None:
    state = PolicyState(changed_at_s=100)
    held = decide(POLICY, Load(queued=400, busy_slots=2), 2, state, now_s=101)
    assert (held.desired, held.reason) == (2, "cooldown")
    moved = decide(POLICY, Load(queued=400, busy_slots=2), 2, state, now_s=102.5)
    assert moved.desired == 4


def test_scale_in_waits_for_a_whole_idle_period() -> None:
    idle = Load(queued=0, busy_slots=0)
    state = PolicyState()
    for now in (0, 5, 9.9):
        decision = decide(POLICY, idle, 4, state, now_s=now)
        assert decision.desired == 4
        state = decision.state
    assert state.idle_since_s == 0
    decision = decide(POLICY, idle, 4, state, now_s=10)
    assert decision.desired == 1
    assert decision.reason.startswith("scale in")
    assert decision.state == PolicyState(idle_since_s=None, changed_at_s=10)


def test_queued_work_resets_the_idle_clock() -> None:
    state = decide(POLICY, Load(0, 0), 4, PolicyState(), now_s=0).state
    state = decide(POLICY, Load(1, 3, oldest_age_s=0.1), 4, state, now_s=8).state
    assert state.idle_since_s is None
    state = decide(POLICY, Load(0, 0), 4, state, now_s=9).state
    assert decide(POLICY, Load(0, 0), 4, state, now_s=12).desired == 4  # idle 3 s only
    assert decide(POLICY, Load(0, 0), 4, state, now_s=19).desired == 1


def test_scale_in_keeps_the_workers_busy_slots_need() -> None:
    state = PolicyState(idle_since_s=0)
    # two of four workers busy: idle (nothing queued, two workers free), down to two
    decision = decide(POLICY, Load(queued=0, busy_slots=2), 4, state, now_s=20)
    assert decision.desired == 2
    # every worker busy is no idle fleet, whatever the clock says
    busy = decide(POLICY, Load(queued=0, busy_slots=4), 4, state, now_s=20)
    assert busy.desired == 4 and busy.state.idle_since_s is None


def test_hysteresis_no_flapping_around_a_steady_load() -> None:
    """A load that neither backs up nor leaves a worker free keeps the count, tick after tick."""
    state, current = PolicyState(), 2
    for tick in range(60):
        load = Load(queued=tick % 2, busy_slots=2, oldest_age_s=0.2 if tick % 2 else None)
        decision = decide(POLICY, load, current, state, now_s=tick)
        state, current = decision.state, decision.desired
        assert current == 2


def test_the_bounds_are_restored_first() -> None:
    assert decide(POLICY, Load(0, 0), 0, PolicyState(), now_s=0).desired == 1
    assert decide(POLICY, Load(0, 0), 6, PolicyState(), now_s=0).desired == 4
    zero = ScalePolicy(min_workers=0, max_workers=2, idle_s=0)
    assert decide(zero, Load(0, 0), 1, PolicyState(), now_s=0).desired == 0


def test_min_above_max_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match=r"--min/--max.*MIN <= MAX"):
        make_policy(min_workers=5, max_workers=2)
    with pytest.raises(UsageError, match="--concurrency"):
        make_policy(min_workers=1, max_workers=2, slots_per_worker=0)


@pytest.mark.parametrize("text", ["4", "a:b", "3:2", "0:0", "-1:2", "1:2:3", ""])
def test_bad_bounds_name_the_value_and_the_form(text: str) -> None:
    with pytest.raises(UsageError, match=r"MIN:MAX.*e\.g\. --autoscale 1:4"):
        parse_bounds(text)


def test_bounds() -> None:
    assert parse_bounds("1:4") == (1, 4)
    assert parse_bounds("0:2") == (0, 2)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--min", "3", "--max", "1"], "--min/--max"),
        (["--concurrency", "0"], "--concurrency"),
        (["--idle-s", "-1"], "--idle-s"),
        (["--interval-s", "inf"], "--interval-s"),  # an OverflowError after starting a worker
    ],
)
def test_tether_autoscale_refuses_bad_options_with_exit_2(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any setting is read or process started (no Redis is configured here)."""
    from tether.producer.ops.cli import run_cli

    assert run_cli(["autoscale", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: UsageError: tether autoscale " + named), err
    assert "see tether autoscale --help" in err


def test_tether_autoscale_needs_a_redis_broker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With RabbitMQ the queue cannot be read here: exit 2 naming the setting and the way out,
    before any connection (nothing listens at these addresses)."""
    from tether.producer.ops.cli import run_cli

    monkeypatch.setenv("TETHER_BROKER_URL", "amqp://guest:guest@127.0.0.1:1//")
    monkeypatch.setenv("TETHER_REDIS_URL", "redis://127.0.0.1:1/0")
    assert run_cli(["autoscale", "--min", "1", "--max", "2"]) == 2
    err = capsys.readouterr().err
    assert "TETHER_BROKER_URL is amqp://" in err and "rabbitmq trigger" in err, err
