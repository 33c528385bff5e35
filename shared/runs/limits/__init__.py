"""Fleet-wide model limits: per model (or named endpoint), requests per minute, tokens per
minute and calls in flight, enforced by one Redis script for every worker of the fleet, with a
429's ``Retry-After`` pausing that model for all of them.

:mod:`tether.settings.limits` reads the limits (``TETHER_MODEL_LIMITS``);
:mod:`~tether.runs.limits.base` is the seam (:class:`ModelBudget`), with an in-memory and a
Redis member; :mod:`~tether.runs.limits.gate` wraps a model client so each call waits for its
budget.
"""
