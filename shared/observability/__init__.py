"""Metrics and traces: Prometheus metrics (:mod:`.metrics`, served by :mod:`.exposition`) and
OpenTelemetry spans (:mod:`.tracing`).

This package sits beside :mod:`tether.persistence` in the layers, so the run protocol and the
runtime record what happens with one-line calls; it never imports Celery. Tracing depends on
``opentelemetry-api`` only: with no SDK configured every span is a no-op.
"""
