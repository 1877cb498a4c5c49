"""Shared test fixtures.

From the start of the session (before any module is collected or any fixture,
of whatever scope, runs), ``KERNIX_CACHE_DIR`` and ``XDG_CACHE_HOME`` point at
temporary directories of this process, removed at its end, so the suite never
reads or writes the user's real cache (``~/.cache/kernix``), also where a test
unsets ``KERNIX_CACHE_DIR``; each test sets ``KERNIX_CACHE_DIR`` again, in case
the one before changed it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Under pytest-xdist (``pytest -n auto``) several worker processes may use one GPU: each takes
# memory as it needs it instead of JAX's default of most of the GPU's memory up front.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


_SESSION_DIRS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Point kernix's cache (and the XDG cache it would fall back on) at temporary
    directories for the whole session; see the module's docstring."""
    for variable, prefix in (("KERNIX_CACHE_DIR", "kernix-test-cache-"), ("XDG_CACHE_HOME", "kernix-test-xdg-")):
        _SESSION_DIRS.append(tempfile.mkdtemp(prefix=prefix))
        os.environ[variable] = _SESSION_DIRS[-1]
    _check_installed()


def pytest_unconfigure(config: pytest.Config) -> None:
    for directory in _SESSION_DIRS:
        shutil.rmtree(directory, ignore_errors=True)


def _check_installed() -> None:
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
def session_cache_dir() -> Path:
    """The cache root shared by the whole test session (set up by :func:`pytest_configure`)."""
    return Path(_SESSION_DIRS[0])


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
