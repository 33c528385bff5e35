"""Tether worker: execution. The Celery-free engine (:mod:`tether.worker.engine`) and its Celery
wiring beside it: the app, the ``tether.run`` / ``tether.drain`` tasks, the guardian of prefork
children, the recovery sweeper, the presence heartbeat and warm shutdown."""
