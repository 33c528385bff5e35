"""#47 W3: no URL credential in a log line (:mod:`tether.observability.url_masking`).

httpx logs every request's URL whole at INFO, so a webhook URL's ``?token=`` was in a worker's
log three times. The filter masks the user information and every query value of each URL in a
record. On a real worker,
``tests/test_webhooks_workers.py::test_a_dead_webhook_is_listed_and_redelivered`` scans the
worker's log for the URL's planted password and token.
"""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.support.webhook_receiver import webhook_receiver
from tether.observability.url_masking import (
    URL_MASKING,
    install_url_masking,
    mask_url_for_log,
    mask_urls_for_log,
)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("https://u:pw@h.example/p?token=t1&x=2", "https://***@h.example/p?token=***&x=***"),
        ("https://tok@h.example/p", "https://***@h.example/p"),  # a token as the user
        ("http://h.example:8080/p?bare", "http://h.example:8080/p?***"),
        ("https://h.example/cb#access_token=t2&y=1", "https://h.example/cb#access_token=***&y=***"),
        ("https://h.example/docs#section-2", "https://h.example/docs#section-2"),
        ("redis://:pw@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
        ("https://h.example/a/b", "https://h.example/a/b"),  # nothing to mask: as it is
    ],
)
def test_user_information_and_every_query_value_are_masked(text: str, masked: str) -> None:
    assert mask_url_for_log(text) == masked


def test_every_url_in_a_text_is_masked_and_other_text_kept() -> None:
    line = (
        'HTTP Request: POST http://hooks:pw@10.0.0.7/t?token=abc "HTTP/1.1 500", '
        "then URL('https://h/?k=v')"
    )
    assert mask_urls_for_log(line) == (
        'HTTP Request: POST http://***@10.0.0.7/t?token=*** "HTTP/1.1 500", '
        "then URL('https://h/?k=***')"
    )
    assert mask_urls_for_log("no URL: a=1&b=2") == "no URL: a=1&b=2"


@pytest.fixture
def no_masking() -> Iterator[None]:
    """Start without the filter anywhere (a producer built by an earlier test installs it on
    this process's loggers), and put back what was there."""
    names = ["", *logging.Logger.manager.loggerDict]
    loggers = [logging.getLogger(name) for name in names]
    had = [each for each in loggers if URL_MASKING in each.filters]
    handlers = [h for h in logging.getLogger().handlers if URL_MASKING in h.filters]
    for each in had:
        each.removeFilter(URL_MASKING)
    for handler in handlers:
        handler.removeFilter(URL_MASKING)
    try:
        yield
    finally:
        for each in loggers:
            each.removeFilter(URL_MASKING)
        for handler in logging.getLogger().handlers:
            handler.removeFilter(URL_MASKING)
        for each in had:
            each.addFilter(URL_MASKING)
        for handler in handlers:
            handler.addFilter(URL_MASKING)


def test_httpx_request_lines_are_masked_where_they_are_made(
    no_masking: None, caplog: pytest.LogCaptureFixture
) -> None:
    token, password = f"tok-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    with webhook_receiver() as receiver, caplog.at_level(logging.INFO, logger="httpx"):
        url = receiver.url.replace("http://", f"http://hooks:{password}@") + f"/t?token={token}"
        httpx.post(url, content=b"{}")
        assert token in caplog.text  # httpx logs the URL whole (W3)
        caplog.clear()
        install_url_masking(root_handlers=False)
        httpx.post(url, content=b"{}")
    assert "HTTP Request: POST" in caplog.text and "token=***" in caplog.text
    assert token not in caplog.text and password not in caplog.text
    assert [r.query for r in receiver.on("/t")] == [f"token={token}"] * 2  # sent as given


def test_tether_records_and_their_exceptions_are_masked(
    no_masking: None, caplog: pytest.LogCaptureFixture
) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    log = logging.getLogger("tether.runs.webhooks.delivery")
    install_url_masking(root_handlers=False)
    with caplog.at_level(logging.INFO, logger=log.name):
        log.info("posting to %s", f"https://h.example/t?token={token}")
        try:
            raise RuntimeError(f"refused: https://h.example/t?token={token}")
        except RuntimeError:
            log.exception("attempt failed")
    assert "https://h.example/t?token=***" in caplog.text
    assert caplog.records[1].exc_text is not None and "token=***" in caplog.records[1].exc_text
    assert token not in caplog.text


def test_on_a_worker_every_record_through_the_root_handlers_is_masked(no_masking: None) -> None:
    """A worker's logging is its own: the filter also sits on the root logger's handlers, so a
    record of any logger that propagates (Celery's) is masked."""
    token = f"tok-{uuid.uuid4().hex}"
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        install_url_masking(root_handlers=True)
        logging.getLogger("celery.worker.strategy").warning("got http://h/?token=%s", token)
    finally:
        root.removeHandler(handler)
    assert out.getvalue() == "got http://h/?token=***\n"


def test_a_producer_masks_its_own_and_httpx_records_and_leaves_the_apps_handlers(
    no_masking: None, redis_url: str
) -> None:
    from tether.producer.client import Producer

    handler = logging.NullHandler()
    logging.getLogger().addHandler(handler)
    try:
        with Producer(broker_url=redis_url, redis_url=redis_url, store_url="memory://"):
            pass
        assert URL_MASKING in logging.getLogger("httpx").filters
        assert URL_MASKING in logging.getLogger("tether.producer.handle").filters
        assert URL_MASKING not in handler.filters  # the application's logging is its own
    finally:
        logging.getLogger().removeHandler(handler)


def test_a_url_tether_masked_already_keeps_its_form() -> None:
    # mask_url's `user:***` (what producers and workers print) is not masked a second time
    assert mask_url_for_log("redis://:***@127.0.0.1:1/0") == "redis://:***@127.0.0.1:1/0"
    assert mask_url_for_log("redis://bob:***@h:1/0") == "redis://bob:***@h:1/0"
    assert mask_url_for_log("redis://bob:pw@h:1/0") == "redis://***@h:1/0"
    assert mask_url_for_log("https://tok@h/x") == "https://***@h/x"
