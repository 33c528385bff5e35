"""#29 item 6: ``tether run`` and ``tether submit`` take ``--durability`` (a run option), on the
shared stack's workers; a value that is no durability is one error line naming it."""

from __future__ import annotations

import json

from tests.support.stack import Stack, unique
from tests.test_cli import ok, one_error_line, parallel


def test_run_and_submit_take_durability(live_stack: Stack) -> None:
    ran, submitted, bad = parallel(
        live_stack.env,
        ["run", unique("cli-dur"), "remember x", "--agent", "notes", "--durability", "step",
         "--json"],
        ["submit", unique("cli-dur"), "remember y", "--agent", "notes", "--durability", "run",
         "--json"],
        ["submit", unique("cli-dur"), "hi", "--agent", "echo", "--durability", "sometimes"],
    )  # fmt: skip
    producer = live_stack.producer
    for result, durability in ((ran, "step"), (submitted, "run")):
        run_id = json.loads(ok(result).stdout)["run_id"]
        record = producer.record(run_id)
        assert record is not None and record.request is not None
        assert record.request.durability == durability
    one_error_line(bad, "durability", "'run' or 'step'")
