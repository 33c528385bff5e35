"""``--scorer`` values to scorers, checked before any run starts.

A value is a built-in name with optional ``key=value`` options, or a Python import path:

- ``exact``, ``contains``, ``regex``, ``includes-any``, ``numeric:tol=0.01,rel=0.001``,
  ``json``, ``json:field=answer.value``, ``json:schema=schema.json``, ``f1:threshold=0.8``;
- ``judge``, ``judge:rubric=rubric.txt,model=gpt-4o-mini,threshold=0.5`` (model-graded;
  ``verdict=text`` for an endpoint that refuses tools: the verdict is then asked for in text);
- ``mypkg.scorers:grade`` (any callable ``grade(case, output, events)``), with options after a
  second colon: ``mypkg.scorers:grade:threshold=0.5``.

Every scorer takes ``threshold`` (a score passes at or above it; default 1.0). A value that does
not parse, an unknown, repeated or empty option, a ``tol``/``rel`` that is not a finite number
>= 0, a ``threshold`` outside [0, 1], or an import path that does not import is refused with
:class:`~tether.errors.InvalidInput` naming the value, before anything is submitted.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import InvalidInput
from tether.producer.ops.batch.scoring.base import Sample, Score, Scorer
from tether.producer.ops.batch.scoring.builtin import (
    BuiltinFn,
    contains,
    exact,
    f1,
    includes_any,
    json_match,
    numeric,
    regex,
)

if TYPE_CHECKING:
    from tether.models.base import ModelClient
    from tether.settings.prices import ModelPrices

#: Built-in scorers: name -> (factory taking the options, options it takes besides threshold).
_BUILTINS: dict[str, tuple[Callable[..., BuiltinFn], frozenset[str]]] = {
    "exact": (lambda: exact, frozenset()),
    "contains": (lambda: contains, frozenset()),
    "regex": (lambda: regex, frozenset()),
    "includes-any": (lambda: includes_any, frozenset()),
    "numeric": (numeric, frozenset({"tol", "rel"})),
    "json": (json_match, frozenset({"field", "schema"})),
    "f1": (lambda: f1, frozenset()),
}
_FLOAT_OPTIONS = frozenset({"tol", "rel", "threshold"})
_TOLERANCES = frozenset({"tol", "rel"})  # finite and >= 0 (threshold: in [0, 1])
JUDGE = "judge"
BUILTIN_NAMES = (*_BUILTINS, JUDGE)

#: Builds the judge's model client when a judge is asked for (from the producer's settings).
ClientFactory = Callable[[], "tuple[ModelClient, str]"]


def _options(value: str, text: str, allowed: frozenset[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed | {"threshold"}:
            names = ", ".join(sorted(allowed | {"threshold"}))
            raise InvalidInput(f"--scorer {value!r}: unknown option {part!r}; options: {names}")
        if key in options:
            raise InvalidInput(f"--scorer {value!r}: option {key} is given twice; give it once")
        if key in _FLOAT_OPTIONS:
            try:
                options[key] = float(raw)
            except ValueError:
                raise InvalidInput(
                    f"--scorer {value!r}: {key} must be a number, got {raw!r}"
                ) from None
            if key in _TOLERANCES and not (math.isfinite(options[key]) and options[key] >= 0):
                raise InvalidInput(
                    f"--scorer {value!r}: {key} must be a finite number >= 0, got {raw.strip()!r}"
                )
        elif not raw.strip():
            raise InvalidInput(f"--scorer {value!r}: option {key} is empty; give it a value")
        else:
            options[key] = raw.strip()
    threshold = options.get("threshold", 1.0)
    if not 0.0 <= threshold <= 1.0:
        raise InvalidInput(f"--scorer {value!r}: threshold must be in [0, 1], got {threshold}")
    return options


def builtin_scorer(value: str) -> Scorer:
    """A built-in scorer from its ``--scorer`` value (not the judge)."""
    name, _, text = value.partition(":")
    factory, allowed = _BUILTINS[name]
    options = _options(value, text, allowed)
    threshold = options.pop("threshold", 1.0)
    return Scorer(name=value, fn=factory(**options), threshold=threshold)


def judge_scorer(
    value: str, client_factory: ClientFactory | None, prices: ModelPrices | None = None
) -> Scorer:
    """The judge from its ``--scorer`` value; its model client comes from ``client_factory``,
    and its tokens are priced at ``prices`` (the producer's ``TETHER_MODEL_PRICES``)."""
    from tether.producer.ops.batch.scoring.judge import Judge, load_rubric

    options = _options(value, value.partition(":")[2], frozenset({"rubric", "model", "verdict"}))
    channel = options.get("verdict", "tool")
    if channel not in ("tool", "text"):
        raise InvalidInput(
            f"--scorer {value!r}: verdict must be 'tool' (the submit_verdict tool) or 'text' "
            f"(for an endpoint that refuses tools), got {channel!r}"
        )
    rubric = load_rubric(options.get("rubric"))
    if client_factory is None:
        raise InvalidInput(f"--scorer {value!r} needs a model client; none was configured")
    client, default_model = client_factory()
    judge = Judge(client, options.get("model") or default_model, rubric, prices, channel)
    return Scorer(
        name=value,
        fn=judge,
        threshold=options.get("threshold", 1.0),
        needs_target=False,
        slow=True,
    )


def import_scorer(value: str) -> Scorer:
    """A custom scorer ``module.path:function[:options]``, imported now.

    Raises:
        InvalidInput: the module or the attribute does not import, or is not callable.
    """
    module_name, _, rest = value.partition(":")
    attr, _, text = rest.partition(":")
    if not module_name or not attr:
        raise InvalidInput(
            f"--scorer {value!r} is neither a built-in scorer ({', '.join(BUILTIN_NAMES)}) nor "
            "an import path module.path:function"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure: the batch must not start
        raise InvalidInput(
            f"--scorer {value!r}: module {module_name!r} does not import "
            f"({type(exc).__name__}: {exc}); check the path and PYTHONPATH"
        ) from exc
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise InvalidInput(f"--scorer {value!r}: module {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise InvalidInput(f"--scorer {value!r}: {attr!r} is not callable")
    options = _options(value, text, frozenset())
    custom: Callable[..., Any] = fn

    def call(sample: Sample) -> Score:
        return as_score(custom(sample.case, sample.output, sample.events))

    return Scorer(
        name=value, fn=call, threshold=options.get("threshold", 1.0), needs_target=False, slow=True
    )


def scores_with_regex(scorers: Sequence[Scorer]) -> bool:
    """Whether the ``regex`` scorer is among ``scorers``: then every case's ``expected`` is a
    pattern, checked when the cases are validated (``regex_expected`` of
    :func:`~tether.producer.ops.batch.cases.scan_cases`)."""
    return any(s.fn is regex for s in scorers)


def as_score(result: Any) -> Score:
    """A custom scorer's answer as a :class:`Score` (a bool or a number in [0, 1] is fine)."""
    if isinstance(result, Score):
        return result
    if isinstance(result, bool):
        return Score(value=float(result))
    if isinstance(result, int | float):
        return Score(value=float(result))
    raise TypeError(f"a scorer must return a Score, a bool or a float, got {type(result).__name__}")


def resolve_scorers(
    values: Sequence[str | Scorer],
    *,
    client_factory: ClientFactory | None = None,
    prices: ModelPrices | None = None,
) -> list[Scorer]:
    """The scorers of a batch, every value checked (see the module docstring); a judge prices
    its tokens at ``prices``.

    Raises:
        InvalidInput: a value that does not parse or import, or a name given twice.
    """
    scorers: list[Scorer] = []
    for value in values:
        if isinstance(value, Scorer):
            scorers.append(value)
            continue
        name = value.partition(":")[0]
        if name in _BUILTINS:
            scorers.append(builtin_scorer(value))
        elif name == JUDGE:
            scorers.append(judge_scorer(value, client_factory, prices))
        else:
            scorers.append(import_scorer(value))
    names = [s.name for s in scorers]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidInput(f"--scorer {repeated[0]!r} is given twice; give each scorer once")
    return scorers


__all__ = [
    "BUILTIN_NAMES",
    "ClientFactory",
    "as_score",
    "builtin_scorer",
    "import_scorer",
    "judge_scorer",
    "resolve_scorers",
    "scores_with_regex",
]
