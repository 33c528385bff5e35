"""Where running and finished batches announce their progress (the console's Batches page):
the :class:`BatchBoard` seam, its in-memory and Redis boards, and the reporter a batch feeds."""

from tether.producer.ops.batch.boards.base import BatchBoard, BatchRecord, BatchState
from tether.producer.ops.batch.boards.memory import MemoryBatchBoard
from tether.producer.ops.batch.boards.redis import RedisBatchBoard

__all__ = ["BatchBoard", "BatchRecord", "BatchState", "MemoryBatchBoard", "RedisBatchBoard"]
