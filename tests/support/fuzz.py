"""Shared pieces of the fuzz tests: reproducible settings, a case/crash tally, valid ids.

Every fuzz test prints ``FUZZ <name> cases=<n> crashes=<m>`` through :class:`Tally`;
``python -m tests.chaos_report`` sums these lines into the guarantees table.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tether.errors import TetherError
from tether.ids import validate_id


def fuzz(max_examples: int) -> settings:
    """Reproducible fuzz settings: derandomized, no deadline, ``max_examples`` cases."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
            HealthCheck.filter_too_much,
        ],
    )


class Tally:
    """Counts the cases and crashes of one fuzz test; :meth:`report` prints and asserts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = 0
        self.crashes: list[str] = []

    def report(self) -> None:
        """Print the ``FUZZ`` line and fail when any case crashed."""
        print(f"\nFUZZ {self.name} cases={self.cases} crashes={len(self.crashes)}")
        assert self.crashes == [], self.crashes[:5]


def is_valid_id(value: object) -> bool:
    """Whether ``value`` passes :func:`tether.ids.validate_id`."""
    try:
        validate_id(value)
    except TetherError:
        return False
    return True


valid_ids = st.from_regex(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,15}", fullmatch=True).filter(
    lambda s: ".." not in s
)
"""Ids :func:`tether.ids.validate_id` accepts."""
