# Tether's image: the worker (`docker compose up --scale worker=N` runs N of these), the beat
# (`tether beat`, with celery-redbeat: the `schedules` extra) and the `tether` CLI.
# Settings come from the environment only (TETHER_* and AWS_*); see the README.
#
# Your own agents: build an image FROM this one that copies their package and names it in
# TETHER_AGENT_MODULES, as deploy/agents.Dockerfile does (docs/deployment.md#your-agents-in-the-image).
FROM python:3.11.13-slim-bookworm AS base

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY producer ./producer
COPY worker ./worker
RUN pip install ".[schedules]" \
    && useradd --create-home --uid 10001 tether

USER tether
CMD ["tether", "worker"]

# Flower (optional, `docker compose --profile flower up`): the same app, so it reads the same
# broker settings (key prefix, JSON only) as the workers.
FROM base AS flower
USER root
RUN pip install "flower==2.0.1"
USER tether
CMD ["python", "-m", "celery", "-A", "tether.worker.app", "flower", "--port=5555"]

# The web console (`tether console`, deploy/k8s/console.yaml): the same app plus the console extra.
FROM base AS console
USER root
RUN pip install ".[console]"
USER tether
CMD ["tether", "console", "--host", "0.0.0.0"]
