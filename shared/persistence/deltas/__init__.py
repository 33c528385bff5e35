"""Live deltas: the model's answer in pieces while a worker streams it (ephemeral, bounded).

:class:`InMemoryDeltaChannel` and :class:`RedisDeltaChannel` implement
:class:`~tether.persistence.deltas.base.DeltaChannel` and pass
``tests/test_delta_channel_contract.py``; :mod:`tether.persistence.deltas.live` puts pieces and
committed events in one order for readers.
"""

from tether.persistence.deltas.base import DeltaChannel, LiveDelta
from tether.persistence.deltas.memory import InMemoryDeltaChannel
from tether.persistence.deltas.redis import RedisDeltaChannel

__all__ = ["DeltaChannel", "InMemoryDeltaChannel", "LiveDelta", "RedisDeltaChannel"]
