"""A private Redis Cluster: N ``redis-server --cluster-enabled yes`` masters joined by redis-cli.

For the tests and the benchmarks. Every node is a :class:`~tether.dev.redis_server.RedisServer`
(free 127.0.0.1 port, private temporary directory, no persistence, ``0600`` config file, own
process session) with cluster mode on; :meth:`RedisClusterProcesses.start` joins them with
``redis-cli --cluster create ... --cluster-replicas 0`` and waits until every node reports
``cluster_state:ok``. The cluster bus port is chosen explicitly (``cluster-port``, Redis >= 7.0)
because the default ``port + 10000`` may be taken or above 65535 for a random free port.

``redis-cli`` is looked up next to the ``redis-server`` binary, then on ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from types import TracebackType
from urllib.parse import quote

import redis

from tether.dev.redis_server import (
    INSTALL_HINT,
    RedisServer,
    find_redis_server_binary,
    free_port,
    server_version,
)
from tether.errors import ConfigurationError

CLI_INSTALL_HINT = (
    "install it with `apt-get install redis-tools` (Debian/Ubuntu; `redis-server` pulls it in "
    "too) or `brew install redis` (macOS), or put redis-cli next to the redis-server binary"
)
#: ``cluster-port`` (a bus port chosen by us) exists since Redis 7.0.
MIN_VERSION = (7, 0)
_HOST = "127.0.0.1"
_NODE_ATTEMPTS = 3
_SLOTS = 16384


def find_redis_cli_binary(server_binary: str) -> str:
    """The ``redis-cli`` next to ``server_binary``, else the one on ``PATH``.

    Raises:
        ConfigurationError: none was found; the message says how to install one.
    """
    beside = os.path.join(os.path.dirname(os.path.abspath(server_binary)), "redis-cli")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("redis-cli")
    if found is None:
        raise ConfigurationError(
            f"no redis-cli binary found next to {server_binary!r} or on PATH; {CLI_INSTALL_HINT}"
        )
    return found


class RedisClusterProcesses:
    """``masters`` private cluster nodes on 127.0.0.1, no replicas, all slots assigned.

    Use as a context manager, or call :meth:`start` and :meth:`close`.

    Args:
        masters: number of master nodes (redis-cli needs at least 3).
        binary: the ``redis-server`` to run (default: :func:`find_redis_server_binary`).
        password: require this password on every node (``requirepass``; it appears in :attr:`url`
            only).
        node_timeout_ms: ``cluster-node-timeout``: how soon a killed node is marked failed.
        start_timeout_s: how long :meth:`start` waits for ``cluster_state:ok``.

    Raises:
        ConfigurationError: fewer than 3 masters, no binaries, or a redis-server older than 7.0.
    """

    def __init__(
        self,
        masters: int = 3,
        *,
        binary: str | None = None,
        password: str | None = None,
        node_timeout_ms: int = 2000,
        start_timeout_s: float = 30.0,
    ) -> None:
        if masters < 3:
            raise ConfigurationError(f"a Redis Cluster needs at least 3 masters, not {masters}")
        self.binary = binary or find_redis_server_binary()
        version = server_version(self.binary)
        if version[:2] < MIN_VERSION:
            shown = ".".join(map(str, version))
            raise ConfigurationError(
                f"{self.binary!r} is Redis {shown}; the cluster launcher needs >= 7.0; "
                f"{INSTALL_HINT}"
            )
        self.cli = find_redis_cli_binary(self.binary)
        self.masters = masters
        self.password = password
        self.node_timeout_ms = node_timeout_ms
        self.start_timeout_s = start_timeout_s
        self.nodes: list[RedisServer] = []

    # --- addresses ----------------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        """The client ports of the nodes, in node order."""
        return [port for node in self.nodes if (port := node.port) is not None]

    @property
    def url(self) -> str:
        """``redis+cluster://[:password@]127.0.0.1:p1,127.0.0.1:p2,...`` (all nodes)."""
        if not self.nodes:
            raise ConfigurationError("RedisClusterProcesses has no nodes yet; call start() first")
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return "redis+cluster://" + auth + ",".join(f"{_HOST}:{p}" for p in self.ports)

    def __repr__(self) -> str:
        return f"RedisClusterProcesses(ports={self.ports}, binary={self.binary!r})"

    def node_client(self, index: int) -> redis.Redis:
        """A plain (non-cluster) bytes client on one node, e.g. for ``CLUSTER INFO``."""
        return self.nodes[index].client()

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> RedisClusterProcesses:
        """Start the nodes, create the cluster and wait for ``cluster_state:ok``.

        Raises:
            ConfigurationError: a node did not start, redis-cli failed, or the cluster did not
                become ready in ``start_timeout_s``.
        """
        if self.nodes:
            return self
        try:
            for _ in range(self.masters):
                self.nodes.append(self._start_node())
            self._create()
            self.wait_ok()
        except BaseException:
            self.close()
            raise
        return self

    def _start_node(self) -> RedisServer:
        # The bus port is picked like the client port: free a moment ago. On the rare race a
        # fresh pair is tried.
        last: ConfigurationError | None = None
        for _ in range(_NODE_ATTEMPTS):
            node = RedisServer(
                binary=self.binary,
                port=0,
                unix_socket=False,
                password=self.password,
                host=_HOST,
                extra_config=self._node_config(),
            )
            try:
                return node.start()
            except ConfigurationError as exc:
                node.close()
                last = exc
        assert last is not None
        raise last

    def _node_config(self) -> dict[str, str]:
        # No masterauth: without replicas no node ever authenticates to another.
        return {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",  # relative to the node's private dir
            "cluster-port": str(free_port(_HOST)),
            "cluster-node-timeout": str(self.node_timeout_ms),
        }

    def _create(self) -> None:
        env = dict(os.environ)
        if self.password is not None:
            env["REDISCLI_AUTH"] = self.password  # not on the command line: `ps` shows that
        addresses = [f"{_HOST}:{port}" for port in self.ports]
        cmd = [self.cli, "--cluster", "create", *addresses]
        cmd += ["--cluster-replicas", "0", "--cluster-yes"]
        try:
            done = subprocess.run(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.start_timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigurationError(f"`redis-cli --cluster create` failed: {exc}") from exc
        if done.returncode != 0:
            raise ConfigurationError(
                f"`redis-cli --cluster create` exited with code {done.returncode}; it printed:\n"
                f"{(done.stdout + done.stderr)[-1500:]}"
            )

    def cluster_info(self, index: int) -> dict[str, str]:
        """``CLUSTER INFO`` of one node as a dict of strings."""
        client = self.node_client(index)
        try:
            # Two words, not "CLUSTER INFO": that name carries a dict-parsing callback.
            raw = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        finally:
            client.close()
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def _node_ok(self, index: int) -> bool:
        with contextlib.suppress(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            info = self.cluster_info(index)
            return (
                info.get("cluster_state") == "ok"
                and info.get("cluster_slots_ok") == str(_SLOTS)
                and info.get("cluster_known_nodes") == str(self.masters)
            )
        return False

    def wait_ok(self, timeout_s: float | None = None) -> None:
        """Wait until every node reports ``cluster_state:ok`` with all slots and nodes known.

        Raises:
            ConfigurationError: not within ``timeout_s`` (default ``start_timeout_s``).
        """
        limit_s = self.start_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        while not all(self._node_ok(i) for i in range(len(self.nodes))):
            if time.monotonic() > deadline:
                states = [self._describe_state(i) for i in range(len(self.nodes))]
                raise ConfigurationError(
                    f"the Redis Cluster on ports {self.ports} was not ready within {limit_s} s "
                    f"(node states: {states}); see the node logs in their work directories"
                )
            time.sleep(0.05)

    def _describe_state(self, index: int) -> str:
        try:
            return self.cluster_info(index).get("cluster_state", "?")
        except redis.exceptions.RedisError as exc:
            return f"unreachable ({type(exc).__name__})"

    def kill_node(self, index: int) -> None:
        """Kill one node abruptly (SIGKILL); its slots become unavailable."""
        self.nodes[index].kill()

    def restart_node(self, index: int) -> None:
        """Start a killed node again on its port with its cluster config (its data is gone) and
        wait until the cluster is ok again."""
        self.nodes[index].start()
        self.wait_ok()

    def close(self) -> None:
        """Stop every node and delete their work directories."""
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.close()

    def __enter__(self) -> RedisClusterProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
