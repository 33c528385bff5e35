"""The run protocol between producers and workers, with no Celery import: the wire contract
(:mod:`~tether.runs.contract`), the run queue on Redis (:mod:`~tether.runs.queue`), per-session
leases (:mod:`~tether.runs.leases`), worker presence and the Celery configuration both sides share.

The worker's execution engine that drives this protocol lives in :mod:`tether.worker.engine`.
"""
