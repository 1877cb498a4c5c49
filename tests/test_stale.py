"""Nothing stale, ever: what a build read is what its entry vouches for.

* every file the compilers read is tracked, system and CUDA toolkit headers
  too, except the host compiler's own installation (its identity covers it);
* the environment variables that change a compiler's search list are part
  of every key, fingerprint and remembered compiler answer;
* a file that changed while a build ran is never recorded as current;
* kernix's own code (generator, headers, inference) is in every key by content;
* a ``kernix cache clear`` at any moment is a miss for a load, never an error.

Each test fails on a kernix that has the fault (see the docstrings).  All on
the CPU path but the CUDA toolkit test, which builds without a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix import compilation
from kernix.backend import toolchain
from kernix.backend.installation import own_header_dirs
from kernix.store import entries, files
from kernix.store.manifest import Manifest

from helpers import FIXTURES, has_nvcc, unique_name

KERNEL = """#include "kernix/common.h"
#include <value.h>
// @BE add_k (...)->(...)
void add_k(const BE::Tensor x, BE::Tensor out) {
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i] + K;
}
"""




def _values(mod: kernix.CompiledModule) -> list[float]:
    with jax.default_device(jax.devices("cpu")[0]):
        return np.asarray(mod.add_k(jnp.zeros(3, jnp.float32))).tolist()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src" / "kernel.cpp"
    src.parent.mkdir()
    src.write_text(KERNEL)
    return src


def _header_dir(tmp_path: Path, name: str, k: float) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "value.h").write_text(f"#define K {k}f\n")
    return d


def _load(source: Path, cache: Path, name: str, **kw) -> kernix.CompiledModule:
    """Load under a fresh target prefix: a rebuilt library is different code for XLA."""
    return kernix.load_cpp_file(source, name=name, build_directory=cache, target_prefix=unique_name("t"), **kw)


def _recorded(cache: Path, name: str) -> list[str]:
    return [d[0] for m in (cache / "modules" / name).glob("*/manifest.json")
            for d in json.loads(m.read_text())["dependencies"]]


# ----------------------------------------------------------- 1. every file the compilers read


@pytest.mark.parametrize("variable", ["CPLUS_INCLUDE_PATH", "CPATH"])
def test_a_header_found_through_the_compilers_search_path_is_tracked(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str,
) -> None:
    """Was: a directory of the compiler's search list (here one added by the
    environment, as /usr/local/include is by default) was taken for the
    toolchain's own, so an edited header there was a stale hit."""
    inc = _header_dir(tmp_path, "sysinc", 1.0)
    monkeypatch.setenv(variable, str(inc))
    cache, name = tmp_path / "cache", unique_name("search_path")
    assert _values(_load(source, cache, name)) == [1.0] * 3
    assert str(inc / "value.h") in _recorded(cache, name)
    (inc / "value.h").write_text("#define K 7.0f\n")
    assert _values(_load(source, cache, name)) == [7.0] * 3


def test_the_compilers_environment_is_part_of_the_key(source: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: CPLUS_INCLUDE_PATH entered neither the fingerprint nor the key, so
    pointing it at another directory loaded the library built with the first."""
    first, second = _header_dir(tmp_path, "first", 1.0), _header_dir(tmp_path, "second", 2.0)
    cache, name = tmp_path / "cache", unique_name("env_key")
    monkeypatch.setenv("CPLUS_INCLUDE_PATH", str(first))
    assert _values(_load(source, cache, name)) == [1.0] * 3
    monkeypatch.setenv("CPLUS_INCLUDE_PATH", str(second))
    assert _values(_load(source, cache, name)) == [2.0] * 3
    monkeypatch.setenv("CPLUS_INCLUDE_PATH", str(first))
    assert _values(_load(source, cache, name)) == [1.0] * 3
    assert len(list((cache / "modules" / name).glob("*/manifest.json"))) == 2  # one entry each


def test_answers_remembered_about_a_compiler_follow_its_environment(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: a compiler's search list was remembered per compiler file only, so a
    process with another CPLUS_INCLUDE_PATH was given the first one's list."""
    cxx = toolchain.find_host_compiler().path
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(tmp_path / "cache"))
    asked: list[str | None] = []

    def ask() -> str | None:
        asked.append(os.environ.get("CPLUS_INCLUDE_PATH"))
        return asked[-1]

    for value in ("/a", "/b", "/a"):
        monkeypatch.setenv("CPLUS_INCLUDE_PATH", value)
        assert files.remembered("test-search", cxx, ask) == value
    assert asked == ["/a", "/b"]  # the third is remembered


def _header_path(cxx: str, header: str) -> str:
    """Where ``cxx`` finds ``#include <header>``, as its own depfile says."""
    out = subprocess.run([cxx, "-x", "c++", "-std=c++17", "-M", "-"], input=f"#include <{header}>\n",
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}).stdout
    found = [p for p in out.replace("\\\n", " ").split() if p.endswith("/" + header)]
    assert found, out
    return os.path.normpath(found[0])


def test_the_compilers_own_headers_are_derived_from_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The boundary is the compiler's: its C++ standard library and private
    headers are its own, the C library's headers and a directory the
    environment adds are not."""
    cxx = toolchain.find_host_compiler().path
    monkeypatch.setenv("CPLUS_INCLUDE_PATH", str(_header_dir(tmp_path, "added", 1.0)))
    own = own_header_dirs(cxx)
    assert _header_path(cxx, "vector").startswith(own)  # libstdc++ (or libc++)
    assert _header_path(cxx, "stddef.h").startswith(own)  # the compiler's private headers
    assert not _header_path(cxx, "stdio.h").startswith(own)  # the C library's
    assert not str(tmp_path / "added" / "value.h").startswith(own)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed (the test builds CUDA code without a GPU)")
def test_a_header_in_the_cuda_toolkits_include_directory_is_tracked(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: the CUDA toolkit's include directories were left out of the record,
    so a header installed there (found through CUDA_HOME's nvcc) and edited
    was a stale hit."""
    real_nvcc = toolchain.find_nvcc().path
    real_home = toolchain.find_cuda_home()
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    # A toolkit whose nvcc adds its own include directory, as a real one's nvcc.profile does.
    (home / "bin" / "nvcc").write_text(f'#!/bin/sh\nexec {real_nvcc} -I{home / "include"} "$@"\n')
    (home / "bin" / "nvcc").chmod(0o755)
    (home / "include" / "cuda_runtime.h").symlink_to(real_home / "include" / "cuda_runtime.h")
    (home / "lib64").symlink_to(real_home / "lib64")
    (home / "include" / "value.h").write_text("#define K 1.0f\n")
    monkeypatch.delenv("KERNIX_NVCC", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(home))
    toolchain.forget()
    try:
        src = tmp_path / "k.cu"
        src.write_text('#include "kernix/common.h"\n#include <value.h>\n'
                       "__global__ void add_k_kernel(float* x) { x[0] += K; }\n"
                       "// @BE add_k\nvoid add_k(BE::Tensor x, cudaStream_t s) { add_k_kernel<<<1, 1, 0, s>>>("
                       "x.data_ptr<float>()); }\n")
        cache, name = tmp_path / "cache", unique_name("toolkit")

        def load() -> kernix.CompiledModule:
            return kernix.load_cuda_file(src, name=name, build_directory=cache, compute_capability="sm_80",
                                         auto_register=False)

        first = load()
        assert str(home / "include" / "value.h") in _recorded(cache, name)
        assert str(home / "include" / "cuda_runtime.h") in _recorded(cache, name)
        (home / "include" / "value.h").write_text("#define K 7.0f\n")
        assert load().digest != first.digest  # rebuilt from the edited header
    finally:
        toolchain.forget()


# ----------------------------------------------------------- 2. a file changed during the build


@pytest.mark.parametrize("older", [False, True], ids=["now", "backdated"])
def test_a_header_edited_during_the_build_is_never_recorded_as_current(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], older: bool,
) -> None:
    """Was: the header's version was taken after the build, so its new content
    was recorded as what the build had read, and the next load was a stale
    hit.  ``backdated``: the edit keeps an old mtime (``cp -p``); its ctime
    still gives it away."""
    inc = _header_dir(tmp_path, "inc", 1.0)
    header = inc / "value.h"
    cache, name = tmp_path / "cache", unique_name("edited_during")
    real = compilation.compile_library

    def edit_while_building(*args, **kwargs):
        result = real(*args, **kwargs)  # the compilers read K 1.0 ...
        header.write_text("#define K 7.0f\n")  # ... and the header changes before the build ends
        if older:
            os.utime(header, ns=(1_000_000_000, 1_000_000_000))
        return result

    monkeypatch.setattr(compilation, "compile_library", edit_while_building)
    assert _values(_load(source, cache, name, extra_include_paths=[str(inc)])) == [1.0] * 3
    monkeypatch.setattr(compilation, "compile_library", real)
    capfd.readouterr()
    mod = _load(source, cache, name, extra_include_paths=[str(inc)], verbose=True)
    assert f"{header} changed during the build" in capfd.readouterr().err  # said why it missed
    assert _values(mod) == [7.0] * 3


def test_objects_compiled_while_a_header_changed_are_not_reused(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:
    """A header edited after the compiler read it but before it wrote its
    object leaves an object newer than the header, which a ninja that
    compares the two times takes for up to date (recent ninja versions record
    the command's start instead and rebuild it).  The work directory's record
    marks the header unsettled, so the next build starts from an empty
    directory whatever ninja makes of the times.  Was: the entry recorded the
    new header as read, and the next load was a stale hit."""
    inc = _header_dir(tmp_path, "inc", 1.0)
    wrap = tmp_path / "cxx"
    wrap.mkdir()
    (wrap / "edit").touch()
    real_cxx = toolchain.find_host_compiler().path
    (wrap / "cxx").write_text(f"""#!/bin/sh
"{real_cxx}" "$@" || exit $?
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case "$out" in shim_*.o)
  if [ -e "{wrap}/edit" ]; then
    rm -f "{wrap}/edit"
    printf '#define K 7.0f\\n' > "{inc}/value.h"
    sleep 0.05; touch "$out"
  fi;;
esac
""")
    (wrap / "cxx").chmod(0o755)
    monkeypatch.setenv("CXX", str(wrap / "cxx"))
    toolchain.forget()
    try:
        cache, name = tmp_path / "cache", unique_name("object_during")
        assert _values(_load(source, cache, name, extra_include_paths=[str(inc)])) == [1.0] * 3
        assert not (wrap / "edit").exists()  # the header did change mid-build
        capfd.readouterr()
        mod = _load(source, cache, name, extra_include_paths=[str(inc)], verbose=True)
        assert f"afresh: {inc / 'value.h'} changed while its last build ran" in capfd.readouterr().err
        assert _values(mod) == [7.0] * 3
    finally:
        toolchain.forget()


def test_a_header_dated_in_the_future_settles(source: Path, tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    """A header whose modification time was set ahead (``touch -d``, an archive
    from a machine whose clock runs ahead) before the build is not taken for
    one that changed during it: the next load is a hit, not a rebuild forever."""
    inc = _header_dir(tmp_path, "inc", 3.0)
    ahead = time.time_ns() + 86_400 * 10**9
    os.utime(inc / "value.h", ns=(ahead, ahead))
    cache, name = tmp_path / "cache", unique_name("future")
    assert _values(_load(source, cache, name, extra_include_paths=[str(inc)])) == [3.0] * 3
    capfd.readouterr()
    _load(source, cache, name, extra_include_paths=[str(inc)], verbose=True)
    assert f"{name}: cache hit" in capfd.readouterr().err


def test_the_build_clock_is_the_file_systems(tmp_path: Path) -> None:
    """A file written after the clock was read is unsettled; one written before is settled."""
    before = tmp_path / "before.h"
    before.write_text("a")
    started = files.filesystem_now(tmp_path)
    after = tmp_path / "after.h"
    after.write_text("b")
    versions = files.settled_versions([str(before), str(after), str(tmp_path / "gone.h")], started)
    assert versions[0][-1] == files.file_digest(before)
    assert versions[1][-1] == versions[2][-1] == files.UNSETTLED
    assert not files.versions_current([versions[1]])
    assert files.stale_file(versions) == f"{after} {files.UNSETTLED}"


# ----------------------------------------------------------- 3. kernix's own code in every key


def _copy_of_kernix(tmp_path: Path) -> Path:
    """A copy of the kernix package under test, importable from the returned directory
    (run from there: ``python -c`` imports from the current directory first)."""
    top = tmp_path / "kernix-copy"
    shutil.copytree(Path(kernix.__file__).parent, top / "kernix", ignore=shutil.ignore_patterns("__pycache__"))
    return top


MARKED = """#include "kernix/common.h"
#ifndef KERNIX_TEST_HEADER_MARK
#define KERNIX_TEST_HEADER_MARK 0
#endif
#ifndef KERNIX_TEST_GENERATOR_MARK
#define KERNIX_TEST_GENERATOR_MARK 0
#endif
// @BE add_k (...)->(...)
void add_k(const BE::Tensor x, BE::Tensor out) {
  for (int64_t i = 0; i < x.numel(); ++i)
    out.data_ptr<float>()[i] = 1.0f + KERNIX_TEST_HEADER_MARK + 2.0f * KERNIX_TEST_GENERATOR_MARK;
}
"""


def _load_with(top: Path, src: Path, cache: Path, name: str) -> float:
    code = (f"import kernix, jax.numpy as jnp; m = kernix.load_cpp_file({str(src)!r}, name={name!r}); "
            "print(float(m.add_k(jnp.zeros(1, jnp.float32))[0]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(top), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]).rstrip(os.pathsep), "KERNIX_CACHE_DIR": str(cache), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         check=False, cwd=top)  # (not the checkout's directory: `-c` imports from the cwd first)
    assert out.returncode == 0, out.stderr[-3000:]
    return float(out.stdout.split()[-1])


@pytest.mark.installed
def test_kernixs_own_code_is_in_the_key_by_content(tmp_path: Path) -> None:
    """Was: kernix entered the key as its version only, so a kernix header or
    code generator edited in place (a checkout, a patched install) loaded the
    library the old one built: the generator edit was a direct hit, the header
    edit rebuilt the entry under the same key."""
    top = _copy_of_kernix(tmp_path)
    src, cache, name = tmp_path / "marked.cpp", tmp_path / "cache", unique_name("own_code")
    src.write_text(MARKED)
    assert _load_with(top, src, cache, name) == 1.0

    header = top / "kernix" / "include" / "kernix" / "common.h"
    header.write_text(header.read_text() + "\n#define KERNIX_TEST_HEADER_MARK 1\n")
    assert _load_with(top, src, cache, name) == 2.0

    generator = top / "kernix" / "backend" / "codegen.py"
    generator.write_text(generator.read_text() + (
        "\n\n_shim_unit = shim_unit\n\n\n"
        "def shim_unit(*args, **kwargs):\n"
        "    return '#define KERNIX_TEST_GENERATOR_MARK 1\\n' + _shim_unit(*args, **kwargs)\n"
    ))
    assert _load_with(top, src, cache, name) == 4.0
    assert len(list((cache / "modules" / name).glob("*/manifest.json"))) == 3  # one key per kernix


@pytest.mark.installed
def test_kernixs_inference_code_is_in_the_spec_key(tmp_path: Path) -> None:
    """Was: the spec cache's key held kernix's version only, so specs inferred
    by an older inference (same version, other code) were served again."""
    top = _copy_of_kernix(tmp_path)
    src, cache = tmp_path / "add_one.cpp", tmp_path / "cache"
    shutil.copy(FIXTURES / "reliability" / "add_one.cpp", src)
    code = f"import kernix; print(kernix.infer_file({str(src)!r}).functions[0].name)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(top), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]).rstrip(os.pathsep), "KERNIX_CACHE_DIR": str(cache)}

    def infer() -> int:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                             check=False, cwd=top)
        assert out.returncode == 0 and out.stdout.split()[-1] == "add_one", out.stderr[-3000:]
        return len(list((cache / "specs").rglob("*.rec")))

    assert infer() == 1
    assert infer() == 1  # a hit
    classify = top / "kernix" / "frontend" / "classify.py"
    classify.write_text(classify.read_text() + "\n# edited\n")
    assert infer() == 2  # inferred again, under another key


def test_the_identity_covers_the_generator_the_inference_and_the_headers() -> None:
    from kernix.store.direct import code_files

    package = Path(kernix.__file__).resolve().parent
    names = {str(Path(p).resolve().relative_to(package)) for p in code_files()}
    assert {"backend/codegen.py", "backend/flags.py", "backend/ninja.py", "frontend/classify.py",
            "frontend/clangparse.py", "language/spec.py", "language/dtypes.py", "include/kernix/common.h"} <= names
    assert {str(p.relative_to(package)) for p in (package / "include").rglob("*") if p.is_file()} <= names


# ----------------------------------------------------------- 4. a clear at any moment is a miss


@pytest.mark.parametrize("moment", ["before the library is checked", "before the specs are kept"])
def test_a_clear_while_the_entry_is_read_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   moment: str) -> None:
    """Was: a clear between reading the manifest and keeping functions.json made the
    first call a CacheError ("damaged (cannot read functions.json)"), and one
    before the library's check a RuntimeWarning that called the entry damaged."""
    src = tmp_path / "add_one.cpp"
    shutil.copy(FIXTURES / "reliability" / "add_one.cpp", src)
    cache, name = tmp_path / "cache", unique_name("cleared_reading")
    kernix.load_cpp_file(src, name=name, build_directory=cache)
    cleared = []
    if moment == "before the specs are kept":
        real = Manifest.keep_specs

        def keep_after_a_clear(self: Manifest) -> None:
            if not cleared:
                cleared.append(kernix.clear_cache(name, root=cache))
            real(self)

        monkeypatch.setattr(Manifest, "keep_specs", keep_after_a_clear)
    else:
        real_stat = entries.FileStat.of

        def stat_after_a_clear(path):
            if str(path).endswith(".so") and not cleared:
                cleared.append(kernix.clear_cache(name, root=cache))
            return real_stat(path)

        monkeypatch.setattr(entries.FileStat, "of", stat_after_a_clear)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = kernix.load_cpp_file(src, name=name, build_directory=cache, target_prefix=unique_name("t"))
        with jax.default_device(jax.devices("cpu")[0]):
            out = mod.add_one(jnp.arange(4, dtype=jnp.float32))
    assert cleared == [1]
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0, 4.0])
    assert mod.path.exists()  # built and published again

