"""Tool idempotency keys name the request, not the run that applies it.

A run lost with its Redis record (a Redis without persistence restarted, or rewound to an older
snapshot) is submitted again under the same request id, as the docs advise, and gets a new run
id: keys derived from the run id made every call it had already made run again under a new key,
past any tool that deduplicates by key. Keys come from tenant, session, request, step and the
call's position; a run without a request id (in-process) keeps its run id in that place.
"""

from __future__ import annotations

from tether import Agent, ModelResponse, ScriptedModel, tool
from tether.runtime.tools import ToolContext

SEEN: list[str] = []


@tool
def pay(amount: int, context: ToolContext) -> str:
    """Pay ``amount``; records the key it ran under."""
    SEEN.append(context.idempotency_key)
    return f"paid {amount}"


def _agent() -> Agent:
    model = ScriptedModel(
        [ModelResponse.call("c1", "pay", '{"amount": 5}'), ModelResponse.final("done")]
    )
    return Agent(model, tools=[pay])


def test_a_run_submitted_again_under_its_request_id_runs_its_calls_under_the_same_keys() -> None:
    SEEN.clear()
    for run_id in ("run-first", "run-again"):  # Redis lost the first; the same request again
        session = _agent().new_session("s-keys", tenant="acme")
        assert session.run("pay 5", run_id=run_id, request_id="req-pay-5").status == "COMPLETED"
    assert len(SEEN) == 2 and SEEN[0] == SEEN[1]


def test_other_requests_and_other_places_get_other_keys() -> None:
    base = ToolContext("acme", "s-keys", "run-1", 2, "c1", position=0, request_id="req-1")
    others = [
        ToolContext("acme", "s-keys", "run-1", 2, "c1", position=0, request_id="req-2"),
        ToolContext("acme", "s-keys", "run-1", 3, "c1", position=0, request_id="req-1"),
        ToolContext("acme", "s-keys", "run-1", 2, "c1", position=1, request_id="req-1"),
        ToolContext("bob", "s-keys", "run-1", 2, "c1", position=0, request_id="req-1"),
    ]
    assert len({base.idempotency_key, *(o.idempotency_key for o in others)}) == 5
    same_request = ToolContext("acme", "s-keys", "run-9", 2, "zz", position=0, request_id="req-1")
    assert same_request.idempotency_key == base.idempotency_key  # another run, same request
    # no request id: the run id stands in for it, as before (in-process runs)
    alone = ToolContext("acme", "s-keys", "req-1", 2, "c1", position=0)
    assert alone.idempotency_key == base.idempotency_key
