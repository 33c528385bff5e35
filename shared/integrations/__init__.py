"""Bridges between Tether and other agent frameworks.

Each subpackage needs its framework's optional extra, and imports it only when used:

- :mod:`tether.integrations.openai_agents` (``pip install 'tether[agents]'``): a durable
  ``Session`` for the OpenAI Agents SDK, and SDK agents run as Tether agents on Celery workers.

Nothing here imports Celery: workers import these modules, not the other way round.
"""
