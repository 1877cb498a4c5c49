"""The cache's size limit: sizes and ages, least-recently-used eviction after a
build and by ``kernix cache prune``, last use, and that an eviction never
removes what another process is building, never leaves a half-removed entry a
load would trust, and never follows a symbolic link.

One tiny C++ module is built (into a cache that is over its limit, so the build
evicts); every other entry is made by hand or copied from it."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FIXTURES, unique_name

import kernix
from kernix.cli import main
from kernix.errors import CacheError, OptionError
from kernix.store import entries, prune
from kernix.store.prune import DEFAULT_MAX_SIZE, max_size, parse_age, parse_size
from kernix.store.lock import build_lock

SOURCE = FIXTURES / "reliability" / "add_one.cpp"
DAY = 86400.0

# --------------------------------------------------------------------- sizes, ages, the limit


@pytest.mark.parametrize("text, size", [
    ("1000000", 1000000), ("500M", 500 * 1024**2), ("2G", 2 * 1024**3), ("2g", 2 * 1024**3),
    ("1.5GiB", 3 * 1024**3 // 2),
    ("64KB", 64 * 1024), (" 1T ", 1024**4), ("100B", 100), ("0", None), ("none", None), ("Unlimited", None),
])
def test_sizes_are_spelled_as_du_writes_them(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "2X", "G", "-1G", "1e9", "2 GB extra", "0.1"])
def test_what_is_not_a_size_says_what_one_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match=r"500M or 2G"):
        parse_size(text)


def test_prune_refuses_no_limit() -> None:
    with pytest.raises(ValueError, match="is no limit"):
        parse_size("0", unlimited=False)
    with pytest.raises(OptionError, match=r"max_size: '0' is no limit.*clear_cache\(\)"):
        kernix.prune_cache("0")
    with pytest.raises(OptionError, match=r"max_size=0: give a number of bytes"):
        kernix.prune_cache(0)


def test_ages_need_their_unit() -> None:
    assert [parse_age(a) for a in ("30d", "12h", "90m", "45s", "2w", "0.5d")] == [30 * DAY, 43200, 5400, 45, 14 * DAY,
                                                                                    DAY / 2]
    with pytest.raises(ValueError, match="such as 30d or 12h"):
        parse_age("30")
    with pytest.raises(OptionError, match="older_than: '3 days' is not an age"):
        kernix.prune_cache(older_than="3 days")


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNIX_CACHE_MAX_SIZE", raising=False)
    assert max_size() == DEFAULT_MAX_SIZE == 5 * 1024**3
    monkeypatch.setenv("KERNIX_CACHE_MAX_SIZE", "2G")
    assert max_size() == 2 * 1024**3
    monkeypatch.setenv("KERNIX_CACHE_MAX_SIZE", "0")
    assert max_size() is None
    monkeypatch.setenv("KERNIX_CACHE_MAX_SIZE", "lots")
    with pytest.raises(CacheError, match=r"KERNIX_CACHE_MAX_SIZE: 'lots' is not a size.*or `0` for no limit"):
        max_size()


# --------------------------------------------------------------------- entries made by hand


def _entry(root: Path, name: str, key: str, size: int, used: float, *, manifest: bool = True) -> Path:
    """An entry directory as a publisher leaves it (its manifest need not be valid to be pruned)."""
    d = root / "modules" / name / key
    d.mkdir(parents=True)
    (d / "module-0123456789abcdef.so").write_bytes(b"\0" * size)
    if manifest:
        (d / "manifest.json").write_text("{}")
    (d / entries.LAST_USE).touch()
    os.utime(d / entries.LAST_USE, (used, used))
    return d


def _names(items: list[dict]) -> list[tuple[str, str | None]]:
    return [(r["name"], r["key"]) for r in items]


def test_prune_removes_the_least_recently_used_until_the_cache_fits(tmp_path: Path) -> None:
    now = time.time()
    old, older, oldest = (_entry(tmp_path, "ops", f"k{i}", 1000, now - i * DAY) for i in (1, 2, 3))
    work = tmp_path / "build" / "ops"
    work.mkdir(parents=True)
    (work / "ops.o").write_bytes(b"\0" * 1000)
    os.utime(work, (now - 2.5 * DAY, now - 2.5 * DAY))
    result = kernix.prune_cache("1500", root=tmp_path)
    # oldest (3 d), then the work directory (2.5 d), then older (2 d): 4006 -> 1002 bytes
    assert _names(result["removed"]) == [("ops", "k3"), ("ops", None), ("ops", "k2")]
    assert result["removed"][0]["reason"] == "over the limit of 1.5 KiB"
    assert result["removed"][1]["kind"] == "work directory"
    assert result["freed_bytes"] == 3004 and result["total_bytes"] == 1002 and result["kept"] == []  # ({} manifests)
    assert old.is_dir() and not older.exists() and not oldest.exists() and not work.exists()
    assert kernix.prune_cache("1500", root=tmp_path)["removed"] == []  # it fits


def test_prune_by_age_removes_what_is_unused_for_that_long(tmp_path: Path, monkeypatch, capsys) -> None:
    now = time.time()
    recent = _entry(tmp_path, "ops", "recent", 10, now - 3600)
    _entry(tmp_path, "ops", "stale", 10, now - 40 * DAY)
    _entry(tmp_path, "other", "stale", 10, now - 31 * DAY)
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "other-0123456789abcdef.cpp").write_text("int x;")  # goes with other's last entry
    (tmp_path / "direct" / "other").mkdir(parents=True)
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(tmp_path))
    assert main(["cache", "prune", "--older-than", "30d"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "removed ops stale (12 B, last used 40 d ago): unused for 40 d"
    assert out[1] == "removed other stale (12 B, last used 31 d ago): unused for 31 d"
    assert out[2].startswith("removed 2 items (24 B); the cache holds ")
    assert recent.is_dir() and not (tmp_path / "modules" / "other").exists()
    assert not (tmp_path / "sources" / "other-0123456789abcdef.cpp").exists()
    assert not (tmp_path / "direct" / "other").exists()


def _file(path: Path, size: int, when: float) -> Path:
    """A file of ``size`` bytes last modified (and read) at ``when``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    os.utime(path, (when, when))
    return path


def test_preludes_and_a_builds_leftovers_are_evicted_when_unused(tmp_path: Path) -> None:
    """A precompiled prelude goes with its record (last used when its PCH was
    last read); a PCH without a record goes alone; a build's leftover directory
    goes once it is old (a young one may still be being deleted by its build)."""
    now = time.time()
    toolchain = tmp_path / "toolchain"
    old_key, new_key = "a" * 24, "b" * 24
    old_rec = _file(toolchain / f"prelude-{old_key}.rec", 2, now - 3 * DAY)
    old_pch = _file(toolchain / f"prelude-{old_key}-{'1' * 16}.pch", 1000, now - 2 * DAY)
    orphan = _file(toolchain / f"prelude-{'c' * 24}-{'2' * 16}.pch", 500, now - 4 * DAY)
    new_rec = _file(toolchain / f"prelude-{new_key}.rec", 2, now - 5 * DAY)
    new_pch = _file(toolchain / f"prelude-{new_key}-{'3' * 16}.pch", 1000, now - 5 * DAY)
    os.utime(new_pch, (now, now - 5 * DAY))  # read now, written 5 days ago: used now
    _file(toolchain / "gcc-answers.rec", 2, now - 9 * DAY)  # a compiler's answers: not a prelude
    build = tmp_path / "build"
    for name, age in ((".ops.stale-123-456", 2 * entries.TOUCH_INTERVAL_S), (".ops.stale-124-457", 60.0),
                      (".ops.stale-mine", 2 * entries.TOUCH_INTERVAL_S)):  # (the last: a name kernix never writes)
        _file(build / name / "ops.o", 100, now)
        os.utime(build / name, (now - age, now - age))
    result = kernix.prune_cache(older_than="1h", root=tmp_path)
    assert [(r["kind"], r["key"], r["size_bytes"]) for r in result["removed"]] == [
        ("prelude", "c" * 24, 500), ("prelude", old_key, 1002), ("leftovers", None, 100)]
    assert result["removed"][2]["label"] == "ops (leftovers)" and result["removed"][0]["label"] == "prelude cccccccccccc"
    assert not old_rec.exists() and not old_pch.exists() and not orphan.exists()
    assert new_rec.exists() and new_pch.exists() and (toolchain / "gcc-answers.rec").exists()
    assert not (build / ".ops.stale-123-456").exists() and (build / ".ops.stale-124-457").exists()
    assert (build / ".ops.stale-mine").exists()


def test_what_no_eviction_removes_filling_the_limit_evicts_nothing(tmp_path: Path, monkeypatch) -> None:
    """Specs alone over the limit: evicting would empty the cache of entries and
    leave it over its limit still; nothing is evicted, with a warning (once)
    saying what to do; a prune by age still removes what is old."""
    now = time.time()
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "ops.rec").write_bytes(b"\0" * 3000)
    entry = _entry(tmp_path, "ops", "old", 1000, now - 3 * DAY)
    monkeypatch.setattr(prune, "_warned_unevictable", False)
    with pytest.warns(RuntimeWarning, match=r"no eviction removes .*2.9 KiB\) alone exceeds its size limit of 2.0 KiB.*"
                                            r"`kernix cache clear`, or raise KERNIX_CACHE_MAX_SIZE"):
        assert kernix.prune_cache("2K", root=tmp_path)["removed"] == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (once per process)
        assert kernix.prune_cache("2K", root=tmp_path)["removed"] == []
        assert entry.is_dir()
        assert _names(kernix.prune_cache("2K", older_than="1d", root=tmp_path)["removed"]) == [("ops", "old")]


def test_a_manifest_that_cannot_be_removed_keeps_its_library(tmp_path: Path, monkeypatch) -> None:
    entry = _entry(tmp_path, "ops", "old", 100, time.time() - DAY)
    real = os.unlink

    def refused(path, *args, **kwargs):
        if os.fspath(path).endswith("manifest.json"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refused)
    with pytest.raises(CacheError, match=r"could not remove .*manifest.json.*Permission denied"):
        kernix.prune_cache(1, root=tmp_path)
    assert (entry / "manifest.json").is_file() and (entry / "module-0123456789abcdef.so").is_file()


def test_a_limit_that_is_no_size_warns_after_a_build_and_the_entry_is_kept(built: Built, monkeypatch) -> None:
    monkeypatch.setenv("KERNIX_CACHE_MAX_SIZE", "5 gigs")
    built_so = built.root / "copy.so"
    shutil.copyfile(next(built.entry.glob("module-*.so")), built_so)
    warning = r"not kept within a size limit: KERNIX_CACHE_MAX_SIZE: '5 gigs' is not"
    with build_lock(built.root, built.name), pytest.warns(RuntimeWarning, match=warning):
        published = kernix.store.publish(built.root, built.name, "9" * 64, built_so, [], {}, [], "cpu")
    try:
        assert entries.lookup(built.root, built.name, "9" * 64).hit
    finally:
        shutil.rmtree(published.directory, ignore_errors=True)


_HOLDER = """
import sys
from pathlib import Path
from kernix.store import lock
with lock.build_lock(Path(sys.argv[1]), sys.argv[2]):  # as a build of that module holds it
    print("ready", flush=True)
    sys.stdin.readline()
"""


def test_what_another_process_is_building_is_kept(tmp_path: Path) -> None:
    """A process holds the build lock of a module (a build about to load its
    new entry): a prune passes over that module's entries."""
    now = time.time()
    building = _entry(tmp_path, "fresh", "old", 100, now - 3 * DAY)
    free = _entry(tmp_path, "ops", "free", 100, now - 2 * DAY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(kernix.__file__).parents[1]),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), "fresh"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        result = kernix.prune_cache(1, root=tmp_path)
        assert _names(result["removed"]) == [("ops", "free")] and not free.exists()
        assert {(r["key"], r["reason"]) for r in result["kept"]} == {("old", "its module is being built or cleared")}
        assert (building / "manifest.json").is_file()
    finally:
        holder.communicate("\n", timeout=30)
    assert _names(kernix.prune_cache(1, root=tmp_path)["removed"]) == [("fresh", "old")]


def test_prune_follows_no_symbolic_link(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    outside = tmp_path / "outside"
    (outside / "entry").mkdir(parents=True)
    (outside / "precious").write_bytes(b"keep")
    (outside / "entry" / "manifest.json").write_text("{}")
    entry = _entry(root, "ops", "linked", 10, time.time() - DAY)
    (entry / "data").symlink_to(outside / "precious")
    (root / "modules" / "ops" / "elsewhere").symlink_to(outside / "entry", target_is_directory=True)
    (root / "build").mkdir()
    (root / "build" / "ops").symlink_to(outside, target_is_directory=True)
    solo = _entry(root, "solo", "last", 10, time.time() - 2 * DAY)  # its module's last entry: its records go too
    (outside / "solo").mkdir()  # what `direct/solo` and `sources/solo-*` are through the links below
    (outside / "solo-0123456789abcdef.cpp").write_text("int x;")
    (root / "direct").symlink_to(outside, target_is_directory=True)
    (root / "sources").symlink_to(outside, target_is_directory=True)
    result = kernix.prune_cache(1, root=root)
    assert _names(result["removed"]) == [("solo", "last"), ("ops", "linked")]  # the links are no candidates
    assert (outside / "precious").read_bytes() == b"keep" and (outside / "entry" / "manifest.json").is_file()
    assert not entry.exists() and not solo.exists()
    assert (outside / "solo").is_dir() and (outside / "solo-0123456789abcdef.cpp").is_file()


# --------------------------------------------------------------------- with a built module


@dataclass
class Built:
    root: Path
    name: str
    entry: Path
    key: str
    stale: list[Path]
    log: list[tuple[int, str]]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, session_cache_dir: Path) -> Built:
    """add_one built into a cache holding three old entries of 2 MiB with a limit
    of 3 MiB: the build (100 to 400 KiB with its work directory, by compiler; anything
    up to 1 MiB) evicts the two oldest."""
    root = tmp_path_factory.mktemp("prune-cache")
    now = time.time()
    stale = [_entry(root, "old_ops", f"{i:032x}", 2 * 1024 * 1024, now - (10 + i) * DAY) for i in range(3)]
    handler, logger = _Records(), logging.getLogger("kernix")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNIX_CACHE_DIR", str(session_cache_dir))
        mp.setenv("KERNIX_CACHE_MAX_SIZE", "3M")
        name = unique_name("pruned")
        try:
            module = kernix.load_cpp_file(SOURCE, name=name, build_directory=root, auto_register=False)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
    entry = Path(module.path).parent
    key = json.loads((entry / "manifest.json").read_text())["key"]
    del module
    return Built(root, name, entry, key, stale, handler.records)


def _load(built: Built):
    return kernix.load_cpp_file(SOURCE, name=built.name, build_directory=built.root, auto_register=False)


def test_a_build_evicts_the_least_recently_used_beyond_the_limit(built: Built) -> None:
    assert [p.exists() for p in built.stale] == [True, False, False]
    evicted = [m for level, m in built.log if level == logging.INFO and m.startswith("cache: ")]
    assert [m.split(" (")[0] for m in evicted] == [
        "cache: evicted old_ops 000000000000", "cache: evicted old_ops 000000000000"]
    assert all("last used 1" in m and m.endswith("over the limit of 3.0 MiB") for m in evicted)
    assert any(level == logging.DEBUG and "over its limit of 3.0 MiB: evicting the least recently used" in m
               for level, m in built.log)
    assert (built.entry / "manifest.json").is_file() and (built.entry / entries.LAST_USE).is_file()


def test_a_load_records_its_use_once_an_hour(built: Built) -> None:
    last_use = built.entry / entries.LAST_USE
    long_ago = time.time() - 2 * entries.TOUCH_INTERVAL_S
    os.utime(last_use, (long_ago, long_ago))
    module = _load(built)
    assert Path(module.path).parent == built.entry
    recent = last_use.stat().st_mtime
    assert recent > time.time() - 60  # recorded
    _load(built)
    assert last_use.stat().st_mtime == recent  # within the hour: not written again


def test_an_entry_evicted_while_a_process_has_it_loaded_keeps_working(built: Built) -> None:
    """On Linux a removed library stays usable by whoever mapped it, and the
    specs were read at look-up: no lease is needed to evict a loaded entry."""
    module = kernix.load_cpp_file(SOURCE, name=built.name, build_directory=built.root)
    x = jnp.arange(4, dtype=jnp.float32)
    _only_the_built_entry(built)
    os.utime(built.entry / entries.LAST_USE, (time.time() - 100 * DAY,) * 2)
    assert _names(kernix.prune_cache(older_than="50d", root=built.root)["removed"]) == [(built.name, built.key[:32])]
    assert not built.entry.exists()
    np.testing.assert_array_equal(np.asarray(module.add_one(x)), np.arange(1, 5, dtype=np.float32))
    again = _load(built)  # a miss: built again
    assert Path(again.path).is_file()


def _copy_entry(built: Built, key: str, source: str) -> Path:
    """Another version of the module: the built entry copied under ``key``, recording ``source``."""
    entry = built.root / "modules" / built.name / key[:32]
    shutil.copytree(built.entry, entry)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest.update(key=key, sources=[source])
    (entry / "manifest.json").write_text(json.dumps(manifest))
    return entry


def test_no_descriptor_left_is_an_error_saying_so_not_a_rebuild(built: Built, monkeypatch) -> None:
    """A process at its limit of open files (EMFILE) that cannot read an entry
    is told so, not warned that the entry is damaged and sent to rebuild it."""

    def unread(directory):
        raise OSError(errno.EMFILE, "Too many open files", str(directory / "manifest.json"))

    monkeypatch.setattr(entries.Manifest, "read", unread)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CacheError, match=r"Too many open files \(this process.*ulimit -n"):
            entries.lookup(built.root, built.name, built.key)


def test_no_descriptor_left_on_a_warm_load_still_says_so(built: Built) -> None:
    """Was: on a warm load, which has not imported kernix.errors, the lookup that found no descriptor left
    could not import CacheError either (an import opens a file): the entry was called damaged and rebuilt.
    Now the error says what is wrong and how to fix it, with whatever descriptors are left."""
    code = f"""
import os, resource, sys
from pathlib import Path
from kernix.store import entries
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    entries.lookup(Path({str(built.root)!r}), {built.name!r}, {built.key!r})
except Exception as exc:
    for fd in held:
        os.close(fd)
    print(" ".join([str(exc), *getattr(exc, "__notes__", [])]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "too many open files" in out and "ulimit -n" in out


def test_an_entry_that_cannot_be_checked_is_damaged(built: Built, monkeypatch) -> None:
    def refused(path, root, *more):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(entries, "check_private", refused)
    with pytest.warns(RuntimeWarning, match=r"is damaged: cannot open .*Permission denied; rebuilding it"):
        found = entries.lookup(built.root, built.name, built.key)
    assert found.damaged and not found.hit


def test_cache_info_lists_each_version_of_a_module(built: Built, monkeypatch, capsys) -> None:
    copies = [_copy_entry(built, f"{c * 64}", f"/src/{c}/kernels.cpp") for c in "ab"]
    now = time.time()
    for entry, used in zip([built.entry, *copies], [now, now - DAY, now - 3 * DAY]):
        os.utime(entry / entries.LAST_USE, (used, used))
    try:
        info = kernix.cache_info(root=built.root)
        rows = [m for m in info["modules"] if m["name"] == built.name]
        assert [m["key"] for m in rows] == [built.key, "a" * 64, "b" * 64]  # the last used first
        assert rows[-1]["sources"] == ["/src/b/kernels.cpp"] and rows[-1]["age_s"] > 2.9 * DAY
        assert next(m for m in rows if m["key"] == built.key)["sources"] == [str(SOURCE)]
        monkeypatch.setenv("KERNIX_CACHE_DIR", str(built.root))
        assert main(["cache", "info"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"cache: {built.root} (") and out[0].endswith(", limit 5.0 GiB)")
        mine = [line.split() for line in out if built.name in line]
        assert sorted(r[0] for r in mine) == sorted([built.key[:12], "a" * 12, "b" * 12])
        assert [r[-2:] for r in mine if r[0] == "b" * 12] == [["kernels.cpp:", "add_one"]] and ["3", "d"] in [
            r[5:7] for r in mine]
        assert out[-1].startswith(f"  {len(info['modules'])} entries, ")
        assert main(["cache", "prune", "--older-than", "2d", "--json"]) == 0
        pruned = json.loads(capsys.readouterr().out)
        assert [r["key"] for r in pruned["removed"] if r["name"] == built.name] == ["b" * 32]
        assert pruned["older_than_s"] == 2 * DAY and pruned["limit_bytes"] is None
        assert built.entry.is_dir() and copies[0].is_dir() and not copies[1].exists()
    finally:
        for c in copies:
            shutil.rmtree(c, ignore_errors=True)


def _only_the_built_entry(built: Built) -> None:
    """Remove every other entry that the tests before (whichever of them ran in this process) left."""
    for module in (built.root / "modules").iterdir():
        for entry in module.iterdir():
            if entry != built.entry:
                shutil.rmtree(entry)


def test_a_half_removed_entry_is_never_trusted_and_the_next_prune_finishes_it(built: Built, monkeypatch) -> None:
    key = "c" * 64
    keep = _load(built)
    _only_the_built_entry(built)
    copy = _copy_entry(built, key, str(SOURCE))
    assert entries.lookup(built.root, built.name, key).hit
    os.utime(built.entry / entries.LAST_USE)  # (its entry stays)
    os.utime(copy / entries.LAST_USE, (time.time() - 2 * DAY,) * 2)
    real = shutil.rmtree

    def refused(path, *args, **kwargs):
        if os.fspath(path) == str(copy):
            raise PermissionError(13, "Permission denied", str(copy))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", refused)
    with pytest.raises(CacheError, match=r"kernix.prune_cache\(\) removed 0 cache entries but could not remove .*"
                                         r"Permission denied.*chmod -R u\+rwX"):
        kernix.prune_cache(older_than="1d", root=built.root)
    assert not (copy / "manifest.json").exists() and (copy / "last-use").exists()
    assert entries.lookup(built.root, built.name, key).reason == "no entry"
    monkeypatch.setattr(shutil, "rmtree", real)
    kernix.prune_cache(older_than="1d", root=built.root)
    assert not copy.exists() and Path(keep.path).is_file()


def test_an_evicted_module_loads_again_and_a_warm_load_never_prunes(built: Built, monkeypatch) -> None:
    _only_the_built_entry(built)
    long_ago = time.time() - 100 * DAY
    os.utime(built.entry / entries.LAST_USE, (long_ago, long_ago))
    result = kernix.prune_cache(older_than="50d", root=built.root)  # the entry, not its work directory
    assert _names(result["removed"]) == [(built.name, built.key[:32])] and not built.entry.exists()
    assert not (built.root / "direct" / built.name).exists()  # (its module's last entry: its records go too)
    module = _load(built)  # a miss: built again (linked again), into the same entry
    assert Path(module.path).parent == built.entry and (built.entry / entries.LAST_USE).is_file()

    def boom(*args, **kwargs):
        raise AssertionError("a warm load walked the cache")

    monkeypatch.setattr(prune, "survey", boom)
    monkeypatch.setattr(prune, "after_publish", boom)
    assert _load(built).path == module.path


def test_the_prune_lock_names_its_holder(built: Built, monkeypatch, capsys) -> None:
    """A prune waits for another one (and an eviction after a build does not)."""
    with build_lock(built.root, ".prune"):
        monkeypatch.setenv("KERNIX_LOCK_TIMEOUT", "0.2")
        with pytest.raises(CacheError, match=r"pruning the cache since"):
            kernix.prune_cache(root=built.root)


def test_prune_command_usage_errors(capsys) -> None:
    assert main(["cache", "prune", "--max-size", "lots"]) == 2
    assert "argument --max-size: 'lots' is not a size" in capsys.readouterr().err
    assert main(["cache", "prune", "--older-than", "30"]) == 2
    assert "argument --older-than: '30' is not an age" in capsys.readouterr().err
