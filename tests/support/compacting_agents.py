"""An assistant on the configured model (``TETHER_OPENAI_*``, like the built-in ``assistant``)
that compacts its memory with :class:`~tether.runtime.compaction.LlmCompactPolicy` above two
items, the summary asked of ``summary-model`` on the same endpoint: for the usage tests of
billed calls without a ``MODEL_RESPONSE`` on a worker (loaded through TETHER_AGENT_MODULES)."""

from __future__ import annotations

from tether import Agent
from tether.models.openai import model_from_settings
from tether.runtime.compaction import LlmCompactPolicy
from tether.runtime.options import AgentOptions
from tether.settings import load_settings

SUMMARY_MODEL = "summary-model"


def compacting() -> Agent:
    settings = load_settings()
    model = model_from_settings(settings)
    policy = LlmCompactPolicy(model, SUMMARY_MODEL, max_items=2)
    return Agent(
        model,
        settings.openai_model,
        name="compacting",
        options=AgentOptions(compact_policy=policy),
    )


TETHER_AGENTS = {"compacting": compacting}
