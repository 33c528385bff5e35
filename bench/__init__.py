"""Benchmarks: Tether against hand-written and bare Celery baselines in one run.

Run them with ``python -m bench`` (or ``make bench``).

See :mod:`bench.latency` and :mod:`bench.capacity` for what each measure (P1..P6) times,
:mod:`bench.measures` for the list a run executes, and :mod:`bench.stack` for the private Redis,
moto S3 server and worker processes they share.
"""
