"""``tether approve | reject | answer``: settle a WAITING run's pending calls, from any shell."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.producer.ops.cli.runs import (
    AgentOption,
    SessionArg,
    WaitOption,
    print_outcome,
)
from tether.producer.ops.cli.support import JsonOption, TenantOption, cli_producer

CallIdArg = Annotated[
    str, typer.Argument(metavar="CALL_ID", help="The pending call (see the WAITING run's result).")
]


def register(app: typer.Typer) -> None:
    """Add the human-in-the-loop commands to ``app``."""
    app.command()(approve)
    app.command()(reject)
    app.command()(answer)


def approve(
    session_id: SessionArg,
    call_id: CallIdArg,
    agent: AgentOption,
    tenant: TenantOption = None,
    wait_s: WaitOption = None,
    as_json: JsonOption = False,
) -> None:
    """Approve a pending call: the tool runs, the run goes on; prints the answer."""

    with cli_producer(broker=True, ids={"session id": session_id, "tenant": tenant}) as producer:
        handle = producer.approve(session_id, call_id, agent=agent, tenant=tenant)
        print_outcome(handle, wait_s, as_json)


def reject(
    session_id: SessionArg,
    call_id: CallIdArg,
    agent: AgentOption,
    reason: Annotated[
        str, typer.Option("--reason", help="What the model is told.")
    ] = "rejected by a person",
    tenant: TenantOption = None,
    wait_s: WaitOption = None,
    as_json: JsonOption = False,
) -> None:
    """Reject a pending call: the model sees the reason, the run goes on; prints the answer."""

    with cli_producer(broker=True, ids={"session id": session_id, "tenant": tenant}) as producer:
        handle = producer.reject(session_id, call_id, reason, agent=agent, tenant=tenant)
        print_outcome(handle, wait_s, as_json)


def answer(
    session_id: SessionArg,
    call_id: CallIdArg,
    output: Annotated[str, typer.Argument(metavar="OUTPUT", help="The call's output.")],
    agent: AgentOption,
    tenant: TenantOption = None,
    wait_s: WaitOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give the output of a call that waits for one; the run goes on; prints the answer."""

    with cli_producer(broker=True, ids={"session id": session_id, "tenant": tenant}) as producer:
        handle = producer.submit_tool_output(
            session_id, call_id, output, agent=agent, tenant=tenant
        )
        print_outcome(handle, wait_s, as_json)
