"""The baselines: a tiny Celery app a user would write instead of using Tether.

- ``bench.noop``: does nothing, stores no result (bare Celery bulk submit: fire and forget).
- ``bench.ping``: returns its argument through the result backend (bare Celery round trip).
- ``bench.handwritten``: GET the session's JSON blob from S3, append the input and a scripted
  answer, PUT it back, return the answer. No lease, no events, no idempotency: concurrent runs
  of one session can lose updates, a redelivered message applies twice.

Workers: ``celery -A bench.baselines worker -Q bench-baseline`` with the environment of
:func:`bench.stack.bench_env` (``BENCH_BROKER_URL``, ``BENCH_S3_ENDPOINT_URL``, ``BENCH_BUCKET``).
The app uses the same Redis as broker *and* result backend (``apply_async().get()`` needs one;
Tether's app has none, it keeps run records itself), JSON only, and the same delivery settings
as Tether (late acks, prefetch 1, requeue when a pool child dies), so the comparison measures the
per-run work and not Celery tuning.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError
from celery import Celery

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BASELINE_QUEUE = "bench-baseline"
NOOP_TASK = "bench.noop"
PING_TASK = "bench.ping"
HANDWRITTEN_TASK = "bench.handwritten"
BLOB_PREFIX = "baseline"


def baseline_config(broker_url: str, queue: str = BASELINE_QUEUE) -> dict[str, Any]:
    """The baseline app's Celery settings for ``broker_url`` (also its result backend)."""
    prefix = {"global_keyprefix": "bench-celery:"}
    return {
        "broker_url": broker_url,
        "result_backend": broker_url,
        "broker_transport_options": {**prefix, "visibility_timeout": 3600},
        "result_backend_transport_options": prefix,
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": queue,
        "result_expires": 3600,
        "worker_hijack_root_logger": False,
    }


def _lazy_config() -> dict[str, Any]:
    # Read at first use, so importing this module (the bench client does) needs no environment.
    return baseline_config(os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0"))


app = Celery("bench-baselines", set_as_current=False)
app.add_defaults(_lazy_config)
celery = app


def configure(broker_url: str) -> Celery:
    """Point the baseline app at ``broker_url`` in this (client) process; return it."""
    app.conf.update(baseline_config(broker_url))
    return app


_s3: S3Client | None = None
_s3_pid: int | None = None
_s3_lock = threading.Lock()


def _client() -> S3Client:
    """This process's S3 client (rebuilt in a forked pool child, like Tether's)."""
    global _s3, _s3_pid
    with _s3_lock:
        if _s3 is None or _s3_pid != os.getpid():
            _s3 = boto3.client(
                "s3",
                endpoint_url=os.environ["BENCH_S3_ENDPOINT_URL"],
                region_name="us-east-1",
            )
            _s3_pid = os.getpid()
        return _s3


def scripted_answer(text: str) -> str:
    """The scripted model of the baseline: the answers of Tether's ``notes``/``echo`` agents."""
    if text.startswith("remember "):
        return f"noted: {text[len('remember ') :]}"
    return f"echo: {text}"


def blob_key(session_id: str) -> str:
    """Where the hand-written task keeps a session's JSON blob."""
    return f"{BLOB_PREFIX}/{session_id}.json"


@app.task(name=NOOP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
def noop(value: Any = None) -> None:
    """Do nothing; no result is stored, so submitting it subscribes to nothing."""


@app.task(name=PING_TASK)  # type: ignore[untyped-decorator]
def ping(value: Any = None) -> Any:
    """Return ``value`` (through the result backend)."""
    return value


@app.task(name=HANDWRITTEN_TASK)  # type: ignore[untyped-decorator]
def handwritten(session_id: str, text: str) -> dict[str, Any]:
    """GET the session blob, append the input and the answer, PUT it back, return the answer."""
    s3 = _client()
    bucket = os.environ["BENCH_BUCKET"]
    key = blob_key(session_id)
    try:
        doc = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
            raise
        doc = {"session_id": session_id, "messages": []}
    answer = scripted_answer(text)
    doc["messages"].append({"role": "user", "content": text})
    doc["messages"].append({"role": "assistant", "content": answer})
    body = json.dumps(doc, separators=(",", ":")).encode()
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
    return {"output": answer, "messages": len(doc["messages"])}
