"""The web console: ``tether console``.

Server-rendered pages (Starlette, Jinja2, uvicorn; no Node build step) over a deployment's
Redis and store: sessions, a session's timeline, runs, workers, live updates by server-sent
events, Prometheus ``/metrics``, and (with ``--actions``) cancel, approve, reject, answer and
fork. Every view is scoped to one tenant. Needs the ``console`` extra
(``pip install 'tether[console]'``); :func:`available` says whether it is installed.
"""

from __future__ import annotations

from importlib.util import find_spec

#: The third-party modules the console needs (the ``console`` extra).
REQUIRED_MODULES = ("starlette", "uvicorn", "jinja2", "sse_starlette")


def available() -> bool:
    """True when the console's dependencies are installed."""
    return all(find_spec(name) is not None for name in REQUIRED_MODULES)
