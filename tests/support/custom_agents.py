"""A module of agents for registry tests (loaded through TETHER_AGENT_MODULES)."""

from tether import Agent, ModelResponse, ScriptedModel


def shout() -> Agent:
    """Answers in capitals."""
    model = ScriptedModel(
        responder=lambda request: ModelResponse.final(
            str(request.items[-1].model_dump().get("content", "")).upper()
        )
    )
    return Agent(model, name="shout")


TETHER_AGENTS = {"shout": shout}
