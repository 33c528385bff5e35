"""Out-of-band writes on real workers: an in-process save into the workers' store, then a Redis
FLUSHALL; distributed runs before, between and after all succeed, and nothing is lost."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.support.moto_server import S3TestBucket
from tests.support.stack import stack_env
from tether import SessionLogReader
from tether.dev.workers import WorkerFleet
from tether.persistence.redis_conn import redis_from_url
from tether.persistence.storage_url import open_storage
from tether.producer import Producer
from tether.runtime.demo_agents import notes_agent
from tether.settings import Settings


def test_in_process_save_and_flushall_never_brick_a_session(
    s3_bucket: S3TestBucket, redis_url: str, tmp_path: Path
) -> None:
    env = stack_env(redis_url, s3_bucket.endpoint_url, s3_bucket.bucket)
    settings = Settings(
        broker_url=redis_url,
        redis_url=redis_url,
        store_url=f"s3://{s3_bucket.bucket}/tether",
        s3_endpoint_url=s3_bucket.endpoint_url,
        lease_ttl_ms=2000,
    )
    store, archive = open_storage(
        settings.store_url,
        endpoint_url=s3_bucket.endpoint_url,
        region_name=s3_bucket.region,
        aws_access_key_id=s3_bucket.access_key_id,
        aws_secret_access_key=s3_bucket.secret_access_key,
    )
    with WorkerFleet(env, tmp_path, count=1), Producer(settings) as producer:
        assert producer.run("s1", "remember a", agent="notes", wait_s=60).ok
        local = notes_agent()
        local.store, local.archive = store, archive
        session = local.resume_session("s1")
        session.run("remember b")  # outside every worker: the stream never saw it
        session.save()
        assert producer.run("s1", "remember c", agent="notes", wait_s=60).ok
        client: redis.Redis = redis_from_url(redis_url)
        client.flushall()  # every lease, fence, stream and run record is gone
        client.close()
        assert producer.run("s1", "remember d", agent="notes", wait_s=60).ok
        recall = producer.run("s1", "recall", agent="notes", wait_s=60)
    assert (recall.output or "").splitlines() == ["a", "b", "c", "d"]
    report = SessionLogReader(store, archive).verify("s1")
    assert report.ok, report.problems
