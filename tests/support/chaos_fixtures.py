"""Fixtures of the chaos stack (a pytest plugin).

A test module opts in with ``pytest_plugins = ["tests.support.chaos_fixtures"]``; however many
modules do, one stack is started (:func:`~tests.support.chaos_stack.shared_chaos_stack`).

- ``chaos_stack`` (session): the CI-sized stack (short leases), stopped at the end.
- ``chaos`` (function): the same stack, healed for this test (proxy back to ``pass``, Redis and
  every worker running), whatever an earlier test broke.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.chaos_stack import ChaosStack, close_shared_chaos_stack, shared_chaos_stack


@pytest.fixture(scope="session")
def chaos_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosStack]:
    """The shared CI-sized chaos stack (short leases), stopped at the end of the session."""
    stack = shared_chaos_stack(tmp_path_factory.mktemp("chaos"))
    yield stack
    close_shared_chaos_stack()


@pytest.fixture
def chaos(chaos_stack: ChaosStack) -> ChaosStack:
    """The chaos stack, healed for this test."""
    chaos_stack.heal()
    return chaos_stack
