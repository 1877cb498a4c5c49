"""The test suite keeps to its temporary directories: nothing it runs, at
whatever scope, reaches the user's kernix cache (``~/.cache/kernix``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernix import paths

USER_CACHE = Path(os.path.expanduser("~"), ".cache", "kernix")


def _outside_the_user_cache(root: Path) -> bool:
    return not (root == USER_CACHE or root.is_relative_to(USER_CACHE))


@pytest.fixture(scope="module")
def root_seen_by_a_module_fixture() -> Path:
    # module-scoped fixtures (a module built once for several tests) run before function-scoped ones
    return paths.cache_root()


def test_a_module_scoped_fixture_builds_into_the_sessions_cache(root_seen_by_a_module_fixture: Path,
                                                                 session_cache_dir: Path) -> None:
    assert _outside_the_user_cache(root_seen_by_a_module_fixture)
    assert root_seen_by_a_module_fixture == session_cache_dir


def test_collection_already_sees_the_sessions_cache(session_cache_dir: Path) -> None:
    assert Path(COLLECTED_ROOT) == session_cache_dir


def test_a_test_that_unsets_kernix_cache_dir_still_stays_out_of_the_user_cache(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNIX_CACHE_DIR")
    monkeypatch.setattr(paths, "_override", None)
    assert _outside_the_user_cache(paths.cache_root())


COLLECTED_ROOT = str(paths.cache_root())  # at import, as pytest collects this file
