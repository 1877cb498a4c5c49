"""Faults found from outside: stale code after a miss, spec-cache injection,
untracked headers, compiler identity, escaped paths, the lock, link errors,
name collisions and arrays on the wrong platform.  All on the CPU path.

Each test fails on a kernix that has the fault (see the docstrings).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.backend import toolchain
from kernix.backend.installation import own_header_dirs
from kernix.backend.ninja import read_depfile
from kernix.frontend.compiler_view import inference_flags
from kernix.store.files import encode_record, read_record
from kernix.errors import CacheError, CallError, CompilationError, RegistrationError
from kernix.request import make_request
from kernix.runtime.module import CompiledModule
from kernix.language.spec import FunctionSpec
from kernix.store import lock

from helpers import FIXTURES, unique_name

REL = FIXTURES / "reliability"

KERNEL = """#include "kernix/common.h"
#include "value.h"
// @BE add_k (...)->(...)
void add_k(const BE::Tensor x, BE::Tensor out) {
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i] + K;
}
"""


def _values(mod: kernix.CompiledModule, fn: str = "add_k") -> list[float]:
    with jax.default_device(jax.devices("cpu")[0]):
        return np.asarray(getattr(mod, fn)(jnp.zeros(3, jnp.float32))).tolist()


def _write_older(path: Path, text: str, age_s: float = 3600.0) -> None:
    """Replace ``path`` by a new file holding ``text`` whose mtime is in the past
    (as ``mv``, ``cp -p``, ``tar x`` or a branch switch leave it)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    old = time.time() - age_s
    os.utime(tmp, (old, old))
    os.replace(tmp, path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "proj"
    (d / "inc").mkdir(parents=True)
    (d / "kernel.cpp").write_text(KERNEL)
    (d / "inc" / "value.h").write_text("#define K 1.0f\n")
    return d


def _load(project: Path, cache: Path, name: str, **kw) -> kernix.CompiledModule:
    """Load under a fresh target prefix: a rebuilt library is different code for XLA."""
    kw.setdefault("target_prefix", unique_name("t"))
    return kernix.load_cpp_file(
        project / "kernel.cpp", name=name, build_directory=cache,
        extra_include_paths=[str(project / "inc")], **kw,
    )


@pytest.fixture
def wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The logging compiler wrapper of the reliability tests, as $CXX."""
    d = tmp_path / "cxx"
    d.mkdir()
    shutil.copy(REL / "cxx_wrapper.sh", d / "cxx")
    (d / "cxx").chmod(0o755)
    monkeypatch.setenv("CXX", str(d / "cxx"))
    toolchain.forget()
    yield d
    toolchain.forget()


def _calls(wrapper: Path, kind: str) -> int:
    log = wrapper / "calls.log"
    return sum(ln.startswith(kind) for ln in log.read_text().splitlines()) if log.exists() else 0


# ----------------------------------------------------------- 1. stale code after a miss


def test_source_replaced_by_an_older_file_is_recompiled(project: Path, tmp_path: Path) -> None:
    """Was: ninja saw the older mtime, kept the old object, and the old code was
    published under the new key."""
    cache, name = tmp_path / "cache", unique_name("older_src")
    assert _values(_load(project, cache, name)) == [1.0] * 3
    _write_older(project / "kernel.cpp", KERNEL.replace("+ K;", "+ K + 10.0f;"))
    assert _values(_load(project, cache, name)) == [11.0] * 3


def test_header_turned_into_a_symlink_to_an_older_file_is_recompiled(project: Path, tmp_path: Path) -> None:
    cache, name = tmp_path / "cache", unique_name("older_hdr")
    assert _values(_load(project, cache, name)) == [1.0] * 3
    other = tmp_path / "other_value.h"
    other.write_text("#define K 5.0f\n")
    old = time.time() - 3600
    os.utime(other, (old, old))
    (project / "inc" / "value.h").unlink()
    (project / "inc" / "value.h").symlink_to(other)
    assert _values(_load(project, cache, name)) == [5.0] * 3


def _replace_keeping_size_and_mtime(path: Path, text: str) -> None:
    """Overwrite ``path`` with ``text`` (same length) and put its mtime back, as
    ``cp -p``, ``tar x`` or ``rsync -a`` of another version of the file leave it."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_header_replaced_with_the_same_size_and_mtime_is_a_miss(project: Path, tmp_path: Path) -> None:
    """Was: the manifest's check of the headers compared size and mtime only, so
    the cache kept serving the old code."""
    cache, name = tmp_path / "cache", unique_name("same_mtime_hdr")
    assert _values(_load(project, cache, name)) == [1.0] * 3
    _replace_keeping_size_and_mtime(project / "inc" / "value.h", "#define K 7.0f\n")
    assert _values(_load(project, cache, name)) == [7.0] * 3


def test_compiler_symlink_pointed_elsewhere_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: the direct index recorded the compiler's resolved path only, so after
    ``ln -sfn`` (or ``update-alternatives``) the old build was still served."""
    for version, factor in (("v1", 2), ("v2", 3)):
        (tmp_path / version).mkdir()
        cxx = tmp_path / version / "g++"
        cxx.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -DFACTOR={factor}.0f "$@"\n')
        cxx.chmod(0o755)
    current = tmp_path / "current"
    monkeypatch.setenv("CXX", str(current / "g++"))
    src = KERNEL.replace('#include "value.h"\n', "").replace("+ K;", "* FACTOR;")
    cache, name = tmp_path / "cache", unique_name("relinked_cxx")

    def values() -> list[float]:
        toolchain.forget()
        mod = kernix.load_cpp_inline(name, src, build_directory=cache, target_prefix=unique_name("t"))
        with jax.default_device(jax.devices("cpu")[0]):
            return np.asarray(mod.add_k(jnp.ones(3, jnp.float32))).tolist()

    current.symlink_to("v1")
    assert values() == [2.0] * 3
    current.unlink()
    current.symlink_to("v2")
    assert values() == [3.0] * 3
    toolchain.forget()


def test_editing_a_kernel_body_stays_incremental(project: Path, tmp_path: Path, wrapper: Path) -> None:
    """The work-directory check must not turn the common edit into a full rebuild."""
    cache, name = tmp_path / "cache", unique_name("incremental")
    _load(project, cache, name)
    assert _calls(wrapper, "compile") == 3
    (project / "kernel.cpp").write_text(KERNEL.replace("+ K;", "+ K + 2.0f;"))
    assert _values(_load(project, cache, name)) == [3.0] * 3
    assert _calls(wrapper, "compile") == 4  # the user's unit only, not the handlers or the messages
    assert _calls(wrapper, "link") == 2


def _work_dir_damage_then_reload(project: Path, tmp_path: Path, damage) -> kernix.CompiledModule:
    cache, name = tmp_path / "cache", unique_name("workdamage")
    _load(project, cache, name)
    work = cache / "build" / name
    damage(work)
    (project / "kernel.cpp").write_text(KERNEL.replace("+ K;", "+ K + 3.0f;"))  # a miss that relinks
    return _load(project, cache, name)


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_objects_in_the_work_directory_are_rebuilt(project: Path, tmp_path: Path) -> None:
    """Was: the link failed with "file too short" at every load until the cache was cleared."""
    mod = _work_dir_damage_then_reload(project, tmp_path, lambda w: [_cut(o) for o in w.glob("*.o")])
    assert _values(mod) == [4.0] * 3


def test_truncated_library_in_the_work_directory_is_never_published(project: Path, tmp_path: Path) -> None:
    """Was: ninja found module.so up to date and the cut library was published
    ("file too short" / "invalid ELF header" at every load)."""
    cache, name = tmp_path / "cache", unique_name("cutso")
    _load(project, cache, name)
    _cut(cache / "build" / name / "module.so")
    shutil.rmtree(cache / "modules" / name)  # a miss that needs no recompile
    assert _values(_load(project, cache, name)) == [1.0] * 3


def test_library_that_fails_to_load_is_not_left_in_the_cache(tmp_path: Path) -> None:
    """A library linked against a shared library the loader cannot find: one clean
    rebuild, then an error naming the fixes, and no cache entry left behind."""
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "dep.cpp").write_text("float kx_dep(float x) { return x + 1.0f; }\n")
    subprocess.run(["g++", "-shared", "-fPIC", str(libdir / "dep.cpp"), "-o", str(libdir / "libkxdep.so")], check=True)
    src = (
        '#include "kernix/common.h"\nfloat kx_dep(float);\n// @BE use_dep\n'
        "void use_dep(const BE::Tensor x, BE::Tensor out) { out.data_ptr<float>()[0] = kx_dep(0.0f); }\n"
    )
    cache, name = tmp_path / "cache", unique_name("noload")
    with pytest.raises(RegistrationError) as info:
        kernix.load_cpp_inline(name, src, build_directory=cache, extra_ldflags=[f"-L{libdir}", "-lkxdep"])
    message = str(info.value)
    assert "libkxdep.so" in message and "force_rebuild=True" in message
    assert f"kernix cache clear {name}" in message
    assert not list((cache / "modules" / name).glob("*/manifest.json"))


# ----------------------------------------------------------- 2. the spec cache


def _spec_entries(cache: Path) -> list[Path]:
    return sorted((cache / "specs").glob("*/*.rec"))


def test_spec_cache_follows_build_directory(project: Path, tmp_path: Path, session_cache_dir: Path) -> None:
    cache = tmp_path / "cache"
    before = set(_spec_entries(session_cache_dir))
    _load(project, cache, unique_name("specroot"))
    assert _spec_entries(cache)
    assert set(_spec_entries(session_cache_dir)) == before


def _tamper_spec_cache(cache: Path, edit) -> None:
    (entry,) = _spec_entries(cache)
    data = read_record(entry, cache)
    edit(data["payload"]["functions"][0])
    entry.write_bytes(encode_record(data))


@pytest.mark.parametrize(
    "edit",
    [
        lambda f: f.update(qualified_name='add_k(x, out); } void evil() { system("touch INJECTED"); } void z'),
        lambda f: f["params"][0].update(canonical_type="int; } void evil() { int"),
        lambda f: f["params"][0].update(name="x) { } void evil(int"),
    ],
    ids=["qualified_name", "canonical_type", "param_name"],
)
def test_injected_code_in_a_cached_spec_never_reaches_the_compiler(project: Path, tmp_path: Path, edit) -> None:
    cache, name = tmp_path / "cache", unique_name("inject")
    _load(project, cache, name)
    _tamper_spec_cache(cache, edit)
    shutil.rmtree(cache / "modules")
    mod = _load(project, cache, name, force_rebuild=True)  # the tampered entry is a miss: parsed again
    assert _values(mod) == [1.0] * 3
    for shim in (cache / "build" / name).glob("shim_*.cpp"):
        assert "evil" not in shim.read_text()


def test_spec_cache_entry_others_can_write_is_not_used(project: Path, tmp_path: Path) -> None:
    cache, name = tmp_path / "cache", unique_name("specperm")
    _load(project, cache, name)
    _tamper_spec_cache(cache, lambda f: f.update(qualified_name="no_such_function"))
    (entry,) = _spec_entries(cache)
    entry.chmod(entry.stat().st_mode | stat.S_IWOTH)
    mod = _load(project, cache, name, force_rebuild=True)  # parses again instead
    assert _values(mod) == [1.0] * 3


# ----------------------------------------------------------- 3. headers and flags


def test_header_in_a_user_isystem_directory_is_tracked(project: Path, tmp_path: Path) -> None:
    """Was: -MMD left the header out of the manifest, so editing it was a stale hit."""
    cache, name = tmp_path / "cache", unique_name("isystem")
    sysdir = project / "inc"

    def load() -> kernix.CompiledModule:
        return kernix.load_cpp_file(project / "kernel.cpp", name=name, build_directory=cache,
                                    extra_cflags=["-isystem", str(sysdir)], target_prefix=unique_name("t"))

    assert _values(load()) == [1.0] * 3
    manifest = json.loads(next((cache / "modules" / name).glob("*/manifest.json")).read_text())
    recorded = [d[0] for d in manifest["dependencies"]]
    assert str(sysdir / "value.h") in recorded
    own = own_header_dirs(toolchain.find_host_compiler().path)  # libstdc++, the compiler's private headers
    assert own and not any(p.startswith(own) for p in recorded)  # covered by the compiler's identity
    (sysdir / "value.h").write_text("#define K 7.0f\n")
    assert _values(load()) == [7.0] * 3


def test_inference_sees_the_builds_preprocessor_flags(tmp_path: Path) -> None:
    """-isystem, -include, -U and -std in extra_cflags reach inference as well as the build."""
    inc = tmp_path / "sys"
    inc.mkdir()
    (inc / "types.h").write_text("typedef float real_t;\n")
    (tmp_path / "forced.h").write_text("#define KX_FORCED 1\n")
    src = (
        '#include "kernix/common.h"\n#include <types.h>\n'
        "#ifndef KX_FORCED\n#error not forced\n#endif\n"
        "#ifdef KX_GONE\n#error not undefined\n#endif\n"
        "#if __cplusplus < 201703L\n#error not C++17\n#endif\n"
        "// @BE scale (...)->(...)\n"
        "void scale(const BE::Tensor x, BE::Tensor out, real_t k) {\n"
        "  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i] * k;\n}\n"
    )
    mod = kernix.load_cpp_inline(
        unique_name("inferflags"), src, build_directory=tmp_path / "cache",
        extra_cflags=["-isystem", str(inc), "-include", str(tmp_path / "forced.h"), "-DKX_GONE", "-UKX_GONE",
                      "-std=c++17"],
    )
    assert mod.specs["scale"][-1].endswith("float32")
    with jax.default_device(jax.devices("cpu")[0]):
        assert np.asarray(mod.scale(jnp.ones(2, jnp.float32), k=3.0)).tolist() == [3.0, 3.0]


def test_relative_include_flag_is_resolved_against_the_cwd_for_both(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    request = make_request("rel", [project / "kernel.cpp"], "cpp", None, {"extra_cflags": ["-Iinc", "-isystem", "inc"]})
    assert request.extra_cflags == (f"-I{project / 'inc'}", "-isystem", str(project / "inc"))
    parse_flags = inference_flags(request.include_dirs, request.extra_cflags, request.optimization_level, False)
    assert f"-I{project / 'inc'}" in parse_flags
    mod = kernix.load_cpp_file(project / "kernel.cpp", name=unique_name("relinc"),
                               build_directory=tmp_path / "cache", extra_cflags=["-Iinc"])
    assert _values(mod) == [1.0] * 3


@pytest.mark.parametrize("option,flags,match", [
    ("extra_cflags", ["-I"], r"extra_cflags\[0\] = '-I' has no value.*'-I/path/to/dir'"),
    ("extra_cflags", ["-O2", "-D", "", "-DX"], r"extra_cflags\[1\] = '-D' has no value.*'-DNAME=1'"),
    ("extra_cflags", ["-isystem"], r"'-isystem' has no value"),
    ("extra_ldflags", ["-L", ""], r"extra_ldflags\[0\] = '-L' has no value"),
    ("extra_cflags", ["-DA=1\n-DB=2"], r"extra_cflags\[0\] = .* contains a line break"),
    ("extra_ldflags", ["-lm\r"], r"extra_ldflags\[0\] = .* contains a line break"),
    ("extra_include_paths", ["inc\0"], r"extra_include_paths\[0\] = .* NUL"),
])
def test_flags_the_compiler_would_misread_are_refused_before_inference(
    tmp_path: Path, option: str, flags: list[str], match: str
) -> None:
    """A flag with no value took the compiler's next flag (kernix's own -I) as
    its value; a line break was refused only when writing the build file, after
    inference. Both are refused with the option and index, before parsing: the
    source below would fail inference otherwise."""
    with pytest.raises(kernix.OptionError, match=match):
        kernix.load_cpp_inline(unique_name("badflag"), "// @BE f\nvoid f(undeclared_t x) {}\n",
                               build_directory=tmp_path, **{option: flags})
    assert not (tmp_path / "specs").exists()


def test_inline_source_with_a_relative_include_says_how_to_find_it(project: Path, tmp_path: Path) -> None:
    """An inline source is compiled from the cache, so `#include "value.h"` is not found beside
    the user's code; the error says where it looked and which option adds the directory, and
    that option works."""
    name = unique_name("inlineinc")
    with pytest.raises(kernix.InferenceError, match=r"'value.h' file not found; #include \"\.\.\.\" looks beside "
                       r"the including file \(for a load_\*_inline source, that is the cache's sources/ directory\)"
                       r".*extra_include_paths=\[\.\.\.\]"):
        kernix.load_cpp_inline(name, KERNEL, build_directory=tmp_path)
    mod = kernix.load_cpp_inline(name, KERNEL, build_directory=tmp_path, extra_include_paths=[project / "inc"])
    assert _values(mod) == [1.0] * 3


# ----------------------------------------------------------- 4. compiler identity


def test_compiler_wrapper_edited_in_place_is_a_miss(project: Path, tmp_path: Path, wrapper: Path) -> None:
    """Same path, same --version banner, different behaviour: was a stale hit."""
    cache, name = tmp_path / "cache", unique_name("wrapper")
    (project / "inc" / "value.h").write_text("#ifndef KX_EXTRA\n#define KX_EXTRA 0.0f\n#endif\n#define K (1.0f + KX_EXTRA)\n")
    assert _values(_load(project, cache, name)) == [1.0] * 3
    cxx = wrapper / "cxx"
    text = cxx.read_text()
    cxx.write_text(text.replace('exec "${KX_REAL_CXX:-g++}" "$@"', 'exec "${KX_REAL_CXX:-g++}" -DKX_EXTRA=20.0f "$@"'))
    assert _values(_load(project, cache, name)) == [21.0] * 3


# ----------------------------------------------------------- 5. paths with $, #, spaces, unicode


def test_depfile_is_read_with_gccs_escaping(tmp_path: Path) -> None:
    dep = tmp_path / "x.o.d"
    dep.write_text("x.o: /p/a$$b\\ \\#c\\ \u00fc/k.cpp \\\n /p/plain.h /p/back\\slash.h\n")
    assert read_depfile(dep) == ["/p/a$b #c \u00fc/k.cpp", "/p/plain.h", "/p/back\\slash.h"]


def test_depfile_reads_gccs_own_escaping_of_backslashes(tmp_path: Path) -> None:
    """Was: a backslash right before a space came back doubled (g++ doubles it, make's rule), so
    the header was recorded under a path that does not exist and publishing failed."""
    names = ["a\\ b.h", "c\\#d.h", "e\\\\ f.h", "g\\h.h", "i\\\\#j.h", "k$ l.h"]
    for n in names:
        (tmp_path / n).write_text("")
    (tmp_path / "m.cpp").write_text("".join(f'#include "{n}"\n' for n in names))
    subprocess.run(["g++", "-MD", "-MF", "m.d", "-E", "m.cpp", "-o", os.devnull], cwd=tmp_path, check=True)
    assert read_depfile(tmp_path / "m.d")[-len(names):] == names


@pytest.mark.parametrize(
    "project, cache",
    [
        # Was: the build succeeded and publishing failed with a CacheError (``$$`` in the path).
        pytest.param("we$ird #dir \u00fcn", "c$a #c", id="dollar-hash-space-unicode"),
        # Was: a CompilationError from the generated unit, whose ``#include`` escaped the path as a
        # string literal (a header name takes ``\\`` as it is, and cannot hold ``"`` in ``"..."``).
        pytest.param('say "hi" \\ back\\slash', "cache", id="double-quote-backslash"),
    ],
)
def test_source_under_an_odd_path_builds_and_tracks_its_header(tmp_path: Path, project: str, cache: str) -> None:
    proj = tmp_path / project
    (proj / "inc").mkdir(parents=True)
    (proj / "kernel.cpp").write_text(KERNEL)
    (proj / "inc" / "value.h").write_text("#define K 2.0f\n")
    cache_dir, name = tmp_path / cache, unique_name("oddpath")
    assert _values(_load(proj, cache_dir, name)) == [2.0] * 3
    manifest = json.loads(next((cache_dir / "modules" / name).glob("*/manifest.json")).read_text())
    assert str(proj / "inc" / "value.h") in [d[0] for d in manifest["dependencies"]]
    (proj / "inc" / "value.h").write_text("#define K 4.0f\n")
    assert _values(_load(proj, cache_dir, name)) == [4.0] * 3


def test_source_path_no_include_can_name_is_refused_naming_it(tmp_path: Path) -> None:
    """A path with a line break cannot be named by any ``#include``: a KernixError that names the
    file and says to rename it, not a compiler error about the generated unit."""
    proj = tmp_path / "two\nlines"
    proj.mkdir()
    (proj / "kernel.cpp").write_text(KERNEL)
    (proj / "value.h").write_text("#define K 2.0f\n")
    with pytest.raises(kernix.KernixError, match=r"cannot compile .*two\\nlines.*line break.*Rename the file") as info:
        kernix.load_cpp_file(proj / "kernel.cpp", name=unique_name("nlpath"), build_directory=tmp_path / "cache")
    assert not isinstance(info.value, CompilationError)


def test_disk_full_during_a_compile_says_so(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler that runs out of disk space: the error says the disk is full and where the
    compilers write, not only that the build failed (read as a fault in the user's code)."""
    cxx = tmp_path / "bin" / "cxx"
    cxx.parent.mkdir()
    cxx.write_text('#!/bin/sh\ncase " $* " in *" -c "*) echo "x.s: Fatal error: shim_0.o: No space left on device" >&2; '
                   'exit 1;; esac\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    toolchain.forget()
    try:
        with pytest.raises(CompilationError, match=r"the disk is full .*KiB free.*KERNIX_CACHE_DIR \(or TMPDIR\)"):
            _load(project, tmp_path / "cache", unique_name("nospace"))
    finally:
        toolchain.forget()


# ----------------------------------------------------------- 6. the lock


def test_lock_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "locks").mkdir(parents=True)
    outside = tmp_path / "outside" / "created_by_kernix"
    outside.parent.mkdir()
    (root / "locks" / "victim.lock").symlink_to(outside)
    with pytest.raises(CacheError, match="symbolic link"):
        with lock.build_lock(root, "victim"):
            pass
    assert not outside.exists()


def test_lock_file_is_private(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    with lock.build_lock(root, "mine"):
        pass
    path = root / "locks" / "mine.lock"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)  # as an older kernix left it: readable is enough to flock
    with lock.build_lock(root, "mine"):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_lock_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "locks").mkdir(parents=True)
    (root / "locks").chmod(0o777)
    with pytest.raises(CacheError, match="other users can write"):
        with lock.build_lock(root, "any"):
            pass


@pytest.fixture
def holder(tmp_path: Path):
    """A process holding the build lock of module 'held' under ``tmp_path/cache``."""
    root, flag = tmp_path / "cache", tmp_path / "locked"
    code = (
        "import sys, time, pathlib\nfrom kernix.store import lock\n"
        "with lock.build_lock(pathlib.Path(sys.argv[1]), 'held'):\n"
        "    open(sys.argv[2], 'w').close()\n    time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(flag)], start_new_session=True)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    yield root, proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def test_waiter_names_its_holder_then_gives_up_with_advice(holder, monkeypatch, capfd) -> None:
    root, proc = holder
    monkeypatch.setattr(lock, "ANNOUNCE_AFTER_S", 0.1)
    monkeypatch.setenv("KERNIX_LOCK_TIMEOUT", "0.5")
    with pytest.raises(CacheError, match="held by a live process") as info:
        with lock.build_lock(root, "held"):
            pass
    err = capfd.readouterr().err
    assert f"waiting for process {proc.pid} (running), building 'held' since" in err
    assert f"process {proc.pid}" in str(info.value) and "KERNIX_LOCK_TIMEOUT" in str(info.value)


def test_waiter_on_a_stopped_holder_says_so(holder, monkeypatch) -> None:
    root, proc = holder
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        monkeypatch.setenv("KERNIX_LOCK_TIMEOUT", "0.3")
        with pytest.raises(CacheError, match="held by a stopped process") as info:
            with lock.build_lock(root, "held"):
                pass
        assert f"process {proc.pid} (stopped)" in str(info.value) and "kill -CONT" in str(info.value)
    finally:
        os.kill(proc.pid, signal.SIGCONT)


# ----------------------------------------------------------- 7. link errors, names, platforms


def test_undefined_symbol_is_a_link_error_naming_it_demangled(tmp_path: Path) -> None:
    """Was: the library linked, was cached, and dlopen failed with a mangled name."""
    src = (
        '#include "kernix/common.h"\nnamespace ns { float helper(float); }\n// @BE uses_helper\n'
        "void uses_helper(const BE::Tensor x, BE::Tensor out) { out.data_ptr<float>()[0] = ns::helper(1.0f); }\n"
    )
    cache, name = tmp_path / "cache", unique_name("undef")
    with pytest.raises(CompilationError, match=r"undefined symbol\(s\) ns::helper\(float\)") as info:
        kernix.load_cpp_inline(name, src, build_directory=cache)
    assert "uses_helper" in str(info.value) and "extra_ldflags" in str(info.value)
    assert not list((cache / "modules").glob(f"{name}/*/manifest.json"))


def test_symbol_defined_in_two_sources_is_a_link_error_naming_both_files(tmp_path: Path) -> None:
    """Was: the linker's message named only the generated units (shim_0.o, shim_1.o)."""
    src = tmp_path / "src"
    src.mkdir()
    for fn, factor in (("fa", 2), ("fb", 3)):
        (src / f"{fn}.cpp").write_text(
            f'#include "kernix/common.h"\nfloat scale(float x) {{ return x * {factor}; }}\n// @BE {fn}\n'
            f"void {fn}(const BE::Tensor x, BE::Tensor out) {{ out.data_ptr<float>()[0] = scale(1.0f); }}\n"
        )
    with pytest.raises(CompilationError, match=r"defined in more than one source file: scale\(float\) \(in "
                       + re.escape(f"{src / 'fa.cpp'}, {src / 'fb.cpp'})") + r".*`static` or `inline`"):
        kernix.load_cpp_dir(src, name=unique_name("twice"), build_directory=tmp_path / "cache")
    for f in src.iterdir():  # the fix the message suggests
        f.write_text(f.read_text().replace("float scale", "static float scale"))
    mod = kernix.load_cpp_dir(src, name=unique_name("twice"), build_directory=tmp_path / "cache")
    with jax.default_device(jax.devices("cpu")[0]):
        assert [float(getattr(mod, fn)(jnp.zeros(1, jnp.float32), out=jax.ShapeDtypeStruct((1,), jnp.float32))[0]) for fn in ("fa", "fb")] == [2.0, 3.0]


@pytest.mark.parametrize("output", [
    "/usr/bin/ld.gold: error: shim_1.o: multiple definition of 'scale(float)'\n"
    "/usr/bin/ld.gold: shim_0.o: previous definition here\ncollect2: error: ld returned 1 exit status\n",
    "/usr/bin/ld: shim_1.o: in function `scale(float)':\nshim_1.cpp:(.text+0x0): multiple definition of "
    "`scale(float)'; shim_0.o:shim_0.cpp:(.text+0x0): first defined here\n",
], ids=["gold", "GNU ld"])
def test_host_linker_definition_clash_names_the_sources(output: str) -> None:
    """gold names the first definition's unit on a line of its own."""
    from kernix.backend.ninja import _link_error_message

    message = _link_error_message(Path("/b"), output, ["/p/a.cpp", "/p/b.cpp"])
    assert message is not None and "scale(float) (in /p/a.cpp, /p/b.cpp)" in message


def test_gold_undefined_symbol_names_the_function_using_it() -> None:
    from kernix.backend.ninja import _link_error_message

    output = ("shim_0.o:shim_0.cpp:function uses_helper(BE::Tensor, BE::Tensor): error: undefined reference to "
              "'ns::helper(float)'\ncollect2: error: ld returned 1 exit status\n")
    message = _link_error_message(Path("/b"), output, ["/p/a.cpp"])
    assert message is not None and "ns::helper(float) (used by uses_helper(BE::Tensor, BE::Tensor))" in message


def test_device_linker_definition_clash_names_the_sources() -> None:
    """nvlink's spelling of the same error (relocatable device code)."""
    from kernix.backend.ninja import _link_error_message

    out = "nvlink error   : Multiple definition of '_Z5scalef' in 'shim_1.o', first defined in 'shim_0.o'\n"
    message = _link_error_message(Path("/b"), out, ["/p/a.cu", "/p/b.cu"])
    assert message is not None and "_Z5scalef (in /p/a.cu, /p/b.cu)" in message


@pytest.mark.parametrize("fn", ["path", "targets", "__init__"])
def test_kernel_named_like_a_module_attribute_is_rejected_at_load(tmp_path: Path, fn: str) -> None:
    src = (
        f'#include "kernix/common.h"\n// @BE {fn}\n'
        f"void {fn}(const BE::Tensor x, BE::Tensor out) {{ }}\n"
    )
    with pytest.raises(kernix.KernixError, match=rf"function name '{fn}' is taken by CompiledModule") as info:
        kernix.load_cpp_inline(unique_name("collide"), src, build_directory=tmp_path / "cache")
    assert "// @BE" in str(info.value)


def test_every_other_kernel_name_is_an_attribute() -> None:
    spec = FunctionSpec.from_json({"name": "name_of", "qualified_name": "name_of", "params": []})
    mod = CompiledModule("m", Path("/nonexistent.so"), "cpu", [spec], {"name_of": "kernix_handler_0_name_of"}, "0")
    assert mod.name_of is mod["name_of"] and mod.name == "m"


def test_arrays_on_the_wrong_platform_are_a_call_error() -> None:
    """A CUDA module called with CPU arrays: was XLA's raw "No FFI handler registered"."""
    spec = FunctionSpec.from_json({
        "name": "k", "qualified_name": "k",
        "params": [
            {"name": "x", "role": "arg", "kind": "tensor", "canonical_type": "const BE::Tensor",
             "type": "const BE::Tensor", "dtype": None, "rank": None},
            {"name": "out", "role": "ret", "kind": "tensor", "canonical_type": "BE::Tensor",
             "type": "BE::Tensor", "dtype": None, "rank": None},
        ],
    })
    mod = CompiledModule("gpu_only", Path("/nonexistent.so"), "cuda", [spec], {"k": "kernix_handler_0_k"}, "0")
    mod.registered = True  # as after register(); the check comes before any FFI call
    x = jax.device_put(jnp.zeros(2, jnp.float32), jax.devices("cpu")[0])
    with pytest.raises(CallError, match=r"built for CUDA GPUs, but input 'x' is on .*cpu.*jax.device_put"):
        mod.k(x)


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"), reason="needs nvcc")
def test_undefined_symbol_in_a_cuda_module_is_a_link_error_too(tmp_path: Path) -> None:
    """A CUDA module used to link and fail only at dlopen (a cuBLAS call without -lcublas, say)."""
    src = (
        '#include "kernix/common.h"\nextern "C" int vendor_handle_create(void**);\n// @BE uses_vendor\n'
        "void uses_vendor(const BE::Tensor x, BE::Tensor out, cudaStream_t stream) { void* h; vendor_handle_create(&h); }\n"
    )
    cache, name = tmp_path / "cache", unique_name("cuundef")
    with pytest.raises(CompilationError, match=r"undefined symbol\(s\) vendor_handle_create") as info:
        kernix.load_cuda_inline(name, src, build_directory=cache, compute_capability="sm_80", auto_register=False)
    assert "uses_vendor" in str(info.value)
    assert not list((cache / "modules").glob(f"{name}/*/manifest.json"))
