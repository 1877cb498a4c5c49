"""Shared test fixtures.

Every test runs with ``KERNIX_CACHE_DIR`` pointing at a per-session temporary
directory, so the suite never reads or writes the user's real cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Under pytest-xdist (``pytest -n auto``) several worker processes may use one GPU: each takes
# memory as it needs it instead of JAX's default of most of the GPU's memory up front.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def pytest_configure(config: pytest.Config) -> None:
    """With ``KERNIX_TEST_INSTALLED=1`` (set by ``.ci/run``), the suite tests an
    installed kernix: fail at once if ``import kernix`` finds a source checkout."""
    if os.environ.get("KERNIX_TEST_INSTALLED") != "1":
        return
    import kernix

    package = Path(kernix.__file__).resolve().parent
    if (package.parent / "pyproject.toml").is_file() or (package.parent / ".git").exists():
        raise pytest.UsageError(
            f"KERNIX_TEST_INSTALLED=1 but kernix was imported from a source checkout ({package}); "
            "run the tests from a directory outside the checkout, with PYTHONPATH unset and kernix "
            "installed non-editable (pip install dist/kernix-*.whl)"
        )


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
