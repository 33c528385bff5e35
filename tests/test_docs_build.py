"""The documentation builds with warnings as errors, and its API reference is made from the
docstrings.

``make docs`` runs this test (into ``build/site``, named by ``TETHER_DOCS_SITE_DIR``) and
``make test`` leaves it out (marker ``docs``): CI runs both, so the site is built and checked
once per run instead of twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = Path(os.environ.get("TETHER_DOCS_SITE_DIR") or tmp_path / "site").resolve()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    pages = {
        "api/tether/index.html": "SessionLogReader",
        "api/producer/index.html": "RunHandle",
        "api/worker/index.html": "tether.worker.tasks",
        "api/integrations/index.html": "TetherSession",
        "api/core/index.html": "history_points",
    }
    for page, name in pages.items():
        assert name in (site / page).read_text(), f"{page} does not document {name}"
    for guide in (
        "quickstart",
        "concepts",
        "deployment",
        "recipes/agents-sdk",
        "recipes/celery-canvas",
        "recipes/time-travel",
        "redis-key-layout-v2",
    ):
        assert (site / guide / "index.html").is_file(), guide
