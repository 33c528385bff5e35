"""Metrics and traces: Prometheus metrics (:mod:`.metrics`, served by :mod:`.exposition`) and
OpenTelemetry spans (:mod:`.tracing`).

This package sits just above :mod:`tether.persistence` in the layers (the queue depth and a
worker's metrics endpoint read Redis through it) and below the runtime and the run protocol,
which record what happens with one-line calls; it never imports Celery. Tracing depends on
``opentelemetry-api`` only: with no SDK configured every span is a no-op.
"""
