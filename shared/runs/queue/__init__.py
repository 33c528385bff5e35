"""Run queues: :class:`RunQueue` (the Protocol) with Redis and in-memory implementations."""
