"""The run options' names and descriptions, without pydantic.

:class:`tether.runs.options.RunOptions` declares the options and takes its field descriptions
from here; the CLI builds its help from the same text. ``tether --help`` imports this module and
not the model: building the model costs about 80 ms of a 0.3 s budget.
"""

from __future__ import annotations

#: The most JSON a run's metadata may take.
MAX_METADATA_BYTES = 16_384

#: Each run option's description, by option name (the order of RunOptions' fields).
OPTION_HELP: dict[str, str] = {
    "agent": "The agent to run, by its registered name (e.g. notes).",
    "tenant": "The tenant the session belongs to (default: the producer's, TETHER_TENANT).",
    "request_id": "Idempotency key: submitted again, it returns the first run, applied once "
    "(default: the run id).",
    "metadata": "JSON values the run records in the session's metadata (at most "
    f"{MAX_METADATA_BYTES} bytes of JSON).",
    "timeout_s": "The run's own time limit in seconds (default and cap: the worker's "
    "TETHER_MAX_RUN_S).",
    "on_busy": "When the session is busy: enqueue (default), reject, interrupt (stop the "
    "running run at its next step, keep its steps) or rollback (stop it, discard its steps).",
    "durability": "Override the agent's durability for this run: step checkpoints at every "
    "step boundary (default: the agent's AgentOptions.durability).",
    "webhook": "An http(s) URL called, signed, when the run completes, fails or waits for "
    "a person (default: the tenant's TETHER_WEBHOOK_URLS entry, if any).",
}

#: The option names (a keyword argument outside them is refused with a TypeError).
RUN_OPTIONS = frozenset(OPTION_HELP)
