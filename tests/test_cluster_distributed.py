"""#15: the distributed suite on a real 3-master Redis Cluster (``redis-server
--cluster-enabled yes`` processes joined with ``redis-cli --cluster create``) holding the
session state; the Celery broker stays a plain redis-server, as a user would keep theirs.

The tests are ``tests/test_distributed.py``'s own, collected again here with ``live_stack``
bound to the cluster-backed stack (the slowest ones, which exercise the broker and the worker
fleet more than the state store, run in ``make test-long``). Every worker log is checked for
``CROSSSLOT`` at the end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stack import Stack, start_stack
from tests.test_distributed import (
    test_await_handle_in_asyncio as _await_handle_in_asyncio,
)
from tests.test_distributed import (
    test_bad_requests_fail_clearly_and_workers_keep_serving as _bad_requests,
)
from tests.test_distributed import (  # noqa: F401  (collected again, on the cluster)
    test_cancel_queued_and_running,
    test_handle_from_second_process,
    test_multi_turn_notes_across_workers,
    test_reject_policy_on_busy_session,
    test_republished_message_while_queued_is_applied_once,
    test_same_request_twice_is_applied_once,
    test_submit_many_and_events,
)
from tests.test_distributed import (
    test_concurrent_producers_keep_per_producer_order as _concurrent_producers,
)
from tests.test_distributed import (
    test_sigkill_mid_run_completes_elsewhere_once as _sigkill_mid_run,
)
from tests.test_distributed import (
    test_zombie_worker_cannot_overwrite as _zombie_worker,
)
from tether.dev.redis_cluster import RedisClusterProcesses


@pytest.fixture(scope="module")
def cluster_stack(
    redis_cluster: RedisClusterProcesses, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with start_stack(tmp_path_factory.mktemp("cluster-stack"), redis_cluster.url) as stack:
        yield stack
    logs = "\n".join(worker.log_text() for worker in stack.workers)
    assert "CROSSSLOT" not in logs and "Calling pipelined function" not in logs


@pytest.fixture
def live_stack(cluster_stack: Stack) -> Stack:
    """The cluster-backed stack with every worker running (overrides the plain one here)."""
    cluster_stack.ensure_workers()
    return cluster_stack


def test_the_session_state_really_is_on_the_cluster(live_stack: Stack) -> None:
    assert live_stack.settings.effective_redis_url.startswith("redis+cluster://")
    handle = live_stack.producer.run_async("on-the-cluster", "hello", agent="echo")
    assert handle.result(timeout=60).status == "COMPLETED"
    ref = live_stack.producer.locate(handle.run_id)
    assert ref is not None
    assert live_stack.producer.redis.exists(live_stack.producer.keys.run(*ref))
    broker = live_stack.redis.client()
    try:
        assert not broker.exists(live_stack.producer.keys.run(*ref))  # not on the broker's Redis
    finally:
        broker.close()


def test_sigkill_mid_run_on_the_cluster(live_stack: Stack) -> None:
    """Crash recovery on the cluster: the sweeper reads the sharded active index there."""
    _sigkill_mid_run(live_stack)


@pytest.mark.slow
def test_zombie_worker_on_the_cluster(live_stack: Stack) -> None:
    _zombie_worker(live_stack)


@pytest.mark.slow
def test_concurrent_producers_on_the_cluster(live_stack: Stack) -> None:
    _concurrent_producers(live_stack)


@pytest.mark.slow
def test_bad_requests_on_the_cluster(live_stack: Stack) -> None:
    _bad_requests(live_stack)


@pytest.mark.slow
def test_await_handle_in_asyncio_on_the_cluster(live_stack: Stack) -> None:
    _await_handle_in_asyncio(live_stack)
