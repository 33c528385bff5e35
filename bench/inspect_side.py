"""P11's baseline, run in its own process: Inspect AI's ``eval()`` on the same dataset and epochs
as Tether's batch, written as Inspect's own docs write a model-graded eval: the ``generate()``
solver and the ``model_graded_qa()`` scorer, both models on Inspect's ``openai`` provider talking
HTTP to the same OpenAI-compatible server as Tether's workers (P11 starts it; its URL and key
come in the environment as ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, which the provider reads).

    python -m bench.inspect_side CASES EPOCHS MAX_SAMPLES LOG_DIR

prints one JSON line: the wall time of ``eval()`` alone (the import is not counted), the samples
it ran and how many it scored correct.

Why not ``mockllm``: its ``custom_outputs`` must be a finite list, one reply per call, and that
list is part of the judge model's arguments, which Inspect records with every sample's score
event; a list of n replies per sample made Inspect's time grow with n² (758 KB per sample at
400 x 3). Over HTTP each model is a name, as a user would write it, and every model call of
both sides costs a real request to one server.
"""

from __future__ import annotations

import json
import sys
import time

#: the model names the server answers for Inspect (P11 sets their default replies)
SOLVER_MODEL = "inspect-model"
JUDGE_MODEL = "inspect-judge"
#: what they answer: the reference answer, and model_graded_qa's "correct" grade
ANSWER = "the answer"
GRADE = "GRADE: C"


def main(argv: list[str]) -> None:
    """Run the eval and print its figures."""
    cases, epochs, max_samples, log_dir = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import model_graded_qa
    from inspect_ai.solver import generate

    dataset = MemoryDataset(
        [Sample(id=f"c{i}", input=f"question {i}", target=ANSWER) for i in range(cases)]
    )
    task = Task(
        dataset=dataset,
        solver=generate(),
        scorer=model_graded_qa(model=f"openai/{JUDGE_MODEL}"),
        epochs=epochs,
    )
    started = time.perf_counter()
    (log,) = eval(
        task,
        model=f"openai/{SOLVER_MODEL}",
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
