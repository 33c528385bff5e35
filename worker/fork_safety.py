"""What the worker's main process imports on its main thread before its own threads start.

Billiard forks a new pool child from the main process whenever one exits (a crash, a kill, a
scale-in, ``max_tasks_per_child``). ``fork`` copies the import lock of a module that another
thread of the parent is importing at that instant, held by a thread the child does not have:
the child's first import of that module then waits forever. Seen on a loaded machine: the
sweeper thread created its first S3 client (``import boto3``) right after a Redis restart while
the pool replaced a child; the new child hung in ``import boto3`` holding a prefetched run, whose
caller waited out its timeout. Forks happen only on the main thread (the pool is maintained from
its event loop), so what the main process's threads would import lazily is imported here first.
"""

from __future__ import annotations

import importlib

from tether.worker.engine.services import EngineServices


def warm_main_process(services: EngineServices) -> None:
    """Import, on the calling (main) thread, what the sweeper's first passes import: the object
    store's client (boto3 and botocore's client machinery, when the store is S3), and the codec
    the first connection to a host name looks up (``encodings.idna``)."""
    importlib.import_module("encodings.idna")
    for backend in (services.store, services.archive):
        blobs = getattr(backend, "blobs", None)
        if blobs is not None and hasattr(blobs, "client"):
            _ = blobs.client  # created on first use: this use is the one that imports
