"""The distributed run protocol, with no Celery import: the wire contract producers and workers
share, per-session leases, the run queue, the commit, and the worker's drain cycle.
"""
