"""#15: the distributed suite on a real 3-master Redis Cluster (``redis-server
--cluster-enabled yes`` processes joined with ``redis-cli --cluster create``) holding the
session state; the Celery broker stays a plain redis-server, as a user would keep theirs.

The tests are ``tests/test_distributed.py``'s own, collected again here with ``live_stack``
bound to the cluster-backed stack (``tests/support/cluster_stack.py``); the slowest ones, which
exercise the broker and the worker fleet more than the state store, are collected the same way
in ``tests/test_cluster_distributed_long.py`` (``make test-long``). Every worker log is checked
for ``CROSSSLOT`` when the stack stops.
"""

from __future__ import annotations

from tests.support.cluster_stack import cluster_stack, live_stack  # noqa: F401  (fixtures)
from tests.support.stack import Stack
from tests.test_distributed import (  # noqa: F401  (collected again, on the cluster)
    test_cancel_queued_and_running,
    test_handle_from_second_process,
    test_multi_turn_notes_across_workers,
    test_reject_policy_on_busy_session,
    test_republished_message_while_queued_is_applied_once,
    test_same_request_twice_is_applied_once,
    test_sigkill_mid_run_completes_elsewhere_once,  # the sweeper reads the sharded index here
    test_submit_many_and_events,
)


def test_the_session_state_really_is_on_the_cluster(live_stack: Stack) -> None:  # noqa: F811
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
