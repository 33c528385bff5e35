"""#15: the SIGKILL chaos run on a real 3-master Redis Cluster holding the session state:
100 runs over 10 sessions, 5 worker SIGKILLs; 0 lost, 0 duplicated, every session verified,
and no ``CROSSSLOT`` in any worker log. Slow (``make test-long``): a minute or two on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos_engine import format_table, run_chaos
from tests.support.chaos_stack import open_chaos_stack
from tether.dev.redis_cluster import RedisClusterProcesses


@pytest.mark.slow
def test_sigkill_chaos_on_a_redis_cluster(
    redis_cluster: RedisClusterProcesses, tmp_path: Path
) -> None:
    with open_chaos_stack(tmp_path, state_url=redis_cluster.url) as stack:
        figures = run_chaos(stack, runs=100, sessions=10, kills=5, seed=15, gap_s=(0.4, 1.2))
        print("\n" + format_table(figures, "chaos on a 3-master Redis Cluster"))
        logs = stack.worker_logs()
    assert figures.kills == 5
    assert figures.unresolved == 0
    assert figures.failed == []
    assert (figures.lost, figures.duplicated, figures.out_of_order) == (0, 0, 0)
    assert figures.verified == figures.sessions, figures.verify_problems
    assert figures.completed == figures.runs
    assert "CROSSSLOT" not in logs and "Calling pipelined function" not in logs
