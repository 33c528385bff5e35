"""Settings are validated once, before any service is touched: one line, no traceback.

Each bad setting is tried on the entry points as real processes: ``tether worker``,
``celery -A tether.worker.app worker`` (Celery's own CLI), ``tether run`` and ``tether config``.
``make test`` tries each bad setting once, on the entry points in turn (so each entry point
refuses at least one); ``make test-long`` tries every setting on every entry point (each start
of a worker process costs one to two seconds of CPU).
Every case also carries a password in a URL, which must never appear in the output. The broker
of every case points at 127.0.0.1:1 (nothing listens there), so nothing could reach a real Redis
even if validation let a command through.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.openai_fixture import OpenAIServer
from tether.errors import SettingsError
from tether.models.openai_check import check_endpoint
from tether.settings import Settings, load_settings, masked
from tether.settings.checks import mask_url

SECRET = "s3cret-pw-7f1c"
SAFE_BROKER = f"redis://:{SECRET}@127.0.0.1:1/0"
CASES = {
    # name: (variable at fault, extra environment)
    "unknown store scheme": ("TETHER_STORE_URL", {"TETHER_STORE_URL": "s4://x"}),
    "bad port": (
        "TETHER_REDIS_URL",
        {"TETHER_REDIS_URL": f"redis://:{SECRET}@127.0.0.1:notaport/0"},
    ),
    "broker scheme typo": (
        "TETHER_BROKER_URL",
        {"TETHER_BROKER_URL": f"redis:/:{SECRET}@127.0.0.1:6379/0"},
    ),
    "unknown model API": ("TETHER_OPENAI_API", {"TETHER_OPENAI_API": "completions"}),
}
COMMANDS = {
    "tether worker": ["-m", "tether.producer.ops.cli", "worker", "-P", "solo"],
    "celery worker": [
        "-m",
        "celery",
        "-A",
        "tether.worker.app",
        "worker",
        "-P",
        "solo",
        "--without-mingle",
        "--without-gossip",
    ],
    "tether run": ["-m", "tether.producer.ops.cli", "run", "s1", "hi", "--agent", "echo"],
    "tether config": ["-m", "tether.producer.ops.cli", "config"],
}


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update({"TETHER_BROKER_URL": SAFE_BROKER, **extra})
    return env


WORKER_COMMANDS = {name: args for name, args in COMMANDS.items() if "worker" in name}

#: ``make test``: each case once, on the commands in turn; ``make test-long``: every pair.
SWEEP = [
    pytest.param(False, id="each-once"),
    pytest.param(True, id="every-pair", marks=pytest.mark.slow),
]


def pairs(cases: list[str], commands: list[str], *, every: bool) -> list[tuple[str, str]]:
    """Every (case, command), or each case once on the commands in turn: with at least as many
    cases as commands, every command still gets a case."""
    if every:
        return [(case, command) for case in cases for command in commands]
    count = max(len(cases), len(commands))
    return [(cases[i % len(cases)], commands[i % len(commands)]) for i in range(count)]


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_each_case_once_still_tries_every_entry_point() -> None:
    for cases, commands in ((CASES, COMMANDS), (range(3), WORKER_COMMANDS), ("ab", "xy")):
        tried = pairs(list(map(str, cases)), list(commands), every=False)
        assert {c for c, _ in tried} == set(map(str, cases))
        assert {m for _, m in tried} == set(commands)


@pytest.mark.parametrize("every", SWEEP)
def test_every_entry_point_refuses_each_bad_setting_with_one_line(
    tmp_path: Path, every: bool
) -> None:
    jobs = {
        (case, command): (COMMANDS[command], _env(CASES[case][1]))
        for case, command in pairs(list(CASES), list(COMMANDS), every=every)
    }
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(_run, args, env, tmp_path) for key, (args, env) in jobs.items()}
        done = {key: future.result() for key, future in futures.items()}
    for (case, command), proc in done.items():
        variable = CASES[case][0]
        where = f"{command} with {case}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, where
        assert len(lines) == 1, where
        assert lines[0].startswith("error: SettingsError: ") and variable in lines[0], where
        assert "Traceback" not in proc.stdout + proc.stderr, where
        assert SECRET not in proc.stdout + proc.stderr, where
        assert "ready." not in proc.stdout + proc.stderr, where  # no worker ever started


@pytest.mark.parametrize("every", SWEEP)
def test_a_worker_whose_agent_modules_do_not_import_exits_2_naming_the_module(
    tmp_path: Path, every: bool
) -> None:
    """It used to log "ready" and fail every run ``UnknownAgent``; the docs promise exit 2 on a
    bad setting. A module that raises on import fails the same way."""
    (tmp_path / "broken_agents.py").write_text("raise RuntimeError('half-written module')\n")
    cases = {"no_such_agents_mod": "cannot be imported", "broken_agents": "half-written module"}
    jobs = {
        (module, command): (COMMANDS[command], _env({"TETHER_AGENT_MODULES": module}))
        for module, command in pairs(list(cases), list(WORKER_COMMANDS), every=every)
    }
    for env in (env for _, env in jobs.values()):
        env["PYTHONPATH"] = str(tmp_path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(_run, args, env, tmp_path) for key, (args, env) in jobs.items()}
        done = {key: future.result() for key, future in futures.items()}
    for (module, command), proc in done.items():
        where = f"{command} with {module}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, where
        assert len(lines) == 1 and lines[0].startswith("error: ConfigurationError: "), where
        assert f"agent module {module!r}" in lines[0] and cases[module] in lines[0], where
        assert "ready." not in proc.stdout + proc.stderr, where


def test_the_message_names_the_value_masked_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_BROKER_URL", f"redis://:{SECRET}@cache.example:notaport/0")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "TETHER_BROKER_URL='redis://:***@cache.example:notaport/0'" in message
    assert "port 'notaport' is not a number" in message and "use redis://" in message
    assert SECRET not in message
    assert caught.value.variables == ("TETHER_BROKER_URL",)


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("TETHER_STORE_URL", "s4://x", "scheme 's4://' is not supported"),
        ("TETHER_STORE_URL", "s3://", "bucket name is missing"),
        ("TETHER_REDIS_URL", "redis://127.0.0.1:6379/zero", "database 'zero' is not a number"),
        ("TETHER_REDIS_URL", "amqp://guest@h//", "scheme 'amqp://' is not supported"),
        ("TETHER_BROKER_URL", "redis://127.0.0.1:70000/0", "port '70000'"),
        ("TETHER_BROKER_URL", "127.0.0.1:6379", "has no scheme"),
        ("TETHER_S3_ENDPOINT_URL", "ftp://s3.local", "scheme 'ftp://'"),
        ("TETHER_NAMESPACE", "a:b", "prefix 'a:b' is not allowed"),
        ("TETHER_TENANT", "a/b", "tenant 'a/b' is not allowed"),
        ("TETHER_QUEUE", "two words", "use 1-200 characters"),
        ("TETHER_MAX_ATTEMPTS", "1000", "less than or equal to 100"),
        ("TETHER_AGENT_MODULES", "good.mod,bad-mod", "'bad-mod' is not a module path"),
        ("TETHER_OPENAI_API", "completions", "'chat' or 'responses'"),
        ("TETHER_OPENAI_TIMEOUT_S", "0", "greater than 0"),
        ("TETHER_OPENAI_MAX_RETRIES", "-1", "greater than or equal to 0"),
        ("TETHER_OPENAI_CHECK_MODELS", "gpt-4o,two words", "'two words' is not a model name"),
        # a stray character made the prices and limits keyed by the real name not apply
        ("TETHER_OPENAI_MODEL", "gpt-4o\n", "'gpt-4o\\n' is not a model name"),
        ("TETHER_OPENAI_MODEL", "   ", "'   ' is not a model name"),
        ("TETHER_OPENAI_AZURE_ENDPOINT", "azure.example", "has no scheme"),
        ("TETHER_OPENAI_BASE_URL", "http://llm:8000/v1?key=1", "query string or fragment"),
        ("TETHER_S3_ENDPOINT_URL", "http://s3:9000/#x", "query string or fragment"),
        ("TETHER_MODEL_PRICES", "{not json", "is not JSON"),
        (
            "TETHER_MODEL_PRICES",
            '{"m": {"input_usd_per_mtok": -1, "output_usd_per_mtok": 1}}',
            "m.input_usd_per_mtok",
        ),
        ("TETHER_MODEL_PRICES", '{"m": {"input_usd_per_mtok": 1}}', "output_usd_per_mtok"),
        (
            "TETHER_MODEL_PRICES",
            '{"a b": {"input_usd_per_mtok": 1, "output_usd_per_mtok": 1}}',
            "'a b'",
        ),
        ("TETHER_TENANT_BUDGETS", '{"acme": {"usd_per_day": "lots"}}', "acme.usd_per_day"),
        ("TETHER_TENANT_BUDGETS", '{"acme": {"tokens_per_month": 5}}', "tokens_per_month"),
        ("TETHER_TENANT_BUDGETS", '{"acme": {"usd_per_day": 1e-12}}', "one nano-USD"),
        ("TETHER_TENANT_BUDGETS", '{"a/b": {}}', "'a/b'"),
        # JSON keeps the later of two equal keys silently: the first limit never applied
        (
            "TETHER_MODEL_LIMITS",
            '{"m": {"tokens_per_minute": 5}, "m": {"tokens_per_minute": 6}}',
            "has the key 'm' twice",
        ),
        ("TETHER_TENANT_BUDGETS", '{"a": {"tokens_per_day": 5}, "a": {}}', "has the key 'a' twice"),
        ("TETHER_WEBHOOK_SECRETS", '{"acme": "s1-xxxxxx", "acme": "s2-xxxxxx"}', "'acme' twice"),
        ("TETHER_TENANT_BUDGETS", "@/nonexistent/budgets.json", "cannot be read"),
    ],
)
def test_each_check_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"{variable}=") and needle in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_api_key_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_OPENAI_API_KEY", "sk-hidden-123")
    monkeypatch.setenv("TETHER_OPENAI_BASE_URL", "https://user:sk-hidden-123@api.example/v1")
    assert "sk-hidden" not in repr(masked(load_settings()))
    monkeypatch.setenv("TETHER_OPENAI_BASE_URL", "https://user:sk-hidden-123@api.example:x/v1")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "sk-hidden" not in str(caught.value) and "TETHER_OPENAI_BASE_URL" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:pw@h:notaport/0", "redis://user:***@h:notaport/0"),
        ("redis:/:pw@h", "redis:***@h"),
        ("unix:///tmp/r.sock?db=0&password=pw", "unix:///tmp/r.sock?db=0&password=***"),
        ("memory://", "memory://"),
        ("file:///var/tether", "file:///var/tether"),
        # Azure's key and function code, a SAS signature, a presigned S3 URL's signature
        (
            "https://a.example/v1?api-version=1&api-key=pw",
            "https://a.example/v1?api-version=1&api-key=***",
        ),
        ("https://f.example/api/hook?code=pw", "https://f.example/api/hook?code=***"),
        ("https://b.example/c?sv=2&sig=pw", "https://b.example/c?sv=2&sig=***"),
        ("https://s3.example/o?X-Amz-Signature=pw", "https://s3.example/o?X-Amz-Signature=***"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_local_env_file_is_read_below_dotenv_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("TETHER_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tether").mkdir()
    (tmp_path / ".tether" / "env").write_text(
        "# written by tether up\n"
        "export TETHER_BROKER_URL='redis://:pw@127.0.0.1:7001/0'\n"
        "export TETHER_QUEUE='from-local'\n"
        "export TETHER_TENANT='from-local'\n"
        "export AWS_ACCESS_KEY_ID='testing'\n"
    )
    # other programs' lines in .env are theirs: ignored, not refused
    (tmp_path / ".env").write_text(
        "MY_APP_TOKEN=x\nTETHER_QUEUE=from-dotenv\nTETHER_TENANT=from-dotenv\n"
    )
    monkeypatch.setenv("TETHER_TENANT", "from-environment")
    settings = load_settings()
    assert settings.broker_url == "redis://:pw@127.0.0.1:7001/0"  # only .tether/env sets it
    assert settings.queue == "from-dotenv"  # .env wins over .tether/env
    assert settings.tenant == "from-environment"  # the environment wins over both


def test_a_bad_value_in_the_local_env_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("TETHER_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tether").mkdir()
    (tmp_path / ".tether" / "env").write_text("export TETHER_LEASE_TTL=5\n")
    with pytest.raises(SettingsError, match=r"unknown setting TETHER_LEASE_TTL in \.env or"):
        load_settings()


def test_a_stream_retention_shorter_than_a_run_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_STREAM_RETENTION_S", "60")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "TETHER_STREAM_RETENTION_S (60) is shorter than TETHER_MAX_RUN_S (600)" in message
    assert "set TETHER_STREAM_RETENTION_S >= 600 or lower TETHER_MAX_RUN_S" in message
    monkeypatch.setenv("TETHER_MAX_RUN_S", "60")
    assert load_settings().stream_retention_s == 60


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        (
            {"TETHER_OPENAI_AZURE_ENDPOINT": "https://r.openai.azure.com"},
            "TETHER_OPENAI_AZURE_ENDPOINT needs TETHER_OPENAI_AZURE_API_VERSION",
        ),
        (
            {"TETHER_OPENAI_AZURE_API_VERSION": "2024-10-21"},
            "TETHER_OPENAI_AZURE_API_VERSION is set without TETHER_OPENAI_AZURE_ENDPOINT",
        ),
        (
            {
                "TETHER_OPENAI_AZURE_ENDPOINT": "https://r.openai.azure.com",
                "TETHER_OPENAI_AZURE_API_VERSION": "2024-10-21",
                "TETHER_OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
            },
            "TETHER_OPENAI_BASE_URL and TETHER_OPENAI_AZURE_ENDPOINT are both set",
        ),
    ],
)
def test_azure_settings_must_make_one_whole_endpoint(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], needle: str
) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=needle):
        load_settings()


# --- the model endpoint, checked when a worker starts --------------------------------------------


@pytest.mark.parametrize("every", SWEEP)
def test_a_worker_refuses_to_start_when_the_model_endpoint_check_fails(
    tmp_path: Path, openai_server: OpenAIServer, every: bool
) -> None:
    key = openai_server.api_key
    wrong = "sk-wrong-" + SECRET
    served = {"TETHER_OPENAI_BASE_URL": openai_server.base_url, "TETHER_OPENAI_API_KEY": key}
    cases = {
        # name: (variable at fault, its text in the line, extra environment)
        "unknown model": (
            "TETHER_OPENAI_CHECK_MODELS",
            "names 'gpt-unknown', which",
            {**served, "TETHER_OPENAI_CHECK_MODELS": "test-model,gpt-unknown"},
        ),
        "refused key": (
            "TETHER_OPENAI_API_KEY",
            "was refused by",
            {**served, "TETHER_OPENAI_API_KEY": wrong, "TETHER_OPENAI_CHECK_MODELS": "test-model"},
        ),
        "unreachable endpoint": (
            "TETHER_OPENAI_BASE_URL",
            "cannot be reached",
            {
                "TETHER_OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                "TETHER_OPENAI_API_KEY": key,
                "TETHER_OPENAI_CHECK_MODELS": "test-model",
            },
        ),
    }
    jobs = {
        (case, command): (WORKER_COMMANDS[command], _env(cases[case][2]))
        for case, command in pairs(list(cases), list(WORKER_COMMANDS), every=every)
    }
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {key: pool.submit(_run, args, env, tmp_path) for key, (args, env) in jobs.items()}
        done = {key: future.result() for key, future in futures.items()}
    for (case, command), proc in done.items():
        variable, needle = cases[case][:2]
        where = f"{command} with {case}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, where
        assert len(lines) == 1, where
        assert lines[0].startswith(f"error: SettingsError: {variable}") and needle in lines[0], (
            where
        )
        for secret in (SECRET, key, wrong):
            assert secret not in proc.stdout + proc.stderr, where
        assert "Traceback" not in proc.stdout + proc.stderr, where
        assert "ready." not in proc.stdout + proc.stderr, where


def test_the_model_endpoint_check_passes_for_served_models_and_is_off_by_default(
    openai_server: OpenAIServer,
) -> None:
    key = openai_server.api_key
    check_endpoint(Settings(openai_base_url="http://127.0.0.1:1/v1"))  # no list: no request
    check_endpoint(
        Settings(
            openai_base_url=openai_server.base_url,
            openai_api_key=key,
            openai_check_models=["test-model"],
        )
    )
    # Azure lists base models, not deployments: only the endpoint and the key are checked
    azure = {
        "openai_azure_endpoint": openai_server.root_url,
        "openai_azure_api_version": "2024-10-21",
        "openai_check_models": ["my-deployment"],
    }
    check_endpoint(Settings(openai_api_key=key, **azure))
    with pytest.raises(SettingsError, match="TETHER_OPENAI_API_KEY was refused") as refused:
        check_endpoint(Settings(openai_api_key="sk-wrong-" + SECRET, **azure))
    assert refused.value.variables == ("TETHER_OPENAI_API_KEY",) and SECRET not in str(
        refused.value
    )
    paths = [(r.path, r.query.get("api-version")) for r in openai_server.requests()]
    assert paths == [
        ("/v1/models", None),
        ("/openai/models", "2024-10-21"),
        ("/openai/models", "2024-10-21"),
    ]
