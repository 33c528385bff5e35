"""The model-graded scorer: a judge model reads a rubric, the case and the output, and answers.

The judge's calls go through Tether's own model client (:func:`tether.models.openai.
model_from_settings`, configured by ``TETHER_OPENAI_*``), so they share its endpoint, retries and
key scrubbing. The judge must answer with a JSON object ``{"reasoning": "...", "score": 0.0-1.0}``
(anywhere in its reply: the last object with a score or verdict counts, so a draft before the
final answer and prose with braces around it are fine; a ```json fence is fine);
``"verdict": "pass"`` or ``"fail"`` may stand in for the score. A reply that does not parse is a
scoring error of that case, never a crash. The reasoning is the score's explanation; the
verdict, the model and the tokens it spent (priced at the producer's ``TETHER_MODEL_PRICES``
when they name the judge's model) are stored with the case.

The rubric template names the case's parts as ``{input}``, ``{output}`` and ``{expected}``; those
three are replaced and nothing else is (so JSON braces in a rubric are safe).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.items import UserMessage
from tether.errors import InvalidInput
from tether.models.base import ModelRequest
from tether.producer.ops.batch.scoring.base import Sample, Score, ScoreUsage

if TYPE_CHECKING:
    from tether.core.events import Usage
    from tether.models.base import ModelClient
    from tether.settings.prices import ModelPrices

DEFAULT_RUBRIC = """You are grading an AI assistant's answer.

[Task]
{input}

[Reference answer]
{expected}

[Assistant's answer]
{output}

Grade the assistant's answer against the reference answer: is it correct and complete?
Reply with one JSON object and nothing else:
{"reasoning": "<one or two sentences>", "score": <a number from 0.0 (wrong) to 1.0 (right)>}
"""

SYSTEM_PROMPT = "You are a strict, fair grader. You always answer with one JSON object."
_DECODER = json.JSONDecoder()
_VERDICTS = {"pass": 1.0, "correct": 1.0, "fail": 0.0, "incorrect": 0.0}


class JudgeReplyInvalid(ValueError):
    """The judge's reply does not hold a usable verdict (a scoring error for the case).

    ``usage`` is what the unusable call cost, kept with the case's scoring error.
    """

    def __init__(self, message: str, usage: ScoreUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage


def load_rubric(path: str | None) -> str:
    """The rubric template in ``path`` (None: :data:`DEFAULT_RUBRIC`)."""
    if path is None:
        return DEFAULT_RUBRIC
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(
            f"judge rubric {path!r} cannot be read ({exc.strerror}); pass an existing text file"
        ) from exc
    if "{output}" not in text:
        raise InvalidInput(
            f"judge rubric {path!r} never names {{output}}: the judge would not see the answer"
        )
    return text


def render(template: str, sample: Sample) -> str:
    """The rubric with ``{input}``, ``{output}`` and ``{expected}`` filled in."""
    case = sample.case
    expected = case.expected
    parts = {
        "{input}": "\n".join(case.turns),
        "{output}": sample.output or "",
        "{expected}": ""
        if expected is None
        else (expected if isinstance(expected, str) else json.dumps(expected)),
    }
    return re.sub(r"\{input\}|\{output\}|\{expected\}", lambda m: parts[m.group(0)], template)


def _last_object(text: str) -> dict[str, Any]:
    """The last JSON object in ``text`` that has a ``score`` or a ``verdict`` (else the last
    object). Each ``{`` is tried as the start of an object; a decoded object is skipped whole
    (an object nested in it is not a reply of its own), text that does not decode is prose.

    Raises:
        JudgeReplyInvalid: no ``{`` starts a JSON object.
    """
    objects: list[dict[str, Any]] = []
    problem: str | None = None
    start = text.find("{")
    if start < 0:
        raise JudgeReplyInvalid(f"the judge's reply holds no JSON object: {text[:200]!r}")
    while start >= 0:
        try:
            doc, end = _DECODER.raw_decode(text, start)
        except ValueError as exc:
            problem = problem or str(exc)
            start = text.find("{", start + 1)
            continue
        except RecursionError:
            problem = problem or "nested too deeply"
            start = text.find("{", start + 1)
            continue
        objects.append(doc)  # a decode from "{" is always an object
        start = text.find("{", end)
    graded = [o for o in objects if "score" in o or "verdict" in o]
    if graded or objects:
        return (graded or objects)[-1]
    raise JudgeReplyInvalid(f"the judge's reply is not valid JSON ({problem}): {text[:200]!r}")


def parse_reply(text: str | None) -> tuple[float, str, str | None]:
    """The score, reasoning and verdict in a judge's reply.

    Raises:
        JudgeReplyInvalid: no JSON object, or one without a score in [0, 1] or a known verdict.
    """
    if not text:
        raise JudgeReplyInvalid("the judge's reply is empty")
    doc = _last_object(text)
    verdict = doc.get("verdict")
    score = doc.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        if isinstance(verdict, str) and verdict.lower() in _VERDICTS:
            score = _VERDICTS[verdict.lower()]
        else:
            raise JudgeReplyInvalid(f"the judge's reply has no numeric 'score': {text[:200]!r}")
    if not 0.0 <= float(score) <= 1.0:
        raise JudgeReplyInvalid(f"the judge's score {score} is outside [0, 1]")
    reasoning = doc.get("reasoning")
    return (
        float(score),
        str(reasoning) if reasoning is not None else "",
        (str(verdict) if verdict is not None else None),
    )


class Judge:
    """A model-graded scorer (``--scorer judge:rubric=FILE,model=NAME,threshold=0.5``).

    Args:
        client: the model client (built from the producer's settings when the batch starts).
        model: the judge model's name.
        rubric: the rubric template.
        prices: the producer's price table, to price the judge's tokens (None: unpriced).
    """

    def __init__(
        self, client: ModelClient, model: str, rubric: str, prices: ModelPrices | None = None
    ) -> None:
        self.client = client
        self.model = model
        self.rubric = rubric
        self.prices = prices

    def _usage(self, usage: Usage) -> ScoreUsage:
        # priced here, where the judge's model is known: the results line keeps the cost, so
        # the summary, the report and compare read it without the producer's settings
        cost = self.prices.cost_usd(self.model, usage) if self.prices is not None else None
        return ScoreUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            cost_usd=cost,
        )

    def __call__(self, sample: Sample) -> Score:
        request = ModelRequest(
            model=self.model,
            items=(UserMessage(content=render(self.rubric, sample)),),
            system_prompt=SYSTEM_PROMPT,
        )
        response = self.client.complete(request)
        usage = self._usage(response.usage)
        try:
            value, reasoning, verdict = parse_reply(response.text)
        except JudgeReplyInvalid as exc:
            raise JudgeReplyInvalid(f"{exc} (judge {self.model})", usage) from None
        metadata: dict[str, Any] = {"model": self.model, "reply": (response.text or "")[:2000]}
        if verdict is not None:
            metadata["verdict"] = verdict
        return Score(value=value, explanation=reasoning, metadata=metadata, usage=usage)


__all__ = ["DEFAULT_RUBRIC", "Judge", "JudgeReplyInvalid", "load_rubric", "parse_reply", "render"]
