"""#19: credentials in URLs never reach an error message (S3 endpoint, Redis, broker)."""

from __future__ import annotations

import pytest

from tether.dev.redis_server import free_port
from tether.errors import StoreUnavailable, TetherError
from tether.persistence.redis_conn import redact_url
from tether.persistence.storage_url import open_storage
from tether.settings.checks import mask_urls_in

SECRET = "s3cr3t-Pa55"


def test_unreachable_s3_endpoint_with_credentials_is_masked_in_the_error() -> None:
    endpoint = f"http://AKIAEXAMPLE:{SECRET}@127.0.0.1:{free_port()}"
    store, _ = open_storage(
        "s3://bucket/prefix",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        max_attempts=1,
    )
    with pytest.raises(TetherError) as caught:
        store.load("default", "s1")
    assert isinstance(caught.value, StoreUnavailable), caught.value
    assert SECRET not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)  # still says where it could not connect


@pytest.mark.parametrize(
    "text",
    [
        f"redis://:{SECRET}@host:6379/0",
        f"redis:/:{SECRET}@host:6379/0",  # the scheme typo of the red-team report
        f"amqp://guest:{SECRET}@rabbit:5672//",
        f"unix:///tmp/r.sock?password={SECRET}",
        f"connect failed for rediss://user:{SECRET}@h:1/0 (timeout)",
    ],
)
def test_urls_in_free_text_lose_their_secrets(text: str) -> None:
    masked = mask_urls_in(text)
    assert SECRET not in masked
    assert "***" in masked


def test_redact_url_keeps_what_is_not_secret() -> None:
    assert redact_url(f"redis://user:{SECRET}@h:1/2") == "redis://user:***@h:1/2"
    tls = "rediss://h:1/0?ssl_ca_certs=/a/ca.pem"
    assert redact_url(tls) == tls
