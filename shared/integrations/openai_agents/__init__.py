"""The OpenAI Agents SDK on Tether (``pip install 'tether[agents]'``).

- :class:`TetherSession`: the SDK's ``Session`` protocol over Tether's snapshot store and event
  log, so ``Runner.run(agent, text, session=TetherSession(...))`` keeps its history durably;
  every item write is one event, and ``tether sessions verify`` holds.
- :func:`tether_agent` / :func:`tether_agents`: an SDK agent as a registered Tether agent, so
  Celery workers run it (``TETHER_AGENTS = tether_agents(support_agent)`` in a module named by
  ``TETHER_AGENT_MODULES``).
- :mod:`~tether.integrations.openai_agents.items`: the lossless mapping between SDK items and
  Tether memory items that both use.
"""

from tether.integrations.openai_agents.items import SOURCE, from_memory, to_memory
from tether.integrations.openai_agents.runner import SdkRunnerModel, tether_agent, tether_agents
from tether.integrations.openai_agents.session import TetherSession

__all__ = [
    "SOURCE",
    "SdkRunnerModel",
    "TetherSession",
    "from_memory",
    "tether_agent",
    "tether_agents",
    "to_memory",
]
