"""The arithmetic of P14 (bench/model_limits.py) on hand-made arrival stamps: the busiest
window, the allowance, and the requests that arrived during a 429's pause."""

from __future__ import annotations

from bench.model_limits import Traffic


def _traffic(arrivals: list[float], statuses: list[int] | None = None) -> Traffic:
    return Traffic(
        arrivals=arrivals,
        statuses=statuses or [200] * len(arrivals),
        completed=len(arrivals),
        failed=0,
        wall_s=arrivals[-1] - arrivals[0] if arrivals else 0.0,
        rpm=60,
        window_s=10.0,
        retry_after_s=2.0,
    )


def test_an_even_pace_at_the_limit_fills_each_window_with_its_share_plus_the_edge() -> None:
    t = _traffic([float(s) for s in range(30)])  # one a second: 60/min
    assert t.window_share == 10
    assert t.busiest_window() == 11  # a closed window holds both ends: the GCRA's "+ 1"


def test_a_burst_is_counted_wherever_it_falls() -> None:
    # 20.0 .. 30.0 holds four; 30.5 falls outside every window that starts at 20.x
    assert _traffic([0.0, 20.0, 20.1, 20.2, 29.9, 30.5, 45.0]).busiest_window() == 4
    assert _traffic([0.0, 20.0, 20.1, 20.2, 29.9, 30.0]).busiest_window() == 5  # closed at 30.0


def test_requests_during_a_pause_are_those_within_retry_after_of_a_429() -> None:
    arrivals = [0.0, 1.0, 2.5, 3.1, 6.0]
    t = _traffic(arrivals, [200, 429, 200, 429, 200])
    assert t.rate_limited() == 2
    assert t.during_pauses() == 1  # 2.5 came 1.5 s after the 429 at 1.0; 6.0 after 3.1 + 2
    assert _traffic(arrivals, [200] * 5).during_pauses() == 0
