"""A guarded Celery strategy: a malformed message is refused, never a worker crash.

Celery builds a ``Request`` from each message before our task code runs; a body that is not the
``[args, kwargs, embed]`` triple makes that raise ``ValueError`` in the consumer, which stops the
worker, and the broker hands the same poison message to the next worker. Wrapping the default
strategy turns such errors into ``InvalidTaskError``, which Celery logs and acknowledges.
"""

from __future__ import annotations

from typing import Any

from celery.exceptions import InvalidTaskError
from celery.worker.strategy import default


def guarded(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """The default strategy, with malformed messages refused instead of crashing the consumer."""
    handler = default(task, app, consumer, **kwargs)

    def guarded_handler(
        message: Any, body: Any, ack: Any, reject: Any, callbacks: Any = None, **kw: Any
    ) -> Any:
        try:
            return handler(message, body, ack, reject, callbacks, **kw)
        except InvalidTaskError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise InvalidTaskError(f"malformed {task.name} message refused: {exc!r}") from exc

    return guarded_handler
