"""#19: secrets typed into run inputs never reach storage. Runs on real workers carry planted
credentials (in the input, so also in the echoed output, in memory and in events); afterwards
every Redis key (run records, the broker's messages, streams, indexes) and every S3 object is
scanned for them: 0 hits. Also scanned: the worker logs."""

from __future__ import annotations

from tests.support.chaos_stack import ChaosStack
from tests.support.stack import unique

pytest_plugins = ["tests.support.chaos_fixtures"]

PLANTED = [
    "sk-proj-" + "Zq9" * 11,
    "AKIA" + "ZZQXSECRETKEY123",
    "ghp_" + "Sx7T" * 9,
    "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.bm90LWEtcmVhbC1zaWc",  # sent as a bearer token
]


def test_planted_secrets_are_found_nowhere_at_rest(chaos: ChaosStack) -> None:
    producer = chaos.producer
    sid = unique("secret")
    text = (
        f"my keys: {PLANTED[0]} and {PLANTED[1]}, token {PLANTED[2]}, "
        f"header Authorization: Bearer {PLANTED[3]}"
    )
    handles = [
        producer.run_async(sid, text, agent="echo"),
        producer.run_async(sid, f"remember {text}", agent="notes"),
        producer.run_async(unique("secret-q"), text, agent="echo"),  # queued, then run
    ]
    results = [h.result(timeout=120) for h in handles]
    assert all(r.status == "COMPLETED" for r in results)
    assert "***" in (results[0].output or "")  # what was masked still reads as masked
    redis_values = b"\x00".join(k + b"\x00" + v for k, v in chaos.redis_dump().items())
    s3_values = b"\x00".join(chaos.s3_objects().values())
    logs = chaos.worker_logs().encode()
    hits = [
        (where, secret)
        for secret in PLANTED
        for where, blob in (("redis", redis_values), ("s3", s3_values), ("logs", logs))
        if secret.encode() in blob
    ]
    assert hits == []
    assert len(redis_values) > 1000 and len(s3_values) > 1000  # the scans did read the data
