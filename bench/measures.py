"""The measures P1..P10 and P14 (plus P4w, informational; P10 is four rows: P10, P10r, P10e, P10f;
P14 three: P14, P14u, P14r), each run against its baseline (if any) in one go.

The latency measures are in :mod:`bench.latency`, the throughput and resource measures in
:mod:`bench.capacity`, the durability measures in :mod:`bench.durability`, live token streaming in
:mod:`bench.streaming`, the fleet-wide model limit in :mod:`bench.model_limits`. Every measure
starts from an empty bucket (moto is reset and the bucket re-created), so data an earlier measure
left in moto cannot change a later one. Session ids carry a per-run tag, so Redis state never
collides. See :mod:`bench.core` for how latencies are taken.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.capacity import p2_throughput, p5_submit_rate, p6_worker_rss
from bench.core import Bench, Measure
from bench.durability import p7_step_durability, p8_resume_after_kill
from bench.eval_p11 import p11_eval_vs_inspect
from bench.fanout import p9_producer_fanout
from bench.latency import p1_latency, p3_long_session, p4_tail_latency, p4w_worker_path
from bench.model_limits import p14_limit_window, p14r_rate_limited, p14u_allowance_used
from bench.streaming import (
    p10_delta_latency,
    p10e_streamed_run,
    p10f_result_at_reader,
    p10r_publish_rate,
)

#: Every measure, in the order a full run executes them.
MEASURES: dict[str, Callable[[Bench], Measure]] = {
    "P1": p1_latency,
    "P4": p4_tail_latency,
    "P4w": p4w_worker_path,
    "P3": p3_long_session,
    "P2": p2_throughput,
    "P5": p5_submit_rate,
    "P6": p6_worker_rss,
    "P7": p7_step_durability,
    "P8": p8_resume_after_kill,
    "P9": p9_producer_fanout,
    "P10": p10_delta_latency,
    "P10r": p10r_publish_rate,
    "P10e": p10e_streamed_run,
    "P10f": p10f_result_at_reader,
    "P14": p14_limit_window,
    "P14u": p14u_allowance_used,
    "P14r": p14r_rate_limited,
    "P11": p11_eval_vs_inspect,
}
