"""The checks behind :mod:`tether.settings`: URL forms, names, and masking of secrets.

Pure functions on strings (no I/O, no imports of Redis, boto3 or Celery), so every process can
validate its settings at start for the price of a few string operations. Each check returns
``None`` when the value is fine, else the reason and the fix as one sentence; the settings turn
that into one :class:`~tether.errors.SettingsError` line naming the variable.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
#: Query parameters whose values are secrets (``unix:///s.sock?password=...``, Azure's
#: ``?api-key=`` and ``?code=``, a SAS ``?sig=``, S3's presigned ``X-Amz-Signature``), compared
#: in lower case with ``-`` read as ``_``.
SECRET_PARAMS = frozenset(
    {
        "password", "pass", "passwd", "pwd", "token", "secret", "key", "api_key", "apikey",
        "access_token", "refresh_token", "id_token", "auth", "authorization", "client_secret",
        "code", "sig", "signature", "x_amz_signature", "x_amz_security_token", "x_api_key",
        "session_token", "private_key",
    }
)  # fmt: skip

REDIS_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: Where streams, leases and run records may live: one Redis or a Redis Cluster.
STREAM_SCHEMES = (*REDIS_SCHEMES, *CLUSTER_SCHEMES)
#: The Celery broker: one Redis (Celery cannot use a Redis Cluster) or RabbitMQ.
BROKER_SCHEMES = (*REDIS_SCHEMES, "amqp", "amqps", "pyamqp")
STORE_FORMS = "file:///abs/path, file://./relative/dir, s3://bucket[/prefix] or memory://"
REDIS_FORMS = "redis://[:password@]host:port/db, rediss://... (TLS) or unix:///path/redis.sock"
CLUSTER_FORMS = "redis+cluster://[:password@]host:port[,host:port...] (rediss+cluster:// for TLS)"
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_QUEUE_RE = re.compile(r"[A-Za-z0-9_\-.:@]{1,200}")
_MODEL_RE = re.compile(r"[^\s,]{1,200}")


def mask_url(value: str) -> str:
    """``value`` with passwords and secret query parameters replaced by ``***``.

    Works on malformed URLs too (a typo such as ``redis:/:PW@host`` still hides ``PW``): a value
    that does not parse keeps only its scheme.
    """
    try:
        parts = urlsplit(value)
    except ValueError:
        head = value.split(":", 1)[0]
        return f"{head}://<unparsable url>" if _SCHEME_RE.fullmatch(head) else "<unparsable>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, sep, _pw = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if sep else f"{user}@{hostport}"
    query = parts.query
    if query:
        pairs = [
            (k, MASK if k.lower().replace("-", "_") in SECRET_PARAMS else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = urlencode(pairs, safe="*/")
    rest = parts.path
    if "@" in rest:  # no authority (``scheme:/:pw@host``): whatever precedes '@' may be secret
        rest = MASK + rest[rest.rindex("@") :]
    masked = urlunsplit((parts.scheme, netloc, rest, query, parts.fragment))
    if value.startswith(f"{parts.scheme}://") and not netloc:
        masked = f"{parts.scheme}://{rest}" + (f"?{query}" if query else "")
    return masked


def url_credential(value: str) -> str | None:
    """What credential ``value`` (a URL) carries: ``"a password"``, ``"the query parameter
    'code'"``, or None (also for a URL that does not parse: its checks say why)."""
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return None
    if password is not None:
        return "a password"
    for key, _ in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower().replace("-", "_") in SECRET_PARAMS:
            return f"the query parameter {key!r}"
    return None


_URL_IN_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:/{1,2}[^\s'\"<>]+")


def mask_urls_in(text: str) -> str:
    """``text`` (an error message, a log line) with every URL in it passed through
    :func:`mask_url`, so an endpoint that carries credentials is never echoed whole."""
    return _URL_IN_TEXT_RE.sub(lambda m: mask_url(m.group(0)), text)


def _split(value: str, forms: str) -> SplitResult | str:
    """The parts of a URL, or the reason it cannot be one."""
    if value != value.strip() or any(c.isspace() for c in value):
        return f"it contains whitespace; use {forms}"
    head = value.split(":", 1)[0]
    if ":" not in value or not _SCHEME_RE.fullmatch(head):
        return f"it has no scheme; use {forms}"
    if not value.startswith(f"{head}://"):
        return f"'{head}:' must be followed by '//' (a typo such as '{head}:/'?); use {forms}"
    try:
        return urlsplit(value)
    except ValueError as exc:
        return f"it does not parse ({exc}); use {forms}"


def _host_and_port(parts: SplitResult, forms: str) -> str | None:
    try:
        parts.port  # noqa: B018 - urllib validates the port only when it is read
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
        return f"port {port!r} is not a number from 1 to 65535; use {forms}"
    if not parts.hostname:
        return f"the host is missing; use {forms}"
    if parts.port == 0:
        return f"port 0 is not a valid port; use {forms}"
    return None


def check_redis_url(value: str, *, schemes: tuple[str, ...] = STREAM_SCHEMES) -> str | None:
    """Why ``value`` is not a usable Redis or Redis Cluster (or, with ``schemes``, broker) URL,
    or None."""
    if schemes == BROKER_SCHEMES:
        forms = f"{REDIS_FORMS}, or amqp://host:port//"
    elif set(CLUSTER_SCHEMES) & set(schemes):
        forms = f"{REDIS_FORMS}, or {CLUSTER_FORMS}"
    else:
        forms = REDIS_FORMS
    parts = _split(value, forms)
    if isinstance(parts, str):
        return parts
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        if scheme in CLUSTER_SCHEMES:  # allowed for TETHER_REDIS_URL, not for the broker
            return (
                "Celery cannot use a Redis Cluster as its broker; keep the broker one Redis or "
                f"RabbitMQ ({forms}) and put the cluster in TETHER_REDIS_URL"
            )
        return f"scheme {parts.scheme + '://'!r} is not supported; use {forms}"
    if scheme in CLUSTER_SCHEMES:
        return _check_cluster(parts)
    if scheme == "unix":
        if parts.netloc or not parts.path.startswith("/"):
            return "a unix socket URL needs an absolute path: unix:///path/to/redis.sock?db=0"
        return _check_db(dict(parse_qsl(parts.query)).get("db", "0"), forms)
    problem = _host_and_port(parts, forms)
    if problem is None and scheme in REDIS_SCHEMES:
        problem = _check_db(parts.path.strip("/") or "0", forms)
    return problem


def _check_cluster(parts: SplitResult) -> str | None:
    """Every ``host:port`` of a cluster URL is well formed, and the database is 0 (or absent)."""
    hosts = parts.netloc.rpartition("@")[2]
    for item in hosts.split(","):
        try:
            node = urlsplit("//" + item)
        except ValueError as exc:
            return f"node {item!r} does not parse ({exc}); use {CLUSTER_FORMS}"
        problem = _host_and_port(node, CLUSTER_FORMS)
        if problem is not None:
            return f"node {item!r}: {problem}"
    if parts.path.strip("/") not in ("", "0"):
        return f"a Redis Cluster has only database 0; drop the /db part: {CLUSTER_FORMS}"
    return None


def _check_db(db: str, forms: str) -> str | None:
    if not db.isdigit():
        return f"database {db!r} is not a number (e.g. /0); use {forms}"
    return None


def check_http_url(value: str) -> str | None:
    """Why ``value`` is not an ``http(s)://host[:port]/...`` URL, or None."""
    forms = "http://host:port or https://host[/path]"
    parts = _split(value, forms)
    if isinstance(parts, str):
        return parts
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme + '://'!r} is not supported; use {forms}"
    return _host_and_port(parts, forms)


def check_endpoint_url(value: str) -> str | None:
    """Why ``value`` is not a service endpoint (:func:`check_http_url`, without a query string
    or fragment, which the client would keep in front of every path it adds), or None."""
    problem = check_http_url(value)
    if problem is None:
        parts = urlsplit(value)
        if parts.query or parts.fragment:
            return "a query string or fragment is not supported in an endpoint; use http(s)://host[:port][/path]"
    return problem


def check_store_url(value: str) -> str | None:
    """Why ``value`` is not a storage URL (see :mod:`tether.persistence.storage_url`), or None.

    Relative ``file://dir`` URLs are accepted here; the settings make them absolute.
    """
    parts = _split(value, STORE_FORMS)
    if isinstance(parts, str):
        return parts
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        return f"query strings and fragments are not supported; use {STORE_FORMS}"
    if scheme == "memory":
        return None if not (parts.netloc or parts.path) else "memory:// takes no name or path"
    if scheme == "file":
        if not (parts.netloc + parts.path).strip("/"):
            return "file URLs need a directory, e.g. file:///var/tether or file://./.tether/store"
        return None
    if scheme == "s3":
        if "@" in parts.netloc or ":" in parts.netloc:
            return "put S3 credentials and endpoints in AWS_* / TETHER_S3_ENDPOINT_URL, not here"
        return None if parts.netloc else "the bucket name is missing: s3://bucket[/prefix]"
    return f"scheme {parts.scheme + '://'!r} is not supported; use {STORE_FORMS}"


def check_queue(value: str) -> str | None:
    """Why ``value`` is not a queue name, or None."""
    if _QUEUE_RE.fullmatch(value):
        return None
    return "use 1-200 characters from [A-Za-z0-9_-.:@], e.g. tether"


def check_modules(values: list[str]) -> str | None:
    """Why one of ``values`` is not a dotted module path, or None."""
    bad = [v for v in values if not _MODULE_RE.fullmatch(v)]
    if not bad:
        return None
    return f"{bad[0]!r} is not a module path; use e.g. my_project.agents (comma list or JSON list)"


def check_model_names(
    values: list[str], *, example: str = "gpt-4o-mini,llama3.2 (comma or JSON list)"
) -> str | None:
    """Why one of ``values`` is not a model name, or None."""
    bad = [v for v in values if not _MODEL_RE.fullmatch(v)]
    if not bad:
        return None
    return f"{bad[0]!r} is not a model name; use e.g. {example}"


def check_azure(endpoint: str | None, api_version: str | None, *, base_url_set: bool) -> str | None:
    """Why the Azure OpenAI settings do not make a whole endpoint, or None."""
    if endpoint is None:
        if api_version is not None:
            return (
                "TETHER_OPENAI_AZURE_API_VERSION is set without TETHER_OPENAI_AZURE_ENDPOINT: "
                "set the endpoint (https://<resource>.openai.azure.com) or unset the version"
            )
        return None
    if api_version is None:
        return (
            "TETHER_OPENAI_AZURE_ENDPOINT needs TETHER_OPENAI_AZURE_API_VERSION "
            "(e.g. 2024-10-21): Azure OpenAI answers no request without it"
        )
    if base_url_set:
        return (
            "TETHER_OPENAI_BASE_URL and TETHER_OPENAI_AZURE_ENDPOINT are both set: model calls "
            "go to one endpoint; unset TETHER_OPENAI_BASE_URL for Azure, or the Azure variables"
        )
    return None
