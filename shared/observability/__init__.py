"""Metrics, traces and logs: Prometheus metrics (:mod:`.metrics`, served by :mod:`.exposition`),
OpenTelemetry spans (:mod:`.tracing`), and the log filter that keeps URLs' credentials out of
log lines (:mod:`.url_masking`).

This package sits just above :mod:`tether.persistence` in the layers (the queue depth and a
worker's metrics endpoint read Redis through it) and below the runtime and the run protocol,
which record what happens with one-line calls; it never imports Celery. Tracing depends on
``opentelemetry-api`` only: with no SDK configured every span is a no-op.
"""
