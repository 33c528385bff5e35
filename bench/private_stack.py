"""A private redis-server and moto S3 server for the in-process profiles (no workers)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3

from bench.stack import FAKE_AWS
from tether.dev.moto_server import MotoServer
from tether.dev.redis_server import RedisServer
from tether.ids import new_id
from tether.settings import Settings
from tether.worker.engine.services import EngineServices, build_services


@contextlib.contextmanager
def private_redis_and_s3(bucket: str, log_prefix: str) -> Iterator[tuple[str, str]]:
    """``(redis url, S3 endpoint)`` of fresh servers with ``bucket`` created; stopped after."""
    for name, value in FAKE_AWS.items():
        os.environ.setdefault(name, value)
    log_dir = Path(tempfile.mkdtemp(prefix=log_prefix))
    redis_server = RedisServer(unix_socket=False).start()
    moto = MotoServer(log_dir).start()
    try:
        boto3.client("s3", endpoint_url=moto.endpoint).create_bucket(Bucket=bucket)
        yield redis_server.url, moto.endpoint
    finally:
        moto.stop()
        redis_server.close()


def production_runtime(
    redis_url: str, s3_endpoint: str, bucket: str, **overrides: Any
) -> EngineServices:
    """A worker's runtime built as a Celery worker builds it (the one-script claimer, the Redis
    queue, stream and leases, S3 over HTTP), in a fresh namespace and store prefix; more
    settings in ``overrides``."""
    for name, value in FAKE_AWS.items():  # moto takes any credentials; boto3 wants some
        os.environ.setdefault(name, value)
    tag = new_id("n")[-8:]
    settings = Settings(
        redis_url=redis_url,
        broker_url=redis_url,
        store_url=f"s3://{bucket}/bench-{tag}",
        s3_endpoint_url=s3_endpoint,
        namespace=f"bench-{tag}",
        **overrides,
    )
    return build_services(lambda tenant, session_id: None, settings)
