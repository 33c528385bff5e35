"""The execution engine, with no Celery import: claim, lease and fencing, restore, run, step
checkpoints, commit and recovery (:func:`~tether.worker.engine.cycle.drain` is the entry point).

The Celery wiring in :mod:`tether.worker` (tasks, guardian, sweeper, warm shutdown) calls into it;
the crash-at-every-step suite runs it in-process on in-memory or real backends.
"""
