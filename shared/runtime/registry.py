"""Agents by name: the built-in agents (the offline demo agents and ``assistant``, on the
configured model), configured modules, and entry points.

A module registers agents by exposing ``TETHER_AGENTS: dict[str, Callable[[], Agent]]``; a package
can also publish factories under the entry-point group ``tether.agents``. Later sources override
earlier ones: built-ins, then entry points, then modules in the order given.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points

from tether.errors import ConfigurationError, UnknownAgent
from tether.models.base import ModelClient
from tether.runtime.agent import Agent
from tether.runtime.demo_agents import DEMO_AGENTS
from tether.runtime.model_agents import MODEL_AGENTS

AgentFactory = Callable[[], Agent]
ENTRY_POINT_GROUP = "tether.agents"


class AgentRegistry:
    """Resolves agent names to agents; each name's agent is built once and reused."""

    def __init__(self, factories: dict[str, AgentFactory] | None = None) -> None:
        self._factories: dict[str, AgentFactory] = dict(factories or {})
        self._built: dict[str, Agent] = {}
        self._lock = threading.Lock()
        self._wrap: Callable[[ModelClient], ModelClient] | None = None

    @classmethod
    def default(
        cls, modules: Iterable[str] = (), *, entry_points_enabled: bool = True
    ) -> AgentRegistry:
        """Built-ins + entry points + the given modules."""
        registry = cls({**DEMO_AGENTS, **MODEL_AGENTS})
        if entry_points_enabled:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                registry.register(ep.name, ep.load())
        for module in modules:
            registry.load_module(module)
        return registry

    def register(self, name: str, factory: AgentFactory) -> None:
        """Register (or replace) an agent factory."""
        with self._lock:
            self._factories[name] = factory
            self._built.pop(name, None)

    def load_module(self, module_name: str) -> None:
        """Import ``module_name`` and register its ``TETHER_AGENTS``."""
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(
                f"agent module {module_name!r} cannot be imported ({exc}); "
                "check TETHER_AGENT_MODULES"
            ) from exc
        agents = getattr(module, "TETHER_AGENTS", None)
        if not isinstance(agents, dict):
            raise ConfigurationError(
                f"agent module {module_name!r} has no TETHER_AGENTS dict of name -> factory"
            )
        for name, factory in agents.items():
            self.register(name, factory)

    def wrap_models(self, wrap: Callable[[ModelClient], ModelClient]) -> None:
        """Put every agent's model behind ``wrap`` (a worker's fleet-wide model limits), for
        the agents built from now on."""
        with self._lock:
            self._wrap = wrap
            self._built.clear()

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._factories)

    def get(self, name: str) -> Agent:
        """The agent called ``name``.

        Raises:
            UnknownAgent: no such name.
        """
        with self._lock:
            agent = self._built.get(name)
            if agent is not None:
                return agent
            factory = self._factories.get(name)
            if factory is None:
                shown = name if len(name) <= 60 else name[:60] + "..."
                raise UnknownAgent(
                    f"unknown agent {shown!r}; known agents: {', '.join(sorted(self._factories))}. "
                    "Register it with TETHER_AGENT_MODULES or the 'tether.agents' entry point"
                )
            agent = factory()
            if self._wrap is not None:
                agent.model = self._wrap(agent.model)
            self._built[name] = agent
            return agent
