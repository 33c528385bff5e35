"""Security on the real stack: tenant isolation on every read path, secrets kept out of every
stored byte and log, a password-protected Redis and ``rediss://`` (TLS) for broker, streams,
leases and run records."""

from __future__ import annotations

import datetime
import json
import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from tests.support.chaos_stack import ChaosStack
from tests.support.fuzz import Tally, fuzz, valid_ids
from tests.support.openai_fixture import OpenAIServer
from tests.support.stack import unique
from tether.core.events import EventType
from tether.core.results import RunStatus
from tether.dev.redis_server import RedisServer, free_port
from tether.dev.workers import WorkerProcess
from tether.errors import ConfigurationError, SessionNotFound
from tether.keys import RedisKeys
from tether.models.base import ModelResponse
from tether.persistence.objects import events_dir, head_key
from tether.persistence.redis_conn import redis_from_url
from tether.producer.client import Producer
from tether.runs.celery_config import celery_config
from tether.runtime.redaction import redact_event, secret_redactor
from tether.settings import Settings, masked

pytest_plugins = ["tests.support.chaos_fixtures"]  # the chaos_stack and chaos fixtures

# --- tenant isolation ---------------------------------------------------------------------


@pytest.fixture
def two_tenants(chaos: ChaosStack) -> dict[str, Any]:
    """Tenants alpha and beta, each with a session named ``shared`` and one of its own."""
    tag = unique("iso")
    names = {"shared": f"{tag}-shared", "alpha": f"{tag}-a-only", "beta": f"{tag}-b-only"}
    for tenant, own in (("alpha", names["alpha"]), ("beta", names["beta"])):
        for sid in (names["shared"], own):
            chaos.producer.run(
                sid, f"remember {tenant}-secret-{sid}", agent="notes", tenant=tenant, wait_s=60
            )
    return names


def _beta_marks(names: dict[str, str]) -> list[str]:
    return [f"beta-secret-{names['shared']}", f"beta-secret-{names['beta']}"]


def test_reader_and_archive_never_cross_tenants(
    chaos: ChaosStack, two_tenants: dict[str, str]
) -> None:
    names = two_tenants
    reader = chaos.reader()
    assert names["beta"] not in reader.list_session_ids("alpha")
    assert names["alpha"] not in reader.list_session_ids("beta")
    assert reader.read(names["beta"], tenant="alpha") is None
    for call in (reader.events, reader.project, reader.verify):
        with pytest.raises(SessionNotFound):
            call(names["beta"], tenant="alpha")
    with pytest.raises(SessionNotFound):
        reader.fork(names["beta"], unique("stolen"), tenant="alpha")
    shared_alpha = reader.events(names["shared"], tenant="alpha")
    assert {e.tenant for e in shared_alpha} == {"alpha"}
    dumped = json.dumps([e.model_dump(mode="json") for e in shared_alpha])
    assert not any(mark in dumped for mark in _beta_marks(names))
    fork_id = unique("fork")
    fork = reader.fork(names["shared"], fork_id, tenant="alpha")
    assert fork.tenant == "alpha"
    assert not any(mark in fork.model_dump_json() for mark in _beta_marks(names))
    assert reader.read(fork_id, tenant="beta") is None
    assert reader.archive is not None
    assert reader.archive.read("alpha", names["beta"]) == []
    assert reader.archive.last_seq("alpha", names["beta"]) == 0
    # the objects themselves: nothing of beta under alpha's prefix
    for key, data in chaos.s3_objects("tether/v1/alpha/").items():
        assert not any(mark.encode() in data for mark in _beta_marks(names)), key


def test_live_paths_never_cross_tenants(chaos: ChaosStack, two_tenants: dict[str, str]) -> None:
    names = two_tenants
    producer = chaos.producer
    assert list(producer.tail(names["beta"], tenant="alpha", idle_timeout_s=0.3)) == []
    shared = list(producer.tail(names["shared"], tenant="alpha", idle_timeout_s=0.3))
    assert shared and {e.tenant for e in shared} == {"alpha"}
    handle = producer.run_async(names["shared"], "recall", agent="notes", tenant="alpha")
    assert handle.result(timeout=60).output == f"alpha-secret-{names['shared']}"
    events = list(handle.events(idle_timeout_s=5))
    assert events and all(e.tenant == "alpha" for e in events)
    assert not any(m in e.model_dump_json() for e in events for m in _beta_marks(names))
    # a run that names beta's session under tenant alpha creates an alpha session, never reads beta
    probe = producer.run(names["beta"], "recall", agent="notes", tenant="alpha", wait_s=60)
    assert probe.output == "(nothing remembered)"


def test_cli_never_crosses_tenants(
    chaos: ChaosStack,
    two_tenants: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.producer.ops.cli import run_cli

    names = two_tenants
    for key, value in chaos.env.items():
        if key.startswith(("TETHER_", "AWS_")):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("TETHER_S3_ENDPOINT_URL", chaos.moto_endpoint)

    def cli(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = run_cli(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, _ = cli("sessions", "list", "--tenant", "alpha", "--json")
    assert code == 0 and names["beta"] not in json.loads(out)["sessions"]
    for command in ("show", "events", "verify", "project"):
        code, out, err = cli("sessions", command, names["beta"], "--tenant", "alpha")
        assert code == 2 and "SessionNotFound" in err, (command, err)
    code, _, err = cli("sessions", "fork", names["beta"], unique("x"), "--tenant", "alpha")
    assert code == 2 and "SessionNotFound" in err
    code, out, _ = cli("sessions", "events", names["shared"], "--tenant", "alpha", "--json")
    assert code == 0 and not any(mark in out for mark in _beta_marks(names))
    code, out, _ = cli(
        "tail", names["beta"], "--tenant", "alpha", "--idle-timeout", "0.3", "--json"
    )
    assert code == 0 and out.strip() == ""


KEYS = RedisKeys("tether")
ISOLATION = Tally("tenant/session key injectivity")


@fuzz(200)
@given(a=st.tuples(valid_ids, valid_ids), b=st.tuples(valid_ids, valid_ids))
def _fuzz_distinct_sessions_never_share_a_key(a: tuple[str, str], b: tuple[str, str]) -> None:
    ISOLATION.cases += 1
    if a == b:
        return
    names_a = {*KEYS.session(*a), KEYS.active_member(*a), head_key(*a), events_dir(*a)}
    names_b = {*KEYS.session(*b), KEYS.active_member(*b), head_key(*b), events_dir(*b)}
    if names_a & names_b:
        ISOLATION.crashes.append(f"{a} and {b} share {names_a & names_b}")
    # a prefix listing of one session's objects never includes another's
    if events_dir(*b).startswith(events_dir(*a)) or head_key(*b).startswith(events_dir(*a)):
        ISOLATION.crashes.append(f"{b}'s objects are under {a}'s prefix")


def test_fuzz_distinct_sessions_never_share_a_key() -> None:
    """The cases run here (hypothesis) and their tally is checked by the same test."""
    _fuzz_distinct_sessions_never_share_a_key()
    assert ISOLATION.cases >= 200
    ISOLATION.report()


# --- secrets --------------------------------------------------------------------------------


@pytest.fixture
def secrets_worker(chaos: ChaosStack, openai_server: OpenAIServer) -> Iterator[Producer]:
    """A worker serving the ``openai-chat`` agent (queue ``secrets``) and a producer for it."""
    settings = {
        "TETHER_AGENT_MODULES": "tests.support.secret_agents",
        "TETHER_OPENAI_BASE_URL": openai_server.base_url,
        "TETHER_OPENAI_API_KEY": openai_server.api_key,
        "TETHER_OPENAI_MODEL": "test-model",
        "TETHER_OPENAI_TIMEOUT_S": "10",
        "TETHER_OPENAI_MAX_RETRIES": "1",
    }
    with chaos.queue_worker("secrets", settings) as producer:
        yield producer


def test_secrets_never_stored_or_logged(
    chaos: ChaosStack, openai_server: OpenAIServer, secrets_worker: Producer
) -> None:
    key, password = openai_server.api_key, chaos.password
    sid = unique("secret")
    openai_server.script(
        [
            ModelResponse.call("call_1", "diagnostics", {}),
            ModelResponse.final(f"done; by the way the key is {key} and redis uses {password}"),
            "plain answer",
        ]
    )
    leaky = secrets_worker.run(sid, "check the connection", agent="openai-chat", wait_s=60)
    assert leaky.status is RunStatus.COMPLETED
    assert leaky.output == "done; by the way the key is *** and redis uses ***"
    plain = secrets_worker.run(sid, "anything else?", agent="openai-chat", wait_s=60)
    assert plain.output == "plain answer"
    # a hostile server echoing the key in its errors: a failed run, still nothing leaks
    openai_server.fail_next(
        2, 500, retry_after_s=0.01, message=f"upstream rejected {key} (redis {password})"
    )
    failed = secrets_worker.run_async(sid, "and now?", agent="openai-chat")
    result = failed.run_result(timeout=60)
    assert result.status is RunStatus.FAILED and result.error_type == "ModelError"
    # the key really was used, and the tool output (with both secrets) reached the model redacted
    requests = openai_server.requests()
    assert requests[0].headers["authorization"] == f"Bearer {key}"
    tool_messages = [m for m in requests[1].messages if m.get("role") == "tool"]
    assert tool_messages and tool_messages[0]["content"] == "redis password ***; api key ***"
    history = chaos.reader().events(sid)
    assert any(e.type is EventType.TOOL_RESULT for e in history)
    # now scan every stored byte and every log line
    needles = {"api key": key.encode(), "redis password": password.encode()}
    assert chaos.secret_hits(needles) == []
    objects, keys = len(chaos.s3_objects()), len(chaos.redis_dump())
    print(f"\nsecrets scan: {objects} S3 objects, {keys} Redis keys, worker logs: 0 hits")


def test_redaction_hook_applies_before_storage_and_keeps_the_fold() -> None:
    from tether.core.fold import project_events
    from tether.runtime.demo_agents import notes_agent

    agent = notes_agent()
    agent.redact = secret_redactor(["hunter2-password"])
    seen: list[str] = []
    session = agent.new_session("redacted")
    session.add_listener(lambda e: seen.append(e.model_dump_json()))
    session.run("remember hunter2-password is the password")
    assert session.run("recall").output == "*** is the password"
    stored = session.snapshot().model_dump_json()
    assert "hunter2" not in stored and not any("hunter2" in s for s in seen)
    assert project_events(session.events) == session.memory_snapshot()
    event = session.events[1]
    assert redact_event(event, agent.redact) is event  # already clean: unchanged, not copied
    with pytest.raises(ConfigurationError, match="at least"):
        secret_redactor(["abc"])


# --- Redis password and TLS -------------------------------------------------------------------


def test_password_protected_redis_with_real_workers(chaos: ChaosStack) -> None:
    assert chaos.password and f":{chaos.password}@" in chaos.redis.url
    sid = unique("auth")
    assert chaos.producer.run(sid, "remember a", agent="notes", wait_s=60).worker  # workers work
    url_without = chaos.redis.url.replace(f":{chaos.password}@", "")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis_from_url(url_without, retry=None).get("x")
    wrong = chaos.redis.url.replace(chaos.password, "wrong-password")
    bad = Producer(chaos.settings.model_copy(update={"broker_url": wrong, "redis_url": wrong}))
    with pytest.raises(ConfigurationError, match="refused our credentials") as refused:
        bad.run(sid, "remember b", agent="notes", wait_s=10)
    bad.close()
    assert chaos.password not in str(refused.value)
    assert "***" in json.dumps(masked(chaos.settings))
    assert chaos.password not in json.dumps(masked(chaos.settings))


def test_rediss_urls_are_accepted_everywhere() -> None:
    url = "rediss://:s3cret-pass@redis.example:6380/2?ssl_cert_reqs=required&ssl_ca_certs=/ca.pem"
    client = redis_from_url(url)
    pool = client.connection_pool
    assert pool.connection_class.__name__ == "SSLConnection"
    kwargs = pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("redis.example", 6380, 2)
    assert kwargs["password"] == "s3cret-pass" and kwargs["ssl_ca_certs"] == "/ca.pem"
    settings = Settings(broker_url=url)
    assert settings.effective_redis_url == url
    config = celery_config(settings)
    assert config["broker_url"] == url
    assert config["broker_transport_options"]["global_keyprefix"] == "tether-celery:"
    assert "s3cret-pass" not in json.dumps(masked(settings))


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 (CA, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tether test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.chmod(paths[2], 0o600)
    return paths


def test_rediss_with_a_real_tls_server_and_worker(chaos: ChaosStack, tmp_path: Path) -> None:
    ca, cert, key = _tls_files(tmp_path)
    tls_port = free_port()
    server = RedisServer(
        binary="/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None,
        port=None,  # no plain TCP: the only TCP port speaks TLS
        unix_socket=True,
        password="tls-" + os.urandom(8).hex(),
        extra_config={
            "tls-port": str(tls_port),
            "tls-cert-file": str(cert),
            "tls-key-file": str(key),
            "tls-ca-cert-file": str(ca),
            "tls-auth-clients": "no",
        },
    )
    try:
        server.start()
    except ConfigurationError as exc:
        pytest.fail(f"redis-server could not serve TLS (built without TLS?): {exc}")
    try:
        url = (
            f"rediss://:{server.password}@127.0.0.1:{tls_port}/0"
            f"?ssl_cert_reqs=required&ssl_ca_certs={ca}"
        )
        plain = f"redis://:{server.password}@127.0.0.1:{tls_port}/0"
        with pytest.raises(redis.exceptions.ConnectionError):
            redis_from_url(plain, retry=None, socket_timeout=2).ping()
        assert redis_from_url(url).ping()
        env = dict(chaos.env, TETHER_BROKER_URL=url, TETHER_REDIS_URL=url, TETHER_QUEUE="tls")
        worker = WorkerProcess(unique("tls"), env, chaos.log_dir, queue="tls")
        worker.start()
        settings = chaos.settings.model_copy(
            update={"broker_url": url, "redis_url": url, "queue": "tls"}
        )
        producer = Producer(settings)
        try:
            sid = unique("tls")
            producer.run(sid, "remember over tls", agent="notes", wait_s=60)
            assert producer.run(sid, "recall", agent="notes", wait_s=60).output == "over tls"
            events = list(producer.tail(sid, idle_timeout_s=0.3))
            assert events[-1].type is EventType.STEP_END
            client = redis_from_url(url)
            assert client.get(RedisKeys("tether").fence("default", sid)) is not None  # leases
            client.close()
        finally:
            producer.close()
            worker.stop()
        assert "Connected to rediss://" in worker.log_text()
        assert server.password is not None and server.password not in worker.log_text()
    finally:
        server.close()
    assert ssl.OPENSSL_VERSION  # the client side is the interpreter's OpenSSL
