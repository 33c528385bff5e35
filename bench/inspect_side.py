"""P11's baseline, run in its own process: Inspect AI's ``eval()`` on the same dataset and epochs
as Tether's batch, with the ``mockllm`` provider answering both the solver and a model-graded
scorer (``model_graded_qa`` on ``mockllm/model``).

    python -m bench.inspect_side CASES EPOCHS MAX_SAMPLES LOG_DIR

prints one JSON line: the wall time of ``eval()`` alone (the import is not counted), the samples
it ran and how many it scored.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _replies(text: str, count: int) -> list[Any]:
    """``count`` replies (mockllm reads its outputs into a list: an endless generator would
    never end)."""
    from inspect_ai.model import ModelOutput, ModelUsage

    usage = ModelUsage(input_tokens=10, output_tokens=3, total_tokens=13)
    return [
        ModelOutput.from_content("mockllm/model", text).model_copy(update={"usage": usage})
        for _ in range(count)
    ]


def main(argv: list[str]) -> None:
    """Run the eval and print its figures."""
    cases, epochs, max_samples, log_dir = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import model_graded_qa
    from inspect_ai.solver import generate

    # replies with their usage set: mockllm would otherwise count tokens with tiktoken, which
    # downloads its encoding (no network here); Tether's test server reports usage too
    solver_model = get_model("mockllm/model", custom_outputs=_replies("the answer", cases * epochs))
    judge_model = get_model("mockllm/judge", custom_outputs=_replies("GRADE: C", cases * epochs))

    dataset = MemoryDataset(
        [Sample(id=f"c{i}", input=f"question {i}", target="the answer") for i in range(cases)]
    )
    task = Task(
        dataset=dataset, solver=generate(), scorer=model_graded_qa(model=judge_model), epochs=epochs
    )
    started = time.perf_counter()
    (log,) = eval(
        task,
        model=solver_model,
        log_dir=log_dir,
        display="none",
        max_samples=max_samples,
        max_connections=max_samples,
    )
    wall_s = time.perf_counter() - started
    samples = log.samples or []
    scored = sum(1 for s in samples if s.scores)
    correct = sum(1 for s in samples if s.scores and any(v.value == "C" for v in s.scores.values()))
    print(
        json.dumps(
            {
                "wall_s": wall_s,
                "samples": len(samples),
                "scored": scored,
                "correct": correct,
                "status": log.status,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
