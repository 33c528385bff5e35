"""No URL credential in a log line: a :class:`logging.Filter` that masks the user information
and every query value of each URL in a record (its message with its arguments, and its
exception text).

A URL's credential may sit in its user information (``https://user:pw@host``, or a token as the
user) or under any query parameter name (``?token=``, ``?sig=``, ``?k=``), and libraries log the
URLs they fetch whole: httpx logs each request at INFO (``HTTP Request: POST
https://hooks.example/t?token=... "HTTP/1.1 200 OK"``), which put a webhook URL's token in a
worker's log three times (#47 W3). So in a log every query value is masked, whatever its name,
and the whole user information: ``https://***@hooks.example/t?token=***``. The path is kept (a
log without it would say little).

:func:`install_url_masking` puts the filter where records are made: on the loggers of the HTTP
libraries and on every ``tether`` logger (so their records are masked whatever handlers a
process has), and, in a process whose logging is Tether's own (a worker), on the handlers of the
root logger too (the records of every logger that propagates, Celery's included). A worker
installs it when Celery has set up its logging and in each pool process, a producer when it is
built (a producer may live in an application's process: it leaves that application's handlers
alone).
"""

from __future__ import annotations

import logging
import re

MASK = "***"
#: The loggers of the HTTP libraries that log the URLs they fetch whole.
HTTP_LOGGERS = ("httpx", "httpcore")
#: Tether's loggers: this one and every one below it (``tether.worker.webhooks``...).
TETHER_LOGGER = "tether"

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_PAIR = re.compile(r"([^&;=]*)(=?)[^&;]*")


def _mask_pairs(text: str) -> str:
    """``a=1&b=2`` as ``a=***&b=***``; a bare item (``?secret``) as ``***``."""
    return _PAIR.sub(
        lambda m: (f"{m.group(1)}={MASK}" if m.group(2) else MASK) if m.group(0) else "", text
    )


def mask_url_for_log(url: str) -> str:
    """``url`` with its user information and every query (and fragment) value masked."""
    scheme, _, rest = url.partition("://")
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            end = min(end, found)
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        userinfo, _, hostport = authority.rpartition("@")
        # a URL Tether already masked (`user:***`, mask_url's form) stays as it reads
        if not userinfo.endswith(":" + MASK):
            authority = f"{MASK}@{hostport}"
    path, hash_mark, fragment = tail.partition("#")
    path, question, query = path.partition("?")
    masked = f"{scheme}://{authority}{path}"
    if question:
        masked += "?" + _mask_pairs(query)
    if hash_mark:
        masked += "#" + (_mask_pairs(fragment) if "=" in fragment else fragment)
    return masked


def mask_urls_for_log(text: str) -> str:
    """``text`` with :func:`mask_url_for_log` applied to every URL in it."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: mask_url_for_log(m.group(0)), text)


class UrlMaskingFilter(logging.Filter):
    """Masks the URLs in each record it sees (see the module docstring); drops none."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
            masked = mask_urls_for_log(message)
            if masked != message:
                record.msg, record.args = masked, None
            if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
                text = logging.Formatter().formatException(record.exc_info)
                record.exc_text = mask_urls_for_log(text)
            elif record.exc_text:
                record.exc_text = mask_urls_for_log(record.exc_text)
        except Exception:  # a log line must never fail because of its masking
            pass
        return True


#: The one filter every place shares (adding it twice to a logger or handler is a no-op).
URL_MASKING = UrlMaskingFilter()


def install_url_masking(*, root_handlers: bool) -> None:
    """Add :data:`URL_MASKING` to the HTTP libraries' loggers, to every ``tether`` logger made
    so far, and (``root_handlers``) to every handler the root logger has now. Idempotent: call
    it again once more modules are imported or handlers added."""
    names = [*HTTP_LOGGERS, TETHER_LOGGER]
    names += [
        name
        for name, made in list(logging.Logger.manager.loggerDict.items())
        if name.startswith(f"{TETHER_LOGGER}.") and isinstance(made, logging.Logger)
    ]
    for name in names:
        logging.getLogger(name).addFilter(URL_MASKING)
    if root_handlers:
        for handler in logging.getLogger().handlers:
            handler.addFilter(URL_MASKING)
