"""The order in which ``make test``'s pytest processes take the test files (pytest-xdist).

``--dist loadfile`` hands out one file at a time, and xdist orders the files by their number of
tests. The long files are the worker and CLI files with a few tests each, so they came last and
one process ran the last of them alone while the others had finished (a long tail). This
scheduler hands out the longest files first (their measured seconds below; a file not listed
counts as short), so the short ones fill the ends of the three processes' lanes.

It also sends the files of a :data:`GROUPS` entry to one process, one after the other: they
share a session-scoped fixture (a worker fleet) that each process would otherwise start again.

The seconds need not be exact, only roughly in order. To refresh them from a run of the suite:
``pytest -q -m "not slow and not docs" -n 3 --durations=0 > d.log`` then
``python -m tests.support.schedule d.log`` prints the table to paste here.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

#: Files that share a session fixture: run by one process (a fleet started once, not per process).
#: The chaos stack (Redis, moto behind a fault proxy, 3 workers) and the streaming fleet (2
#: workers) were started by each of the three processes and idled there until the session
#: ended: 3 worker starts and ~15 s of CPU per chaos stack in a run of 2026-12-08.
GROUPS = {
    "tests/test_waits_workers.py": "agents-fleet",
    "tests/test_signals_workers.py": "agents-fleet",
    "tests/test_children_workers.py": "agents-fleet",
    # chaos_stack (tests/support/chaos_fixtures.py)
    "tests/test_chaos.py": "chaos-stack",
    "tests/test_faults.py": "chaos-stack",
    "tests/test_hostile_input.py": "chaos-stack",
    "tests/test_openai_worker.py": "chaos-stack",
    "tests/test_secrets_at_rest.py": "chaos-stack",
    "tests/test_security.py": "chaos-stack",
    "tests/test_usage_model_calls_workers.py": "chaos-stack",
    # streaming (tests/support/stream_stack.py)
    "tests/test_token_stream_count_workers.py": "stream-fleet",
    "tests/test_token_stream_views.py": "stream-fleet",
    "tests/test_token_stream_workers.py": "stream-fleet",
}

#: Seconds each file took in `make test` (setup + call + teardown of its tests; 3 processes on
#: 2 cores): a run of 2026-12-08 at load 6-8 (647 s), times 0.6 for a quieter machine;
#: test_waits_fleet_recovery from its own run once its 100 runs moved to make test-long.
#: Files under 4 s are left out: they go last, in the collection's order.
FILE_SECONDS: dict[str, float] = {
    "tests/test_doc_snippets.py": 85,
    "tests/test_local_stack.py": 54,
    "tests/test_cli.py": 27,
    "tests/test_wake_workers.py": 26,
    "tests/test_faults.py": 26,
    "tests/test_children_crash.py": 24,
    "tests/test_waits_fleet_recovery.py": 22,
    "tests/test_settings_validation.py": 21,
    "tests/test_distributed.py": 18,
    "tests/test_mcp_server.py": 18,
    "tests/test_runaway_tools_workers.py": 18,
    "tests/test_batch_eval.py": 16,
    "tests/test_cluster_distributed.py": 16,
    "tests/test_demo.py": 16,
    "tests/test_console_browser.py": 15,
    "tests/test_security.py": 14,
    "tests/test_metrics.py": 13,
    "tests/test_mcp_secrets_workers.py": 13,
    "tests/test_stream_contract.py": 13,
    "tests/test_run_queue_contract.py": 12,
    "tests/test_waits_workers.py": 11,
    "tests/test_children_workers.py": 11,
    "tests/test_token_stream_views.py": 11,
    "tests/test_waits_crash.py": 10,
    "tests/test_model_budget_contract.py": 10,
    "tests/test_autoscale_workers.py": 10,
    "tests/test_cli_startup.py": 10,
    "tests/test_chaos.py": 10,
    "tests/test_worker_heap_workers.py": 9,
    "tests/test_store_contract.py": 9,
    "tests/test_handle_reattach.py": 9,
    "tests/test_openai_agents.py": 9,
    "tests/test_mcp_restarts.py": 8,
    "tests/test_fork_safety.py": 8,
    "tests/test_console.py": 8,
    "tests/test_zombie_head_workers.py": 8,
    "tests/test_model_limits_workers.py": 8,
    "tests/test_autoscale_handback.py": 8,
    "tests/test_bench_smoke.py": 8,
    "tests/test_webhooks_delivery.py": 8,
    "tests/test_waits_recovery.py": 8,
    "tests/test_schedules_tenants_workers.py": 8,
    "tests/test_durable_workers.py": 8,
    "tests/test_tenant_forgery_workers.py": 7,
    "tests/test_schedules_workers.py": 7,
    "tests/test_async_producer.py": 7,
    "tests/test_tenant_purge.py": 7,
    "tests/test_token_stream_workers.py": 7,
    "tests/test_head_cache_writers_workers.py": 7,
    "tests/test_agents_session_chunks.py": 7,
    "tests/test_cli_input.py": 7,
    "tests/test_hostile_input.py": 6,
    "tests/test_openai_worker.py": 6,
    "tests/test_no_silent_hang.py": 6,
    "tests/test_secrets_everywhere_workers.py": 6,
    "tests/test_budget_concurrent_workers.py": 6,
    "tests/test_signals_crash.py": 6,
    "tests/test_tenant_runs.py": 6,
    "tests/test_model_shares_workers.py": 6,
    "tests/test_webhooks_bounds_workers.py": 6,
    "tests/test_canvas.py": 6,
    "tests/test_mcp_workers.py": 6,
    "tests/test_schedules.py": 6,
    "tests/test_batch_console.py": 6,
    "tests/test_trust_default_workers.py": 6,
    "tests/test_webhooks_workers.py": 6,
    "tests/test_futures.py": 6,
    "tests/test_lost_message.py": 5,
    "tests/test_lease_keeper.py": 5,
    "tests/test_batch.py": 5,
    "tests/test_model_limits_429.py": 5,
    "tests/test_exit_codes.py": 5,
    "tests/test_approvals_workers.py": 5,
    "tests/test_user_project.py": 5,
    "tests/test_wake_tenants.py": 5,
    "tests/test_batch_report.py": 5,
    "tests/test_multitask_workers.py": 5,
    "tests/test_rabbitmq.py": 5,
    "tests/test_import_cycles.py": 5,
    "tests/test_head_journal.py": 5,
    "tests/test_compaction_session.py": 5,
    "tests/test_batch_export.py": 4,
    "tests/test_golden_journal_v1.py": 4,
    "tests/test_agents_session_contract.py": 4,
    "tests/test_runaway_tools.py": 4,
    "tests/test_usage_model_calls_workers.py": 4,
    "tests/test_redis_cluster.py": 4,
}


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the group its file is in."""
    path = nodeid.split("::", 1)[0]
    return GROUPS.get(path, path)


def scope_seconds(scope: str) -> float:
    """The measured seconds of a unit (a group's files add up)."""
    files = [f for f, g in GROUPS.items() if g == scope] or [scope]
    return sum(FILE_SECONDS.get(f, 0.0) for f in files)


def longest_first(scopes: Iterable[str]) -> list[str]:
    """The units in descending measured time; units of equal time keep their order."""
    return sorted(scopes, key=lambda scope: -scope_seconds(scope))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own; absent under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with this module's order and groups; other modes as xdist has them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):  # type: ignore[misc]
        """xdist's loadfile, its queue of units sorted once before the first is handed out (the
        collections stay as collected: a node is sent the indexes of its tests in its own)."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False  # the queue in collection order, then ours
            self._sorted = False

        def _assign_work_unit(self, node: Any) -> None:
            if not self._sorted:
                units = {scope: self.workqueue[scope] for scope in longest_first(self.workqueue)}
                self.workqueue.clear()
                self.workqueue.update(units)
                self._sorted = True
            super()._assign_work_unit(node)

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return LongestFirst(config, log)


_DURATION = re.compile(r"^\s*([0-9.]+)s (?:setup|call|teardown)\s+(\S+?\.py)::")


def table(log_text: str) -> dict[str, float]:
    """Seconds per file from pytest's ``--durations=0`` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in log_text.splitlines():
        match = _DURATION.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    return dict(seconds)


if __name__ == "__main__":
    measured = table(Path(sys.argv[1]).read_text())
    for path, took in sorted(measured.items(), key=lambda kv: -kv[1]):
        if took >= 5.0:
            print(f'    "{path}": {took:.0f},')
