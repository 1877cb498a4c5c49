"""Shared test fixtures.

Every test runs with ``KERNIX_CACHE_DIR`` pointing at a per-session temporary
directory, so the suite never reads or writes the user's real cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache root shared by the whole test session."""
    return tmp_path_factory.mktemp("kernix-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(session_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(session_cache_dir))
    return session_cache_dir


@pytest.fixture(autouse=True)
def _cpu_unless_gpu_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Run tests of C++ (CPU) modules on the CPU, also on a machine with a GPU.

    A target registered for the CPU exists only there, while JAX puts new
    arrays on the GPU when it has one.  Processes a test starts inherit
    ``JAX_PLATFORMS=cpu``; this process has started its backends already.
    """
    if request.node.get_closest_marker("gpu"):
        yield
        return
    import jax

    cpu = jax.devices("cpu")[0]  # starts every backend before the variable below is set
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    with jax.default_device(cpu):
        yield
