"""The rest of ``tests/test_distributed.py`` on a real 3-master Redis Cluster (see
``tests/test_cluster_distributed.py``): the slow ones, in ``make test-long``."""

from __future__ import annotations

import pytest

from tests.support.cluster_stack import cluster_stack, live_stack  # noqa: F401  (fixtures)
from tests.test_distributed import (  # noqa: F401  (collected again, on the cluster)
    test_await_handle_in_asyncio,
    test_bad_requests_fail_clearly_and_workers_keep_serving,
    test_concurrent_producers_keep_per_producer_order,
    test_zombie_worker_cannot_overwrite,
)

pytestmark = pytest.mark.slow
