"""Shared test fixtures.

Every test runs with ``KERNIX_CACHE_DIR`` pointing at a per-session temporary
directory, so the suite never reads or writes the user's real cache.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache root shared by the whole test session."""
    return tmp_path_factory.mktemp("kernix-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(session_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(session_cache_dir))
    return session_cache_dir


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The repository's ``fixtures/`` directory (C++/CUDA sources)."""
    return FIXTURES
