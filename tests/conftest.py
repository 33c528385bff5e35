"""Test configuration: service fixtures live in tests/support and are loaded as plugins."""

import logging

pytest_plugins = [
    "tests.support.redis_server",
    "tests.support.redis_cluster",
    "tests.support.moto_server",
    "tests.support.stack",
    "tests.support.openai_fixture",
    "tests.support.rabbitmq_server",
    "tests.support.crash",
    "tests.support.stream_stack",
    "tests.support.agents_fleet",
    "tests.support.schedule",
    "tests.support.cli_in_process",
]

# moto's embedded werkzeug server logs every request at INFO; keep test output readable
logging.getLogger("werkzeug").setLevel(logging.WARNING)
