"""Blob backend on Amazon S3 (or any S3-compatible service with conditional writes).

Compare-and-set uses S3 conditional writes: a create sends ``If-None-Match: *`` and an update
``If-Match: <etag>``; the version token is the ETag. The boto3 client is created lazily (or
injected), with botocore's ``standard`` retry mode, so throttling and 5xx answers are retried by
botocore before they surface here as :class:`StoreUnavailable`.

Credentials are only passed through to boto3; they are never stored in objects, messages or
``repr``.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from tether.errors import ConfigurationError, StoreUnavailable, TetherError, VersionConflict
from tether.persistence.blobs import Blob
from tether.settings.checks import mask_urls_in

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

SseMode = Literal["AES256", "aws:kms"]

_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_PREFIX_PART_RE = re.compile(r"[A-Za-z0-9_\-.:=+@,]+")
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFIG_CODES = frozenset(
    {
        "NoSuchBucket",
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidBucketName",
        "AuthorizationHeaderMalformed",
        "PermanentRedirect",
        "KMS.NotFoundException",
        "KMS.DisabledException",
    }
)
_DELETE_BATCH = 1000
# Greater than every character an id or an object name can hold, so "<id>/~" sorts after every
# key under "<id>/" and before the next id's keys.
_AFTER_ALL = "~"

# One boto3 session per process: building a client from a fresh session re-reads the service
# model (~150 ms), from a warm one it takes ~10 ms. Sessions are not thread-safe, hence the lock.
_SESSION_LOCK = threading.Lock()
_SESSION: Any = None


def _forget_session_after_fork() -> None:
    # A forked child (Celery prefork) must not inherit a lock held by another parent thread.
    global _SESSION, _SESSION_LOCK
    _SESSION = None
    _SESSION_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_session_after_fork)


class S3Options(TypedDict, total=False):
    """Keyword options of :class:`S3Blobs` (and the S3 store and archive built on it)."""

    client: S3Client | None
    endpoint_url: str | None
    region_name: str | None
    aws_access_key_id: str | None
    aws_secret_access_key: str | None
    aws_session_token: str | None
    sse: SseMode | None
    sse_kms_key_id: str | None
    max_attempts: int
    connect_timeout_s: float
    read_timeout_s: float


@dataclass(frozen=True)
class _ClientConfig:
    """What the boto3 client of an :class:`S3Blobs` is built from."""

    endpoint_url: str | None
    region_name: str | None
    # kept out of repr: credentials must never reach messages or logs
    aws_access_key_id: str | None = field(repr=False)
    aws_secret_access_key: str | None = field(repr=False)
    aws_session_token: str | None = field(repr=False)
    max_attempts: int
    connect_timeout_s: float
    read_timeout_s: float

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {self.max_attempts}")

    def make_client(self) -> S3Client:
        """A new client from the process-wide boto3 session."""
        # Imported here: boto3 costs ~0.3 s to import and most processes never touch S3.
        import boto3
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": {"mode": "standard", "max_attempts": self.max_attempts},
            "connect_timeout": self.connect_timeout_s,
            "read_timeout": self.read_timeout_s,
        }
        if self.endpoint_url is not None:
            # S3-compatible services and emulators want path-style URLs and often reject the
            # optional CRC checksums newer botocore adds by default.
            options["s3"] = {"addressing_style": "path"}
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
        global _SESSION
        with _SESSION_LOCK:
            if _SESSION is None:
                _SESSION = boto3.session.Session()
            client: S3Client = _SESSION.client(
                "s3",
                endpoint_url=self.endpoint_url,
                config=Config(**options),
                region_name=self.region_name or ("us-east-1" if self.endpoint_url else None),
                aws_access_key_id=self.aws_access_key_id,
                aws_secret_access_key=self.aws_secret_access_key,
                aws_session_token=self.aws_session_token,
            )
        return client


class S3Blobs:
    """Objects in one bucket under an optional key prefix."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: S3Client | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        sse: SseMode | None = None,
        sse_kms_key_id: str | None = None,
        max_attempts: int = 5,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        """Args:
        bucket: the bucket name.
        prefix: a key prefix such as ``"tether/prod"`` (no leading or trailing ``/`` needed).
        client: a ready boto3 S3 client; when given, the connection arguments are ignored.
        endpoint_url: an S3-compatible endpoint (enables path-style addressing).
        region_name: the bucket's region (defaults to ``us-east-1`` with an endpoint).
        aws_access_key_id: explicit credentials; otherwise boto3's usual chain applies.
        aws_secret_access_key: see ``aws_access_key_id``.
        aws_session_token: see ``aws_access_key_id``.
        sse: server-side encryption for writes: ``"AES256"`` or ``"aws:kms"`` (None or ``""``:
            the bucket's default).
        sse_kms_key_id: the KMS key for ``sse="aws:kms"`` (None: the account's default key).
        max_attempts: botocore attempts per call (standard retry mode), at least 1.
        connect_timeout_s: socket connect timeout.
        read_timeout_s: socket read timeout.

        Raises:
            ConfigurationError: a malformed bucket, prefix or encryption setting.
        """
        _check_bucket(bucket)
        self._sse, self._sse_kms_key_id = _check_encryption(sse, sse_kms_key_id)
        self._config = _ClientConfig(
            endpoint_url=endpoint_url,
            region_name=region_name,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            max_attempts=max_attempts,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self._client = client
        self._client_injected = client is not None
        self._client_pid = os.getpid()
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Blobs(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @property
    def client(self) -> S3Client:
        """The boto3 client (created on first use, and again in a forked child process).

        A client's connection pool must not be shared with the parent after ``fork``, so a
        client this object created is replaced in a new process; an injected one is kept.
        """
        client = self._client
        if client is None or (not self._client_injected and self._client_pid != os.getpid()):
            with self._client_lock:
                if self._client is None or (
                    not self._client_injected and self._client_pid != os.getpid()
                ):
                    self._client = self._config.make_client()
                    self._client_pid = os.getpid()
                client = self._client
        return client

    def describe(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def get(self, key: str) -> Blob | None:
        full = self._key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full)
            data = response["Body"].read()
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES:
                return None
            raise self._failure(exc, "read", full) from exc
        except BotoCoreError as exc:
            raise self._failure(exc, "read", full) from exc
        return Blob(data, response["ETag"])

    def put(self, key: str, data: bytes, *, expected: str | None) -> str:
        full = self._key(key)
        args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": full,
            "Body": data,
            "ContentType": "application/json",
        }
        if expected is None:
            args["IfNoneMatch"] = "*"
        else:
            args["IfMatch"] = expected
        if self._sse is not None:
            args["ServerSideEncryption"] = self._sse
        if self._sse_kms_key_id is not None:
            args["SSEKMSKeyId"] = self._sse_kms_key_id
        try:
            response = self.client.put_object(**args)
        except ClientError as exc:
            if _code(exc) in _CONFLICT_CODES or _status(exc) in (409, 412):
                raise VersionConflict(
                    f"{self.describe(key)} is no longer at version {expected!r} "
                    f"(S3 answered {_code(exc)}); reload it and retry"
                ) from exc
            raise self._failure(exc, "write", full) from exc
        except BotoCoreError as exc:
            raise self._failure(exc, "write", full) from exc
        return response["ETag"]

    def delete(self, key: str) -> bool:
        full = self._key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES:
                return False
            raise self._failure(exc, "delete", full) from exc
        except BotoCoreError as exc:
            raise self._failure(exc, "delete", full) from exc
        return self.delete_many([key]) == 1

    def delete_many(self, keys: list[str]) -> int:
        deleted = 0
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [self._key(key) for key in keys[start : start + _DELETE_BATCH]]
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._failure(exc, "delete", batch[0]) from exc
            errors = response.get("Errors", [])
            if errors:
                first = errors[0]
                raise StoreUnavailable(
                    f"S3 refused to delete {len(errors)} object(s) in bucket {self.bucket!r}, "
                    f"first {first.get('Key')!r}: {first.get('Code')} {first.get('Message')}; "
                    "check the bucket policy and retry"
                )
            deleted += len(batch)
        return deleted

    def list_names(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        names: list[str] = []
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full, "Delimiter": "/"}
        while True:
            response = self._list(args, full)
            names.extend(obj["Key"][len(full) :] for obj in response.get("Contents", []))
            if not response.get("IsTruncated"):
                return sorted(names)
            args["ContinuationToken"] = response["NextContinuationToken"]

    def list_children(
        self, prefix: str, leaf: str, *, rollup: str, after: str | None, limit: int
    ) -> list[str]:
        full = self._key(prefix)
        # Delimiter "/<rollup>/" folds each child's (possibly many) rollup objects into one
        # common prefix, while "<child>/<leaf>" keys come back as contents: one page holds
        # about limit children, and children without a leaf object are never listed.
        args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": full,
            "Delimiter": f"/{rollup}/",
            "MaxKeys": min(1000, 2 * limit + 1),
        }
        if after is not None:
            args["StartAfter"] = f"{full}{after}/{_AFTER_ALL}"
        out: list[str] = []
        while True:
            response = self._list(args, full)
            for obj in response.get("Contents", []):
                child, slash, rest = obj["Key"][len(full) :].partition("/")
                if slash and child and rest == leaf:
                    out.append(child)
                    if len(out) >= limit:
                        return out
            if not response.get("IsTruncated"):
                return out
            args["ContinuationToken"] = response["NextContinuationToken"]

    def _list(self, args: dict[str, Any], full: str) -> Any:
        try:
            return self.client.list_objects_v2(**args)
        except (ClientError, BotoCoreError) as exc:
            raise self._failure(exc, "list", full) from exc

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _failure(self, exc: Exception, action: str, key: str) -> TetherError:
        where = f"s3://{self.bucket}/{key}"
        if isinstance(exc, NoCredentialsError | PartialCredentialsError | NoRegionError):
            return ConfigurationError(
                f"cannot {action} {where}: {exc}; configure AWS credentials and region "
                "(environment, profile or explicit arguments)"
            )
        if isinstance(exc, ClientError):
            code = _code(exc)
            if code in _CONFIG_CODES:
                return ConfigurationError(
                    f"cannot {action} {where}: S3 answered {code}; check that bucket "
                    f"{self.bucket!r} exists and that the credentials may {action} it"
                )
            return StoreUnavailable(
                f"cannot {action} {where}: S3 answered {code} (HTTP {_status(exc)}) after "
                f"{self._config.max_attempts} attempt(s); retry later"
            )
        return StoreUnavailable(
            f"cannot {action} {where}: {type(exc).__name__}: {mask_urls_in(str(exc))}; check "
            "that the endpoint is "
            "reachable, then retry"
        )


def normalize_prefix(prefix: str) -> str:
    """``prefix`` without surrounding slashes, checked part by part.

    Raises:
        ConfigurationError: an empty part, ``.``/``..`` or characters outside a safe set.
    """
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    for part in stripped.split("/"):
        if part in (".", "..") or not _PREFIX_PART_RE.fullmatch(part):
            raise ConfigurationError(
                f"S3 key prefix {prefix!r} is not valid; use '/'-separated parts of letters, "
                "digits and _-.:=+@,"
            )
    return stripped


def _check_bucket(bucket: str) -> None:
    if not isinstance(bucket, str) or not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
        raise ConfigurationError(
            f"S3 bucket name {bucket!r} is not valid; use 3-63 lowercase letters, digits, "
            "'.' and '-'"
        )


def _check_encryption(
    sse: SseMode | None, sse_kms_key_id: str | None
) -> tuple[SseMode | None, str | None]:
    """``(sse, sse_kms_key_id)`` checked, with empty strings read as None.

    Empty strings come from unset environment settings: they mean "not configured".
    """
    sse = sse or None
    sse_kms_key_id = sse_kms_key_id or None
    if sse not in (None, "AES256", "aws:kms"):
        raise ConfigurationError(
            f"S3 server-side encryption {sse!r} is not supported; use 'AES256' or 'aws:kms'"
        )
    if sse_kms_key_id is not None and sse != "aws:kms":
        raise ConfigurationError("sse_kms_key_id is only valid with sse='aws:kms'")
    return sse, sse_kms_key_id


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
