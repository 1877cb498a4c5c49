"""The warm bundle (kernix.warmstart): the modules a warm load imports, served
from one file in the ``__pycache__`` beside the package, only while it is
current and private.  Each test runs fresh processes against a copy of the kernix package
of its own, so that it can edit, damage and chmod the copy."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import kernix
from kernix import warmstart
from helpers import FIXTURES, has_nvcc, unique_name

SOURCE = FIXTURES / "reliability" / "add_one.cpp"
NAME = unique_name("warmstart")

# A warm load in a fresh process; prints what it needs to know of the modules it imported.
CHILD = """
import json, sys, inspect
import kernix
m = kernix.load_cpp_file({source!r}, name={name!r}, build_directory={cache!r})
served = sorted(n for n, mod in sys.modules.items()
                if n.startswith("kernix") and type(mod.__spec__.loader).__name__ == "_BundledLoader")
request = sys.modules["kernix.request"]
print(json.dumps({{
    "package": kernix.__file__,
    "served": served,
    "imported": sorted(n for n in sys.modules if n == "kernix" or n.startswith("kernix.")),
    "functions": list(m.functions),
    "add_one": [float(v) for v in m.add_one(__import__("numpy").arange(3, dtype="float32"))],
    "origin_is_file": all(mod.__spec__.origin == mod.__file__ for n, mod in sys.modules.items() if n.startswith("kernix.")),
    "cached": request.__cached__,
    "source_line": inspect.getsource(request.make_request).splitlines()[0],
    "edited": getattr(sys.modules["kernix.report"], "EDITED", None),
}}))
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache where the test module is built (once)."""
    root = tmp_path_factory.mktemp("warmstart-cache")
    kernix.load_cpp_file(SOURCE, name=NAME, build_directory=root, auto_register=False)
    return root


@pytest.fixture
def package(tmp_path: Path, cache: Path) -> Path:
    """A copy of the kernix package under test (its parent goes first on the children's path), which has
    loaded the test module once (another kernix is another request: the next load is a warm one)."""
    copy = tmp_path / "site" / "kernix"
    shutil.copytree(Path(kernix.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    _warm(copy, cache, PYTHONDONTWRITEBYTECODE="1")
    return copy


def _pycache(package: Path) -> Path:
    """Where the bundle goes: the ``__pycache__`` of the directory holding the package."""
    return package.parent / "__pycache__"


def _bundle(package: Path) -> Path:
    (found,) = _pycache(package).glob("kernix-warm.*.bundle")
    return found


def _child_env(package: Path, **env: str) -> dict[str, str]:
    """A child's environment: bytecode on (an installed package has its ``.pyc`` files), the copy's directory
    first on ``PYTHONPATH`` (what else it names, libclang say, stays), then ``env``."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    path = os.pathsep.join(p for p in (str(package.parent), os.environ.get("PYTHONPATH")) if p)
    return {**environ, "PYTHONPATH": path, **env}


def _warm(package: Path, cache: Path, **env: str) -> tuple[dict, str]:
    """One warm load in a fresh process: (what it printed, its stderr)."""
    code = CHILD.format(source=str(SOURCE), name=NAME, cache=str(cache))
    environ = _child_env(package, KERNIX_VERBOSE="1", **env)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd=package.parent)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["package"] == str(package / "__init__.py") and out["functions"] == ["add_one"]
    assert out["add_one"] == [1.0, 2.0, 3.0]
    return out, done.stderr


def _served_warm(package: Path, cache: Path) -> dict:
    """A warm load after the one that writes the bundle: it serves every module it imports from it."""
    _, err = _warm(package, cache)
    assert "none yet; written" in err
    out, err = _warm(package, cache)
    assert "bundle" in err and ": used" in err
    return out


C_PLUS_PLUS_MODULES = sorted(set(warmstart.WARM_MODULES) - {"kernix.arch"})


def test_a_warm_load_imports_its_modules_from_the_bundle_as_ordinary_modules(package: Path, cache: Path) -> None:
    out = _served_warm(package, cache)
    assert out["served"] == C_PLUS_PLUS_MODULES
    assert out["imported"] == sorted(["kernix", "kernix.warmstart", *C_PLUS_PLUS_MODULES])
    assert out["origin_is_file"] and out["cached"].endswith(".pyc")
    assert out["source_line"].startswith("def make_request(")
    assert stat.S_IMODE(_bundle(package).stat().st_mode) == 0o644


def test_a_load_leaves_in_the_package_only_what_pip_uninstall_removes(package: Path, cache: Path) -> None:
    """``pip uninstall`` removes the files it installed and the ``.pyc`` file of each ``.py`` among them: any other
    file in ``kernix/`` would keep the directory, and ``import kernix`` would then find an empty namespace package.
    (``.ci/run`` checks the same with pip itself.)"""
    installed = {p for p in package.rglob("*") if p.is_file()}
    _served_warm(package, cache)
    removed = installed | {Path(importlib.util.cache_from_source(str(p))) for p in installed if p.suffix == ".py"}
    assert {p for p in package.rglob("*") if p.is_file()} <= removed
    assert _bundle(package).is_file()


def test_the_bundle_lists_what_a_warm_load_imports(package: Path, cache: Path) -> None:
    """WARM_MODULES is a warm C++ load's modules, plus kernix.arch, which a warm CUDA load adds (its test is in
    test_a_warm_cuda_load_serves_the_architecture_module_too)."""
    out, _ = _warm(package, cache, PYTHONDONTWRITEBYTECODE="1")  # (no bundle: every module imported from its file)
    assert sorted(set(out["imported"]) - {"kernix", "kernix.warmstart"}) == C_PLUS_PLUS_MODULES


@pytest.mark.parametrize("edit", ["size", "same size and mtime"])
def test_an_edited_source_is_imported_from_the_source_and_the_bundle_written_again(
    package: Path, cache: Path, edit: str
) -> None:
    _served_warm(package, cache)
    report = package / "report.py"
    report.write_text(report.read_text() + "EDITED = 1\n")
    out, err = _warm(package, cache)
    assert out["edited"] == 1 and "kernix.report changed; written" in err
    if edit == "same size and mtime":  # (as cp -p or tar x leave it: only the ctime tells)
        before = report.stat()
        report.write_text(report.read_text().replace("EDITED = 1", "EDITED = 2"))
        os.utime(report, ns=(before.st_atime_ns, before.st_mtime_ns))
        out, err = _warm(package, cache)
        assert out["edited"] == 2 and "kernix.report changed; written" in err
    again, _ = _warm(package, cache)
    assert again["edited"] == out["edited"] and again["served"] == C_PLUS_PLUS_MODULES


def test_a_copied_installation_does_not_use_the_bundle_of_the_original(package: Path, cache: Path) -> None:
    """A directory copied whole (a virtual environment, an image layer) carries the bundle, which names the
    original's sources; the copy's own sources decide, edited or not."""
    _served_warm(package, cache)
    copy = package.parent.parent / "copied-site" / "kernix"
    shutil.copytree(package.parent, copy.parent)
    report = copy / "report.py"
    report.write_text(report.read_text() + "EDITED = 1\n")
    out, err = _warm(copy, cache)
    assert out["edited"] == 1 and f"written for another copy of kernix ({package}{os.sep}" in err and "; written" in err
    assert out["cached"].startswith(str(copy.parent))
    again, err = _warm(copy, cache)
    assert again["served"] == C_PLUS_PLUS_MODULES and ": used" in err and again["edited"] == 1
    original, _ = _warm(package, cache)  # (the original keeps its own)
    assert original["served"] == C_PLUS_PLUS_MODULES and original["edited"] is None


@pytest.mark.parametrize("damage", ["truncated", "another file", "other code"])
def test_a_damaged_bundle_is_not_used_and_written_again(package: Path, cache: Path, damage: str) -> None:
    _served_warm(package, cache)
    bundle = _bundle(package)
    data = bundle.read_bytes()
    if damage == "truncated":
        bundle.write_bytes(data[: len(data) // 2])
    elif damage == "another file":
        bundle.write_bytes(b"\x00" * 100)
    else:  # a well-formed bundle whose code is not a code object
        import marshal

        value = marshal.loads(data[len(warmstart.BUNDLE_MAGIC):])
        value["modules"][0][3] = b"print('not code')"
        bundle.write_bytes(warmstart.BUNDLE_MAGIC + marshal.dumps(value))
    _, err = _warm(package, cache)
    assert "; written" in err
    again, err = _warm(package, cache)
    assert again["served"] == C_PLUS_PLUS_MODULES and ": used" in err


def test_a_bundle_other_users_can_write_is_not_read(package: Path, cache: Path) -> None:
    _served_warm(package, cache)
    bundle = _bundle(package)
    bundle.chmod(0o666)
    _, err = _warm(package, cache)
    assert "could have been written by another user; written" in err
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o644  # replaced by a private one


def test_no_bundle_is_written_without_bytecode(package: Path, cache: Path) -> None:
    for _ in range(2):
        out, err = _warm(package, cache, PYTHONDONTWRITEBYTECODE="1")
        assert out["served"] == [] and "not written: sys.dont_write_bytecode is set" in err
    assert not list(_pycache(package).glob("kernix-warm.*"))


def test_the_bundle_follows_the_pycache_prefix(package: Path, cache: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "pycache-prefix"
    _warm(package, cache, PYTHONPYCACHEPREFIX=str(prefix))
    out, _ = _warm(package, cache, PYTHONPYCACHEPREFIX=str(prefix))
    assert out["served"] == C_PLUS_PLUS_MODULES
    assert len(list(prefix.rglob("kernix-warm.*.bundle"))) == 1
    assert not list(package.parent.rglob("kernix-warm.*"))


def test_the_bundle_can_be_turned_off(package: Path, cache: Path) -> None:
    out, err = _warm(package, cache, KERNIX_WARM_BUNDLE="0")
    assert out["served"] == [] and "kernix.warmstart" not in out["imported"] and "warm bundle" not in err
    assert not list(_pycache(package).glob("kernix-warm.*"))


@pytest.mark.skipif(os.getuid() == 0, reason="root writes to any directory: a read-only one needs another user")
def test_no_bundle_is_written_where_its_directory_cannot_be_written(package: Path, cache: Path) -> None:
    pycache = _pycache(package)
    pycache.mkdir(exist_ok=True)
    pycache.chmod(0o555)
    try:
        out, err = _warm(package, cache)
        assert out["served"] == [] and "is not writable" in err
    finally:
        pycache.chmod(0o755)


def test_first_loads_in_threads_share_one_copy_of_each_module(package: Path, cache: Path) -> None:
    _served_warm(package, cache)
    code = f"""
import sys, threading, kernix
mods, errors = [], []
def load():
    try:
        mods.append(kernix.load_cpp_file({str(SOURCE)!r}, name={NAME!r}, build_directory={str(cache)!r},
                                         auto_register=False))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=load) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
CompiledModule = sys.modules["kernix.runtime.module"].CompiledModule
assert not errors, errors
assert len(mods) == 8 and all(type(m) is CompiledModule for m in mods)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_child_env(package),
                          cwd=package.parent)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.skipif(not has_nvcc(), reason="building a CUDA module needs nvcc")
def test_a_warm_cuda_load_serves_the_architecture_module_too(package: Path, tmp_path: Path) -> None:
    source = FIXTURES / "seed_vector_add.cu"
    name = unique_name("warmstart_cuda")
    code = (
        "import json, sys, kernix\n"
        f"kernix.load_cuda_file({str(source)!r}, name={name!r}, build_directory={str(tmp_path / 'cache')!r},"
        " auto_register=False)\n"
        "print(json.dumps(sorted(n for n, m in sys.modules.items() if n.startswith('kernix.')"
        " and type(m.__spec__.loader).__name__ == '_BundledLoader')))\n"
    )
    environ = _child_env(package, KERNIX_CUDA_ARCH="sm_90", JAX_PLATFORMS="cpu")
    environ.pop("KERNIX_CUDA_ARCH_LIST", None)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, check=True,
                           cwd=package.parent)
            for _ in range(3)]  # builds; writes the bundle; warm
    assert json.loads(runs[-1].stdout) == sorted(warmstart.WARM_MODULES)
