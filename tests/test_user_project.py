"""A user project with its own ``worker.py``, ``producer.py`` and ``shared/`` runs Tether unharmed.

Before 0.2 Tether installed the top-level packages ``shared``, ``producer`` and ``worker``, which
collide with the most common module names in user projects. Now everything lives under
``tether``; this test starts a real Celery worker and a producer from inside a user project whose
own modules with those names are traps (they record that they were imported, then raise), with
the project directory first on ``sys.path`` exactly as ``python -m celery`` and
``python script.py`` put it there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.stack import eventually, unique
from tether import SessionLogReader
from tether.dev.workers import READY_MARK
from tether.persistence.storage_url import open_storage

TRAP_NAMES = ("worker", "producer", "shared")

#: Each trap leaves a marker file before raising, so an import whose exception something
#: swallowed is still detected.
TRAP = """\
from pathlib import Path

Path(__file__).resolve().parent.joinpath("{marker}").write_text("imported")
raise RuntimeError("user {name} imported")
"""

AGENTS = '''\
"""The user's agents (TETHER_AGENT_MODULES=agents)."""

from tether import Agent, ModelRequest, ModelResponse, ScriptedModel, ToolOutput, UserMessage
from tether import tool


@tool
def reverse(text: str) -> str:
    """Reverse ``text``."""
    return text[::-1]


def _respond(request: ModelRequest) -> ModelResponse:
    last = request.items[-1]
    if isinstance(last, ToolOutput):
        return ModelResponse.final(f"reversed: {last.output}")
    users = [item for item in request.items if isinstance(item, UserMessage)]
    return ModelResponse.call("call_1", "reverse", {"text": users[-1].content})


def reverser() -> Agent:
    return Agent(ScriptedModel(responder=_respond), "scripted-reverser", tools=[reverse])


TETHER_AGENTS = {"reverser": reverser}
'''

RUN_AGENT = """\
import json
import sys

from tether.producer import Producer

with Producer() as producer:
    result = producer.run(sys.argv[1], sys.argv[2], agent="reverser", wait_s=60)
print(json.dumps({"status": str(result.status), "output": result.output}))
"""


@dataclass
class UserProject:
    """The project directory, its environment and its worker."""

    root: Path
    env: dict[str, str]
    store_url: str
    worker: subprocess.Popen[bytes]
    worker_log: Path

    def markers(self) -> list[str]:
        """Trap markers: the names of user modules that something imported."""
        return sorted(p.name for p in self.root.rglob("IMPORTED-*"))


def write_project(root: Path) -> None:
    """The user's files: traps named like Tether's pre-0.2 packages, agents, a run script."""
    (root / "shared").mkdir(parents=True)
    for name, path in (
        ("worker", root / "worker.py"),
        ("producer", root / "producer.py"),
        ("shared", root / "shared" / "__init__.py"),
    ):
        # the marker goes to the project root, wherever the trap module lives
        marker = f"IMPORTED-{name}" if path.parent == root else f"../IMPORTED-{name}"
        path.write_text(TRAP.format(marker=marker, name=name))
    (root / "agents.py").write_text(AGENTS)
    (root / "run_agent.py").write_text(RUN_AGENT)


def project_env(redis_url: str, store_url: str) -> dict[str, str]:
    """The user's environment: a private Redis, a local store, a namespace of its own."""
    env = {
        k: v
        for k, v in os.environ.items()
        # nothing may add import paths ahead of or instead of the project directory
        if not k.startswith(("TETHER_", "AWS_")) and k not in ("PYTHONPATH", "PYTHONSAFEPATH")
    }
    env.update(
        {
            "TETHER_BROKER_URL": redis_url,
            "TETHER_REDIS_URL": redis_url,
            "TETHER_STORE_URL": store_url,
            "TETHER_AGENT_MODULES": "agents",
            "TETHER_NAMESPACE": f"user-{uuid.uuid4().hex[:8]}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Warm shutdown of the worker's process group, then SIGKILL whatever is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    # a pool child may outlive the main process: clear the whole group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.fixture
def project(tmp_path: Path, redis_url: str) -> Iterator[UserProject]:
    root = tmp_path / "user_project"
    write_project(root)
    store_url = f"file://{tmp_path / 'store'}"
    env = project_env(redis_url, store_url)
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tether.worker.app",
                "worker",
                "-P",
                "solo",
                "-n",
                f"{unique('user')}@%h",
                "--without-mingle",
                "--without-gossip",
                "-l",
                "INFO",
            ],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # its own process group, so stopping it can never leave a child behind
            start_new_session=True,
        )
    user = UserProject(root, env, store_url, worker, log_path)
    try:
        eventually(
            lambda: READY_MARK in log_path.read_text(errors="replace") or worker.poll() is not None,
            timeout_s=60,
        )
        assert worker.poll() is None, f"worker exited:\n{log_path.read_text(errors='replace')}"
        yield user
    finally:
        stop_group(worker)
        # nothing of the group is left running
        with pytest.raises(ProcessLookupError):
            os.killpg(worker.pid, 0)


def test_worker_and_producer_run_a_custom_agent_from_a_project_shadowing_old_names(
    project: UserProject,
) -> None:
    session_id = unique("user")

    proc = subprocess.run(
        [sys.executable, "run_agent.py", session_id, "hello tether"],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    worker_log = project.worker_log.read_text(errors="replace")
    assert proc.returncode == 0, f"{proc.stderr}\nworker log:\n{worker_log[-3000:]}"
    assert json.loads(proc.stdout) == {"status": "COMPLETED", "output": "reversed: rehtet olleh"}
    assert project.markers() == []
    for name in TRAP_NAMES:
        assert f"user {name} imported" not in worker_log
    # the worker committed the session to the project's local store
    store, archive = open_storage(project.store_url)
    report = SessionLogReader(store, archive).verify(session_id)
    assert report.ok, report.problems
