"""Create the bucket of ``TETHER_STORE_URL`` if it is missing (``python -m
tether.producer.ops.s3_init``).

Used by the ``s3-init`` service of ``docker-compose.yml``: it waits for the S3 server to answer,
creates the bucket once, and exits 0 (also when the bucket already exists), so the workers start
only on storage that is ready. Credentials come from the usual ``AWS_*`` variables.
"""

from __future__ import annotations

import sys
import time
from urllib.parse import urlsplit

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from tether.errors import ConfigurationError
from tether.settings import Settings, load_settings

WAIT_S = 120.0
RETRY_S = 1.0


def bucket_of(store_url: str) -> str:
    """The bucket named by an ``s3://bucket[/prefix]`` URL."""
    parts = urlsplit(store_url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigurationError(
            f"TETHER_STORE_URL={store_url!r} is not s3://bucket[/prefix]; nothing to create"
        )
    return parts.netloc


def ensure_bucket(settings: Settings, *, wait_s: float = WAIT_S) -> bool:
    """Create the store's bucket unless it exists; True when it was created.

    Retries while the server is unreachable, for up to ``wait_s``.

    Raises:
        ConfigurationError: the store is not on S3.
        ClientError: the server refused (e.g. bad credentials) or never became reachable.
    """
    bucket = bucket_of(settings.store_url)
    client = boto3.client(
        "s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region
    )
    deadline = time.monotonic() + wait_s
    while True:
        try:
            client.head_bucket(Bucket=bucket)
            return False
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise
            if settings.s3_region == "us-east-1":  # the one region that takes no constraint
                client.create_bucket(Bucket=bucket)
            else:
                client.create_bucket(
                    Bucket=bucket,
                    CreateBucketConfiguration={"LocationConstraint": settings.s3_region},  # type: ignore[typeddict-item]
                )
            return True
        except BotoCoreError:  # not up yet (connection refused, DNS not ready)
            if time.monotonic() > deadline:
                raise
            time.sleep(RETRY_S)


def main() -> None:
    """Entry point: one line of outcome, exit 0 on success."""
    settings = load_settings()
    created = ensure_bucket(settings)
    bucket = bucket_of(settings.store_url)
    print(f"bucket {bucket} {'created' if created else 'already exists'}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
