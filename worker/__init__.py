"""Tether worker: the Celery app and the restore → run → save task."""
