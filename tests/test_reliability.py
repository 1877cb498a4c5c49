"""The build cache under load and faults: concurrent builders, killed builders,
damaged entries, unwritable or full cache directories, clear_cache() during a
build, threads.  All on the CPU path.

The compiler is a wrapper script (fixtures/reliability/cxx_wrapper.sh) that
logs every compile and link, so the tests can count compiler runs, and that
can hold a compile (``hang``, ``pause``) to stop a builder at a known point.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix import compilation, loaders
from kernix.backend import toolchain
from kernix.store import entries, files, lock, trust
from kernix.store.files import file_digest
from kernix.errors import CacheError

from helpers import FIXTURES, unique_name

REL = FIXTURES / "reliability"
WORKER = REL / "load_worker.py"
EXPECTED = [1.0, 2.0, 3.0, 4.0]


class Wrapper:
    """The logging compiler wrapper of one test."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.path = directory / "cxx"

    def calls(self, kind: str) -> int:
        log = self.dir / "calls.log"
        return sum(1 for ln in log.read_text().splitlines() if ln.startswith(kind)) if log.exists() else 0

    def started_pids(self) -> list[int]:
        f = self.dir / "started"
        return [int(x) for x in f.read_text().split()] if f.exists() else []

    def wait_started(self, n: int = 1, timeout: float = 120.0) -> list[int]:
        deadline = time.monotonic() + timeout
        while len(self.started_pids()) < n:
            if time.monotonic() > deadline:
                raise AssertionError("the compiler wrapper never started")
            time.sleep(0.02)
        return self.started_pids()


@pytest.fixture
def wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    d = tmp_path / "cxx"
    d.mkdir()
    w = Wrapper(d)
    shutil.copy(REL / "cxx_wrapper.sh", w.path)
    w.path.chmod(0o755)
    monkeypatch.setenv("CXX", str(w.path))
    toolchain.forget()
    yield w
    toolchain.forget()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache root of this test's own (it does not exist yet)."""
    r = tmp_path / "cache"
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(r))
    return r


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The add_one module's source, at a path of this test's own."""
    p = tmp_path / "src" / "add_one.cpp"
    p.parent.mkdir()
    shutil.copy(REL / "add_one.cpp", p)
    return p


def _spawn(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, env=dict(os.environ), **kw,
    )


def _result(proc: subprocess.Popen, timeout: float = 180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _check(mod: kernix.CompiledModule) -> None:
    with jax.default_device(jax.devices("cpu")[0]):  # also from module-scoped fixtures
        np.testing.assert_array_equal(mod.add_one(jnp.arange(4, dtype=jnp.float32)), EXPECTED)


# --------------------------------------------------------------------- concurrency


#: The processes of the crowd tests: four a core, eight at least and sixteen at most.
CROWD = max(8, min(16, 4 * len(os.sched_getaffinity(0))))

CROWD_WORKER = """
import json, os, sys, time
import numpy as np, jax, jax.numpy as jnp
import kernix
src, name, ready, go, storm, seconds = sys.argv[1:7]

def wait_for(path):
    deadline = time.monotonic() + 600
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"{path} never appeared")
        time.sleep(0.005)

def add_one():
    mod = kernix.load_cpp_file(src, name=name)
    return mod, np.asarray(mod.add_one(jnp.arange(4, dtype=jnp.float32))).tolist()

jax.devices()  # start the backend before the barrier
open(ready, "w").close()
wait_for(go)  # the stampede: every process loads the new module at once
mod, values = add_one()
print("crowd:", json.dumps({"values": values, "so": str(mod.path)}), flush=True)
wait_for(storm)  # the storm: load over and over while the test clears the cache
errors, loads, wrong = [], 0, 0
end = time.monotonic() + float(seconds)
while time.monotonic() < end:
    try:
        wrong += add_one()[1] != [1.0, 2.0, 3.0, 4.0]
        loads += 1
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}"[:500])
print("crowd:", json.dumps({"loads": loads, "errors": errors, "wrong": wrong}))
"""


class Crowd:
    """CROWD processes that loaded one new module at the same moment into an empty cache (each
    started once for the file: starting JAX takes a second a process), then wait for the storm."""

    def __init__(self, directory: Path) -> None:
        self.dir, self.root, self.name = directory, directory / "cache", unique_name("crowd")
        self.wrapper = Wrapper(directory / "cxx")
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        source = self.dir / "add_one.cpp"
        shutil.copy(REL / "add_one.cpp", source)
        self.wrapper.dir.mkdir()
        shutil.copy(REL / "cxx_wrapper.sh", self.wrapper.path)
        self.wrapper.path.chmod(0o755)
        # (on the CPU alone: what is tested is the cache, and sixteen processes need not start a GPU each)
        env = dict(os.environ, CXX=str(self.wrapper.path), KERNIX_CACHE_DIR=str(self.root), JAX_PLATFORMS="cpu")
        self.procs = [
            subprocess.Popen([sys.executable, "-W", "error::RuntimeWarning", "-c", CROWD_WORKER, str(source),
                              self.name, str(self.dir / f"ready-{i}"), str(self.dir / "go"),
                              str(self.dir / "storm"), "4"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for i in range(CROWD)
        ]
        deadline = time.monotonic() + 180
        while not all((self.dir / f"ready-{i}").exists() for i in range(CROWD)):
            assert all(p.poll() is None for p in self.procs), self.failures()
            assert time.monotonic() < deadline, "workers never became ready"
            time.sleep(0.02)
        watchdog = threading.Timer(180, self.kill)  # a worker that never prints is killed: its line reads ""
        watchdog.start()
        try:
            (self.dir / "go").touch()
            self.loaded = [_reply(p) for p in self.procs]
        finally:
            watchdog.cancel()
        assert None not in self.loaded, self.failures()
        self.compiles, self.links = self.wrapper.calls("compile"), self.wrapper.calls("link")

    def failures(self) -> list[str]:
        return [p.communicate()[1][-2000:] for p in self.procs if p.poll() is not None]

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _reply(p: subprocess.Popen) -> object:
    """A worker's next ``crowd:`` line (what else it prints is passed over), or ``None`` once it has ended."""
    for line in iter(p.stdout.readline, ""):
        if line.startswith("crowd: "):
            return json.loads(line[7:])
    return None


@pytest.fixture(scope="module")
def crowd(tmp_path_factory: pytest.TempPathFactory):
    c = Crowd(tmp_path_factory.mktemp("crowd"))
    try:
        c.start()
        yield c
    finally:
        c.kill()


def test_processes_loading_a_new_module_at_once_compile_it_once(crowd: Crowd) -> None:
    """CROWD processes (eight at least) load the same new module at once into an empty cache:
    all get the right answer, and the compiler runs for one build only."""
    assert all(r["values"] == EXPECTED for r in crowd.loaded)
    assert len({r["so"] for r in crowd.loaded}) == 1
    assert crowd.compiles == 3  # the user's unit, the handler unit and the messages unit, once
    assert crowd.links == 1
    assert len(list((crowd.root / "modules" / crowd.name).glob("*/manifest.json"))) == 1


def test_a_clear_that_removes_the_clock_file_of_a_starting_build_is_no_error(tmp_path: Path, monkeypatch) -> None:
    """Was: a build reads the file system's clock from a file it makes in ``build/``; a clear of every
    module, which removes what no module owns there, could remove it first, and the build failed with a
    CacheError naming the file (seen once in the storm below)."""
    make = tempfile.mkstemp

    def and_cleared(*args, **kwargs):
        fd, path = make(*args, **kwargs)
        os.unlink(path)
        return fd, path

    monkeypatch.setattr(tempfile, "mkstemp", and_cleared)
    assert files.filesystem_now(tmp_path, settle_s=0.0) > 0


def test_processes_load_while_the_cache_is_cleared_again_and_again(crowd: Crowd) -> None:
    """The crowd's processes load its module over and over for 4 s while this one clears the
    cache (the module's, then all of it) in a loop: every load is a hit, or a miss and a
    rebuild; never an error, a warning that an entry is damaged, or a wrong value.  Was: one
    to three "damaged (cannot read functions.json)" CacheErrors a run (of sixteen processes
    on two cores), from a clear between reading an entry's manifest and its specs."""
    (crowd.dir / "storm").touch()
    clears = 0
    while any(p.poll() is None for p in crowd.procs):
        kernix.clear_cache(crowd.name if clears % 2 else None, root=crowd.root)
        clears += 1
    results = []
    for p in crowd.procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads([ln for ln in out.splitlines() if ln.startswith("crowd: ")][-1][7:]))
    assert [r["errors"] for r in results] == [[]] * CROWD
    assert sum(r["wrong"] for r in results) == 0
    assert all(r["loads"] > 0 for r in results) and clears > 10


def test_two_threads_in_one_process(wrapper: Wrapper, root: Path, tmp_path: Path) -> None:
    """Threads loading the same module and another one concurrently: each module is
    built once, every thread gets a working module."""
    text = (REL / "add_one.cpp").read_text()
    other = text.replace("+ 1.0f", "+ 1.0f + 0.0f")
    names = [unique_name("thread_a"), unique_name("thread_b")]
    jobs = [(names[0], text), (names[0], text), (names[1], other), (names[1], other)]
    results: list = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = kernix.load_cpp_inline(jobs[i][0], jobs[i][1])
        except BaseException as exc:  # reported below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    for r in results:
        assert isinstance(r, kernix.CompiledModule), r
        _check(r)
    assert results[0].path == results[1].path and results[2].path == results[3].path
    assert wrapper.calls("compile") == 6 and wrapper.calls("link") == 2


# --------------------------------------------------------------------- crashes


def _kill_builder(proc: subprocess.Popen, wrapper: Wrapper) -> None:
    """SIGKILL the builder and every compiler its ninja started (they run in process groups of
    their own), including one ninja forked just before it died that has yet to log its call: once
    this returns, nothing of the killed build writes to the wrapper's logs."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 30
    while True:
        running = _running(wrapper.path)
        for pid in [*running, *wrapper.started_pids()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not running:
            return
        assert time.monotonic() < deadline, f"compiler wrappers still running: {running}"
        time.sleep(0.05)


def _running(script: Path) -> list[int]:
    """The processes whose command line names ``script``: the shell running it, and ninja's
    ``/bin/sh -c`` about to."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(os.path.join(entry.path, "cmdline"), "rb") as f:
                    if str(script).encode() in f.read():
                        pids.append(int(entry.name))
            except OSError:  # (gone meanwhile)
                pass
    return pids


def test_builder_killed_mid_compile(wrapper: Wrapper, root: Path, source: Path, monkeypatch) -> None:
    """SIGKILL a builder while its compiler runs: the next load takes the lock at once
    (the dead holder's flock is gone), builds afresh and never sees a partial entry."""
    name = unique_name("killed")
    (wrapper.dir / "hang").touch()
    proc = _spawn([str(source), name])
    try:
        wrapper.wait_started()
    finally:
        _kill_builder(proc, wrapper)
    assert proc.returncode == -signal.SIGKILL
    build_dir = root / "build" / name
    assert (build_dir / ".kernix-building").exists()  # the marker of a build that did not finish
    assert not list((root / "modules").glob(f"{name}/*/manifest.json"))  # nothing published
    assert not (build_dir / "module.so").exists()

    (wrapper.dir / "hang").unlink()
    before = wrapper.calls("compile")
    monkeypatch.setenv("KERNIX_LOCK_TIMEOUT", "5")  # a stale lock would fail the load
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match="interrupted"):
        mod = kernix.load_cpp_file(source, name=name)
    elapsed = time.monotonic() - start
    _check(mod)
    assert wrapper.calls("compile") - before == 3  # rebuilt from scratch
    assert elapsed < 60, elapsed
    assert not (build_dir / ".kernix-building").exists()
    assert not list((root / "build").glob(f".{name}.stale-*"))  # the dead build's dir is gone
    # The lock is free again.
    with lock.build_lock(root, name):
        pass


# ------------------------------------------------- the edit loop: inference beside the compile


def _edited(source: Path, old: str, new: str) -> None:
    text = source.read_text()
    assert old in text
    source.write_text(text.replace(old, new))


def test_a_body_edit_is_compiled_while_inference_runs(wrapper: Wrapper, root: Path, source: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild starts the compile of the edited unit (with the previous build's generated code) before
    inference returns; the handler unit is not compiled again."""
    name = unique_name("beside")
    kernix.load_cpp_file(source, name=name, auto_register=False)
    compiles = wrapper.calls("compile")
    real = compilation.exported_units
    seen: list[int] = []

    def inference_that_waits_for_the_compile(request):  # held until the compile has started
        try:
            seen.extend(wrapper.wait_started(timeout=30))
        finally:
            (wrapper.dir / "pause").unlink()
        return real(request)

    monkeypatch.setattr(compilation, "exported_units", inference_that_waits_for_the_compile)
    _edited(source, "in[i] + 1.0f", "in[i] + 2.0f")
    # Paused from before the load: a compile that began before inference does could pass the wrapper's check
    # of the file first, and never be seen.
    (wrapper.dir / "pause").touch()
    mod = kernix.load_cpp_file(source, name=name)
    assert len(seen) == 1
    assert wrapper.calls("compile") - compiles == 1 and wrapper.calls("link") == 2  # the user's unit only
    with jax.default_device(jax.devices("cpu")[0]):
        np.testing.assert_array_equal(mod.add_one(jnp.arange(4, dtype=jnp.float32)), [2.0, 3.0, 4.0, 5.0])


def test_a_changed_signature_regenerates_and_recompiles_the_handler_unit(wrapper: Wrapper, root: Path,
                                                                          source: Path) -> None:
    """The early compile is of the old signature's code: inference tells, and the new code is built."""
    name = unique_name("resigned")
    kernix.load_cpp_file(source, name=name, auto_register=False)
    handlers = root / "build" / name / "handlers_0.cpp"
    before = handlers.read_text()
    _edited(source, "BE::Tensor out)", "BE::Tensor out, float step)")
    _edited(source, "in[i] + 1.0f", "in[i] + step")
    mod = kernix.load_cpp_file(source, name=name)
    assert handlers.read_text() != before
    assert (root / "build" / name / "handlers_0.o").stat().st_mtime_ns > handlers.stat().st_mtime_ns
    with jax.default_device(jax.devices("cpu")[0]):
        np.testing.assert_array_equal(mod.add_one(jnp.arange(4, dtype=jnp.float32), step=0.5), [0.5, 1.5, 2.5, 3.5])


def test_a_body_edit_that_does_not_compile_is_compiled_once(wrapper: Wrapper, root: Path, source: Path) -> None:
    """The early compile's error is the build's error: the unit is not compiled a second time."""
    name = unique_name("broken")
    kernix.load_cpp_file(source, name=name, auto_register=False)
    compiles = wrapper.calls("compile")
    _edited(source, "in[i] + 1.0f", "in[i] + no_such_name")
    with pytest.raises(kernix.CompilationError, match="no_such_name") as info:
        kernix.load_cpp_file(source, name=name)
    assert str(source) in info.value.output
    assert wrapper.calls("compile") - compiles == 1


def test_an_error_of_inference_stops_the_early_compile(wrapper: Wrapper, root: Path, source: Path) -> None:
    """A signature inference refuses is reported at once: the compile started beside it is stopped."""
    name = unique_name("refused")
    kernix.load_cpp_file(source, name=name, auto_register=False)
    (wrapper.dir / "hang").touch()  # the early compile would take two minutes
    _edited(source, "BE::Tensor out)", "BE::Tensor out, const char** names)")
    start = time.monotonic()
    with pytest.raises(kernix.InferenceError, match="names"):
        kernix.load_cpp_file(source, name=name)
    assert time.monotonic() - start < 60
    (pid,) = wrapper.started_pids()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_bad_lock_timeout_is_a_clear_error(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNIX_LOCK_TIMEOUT", "soon")
    with pytest.raises(CacheError, match="KERNIX_LOCK_TIMEOUT='soon' is not a positive number"):
        with lock.build_lock(root, "any"):
            pass


def test_lock_of_dead_process_is_released(root: Path, tmp_path: Path) -> None:
    """A process that dies (SIGKILL) holding the build lock does not block anyone."""
    code = (
        "import sys, time, pathlib\n"
        "from kernix.store import lock\n"
        "with lock.build_lock(pathlib.Path(sys.argv[1]), 'held'):\n"
        "    open(sys.argv[2], 'w').close()\n"
        "    time.sleep(120)\n"
    )
    flag = tmp_path / "locked"
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(flag)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        # Held by a live process: we wait.
        os.environ["KERNIX_LOCK_TIMEOUT"] = "0.3"
        try:
            with pytest.raises(CacheError, match="held by a live process"):
                with lock.build_lock(root, "held"):
                    pass
        finally:
            del os.environ["KERNIX_LOCK_TIMEOUT"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    start = time.monotonic()
    with lock.build_lock(root, "held"):
        pass
    assert time.monotonic() - start < 1.0


def test_clear_cache_waits_for_a_running_build(wrapper: Wrapper, root: Path, source: Path) -> None:
    """clear_cache() during another process's build waits for it; the build succeeds."""
    name = unique_name("cleared")
    (wrapper.dir / "pause").touch()
    proc = _spawn([str(source), name])
    try:
        wrapper.wait_started()
        removed: list = []
        t = threading.Thread(target=lambda: removed.append(kernix.clear_cache()))
        t.start()
        t.join(1.0)
        assert t.is_alive(), "clear_cache() did not wait for the build lock"
        (wrapper.dir / "pause").unlink()
        result = _result(proc)
        t.join(60)
        assert not t.is_alive()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert result["values"] == EXPECTED
    assert removed == [1]  # the finished entry, removed after the build
    assert not (root / "modules" / name).exists()


# --------------------------------------------------------------------- damaged entries


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """One add_one module in a cache of its own, shared by the damage tests."""
    r = tmp_path_factory.mktemp("damage-cache")
    name = unique_name("damaged")
    text = (REL / "add_one.cpp").read_text()
    mod = kernix.load_cpp_inline(name, text, build_directory=r)
    _check(mod)
    return r, name, text, mod


def _replace(path: Path, data: bytes) -> None:
    # Damage by replacing the file: rewriting a library in place would also
    # change the copy this process has mapped (as it would for any program).
    tmp = path.with_name(path.name + ".damage")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _truncate(so: Path, manifest: Path) -> None:
    data = so.read_bytes()
    _replace(so, data[: len(data) // 2])


def _garbage_same_size(so: Path, manifest: Path) -> None:
    _replace(so, os.urandom(so.stat().st_size))


def _missing_library(so: Path, manifest: Path) -> None:
    so.unlink()


def _manifest_not_json(so: Path, manifest: Path) -> None:
    manifest.write_bytes(b'{"format": 1, "key": ')


def _manifest_missing_field(so: Path, manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    del data["so_sha256"]
    manifest.write_text(json.dumps(data))


def _manifest_points_outside(so: Path, manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    data["so"] = "../../../../evil.so"
    manifest.write_text(json.dumps(data))


def _manifest_wrong_types(so: Path, manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    data["handlers"] = ["not", "a", "mapping"]
    manifest.write_text(json.dumps(data))


def _manifest_binary(so: Path, manifest: Path) -> None:
    manifest.write_bytes(b"\xff\xfe\x00garbage")


@pytest.mark.parametrize(
    "damage",
    [_truncate, _garbage_same_size, _missing_library, _manifest_not_json, _manifest_missing_field,
     _manifest_points_outside, _manifest_wrong_types, _manifest_binary],
)
def test_damaged_entry_is_detected_and_rebuilt(built, damage) -> None:
    r, name, text, mod = built
    (manifest,) = (r / "modules" / name).glob("*/manifest.json")
    so = manifest.parent / json.loads(manifest.read_text())["so"]
    damage(so, manifest)
    with pytest.warns(RuntimeWarning, match="damaged"):
        again = kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    assert again.path == mod.path and again.digest == mod.digest
    assert file_digest(again.path) == mod.digest  # the library on disk is whole again
    again.register()  # same code as the registered module: a no-op
    _check(again)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and the entry is clean now
        kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)


def test_leftovers_of_a_dead_publisher_are_never_loaded(built) -> None:
    """A library without a manifest (publisher died before the manifest was
    renamed into place) and temporary files are ignored, then cleaned up."""
    r, name, text, mod = built
    (manifest,) = (r / "modules" / name).glob("*/manifest.json")
    manifest.unlink()
    tmp = manifest.parent / ".manifest.json.abc.tmp"
    tmp.write_text("{half")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing manifest is an ordinary miss
        again = kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    assert again.digest == mod.digest
    assert not tmp.exists()


# --------------------------------------------------------------------- unwritable / full


def _fail_under(monkeypatch: pytest.MonkeyPatch, base: Path, err: int) -> None:
    """Make creating directories and files under ``base`` fail with ``err``."""
    real_mkdir, real_mkstemp, real_open = os.mkdir, tempfile.mkstemp, os.open

    def under(p) -> bool:
        return str(os.fspath(p)).startswith(str(base))

    def mkdir(p, *a, **k):
        if under(p):
            raise OSError(err, os.strerror(err), str(p))
        return real_mkdir(p, *a, **k)

    def mkstemp(*a, dir=None, **k):
        if dir is not None and under(dir):
            raise OSError(err, os.strerror(err), str(dir))
        return real_mkstemp(*a, dir=dir, **k)

    def open_(p, flags, *a, **k):
        if under(p) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(err, os.strerror(err), str(p))
        return real_open(p, flags, *a, **k)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize("err,match", [(errno.EROFS, "not writable"), (errno.EACCES, "not writable"),
                                       (errno.ENOSPC, "no space left")])
def test_unwritable_or_full_empty_cache_is_a_clear_error(root: Path, monkeypatch, err, match) -> None:
    _fail_under(monkeypatch, root, err)
    with pytest.raises(CacheError, match=match) as info:
        kernix.load_cpp_inline(unique_name("ro"), (REL / "add_one.cpp").read_text())
    assert "KERNIX_CACHE_DIR" in str(info.value) or "kernix cache clear" in str(info.value)


def test_cache_root_under_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(CacheError, match="not a directory|is a file"):
        kernix.load_cpp_inline(unique_name("enotdir"), (REL / "add_one.cpp").read_text(),
                               build_directory=blocker / "cache")


def _mount(args: list[str]) -> None:
    """Run ``mount ARGS``, skipping the test where this process may not mount (not root, a container)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a file system needs root and mount(8)")
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.strip()}")


def _unmount(path: Path) -> None:
    """Unmount ``path``; lazily if something still holds a file there, so no mount outlives the test."""
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_cache_on_a_noexec_file_system_is_a_clear_error(tmp_path: Path) -> None:
    """Was: a build, a second build from scratch, then advice about LD_LIBRARY_PATH and rpath, since
    dlopen cannot map a library from a noexec mount.  Now: no compile, an error naming the mount
    option and the setting that moves the cache; a cache that was built elsewhere and is now seen
    through a noexec mount gives the same error, without a rebuild and with its entry kept."""
    source = (REL / "add_one.cpp").read_text()
    fresh, built, seen = tmp_path / "fresh", tmp_path / "built", tmp_path / "seen"
    for d in (fresh, built, seen):
        d.mkdir()
    name = unique_name("noexec")
    kernix.load_cpp_inline(name, source, build_directory=built)
    _mount(["-t", "tmpfs", "-o", "noexec,size=8m", "tmpfs", str(fresh)])
    try:
        with pytest.raises(CacheError, match="mounted noexec.*KERNIX_CACHE_DIR"):
            kernix.load_cpp_inline(unique_name("noexec"), source, build_directory=fresh / "cache")
        assert not (fresh / "cache" / "build").exists()  # nothing was compiled
    finally:
        _unmount(fresh)
    _mount(["--bind", str(built), str(seen)])
    try:
        subprocess.run(["mount", "-o", "remount,bind,noexec", str(seen)], check=True)
        with pytest.raises(CacheError, match="mounted noexec.*KERNIX_CACHE_DIR") as info:
            kernix.load_cpp_inline(name, source, build_directory=seen, target_prefix=unique_name("t"))
        assert "LD_LIBRARY_PATH" not in str(info.value)
    finally:
        _unmount(seen)
    assert list((built / "modules" / name).glob("*/manifest.json"))  # kept: it loads from an exec mount
    kernix.load_cpp_inline(name, source, build_directory=built)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_read_only_cache_directory_real_permissions(tmp_path: Path) -> None:
    r = tmp_path / "ro"
    r.mkdir()
    r.chmod(0o555)
    try:
        with pytest.raises(CacheError, match="not writable"):
            kernix.load_cpp_inline(unique_name("chmod"), (REL / "add_one.cpp").read_text(), build_directory=r)
    finally:
        r.chmod(0o755)


def test_disk_full_while_publishing_then_recovers(built, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while the library is written: a clear error, nothing half-published
    is loaded later, and the next load (with space again) succeeds."""
    r, name, text, mod = built
    shutil.rmtree(r / "modules" / name)  # the entry goes; ninja's build directory stays
    real = entries.atomic_write

    def full(path: Path, data: bytes) -> None:
        if path.suffix == ".so":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(entries, "atomic_write", full)
    with pytest.raises(CacheError, match="no space left"):
        kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    assert not list((r / "modules" / name).glob("*/manifest.json"))
    monkeypatch.setattr(entries, "atomic_write", real)
    again = kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    assert again.digest == mod.digest


def test_read_only_cache_still_serves_hits(built, monkeypatch: pytest.MonkeyPatch) -> None:
    """A populated cache that has become read-only still loads what it holds."""
    r, name, text, mod = built
    kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)  # make sure it is there
    _fail_under(monkeypatch, r, errno.EROFS)
    again = kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    assert again.path == mod.path


# --------------------------------------------------------------------- trust


def test_refuses_library_in_a_directory_others_can_write(built) -> None:
    r, name, text, mod = built
    kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    entry = mod.path.parent
    mode = entry.stat().st_mode
    entry.chmod(mode | stat.S_IWOTH)
    try:
        with pytest.raises(CacheError, match=r"other users can write to it.*chmod o-w") as info:
            kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
        assert str(entry) in str(info.value)
    finally:
        entry.chmod(mode)


def test_refuses_world_writable_cache_root(tmp_path: Path) -> None:
    r = tmp_path / "open"
    r.mkdir()
    r.chmod(0o777)
    with pytest.raises(CacheError, match="other users can write"):
        trust.check_private(r / "modules" / "x", r)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a file to another user")
def test_refuses_library_owned_by_another_user(built) -> None:
    r, name, text, mod = built
    kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    os.chown(mod.path, 65534, 65534)
    try:
        with pytest.raises(CacheError, match="owned by another user"):
            kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    finally:
        os.chown(mod.path, 0, 0)


def test_symlink_inside_cache_is_refused(built) -> None:
    r, name, text, mod = built
    kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    (manifest,) = (r / "modules" / name).glob("*/manifest.json")
    real = manifest.with_name("manifest.real")
    manifest.rename(real)
    manifest.symlink_to(real)
    try:
        with pytest.raises(CacheError, match="symbolic link"):
            kernix.load_cpp_inline(name, text, build_directory=r, auto_register=False)
    finally:
        manifest.unlink()
        real.rename(manifest)


def test_permissive_umask_does_not_make_the_cache_writable_by_others(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        trust.makedirs(tmp_path / "u" / "a" / "b")
    finally:
        os.umask(old)
    for d in (tmp_path / "u", tmp_path / "u" / "a", tmp_path / "u" / "a" / "b"):
        assert not d.stat().st_mode & (stat.S_IWOTH | stat.S_IWGRP), d


def test_the_walk_up_a_path_stops_where_it_exists(tmp_path: Path) -> None:
    """The one walk behind the output-directory check, the noexec check of the
    cache and the prebuilt trust check: a dangling link is where a path would
    be made (lexists), but not the file system it would be made on (exists)."""
    from kernix.paths import ancestors, nearest_existing

    assert list(ancestors("/a/b/c")) == ["/a/b/c", "/a/b", "/a", "/"]
    assert list(ancestors("a/b")) == ["a/b", "a", ""]
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    missing = str(tmp_path / "dangling" / "x" / "y")
    assert nearest_existing(missing) == str(tmp_path / "dangling")
    assert nearest_existing(missing, os.path.exists) == str(tmp_path)
    assert nearest_existing(str(tmp_path)) == str(tmp_path)


def test_clear_cache_of_one_name_leaves_similar_names_alone(tmp_path: Path) -> None:
    r = tmp_path / "c"
    a = files.write_source(r, "ops", "int a;", "cpp")
    b = files.write_source(r, "ops-v2", "int b;", "cpp")
    kernix.clear_cache("ops", root=r)
    assert not a.exists() and b.exists()


def test_refuses_to_build_from_a_source_directory_others_can_write(tmp_path: Path) -> None:
    r = tmp_path / "c"
    files.write_source(r, "ops", "int a;", "cpp")
    (r / "sources").chmod(0o777)
    with pytest.raises(CacheError, match="other users can write"):
        files.write_source(r, "ops", "int a;", "cpp")


def test_cache_cleared_between_lookup_and_load(root: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process clearing the cache right after the look-up costs a rebuild, not an error."""
    name = unique_name("vanish")
    built = subprocess.run(
        [sys.executable, "-c", f"import kernix; kernix.load_cpp_file({str(source)!r}, name={name!r})"],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    real_lookup = entries.lookup
    calls = []

    lookups = []

    def lookup_then_clear(*a, **k):
        found = real_lookup(*a, **k)
        lookups.append(found)
        if found.hit and not calls:
            calls.append(found)
            kernix.clear_cache(name)  # as another process would, between look-up and dlopen
        return found

    monkeypatch.setattr(entries, "lookup", lookup_then_clear)
    mod = kernix.load_cpp_file(source, name=name)
    _check(mod)
    assert calls and mod.path.exists()  # rebuilt and published again
    assert len(lookups) >= 2 and lookups[0] is calls[0]


def test_clearing_the_whole_cache_leaves_nothing_to_count(tmp_path: Path) -> None:
    """`kernix cache clear` empties what `kernix cache info` counts: precompiled preludes,
    inference set-ups and the records of a module whose entries are already gone included."""
    r = tmp_path / "c"
    shared = [r / "toolchain" / "prelude-0123.pch", r / "direct" / ".parse" / "0123.rec",
              r / "direct" / "gone" / "4567.rec", r / "specs" / "ab" / "ab12.rec"]
    for path in shared:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1024)
    assert kernix.cache_info(root=r)["total_bytes"] == 4096
    kernix.clear_cache(root=r)
    assert [p for p in shared if p.exists()] == []
    assert kernix.cache_info(root=r)["total_bytes"] == 0


# --------------------------------------------------------------------- clear_cache and cache_info


def _clear_after(monkeypatch: pytest.MonkeyPatch, module, attr: str, root: Path, name: str) -> list[int]:
    """Make ``module.attr`` (a function or a context manager factory) run
    ``clear_cache(name)`` first, once, as another process might at that moment."""
    real = getattr(module, attr)
    cleared: list[int] = []

    def clear_then(*args, **kwargs):
        if not cleared:
            cleared.append(kernix.clear_cache(name, root=root))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, attr, clear_then)
    return cleared


def _inline_source_of(root: Path, name: str) -> Path:
    (path,) = (root / "sources").glob(f"{name}-*.cpp")
    return path


def _load_despite_the_clear(root: Path, name: str, text: str, cleared: list[int]) -> None:
    """Load ``text`` inline: it works, the clear ran once (removing no entry yet), and the
    stored source holds ``text`` again."""
    mod = kernix.load_cpp_inline(name, text, build_directory=str(root))
    assert cleared == [0]
    _check(mod)
    assert _inline_source_of(root, name).read_text() == text


def test_clear_right_after_an_inline_source_is_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernix cache clear` between storing an inline source and building it (before
    the build lock is taken) costs nothing: the load stores the source again."""
    name, text = unique_name("inline_cleared"), (REL / "add_one.cpp").read_text()
    real = files.write_source
    cleared: list[int] = []

    def store_then_clear(*args, **kwargs):
        path = real(*args, **kwargs)
        if not cleared:
            cleared.append(kernix.clear_cache(name, root=tmp_path))
            assert not path.exists()
        return path

    monkeypatch.setattr(loaders, "write_source", store_then_clear)  # where the load stores it
    _load_despite_the_clear(tmp_path, name, text, cleared)


def test_whole_clear_while_an_inline_source_is_being_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clear of every module removes the temporary file of an inline source being written
    (`sources/.<name>-<hash>.cpp.XXXX.tmp`, no module's by its name) before it is renamed into
    place: the load writes it again instead of failing."""
    name, text = unique_name("inline_tmp"), (REL / "add_one.cpp").read_text()
    real = os.replace
    cleared: list[int] = []

    def clear_then_replace(src, dst, *args, **kwargs):
        if not cleared and os.fspath(src).endswith(".tmp") and "sources" in os.fspath(dst):
            cleared.append(kernix.clear_cache(root=tmp_path))
            assert not os.path.exists(src)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", clear_then_replace)
    _load_despite_the_clear(tmp_path, name, text, cleared)


def test_clear_while_a_load_waits_for_the_build_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clear that holds the build lock while an inline load waits for it (so it
    removes the stored source) does not make that load fail."""
    name, text = unique_name("inline_waited"), (REL / "add_one.cpp").read_text()
    cleared = _clear_after(monkeypatch, compilation, "build_lock", tmp_path, name)  # where the build takes it
    _load_despite_the_clear(tmp_path, name, text, cleared)
    assert kernix.cache_info(root=tmp_path)["modules"][0]["name"] == name


def _outside(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A directory outside the cache that looks like a module area, and its files."""
    out = tmp_path / "outside"
    made = [out / "ops" / "k1" / "manifest.json", out / "ops" / "k2" / "manifest.json", out / "keep.txt"]
    for p in made:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("precious")
    return out, made


@pytest.mark.parametrize("whole", [False, True], ids=["named", "whole"])
def test_clear_removes_a_symlinked_module_directory_never_what_it_points_to(tmp_path: Path, whole: bool) -> None:
    """A symbolic link where a module's directory belongs is removed (it holds no
    entry of this cache, so it is not counted); what it points to is untouched."""
    r = tmp_path / "c"
    out, made = _outside(tmp_path)
    (r / "modules").mkdir(parents=True)
    (r / "modules" / "ops").symlink_to(out / "ops")
    assert kernix.cache_info(root=r) == {"root": str(r), "total_bytes": 0, "modules": [], "tuning": []}
    assert kernix.clear_cache(None if whole else "ops", root=r) == 0
    assert not os.path.lexists(r / "modules" / "ops")
    assert all(p.read_text() == "precious" for p in made)


def test_clear_counts_real_entries_and_not_symlinked_ones(tmp_path: Path) -> None:
    r = tmp_path / "c"
    out, made = _outside(tmp_path)
    entry = r / "modules" / "ops" / "0123"
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text("{}")
    (r / "modules" / "ops" / "4567").symlink_to(out / "ops" / "k1")
    assert [m["path"] for m in kernix.cache_info(root=r)["modules"]] == [str(entry)]
    assert kernix.clear_cache(root=r) == 1
    assert not (r / "modules" / "ops").exists()
    assert all(p.read_text() == "precious" for p in made)


@pytest.mark.parametrize("area", ["modules", "build", "sources", "direct", "specs", "toolchain", "locks"])
def test_clear_never_goes_through_a_symlinked_area(tmp_path: Path, area: str) -> None:
    """A cache area that is a symbolic link is removed by `kernix cache clear`, never
    gone through: nothing outside the cache is deleted, and nothing is counted."""
    r = tmp_path / "c"
    out, made = _outside(tmp_path)
    (out / "ops-0123456789abcdef.cpp").write_text("precious")
    (out / "ops.lock").write_text("precious")
    made += [out / "ops-0123456789abcdef.cpp", out / "ops.lock"]
    r.mkdir()
    (r / area).symlink_to(out)
    assert kernix.cache_info(root=r)["total_bytes"] == 0
    assert kernix.clear_cache("ops", root=r) == 0
    assert kernix.clear_cache(root=r) == 0
    assert not (r / area).is_symlink()
    assert (r / area).is_dir() == (area == "locks")  # (the clear took locks in a real directory)
    assert all(p.read_text() == "precious" for p in made)


def test_clear_replaces_a_planted_lock_symlink_without_following_it(tmp_path: Path) -> None:
    """A lock file that is a symbolic link (which the build lock refuses, advising
    `kernix cache clear`) does not stop the clear: the link goes, its target stays."""
    r = tmp_path / "c"
    out, made = _outside(tmp_path)
    (r / "modules" / "ops" / "0123").mkdir(parents=True)
    (r / "locks").mkdir()
    (r / "locks" / "ops.lock").symlink_to(out / "keep.txt")
    assert kernix.clear_cache("ops", root=r) == 1
    assert (r / "locks" / "ops.lock").is_file() and not (r / "locks" / "ops.lock").is_symlink()
    assert all(p.read_text() == "precious" for p in made)


def test_clear_removes_files_where_directories_belong(tmp_path: Path) -> None:
    """Regular files where the cache keeps directories (a module's directory, an
    entry, a whole area) are removed, counted only when they were entries."""
    r = tmp_path / "c"
    (r / "modules" / "ops").mkdir(parents=True)
    (r / "modules" / "ops" / "0123").write_text("not an entry")
    (r / "modules" / "mm").write_text("not a module")
    for area in ("build", "sources", "specs"):
        (r / area).write_text("not an area")
    assert kernix.cache_info(root=r)["total_bytes"] == len("not an entry") + len("not a module") + 3 * len("not an area")
    assert kernix.clear_cache("mm", root=r) == 0 and not (r / "modules" / "mm").exists()
    assert kernix.clear_cache(root=r) == 0
    assert sorted(p.name for p in r.iterdir()) == ["locks", "modules"]
    assert list((r / "modules").iterdir()) == []
    assert kernix.cache_info(root=r)["total_bytes"] == 0


def test_names_that_are_not_utf8_are_cleared_and_shown(tmp_path: Path) -> None:
    """A directory whose name is not UTF-8 (no module has such a name) is listed with
    its bytes escaped, so any output can print it, and removed by a clear."""
    r = tmp_path / "c"
    entry = os.path.join(os.fsencode(r), b"modules", b"bad\xff", b"0123")
    os.makedirs(entry)
    with open(os.path.join(entry, b"manifest.json"), "wb") as f:
        f.write(b"{")
    os.makedirs(os.path.join(os.fsencode(r), b"build", b"\xfe"))
    os.makedirs(os.path.join(os.fsencode(r), b"sources"))
    with open(os.path.join(os.fsencode(r), b"sources", b"\xfd-0123456789abcdef.cpp"), "wb") as f:
        f.write(b"int x;")
    info = kernix.cache_info(root=r)
    (m,) = info["modules"]
    assert m["damaged"] and m["name"] == "bad\\xff" and m["path"].endswith("bad\\xff/0123")
    json.dumps(info, ensure_ascii=False).encode("utf-8")  # (a string with surrogates cannot be written)
    assert info["total_bytes"] == 1 + len("int x;")
    shown = subprocess.run(  # an output that writes strict UTF-8
        [sys.executable, "-m", "kernix", "cache", "info"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "KERNIX_CACHE_DIR": str(r), "PYTHONIOENCODING": "utf-8"},
    )
    assert shown.returncode == 0 and "bad\\xff" in shown.stdout, shown.stderr
    assert kernix.clear_cache(root=r) == 1
    assert kernix.cache_info(root=r) == {"root": str(r), "total_bytes": 0, "modules": [], "tuning": []}
    assert [os.listdir(r / a) for a in ("modules", "build", "sources")] == [[], [], []]


def _refuse_unlink(monkeypatch: pytest.MonkeyPatch, refused: str) -> None:
    """Make removing files named ``refused`` fail as in a directory one may not
    write (permission bits do not stop root, who may run this suite)."""
    real = os.unlink

    def unlink(path, *args, **kwargs):
        if os.path.basename(os.fsdecode(path)) == refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)


def test_clear_that_cannot_remove_an_entry_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry that cannot be removed is not counted as removed: the clear removes
    what it can, then says what it could not remove and how to fix it."""
    r = tmp_path / "c"
    for key in ("0123", "4567"):
        (r / "modules" / "ops" / key).mkdir(parents=True)
    (r / "modules" / "ops" / "4567" / "manifest.json").write_text("{}")
    _refuse_unlink(monkeypatch, "manifest.json")
    with pytest.raises(CacheError) as info:
        kernix.clear_cache("ops", root=r)
    message = str(info.value)
    assert "removed 1 cache entry" in message and str(r / "modules" / "ops" / "4567" / "manifest.json") in message
    assert f"chmod -R u+rwX {r}" in message and "run `kernix.clear_cache('ops')` again" in message
    assert message.startswith("clear_cache('ops') removed 1 cache entry")
    assert "kernix cache clear" not in message  # (the call was Python's, not the command line's)
    assert not (r / "modules" / "ops" / "0123").exists() and (r / "modules" / "ops" / "4567").exists()
    monkeypatch.undo()
    assert kernix.clear_cache("ops", root=r) == 1  # the advice's second half


def test_a_clear_that_cannot_remove_names_the_call_or_command_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`kernix cache clear ops` advises running itself again (not a clear of every
    module); `kernix cache clear` and clear_cache() name themselves."""
    from kernix.cli import main

    r = tmp_path / "c"
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(r))
    (r / "modules" / "ops" / "4567").mkdir(parents=True)
    (r / "modules" / "ops" / "4567" / "manifest.json").write_text("{}")
    _refuse_unlink(monkeypatch, "manifest.json")
    assert main(["cache", "clear", "ops"]) == 1
    err = capsys.readouterr().err
    assert "kernix cache clear ops removed 0 cache entries" in err and "run `kernix cache clear ops` again" in err
    assert main(["cache", "clear"]) == 1
    err = capsys.readouterr().err
    assert "kernix cache clear removed 0 cache entries" in err and "run `kernix cache clear` again" in err
    with pytest.raises(CacheError, match=r"^clear_cache\(\) removed 0 cache entries.*run `kernix\.clear_cache\(\)` again"):
        kernix.clear_cache(root=r)


def test_cache_info_of_an_unreadable_directory_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernix cache info` does not leave out what it cannot read: it names it."""
    r = tmp_path / "c"
    (r / "modules" / "ops" / "0123").mkdir(parents=True)
    (r / "modules" / "ops" / "0123" / "manifest.json").write_text("{}")
    unreadable = r / "modules" / "ops"
    real = os.scandir

    def scandir(path=".", *args, **kwargs):
        if os.fspath(path) == str(unreadable):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    expected = f"cannot read {re.escape(str(unreadable))} .*chmod -R u\\+rwX {re.escape(str(r))}"
    with pytest.raises(CacheError, match=expected):
        kernix.cache_info(root=r)


def _cache_of_three_modules(r: Path) -> dict[Path, int]:
    """A cache of modules ``ops``, ``mm`` and ``nn`` with what each leaves in every
    module area, a shared area, and a file outside any entry; the bytes of each entry."""
    sizes = {}
    for i, name in enumerate(("ops", "mm", "nn")):
        entry = r / "modules" / name / f"{i}123"
        (entry / "sub").mkdir(parents=True)
        (entry / "manifest.json").write_text("{")  # (damaged: listed, with its size)
        (entry / "module.so").write_bytes(b"x" * (100 + i))
        (entry / "sub" / "more").write_bytes(b"y" * 10)
        sizes[entry] = 1 + 100 + i + 10
        for made in (r / "build" / name / "shim.o", r / "build" / f".{name}.stale-1-2" / "x.o",
                     r / "sources" / f"{name}-0123456789abcdef.cpp", r / "direct" / name / "0123.rec"):
            made.parent.mkdir(parents=True, exist_ok=True)
            made.write_bytes(b"z")
    (r / "modules" / "ops" / "loose").write_bytes(b"w" * 7)
    (r / "specs" / "ab").mkdir(parents=True)
    (r / "specs" / "ab" / "ab12.rec").write_bytes(b"s" * 5)
    return sizes


def _count_calls(monkeypatch: pytest.MonkeyPatch, *functions: str) -> dict[tuple[str, str], int]:
    """Count the calls of each ``os.<function>`` by ``(function, the path it is given)``."""
    calls: dict[tuple[str, str], int] = {}
    for function in functions:
        real = getattr(os, function)

        def counted(path=".", *args, _real=real, _function=function, **kwargs):
            key = (_function, os.fsdecode(path) if not isinstance(path, int) else f"fd {path}")
            calls[key] = calls.get(key, 0) + 1
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, function, counted)
    return calls


def test_cache_info_reads_each_directory_and_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One walk gives the total and each entry's size: no directory is listed and
    no file looked at twice, and the entries' sizes are their files' bytes."""
    r = tmp_path / "c"
    sizes = _cache_of_three_modules(r)
    calls = _count_calls(monkeypatch, "scandir", "stat", "lstat")
    info = kernix.cache_info(root=r)
    monkeypatch.undo()
    assert {call: n for call, n in calls.items() if n > 1 and call[1].startswith(str(r))} == {}
    assert {Path(m["path"]): m["size_bytes"] for m in info["modules"]} == sizes
    assert [m["name"] for m in info["modules"]] == ["mm", "nn", "ops"]
    assert info["total_bytes"] == sum(sizes.values()) + 7 + 5 + 3 * 4


def test_a_clear_of_every_module_lists_each_area_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clear of every module lists each cache area once, not once per module,
    and still removes each module's entries, work directories, sources and records."""
    r = tmp_path / "c"
    _cache_of_three_modules(r)
    calls = _count_calls(monkeypatch, "scandir")
    assert kernix.clear_cache(root=r) == 3
    monkeypatch.undo()
    assert {area: calls.get(("scandir", str(r / area)), 0) for area in ("modules", "build", "sources", "direct")} == {
        "modules": 1, "build": 1, "sources": 1, "direct": 1}
    assert kernix.cache_info(root=r) == {"root": str(r), "total_bytes": 0, "modules": [], "tuning": []}
    assert [os.listdir(r / a) for a in ("modules", "build", "sources")] == [[], [], []]


def test_a_clear_of_every_module_removes_what_a_build_made_while_it_waited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a build publishes while the clear of every module waits for its lock (a
    module directory, a work directory, records: named after the module) is removed
    and counted, though the areas were listed before."""
    from kernix.store import admin

    r = tmp_path / "c"
    files.write_source(r, "late", "int a;", "cpp")  # all the listing finds of `late`
    real = admin.build_lock
    made = [r / "modules" / "late" / "0123" / "manifest.json", r / "build" / "late" / "x.o",
            r / "direct" / "late" / "0123.rec"]

    def build_lock(root, name, **kwargs):
        for path in made if name == "late" else ():  # as the build holding the lock publishes
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
        return real(root, name, **kwargs)

    monkeypatch.setattr(admin, "build_lock", build_lock)
    assert kernix.clear_cache(root=r) == 1
    assert not any(os.path.lexists(r / area / "late") for area in ("modules", "build", "direct"))
    assert list((r / "sources").iterdir()) == []
