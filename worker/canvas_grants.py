"""The tenant's word for a chain's later steps (TETHER_REGISTERED_RUNS_ONLY, the default).

Celery applies a chain's second step in the worker that ran the first, from the message's
body, with the worker's credential: registering it there would act for whatever tenant that
body names. So when a process applies a chain's first ``tether_run`` signature (with its
tenant's credential), it writes a **grant** for every later ``tether_run`` step into the
tenant's own keyspace, one key per step in the step's session slot
(:meth:`~tether.keys.RedisKeys.canvas_grant`): the step's session, its run options and its own
input (if any), and which step comes before it. Celery freezes every step's task id before it
sends the first, so the ids are known then.

The worker that applies a later step registers it from its grant, never from the message: the
options are the grant's, and the input is the grant's own or the previous step's output as that
step's run record holds it (in the tenant's keyspace). No grant, or a grant for another
session, and the step is refused. A tenant can write grants only under its own keyspace, so it
can at most trigger a step the same tenant granted, with that tenant's own previous output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from tether.errors import ConfigurationError, RunLost
from tether.runs.contract import CANVAS_RUN_TASK, RunRef, canvas_run_id
from tether.runs.options import RUN_OPTIONS
from tether.runs.queue.redis import RedisRunQueue
from tether.runtime.redaction import mask_input, mask_metadata


class ChainGrant(BaseModel):
    """One later step of a chain, as the applying tenant granted it (stored JSON, version 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    tenant: str
    session_id: str
    task_id: str
    options: dict[str, Any]
    """The step's run options (``agent`` and the rest), masked as inputs are."""
    input: str | None = None
    """The step's own input; None: the previous step's output."""
    previous_session_id: str
    previous_task_id: str


def _step_call(step: dict[str, Any]) -> tuple[str | None, str | None, dict[str, Any]]:
    """A chain step's session, own input and run options, from its signature."""
    args, kwargs = list(step.get("args") or ()), dict(step.get("kwargs") or {})
    named = dict(zip(("session_id", "input"), args, strict=False)) | kwargs
    options = {k: v for k, v in named.items() if k in RUN_OPTIONS and k != "input"}
    if "metadata" in options:
        options["metadata"] = mask_metadata(options["metadata"])
    session_id, text = named.get("session_id"), named.get("input")
    return (
        session_id if isinstance(session_id, str) else None,
        mask_input(text) if isinstance(text, str) else None,
        options,
    )


def grants_for(
    tenant: str, first_session: str, first_task: str, chain: Sequence[Any]
) -> list[ChainGrant]:
    """The grants of a chain's later ``tether_run`` steps (``chain`` as Celery passes it to the
    first step: the rest of the chain, last step first), up to the first step of another task
    (whose output is no run's)."""
    grants: list[ChainGrant] = []
    previous = (first_session, first_task)
    for step in reversed(list(chain)):
        if not isinstance(step, dict) or step.get("task") != CANVAS_RUN_TASK:
            break
        task_id = (step.get("options") or {}).get("task_id")
        session_id, text, options = _step_call(step)
        if not isinstance(task_id, str) or session_id is None:
            break
        grants.append(
            ChainGrant(
                tenant=tenant,
                session_id=session_id,
                task_id=task_id,
                options=options,
                input=text,
                previous_session_id=previous[0],
                previous_task_id=previous[1],
            )
        )
        previous = (session_id, task_id)
    return grants


def write_grants(runs: RedisRunQueue, grants: Sequence[ChainGrant]) -> None:
    """Store ``grants`` in their tenants' keyspaces (the applying process's credential), for as
    long as run records live."""
    if not grants:
        return
    pipe = runs.client.pipeline(transaction=False)
    for grant in grants:
        key = runs.keys.canvas_grant(grant.tenant, grant.session_id, grant.task_id)
        pipe.set(key, grant.model_dump_json(), ex=runs.result_ttl_s)
    pipe.execute()


def granted_step(runs: RedisRunQueue, tenant: str, session_id: str, task_id: str) -> ChainGrant:
    """The grant of the chain step ``task_id``, which a worker is about to register.

    Raises:
        ConfigurationError: no grant (the chain was not applied by its tenant's process), or one
            that does not read.
    """
    raw = runs.client.get(runs.keys.canvas_grant(tenant, session_id, task_id))
    try:
        grant = ChainGrant.model_validate_json(raw) if raw is not None else None
    except ValidationError:
        grant = None
    if grant is None or (grant.tenant, grant.session_id, grant.task_id) != (
        tenant,
        session_id,
        task_id,
    ):
        raise ConfigurationError(
            f"chain step {task_id} (tenant {tenant!r}, session {session_id!r}) was not granted "
            "by its tenant: apply the chain from a process holding that tenant's credential "
            "(its first step grants the later ones; TETHER_REGISTERED_RUNS_ONLY)"
        )
    return grant


def granted_input(runs: RedisRunQueue, grant: ChainGrant) -> str:
    """The input of a granted step: its own, or the previous step's output as that run's
    record holds it (never the message's copy).

    Raises:
        RunLost: the previous step has no finished record.
    """
    if grant.input is not None:
        return grant.input
    ref = RunRef(grant.tenant, grant.previous_session_id, canvas_run_id(grant.previous_task_id))
    view = runs.get(ref)
    output = view.result.output if view is not None and view.result is not None else None
    if output is None:
        raise RunLost(
            f"chain step {grant.task_id}: the previous step's run {ref.run_id} has no recorded "
            "output to pass on (it is unfinished, failed without output, or expired)"
        )
    return output
