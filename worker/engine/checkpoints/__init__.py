"""Step checkpoints: :class:`CheckpointStore` (the Protocol) with Redis and in-memory backends."""
