"""Two small finished batches of one cases file on the test stack, for the report and export
tests: A on the ``calculator`` agent (tool calls; one case meant to fail), B on ``echo`` (which
regresses the arithmetic cases). Each runs 2 epochs with the ``contains`` scorer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.stack import Stack, unique
from tether.producer.ops.batch import run_batch

EPOCHS = 2


@dataclass(frozen=True)
class FinishedBatches:
    """The results files of batches A (calculator) and B (echo), and their case ids."""

    a: Path
    b: Path
    ids: list[str]


def cases(tag: str) -> list[dict[str, object]]:
    """Four cases: three sums the calculator gets right, one whose expected text is wrong."""
    return [
        {"id": f"{tag}-add", "input": "2 + 3", "expected": "5", "tags": ["math", "easy"]},
        {"id": f"{tag}-mul", "input": "7 * 6", "expected": "42", "tags": ["math"]},
        {"id": f"{tag}-sub", "input": "10 - 4", "expected": "6", "tags": ["math", "easy"]},
        {"id": f"{tag}-wrong", "input": "1 + 1", "expected": "three", "tags": ["trick"]},
    ]


def finish_batches(stack: Stack, folder: Path) -> FinishedBatches:
    """Run A and B to the end on the stack's workers."""
    stack.ensure_workers()
    tag = unique("rep")
    data = cases(tag)
    path = folder / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in data))
    outs = []
    for agent in ("calculator", "echo"):
        out = folder / f"{agent}.results.jsonl"
        run_batch(
            stack.producer,
            path,
            agent=agent,
            concurrency=4,
            out=out,
            epochs=EPOCHS,
            scorers=["contains"],
        )
        outs.append(out)
    return FinishedBatches(outs[0], outs[1], [str(c["id"]) for c in data])


__all__ = ["EPOCHS", "FinishedBatches", "cases", "finish_batches"]
