"""Prebuilt modules: ``kernix build`` / ``build_module`` and ``load_prebuilt`` with no compiler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.backend import arch
from kernix.backend import toolchain
from kernix.backend.flags import BuildConfig, compile_flags
from kernix.cli import main
from kernix.prebuilt.format import MANIFEST_NAME, PrebuiltManifest, arch_problem, arch_runs_on, ffi_api_problem

from helpers import unique_name

SCALE = textwrap.dedent(
    """\
    #include "kernix/common.h"
    // @BE scale (...)->(...)
    void scale(const BE::Tensor& x, BE::Tensor& out, float factor) {
      const float* a = x.data_ptr<float>();
      float* o = out.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] * factor + OFFSET;
    }
    """
)

CUDA_SCALE = textwrap.dedent(
    """\
    #include "kernix/common.h"
    __global__ void scale_kernel(const float* x, float* o, float f, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) o[i] = x[i] * f;
    }
    // @BE scale (...)->(...)
    void scale(const BE::Tensor& x, BE::Tensor& out, float factor, cudaStream_t stream) {
      int64_t n = x.numel();
      scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), factor, n);
    }
    """
)


def write_source(directory: Path, text: str = SCALE, name: str = "ops.cpp") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory) -> Path:
    """A CPU module built once for this file (OFFSET=1)."""
    base = tmp_path_factory.mktemp("prebuilt")
    src = write_source(base / "src")
    out = base / "ops_module"
    assert main(["build", str(src), "-o", str(out), "--name", "pbops", "-D", "OFFSET=1", "-O", "2"]) == 0
    return out


def no_compiler_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no compiler on PATH, where importing ``clang``,
    ``kernix.frontend`` or ``kernix.backend`` (its toolchain search, code generation, ninja; not
    ``kernix.backend.arch``) fails, and whose kernix cache
    directory does not exist."""
    block = tmp_path / "block"
    (block / "clang").mkdir(parents=True, exist_ok=True)
    (block / "clang" / "__init__.py").write_text("raise ImportError('libclang is not installed here')\n")
    (block / "sitecustomize.py").write_text(textwrap.dedent(
        """\
        import sys
        class _Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.startswith(("kernix.frontend", "kernix.backend.")) and name != "kernix.backend.arch":
                    raise ImportError(f"{name} must not be imported without a compiler")
                return None
        sys.meta_path.insert(0, _Refuse())
        """
    ))
    bin_dir = tmp_path / "bin"  # PATH: nothing but an empty directory
    bin_dir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "KERNIX_NVCC", "CXX", "CC", "PYTHONPATH")}
    env.update(PATH=str(bin_dir), PYTHONPATH=os.pathsep.join([str(block), os.environ.get("PYTHONPATH", "")]),
               KERNIX_CACHE_DIR=str(tmp_path / "never-created"), JAX_PLATFORMS="cpu")
    return env


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.installed
def test_manifest_records_the_build(prebuilt):
    m = PrebuiltManifest.read(prebuilt)
    assert m.name == "pbops" and m.platform == "cpu"
    assert [f.name for f in m.functions] == ["scale"]
    assert m.functions[0].arg_spec == ("arg", "ret", "attr.factor:float32")
    lib = prebuilt / m.library
    assert lib.is_file() and m.library_size == lib.stat().st_size
    from kernix.store.files import file_digest

    assert m.library_sha256 == file_digest(lib)
    assert m.library.startswith("pbops-") and m.library_sha256[:12] in m.library
    assert m.kernix == kernix.__version__ and m.jaxlib == toolchain.jaxlib_version()
    header = Path(toolchain.jax_ffi_include_dir(), "xla/ffi/api/c_api.h").read_text()
    assert f"XLA_FFI_API_MINOR {m.ffi_api[1]}" in header
    assert m.sources[0][0] == "ops.cpp" and len(m.sources[0][1]) == 64
    assert m.options["defines"] == ["OFFSET=1"] and m.options["optimization_level"] == 2
    assert m.compilers and ("g++" in m.compilers[0] or "c++" in m.compilers[0])
    assert sorted(os.listdir(prebuilt)) == sorted([MANIFEST_NAME, m.library])


def test_load_prebuilt_in_process(prebuilt):
    prefix = unique_name("pb")
    mod = kernix.load_prebuilt(prebuilt, target_prefix=prefix)
    assert isinstance(mod, kernix.CompiledModule)
    assert mod.targets["scale"] == f"{prefix}.scale"
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_allclose(jax.jit(lambda v: mod.scale(v, factor=2.0))(x), 2 * np.arange(4) + 1)
    with pytest.raises(kernix.CallError, match="missing attribute"):
        mod.scale(x)


@pytest.mark.installed
def test_load_prebuilt_without_compiler_or_libclang(prebuilt, tmp_path):
    env = no_compiler_env(tmp_path)
    proc = run_python(
        f"""
        import sys, time
        t0 = time.perf_counter()
        import jax.numpy as jnp, kernix
        mod = kernix.load_prebuilt({str(prebuilt)!r})
        print("kernix.runtime.tuning" in sys.modules)  # (it ships no tune= choices: the load leaves tuning out)
        y = mod.scale(jnp.arange(3, dtype=jnp.float32), factor=3.0)
        print(list(map(float, y)))
        try:
            import clang
        except ImportError:
            print("no clang")
        print(sorted(m for m in sys.modules if m.startswith(("kernix.frontend", "kernix.backend.", "clang"))
                     and m != "kernix.backend.arch"))
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == ["False", "[1.0, 4.0, 7.0]", "no clang", "[]"]
    assert not (tmp_path / "never-created").exists()  # no cache writes


def test_the_no_compiler_environment_really_has_none(prebuilt, tmp_path):
    """The environment above does prevent a JIT build, so the test proves something."""
    env = no_compiler_env(tmp_path)
    src = write_source(tmp_path / "src")
    proc = run_python(f"import kernix; kernix.load_cpp_file({str(src)!r}, extra_cflags=['-DOFFSET=0'])", env)
    assert proc.returncode != 0 and "ImportError" in proc.stderr


def _copy(prebuilt: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(prebuilt, dst)
    return dst


def test_damaged_library_is_refused_before_loading(prebuilt, tmp_path):
    d = _copy(prebuilt, tmp_path)
    lib = d / PrebuiltManifest.read(d).library
    data = bytearray(lib.read_bytes())
    data[-1] ^= 0xFF
    lib.write_bytes(bytes(data))
    with pytest.raises(kernix.PrebuiltError, match="does not match its manifest") as info:
        kernix.load_prebuilt(d, target_prefix=unique_name("bad"))
    assert info.value.reason == "hash"
    from kernix.runtime import registry

    assert str(lib) not in registry.loaded_libraries()  # never dlopened


@pytest.mark.parametrize("api", [[0, 99], [1, 0]])
def test_other_ffi_api_is_refused(prebuilt, tmp_path, api):
    d = _copy(prebuilt, tmp_path)
    data = json.loads((d / MANIFEST_NAME).read_text())
    data["ffi_api"] = api
    (d / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(kernix.PrebuiltError, match=f"XLA FFI API {api[0]}.{api[1]}") as info:
        kernix.load_prebuilt(d)
    assert info.value.reason == "ffi_api"
    assert "Rebuild" in str(info.value)


def test_missing_and_foreign_directories(tmp_path):
    with pytest.raises(kernix.PrebuiltError, match="kernix build") as info:
        kernix.load_prebuilt(tmp_path)
    assert info.value.reason == "missing"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": "kernix-prebuilt", "format": 99}))
    with pytest.raises(kernix.PrebuiltError, match="format 99") as info:
        kernix.load_prebuilt(tmp_path)
    assert info.value.reason == "format"


def test_bad_library_name_in_manifest_is_refused(prebuilt, tmp_path):
    d = _copy(prebuilt, tmp_path)
    data = json.loads((d / MANIFEST_NAME).read_text())
    data["library"] = "../../etc/evil.so"
    (d / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(kernix.PrebuiltError, match="bad library file name"):
        kernix.load_prebuilt(d)


def test_rebuild_into_the_same_directory_replaces_the_library(tmp_path):
    src = write_source(tmp_path / "src")
    out = tmp_path / "m"
    first = kernix.build_module(src, out, name="again", defines=["OFFSET=0"])
    second = kernix.build_module(src, out, name="again", defines=["OFFSET=2"])
    assert first.library != second.library
    assert sorted(os.listdir(out)) == sorted([MANIFEST_NAME, second.library])


def test_ffi_api_rule():
    assert ffi_api_problem((0, 3), (0, 3)) is None
    assert ffi_api_problem((0, 1), (0, 3)) is None
    assert ffi_api_problem((0, 5), (0, 3))
    assert ffi_api_problem((1, 0), (0, 3))


def test_architecture_rules():
    sass, ptx = ("sm_80", "sm_90"), ("compute_90",)
    assert arch_runs_on("sm_80", sass, ptx) == "sm_80"
    assert arch_runs_on("sm_86", sass, ptx) == "sm_80"  # same major, newer minor
    assert arch_runs_on("sm_90", sass, ptx) == "sm_90"
    assert arch_runs_on("sm_100", sass, ptx) == "compute_90"  # PTX compiled by the driver
    assert arch_runs_on("sm_75", sass, ptx) is None
    assert arch_runs_on("sm_90", ("sm_90a",), ()) == "sm_90a"
    assert arch_runs_on("sm_100", ("sm_90a",), ("compute_90a",)) is None
    msg = arch_problem("sm_75", "Tesla T4", sass, ptx)
    assert "Tesla T4" in msg and "sm_80, sm_90, compute_90" in msg and "--arch sm_75,sm_80,sm_90" in msg


def test_arch_lists():
    assert arch.normalize_arch_list("sm_90,sm_80") == ("sm_80", "sm_90")
    assert arch.normalize_arch_list(["90", "8.6", "sm_80"]) == ("sm_80", "sm_86", "sm_90")
    assert arch.normalize_arch_list("sm_100 sm_90a") == ("sm_90a", "sm_100")
    with pytest.raises(kernix.ToolchainError, match="compute capability"):
        arch.normalize_arch_list("sm_80,banana")
    with pytest.raises(kernix.ToolchainError, match="empty"):
        arch.normalize_arch_list([])


def test_arch_list_from_environment(monkeypatch):
    monkeypatch.setenv("KERNIX_CUDA_ARCH_LIST", "90;80")
    monkeypatch.setenv("KERNIX_CUDA_ARCH", "sm_70")
    assert arch.detect_compute_capability() == "sm_80,sm_90"
    assert arch.detect_compute_capability(["sm_75"]) == "sm_75"
    monkeypatch.delenv("KERNIX_CUDA_ARCH_LIST")
    assert arch.detect_compute_capability() == "sm_70"


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"),
                                reason="needs nvcc")


@needs_nvcc
def test_multi_arch_flags():
    flags = compile_flags(BuildConfig("cuda", arch="sm_90,sm_80"))["user"]
    gencode = [f for f in flags if f.startswith("--generate-code")]
    assert gencode == [
        "--generate-code=arch=compute_80,code=sm_80",
        "--generate-code=arch=compute_90,code=[compute_90,sm_90]",
    ]
    single = [f for f in compile_flags(BuildConfig("cuda", arch="sm_90"))["user"] if f.startswith("--generate")]
    assert single == ["--generate-code=arch=compute_90,code=[compute_90,sm_90]"]  # as before


@needs_nvcc
def test_cuda_multi_arch_build_and_refusals(tmp_path, monkeypatch):
    src = write_source(tmp_path / "src", CUDA_SCALE, "scale.cu")
    out = tmp_path / "cu"
    assert main(["build", str(src), "-o", str(out), "--arch", "sm_80,sm_90"]) == 0
    m = PrebuiltManifest.read(out)
    assert m.platform == "cuda" and m.sass == ("sm_80", "sm_90") and m.ptx == ("compute_90",)
    assert any("nvcc" in c.lower() or "cuda" in c.lower() for c in m.compilers)
    from kernix.backend import gpus

    if not gpus.survey().gpus:
        with pytest.raises(kernix.PrebuiltError, match="none is usable here") as info:
            kernix.load_prebuilt(out)
        assert info.value.reason == "platform"
    import kernix.prebuilt.load as load

    monkeypatch.setattr(load, "_gpus", lambda: ([("sm_75", "Tesla T4")], ""))
    with pytest.raises(kernix.PrebuiltError, match=r"Tesla T4 is sm_75.*--arch sm_75,sm_80,sm_90") as info:
        kernix.load_prebuilt(out)
    assert info.value.reason == "arch"


def test_cli_build_reports_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KERNIX_CUDA_ARCH", raising=False)
    monkeypatch.delenv("KERNIX_CUDA_ARCH_LIST", raising=False)
    src = write_source(tmp_path, "// @BE f\nvoid f(const BE::Tensor& x, BE::Tensor& o);\n", "bad.cpp")
    assert main(["build", str(src), "-o", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "bad.cpp:" in err and "error:" in err
    assert main(["build", str(src), "-o", str(tmp_path / "o"), "--cpp", "--arch", "sm_90"]) == 2  # usage
    assert "error: --arch is for CUDA builds; a C++ (CPU) module has no GPU architecture" in capsys.readouterr().err
    with pytest.raises(kernix.OptionError, match="^arch is for CUDA builds"):
        kernix.build_module(src, tmp_path / "o", language="cpp", arch="sm_90")


LINKED = textwrap.dedent(
    """\
    #include <cmath>
    #include "kernix/common.h"
    extern "C" float kxcli_offset(float);   // in libkxcli.so, built by the test
    // @BE shifted (...)->(...)
    void shifted(const BE::Tensor& x, BE::Tensor& out) {
      const float* a = x.data_ptr<float>();
      float* o = out.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) o[i] = kxcli_offset(a[i]) + std::sqrt(4.0f);
    }
    """
)


@pytest.mark.parametrize("joined", [False, True])
def test_cli_build_links_a_library_given_with_l_and_L(tmp_path, capsys, joined):
    """`kernix build -L DIR -l NAME` links libNAME from DIR (relative to the current directory),
    and the module calls into it once the dynamic loader finds it; without -l the link fails
    naming the missing symbol."""
    dep = tmp_path / "deps"
    dep.mkdir()
    (dep / "kxcli.cpp").write_text('extern "C" float kxcli_offset(float v) { return v + 100.0f; }\n')
    subprocess.run(["g++", "-shared", "-fPIC", str(dep / "kxcli.cpp"), "-o", str(dep / "libkxcli.so")], check=True)
    src = write_source(tmp_path / "src", LINKED, "linked.cpp")
    out = tmp_path / "m"
    links = ["-Ldeps", "-lkxcli", "-lm"] if joined else ["-L", "deps", "-l", "kxcli", "-l", "m"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["build", str(src), "-o", str(out), "--name", unique_name("linked"), *links]) == 0, \
            capsys.readouterr().err
        assert main(["build", str(src), "-o", str(tmp_path / "unlinked"), "-L", "deps"]) == 1
    finally:
        os.chdir(cwd)
    assert "kxcli_offset" in capsys.readouterr().err
    for empty in (["-L", ""], ["-l", ""]):  # (the compiler would take the next flag as the value)
        assert main(["build", str(src), "-o", str(tmp_path / "empty"), *empty]) == 2
        assert "-L and -l take a value" in capsys.readouterr().err
    env = {**os.environ, "LD_LIBRARY_PATH": str(dep), "JAX_PLATFORMS": "cpu"}
    proc = run_python(f"""
        import jax.numpy as jnp, kernix
        mod = kernix.load_prebuilt({str(out)!r})
        print(mod.shifted(jnp.arange(3, dtype=jnp.float32)).tolist())
        """, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[102.0, 103.0, 104.0]"


def _edit_manifest(d: Path, **changes) -> None:
    data = json.loads((d / MANIFEST_NAME).read_text())
    data.update(changes)
    (d / MANIFEST_NAME).write_text(json.dumps(data))


def _replace_library(d: Path, data: bytes) -> Path:
    """Write ``data`` as the module's library and record its hash, as a builder would."""
    import hashlib

    lib = d / PrebuiltManifest.read(d).library
    lib.write_bytes(data)
    _edit_manifest(d, library_sha256=hashlib.sha256(data).hexdigest(), library_size=len(data))
    return lib


def test_other_kernix_series_is_refused(prebuilt, tmp_path):
    d = _copy(prebuilt, tmp_path)
    major, minor, *_ = kernix.__version__.split(".")
    _edit_manifest(d, kernix=f"{major}.{int(minor) + 1}.0")
    with pytest.raises(kernix.PrebuiltError, match=r"built by kernix \S+, and this is kernix") as info:
        kernix.load_prebuilt(d, target_prefix=unique_name("ver"))
    assert info.value.reason == "version" and "kernix build" in str(info.value)
    _edit_manifest(d, kernix=f"{major}.{minor}.999")  # a patch release of the same series loads
    kernix.load_prebuilt(d, target_prefix=unique_name("ver"))


@pytest.mark.parametrize("what", ["directory", "library", "manifest"])
def test_module_others_can_write_is_refused(prebuilt, tmp_path, what):
    d = _copy(prebuilt, tmp_path)
    lib = d / PrebuiltManifest.read(d).library
    path = {"directory": d, "library": lib, "manifest": d / MANIFEST_NAME}[what]
    path.chmod(path.stat().st_mode | 0o002)
    with pytest.raises(kernix.PrebuiltError, match=f"other users can write to {path}") as info:
        kernix.load_prebuilt(d, target_prefix=unique_name("ww"))
    assert info.value.reason == "trust" and f"chmod o-w {path}" in str(info.value)
    from kernix.runtime import registry

    assert str(lib) not in registry.loaded_libraries()
    with pytest.raises(kernix.PrebuiltError, match="other users can write"):  # not replaced by a build either
        kernix.prebuilt.load_or_build(d, [tmp_path / "missing.cpp"], quiet=True)
    path.chmod(path.stat().st_mode & ~0o002)  # the fix the message names works
    kernix.load_prebuilt(d, target_prefix=unique_name("ww"))


def test_module_through_a_symbolic_link_is_checked_where_it_lies(prebuilt, tmp_path):
    """The manifest read names the real directory, which the trust checks look at
    (not the link's), and from which the library is loaded."""
    d = _copy(prebuilt, tmp_path)
    (tmp_path / "link").symlink_to(d)
    assert PrebuiltManifest.read(tmp_path / "link").directory == Path(os.path.realpath(d))
    kernix.load_prebuilt(tmp_path / "link", target_prefix=unique_name("ln"))
    d.chmod(0o777)
    with pytest.raises(kernix.PrebuiltError, match=f"other users can write to {d}"):
        kernix.load_prebuilt(tmp_path / "link", target_prefix=unique_name("ln"))
    with pytest.raises(kernix.PrebuiltError, match=f"other users can write to {d}"):
        kernix.prebuilt.load_or_build(tmp_path / "link", [tmp_path / "missing.cpp"], quiet=True)
    d.chmod(0o755)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_module_owned_by_another_user_is_refused(prebuilt, tmp_path):
    d = _copy(prebuilt, tmp_path)
    lib = d / PrebuiltManifest.read(d).library
    os.chown(lib, 4321, 4321)
    with pytest.raises(kernix.PrebuiltError, match=rf"{lib} is owned by another user \(uid 4321\)") as info:
        kernix.load_prebuilt(d, target_prefix=unique_name("own"))
    assert info.value.reason == "trust"


@pytest.mark.installed
@pytest.mark.skipif(os.getuid() != 0, reason="giving files to another user needs root")
def test_module_of_the_account_that_installed_kernix_loads(prebuilt, tmp_path):
    """A shared environment installed by a service account: its prebuilt modules
    load for other users, since that account's kernix already runs in their
    process; anyone else's, or a kernix installation others can write, does not."""
    site = tmp_path / "site"
    shutil.copytree(Path(kernix.__file__).parent, site / "kernix", ignore=shutil.ignore_patterns("__pycache__"))
    d = _copy(prebuilt, tmp_path)
    for top in (site, d):
        for p in (top, *top.rglob("*")):
            os.chown(p, 4321, 4321)
    code = f"""
        import kernix
        try:
            kernix.load_prebuilt({str(d)!r}, target_prefix="svc")
            print("loaded", kernix.__file__)
        except kernix.PrebuiltError as exc:
            print(exc.reason, exc)
        """
    # -S: no site hooks (an editable install's finder would import this checkout's kernix instead of the
    # copy), and not run from this checkout (-c puts the current directory first on the path)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join([str(site), *sys.path[1:]])}

    def run() -> str:
        return subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              env=env, timeout=300, cwd=tmp_path).stdout

    out = run()
    assert out.startswith(f"loaded {site}"), out
    site.chmod(0o777)  # anyone could have replaced that kernix: its owner is not vouched for
    out = run()
    assert out.startswith("trust") and "owned by another user (uid 4321)" in out, out
    site.chmod(0o755)
    for p in (d, *d.rglob("*")):
        os.chown(p, 4322, 4322)  # another account than the installation's
    out = run()
    assert out.startswith("trust") and "owned by another user (uid 4322)" in out, out


def test_truncated_library_is_refused_not_a_crash(prebuilt, tmp_path):
    """A truncated library whose manifest matches it would crash dlopen (SIGBUS)."""
    d = _copy(prebuilt, tmp_path)
    lib = _replace_library(d, (d / PrebuiltManifest.read(d).library).read_bytes()[:4096])
    proc = run_python(
        f"""
        import kernix
        try:
            kernix.load_prebuilt({str(d)!r})
        except kernix.PrebuiltError as exc:
            print(exc.reason, exc)
        """,
        {**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"format cannot load the library {lib}")
    assert f"{lib} is cut short (4096 bytes" in proc.stdout  # (the test's directory name says "truncated")


def test_library_for_another_machine_is_refused(prebuilt, tmp_path):
    d = _copy(prebuilt, tmp_path)
    data = bytearray((d / PrebuiltManifest.read(d).library).read_bytes())
    order = "little" if data[5] == 1 else "big"
    data[18:20] = (183 if int.from_bytes(data[18:20], order) != 183 else 62).to_bytes(2, order)
    _replace_library(d, bytes(data))
    with pytest.raises(kernix.PrebuiltError, match="it is a library for .*, and this machine runs") as info:
        kernix.load_prebuilt(d, target_prefix=unique_name("elf"))
    assert info.value.reason == "platform"


def test_library_dlopen_refuses_is_a_prebuilt_error_and_falls_back(tmp_path):
    dep = tmp_path / "dep"
    dep.mkdir()
    (dep / "dep.cpp").write_text("int kernix_test_dep() { return 1; }\n")
    subprocess.run(["g++", "-shared", "-fPIC", str(dep / "dep.cpp"), "-o", str(dep / "libkxtestdep.so")], check=True)
    src = write_source(tmp_path / "src")
    out = tmp_path / "m"
    kernix.build_module(src, out, name=unique_name("dl"), defines=["OFFSET=0"],
                        extra_ldflags=[f"-L{dep}", "-Wl,--no-as-needed", "-lkxtestdep"])
    (dep / "libkxtestdep.so").unlink()  # the machine that loads it lacks a library it needs
    with pytest.raises(kernix.PrebuiltError, match="libkxtestdep.so: cannot open shared object file") as info:
        kernix.load_prebuilt(out)
    assert info.value.reason == "load" and str(out) in str(info.value)
    mod = kernix.prebuilt.load_or_build(out, [src], quiet=True, extra_cflags=["-DOFFSET=0"])
    assert kernix.prebuilt.last_load_reason(out).startswith("jit: load: ")
    np.testing.assert_allclose(mod.scale(jnp.arange(3, dtype=jnp.float32), factor=2.0), [0, 2, 4])


def test_load_or_build_does_not_serve_a_stale_module(tmp_path):
    src = write_source(tmp_path / "src")
    out = tmp_path / "m"
    name = unique_name("stale")
    kernix.build_module(src, out, name=name, defines=["OFFSET=0"])
    x = jnp.arange(3, dtype=jnp.float32)
    mod = kernix.prebuilt.load_or_build(out, [src], target_prefix=f"{name}_a", quiet=True)
    assert kernix.prebuilt.last_load_reason(out) == "prebuilt"
    src.write_text(SCALE.replace("factor + OFFSET", "factor + OFFSET + 10"))
    mod = kernix.prebuilt.load_or_build(out, [src], target_prefix=f"{name}_b", quiet=True,
                                        extra_cflags=["-DOFFSET=0"])
    reason = kernix.prebuilt.last_load_reason(out)
    assert reason.startswith("jit: stale: ") and "ops.cpp" in reason and "kernix build" in reason
    np.testing.assert_allclose(mod.scale(x, factor=2.0), [10, 12, 14])  # the edited code runs
    kernix.load_prebuilt(out, target_prefix=f"{name}_c")  # without sources to compare, it still loads


HEADERED = SCALE.replace('#include "kernix/common.h"\n',
                         '#include "kernix/common.h"\n#include "offset.h"\n#include "detail/more.h"\n#include "shared.h"\n')


def headered_project(base: Path) -> tuple[Path, Path]:
    """``base/src/ops.cpp`` including ``offset.h`` beside it, ``detail/more.h``
    below it and ``shared.h`` from an include directory outside ``src/``."""
    src = write_source(base / "src", HEADERED)
    (src.parent / "offset.h").write_text("#define OFFSET 1\n")
    (src.parent / "detail").mkdir()
    (src.parent / "detail" / "more.h").write_text("#define MORE 0\n")
    inc = base / "include"
    inc.mkdir()
    (inc / "shared.h").write_text("#define SHARED 0\n")
    return src, inc


def test_manifest_records_the_headers_under_the_sources_directory(tmp_path):
    """Headers the build read below the sources' directory are recorded by relative path with
    their SHA-256; headers elsewhere (an include directory outside it, kernix's own, the
    toolchain's) are not, so the manifest names no path of the build machine."""
    from kernix.store.files import file_digest

    src, inc = headered_project(tmp_path)
    out = tmp_path / "m"
    manifest = kernix.build_module(src, out, name=unique_name("hdr"), include_dirs=[str(inc)])
    assert sorted(manifest.headers) == sorted([
        ("detail/more.h", file_digest(src.parent / "detail" / "more.h")),
        ("offset.h", file_digest(src.parent / "offset.h")),
    ])
    assert PrebuiltManifest.read(out).headers == manifest.headers
    data = json.loads((out / MANIFEST_NAME).read_text())
    assert data["format"] == 2 and str(tmp_path) not in json.dumps(data["headers"])


def test_load_or_build_does_not_serve_a_module_whose_header_changed(tmp_path):
    """An edit to a header the sources include (the sources unchanged) makes the module stale."""
    src, inc = headered_project(tmp_path)
    out = tmp_path / "m"
    name = unique_name("hdrstale")
    kernix.build_module(src, out, name=name, include_dirs=[str(inc)])
    x = jnp.arange(3, dtype=jnp.float32)
    opts = {"quiet": True, "extra_include_paths": [str(inc)]}
    mod = kernix.prebuilt.load_or_build(out, [src], target_prefix=f"{name}_a", **opts)
    assert kernix.prebuilt.last_load_reason(out) == "prebuilt"
    np.testing.assert_allclose(mod.scale(x, factor=2.0), [1, 3, 5])
    (src.parent / "detail" / "more.h").write_text("#define MORE 1\n")
    kernix.prebuilt.load_or_build(out, [src], target_prefix=f"{name}_b", **opts)
    reason = kernix.prebuilt.last_load_reason(out)
    assert reason.startswith("jit: stale: ") and "detail/more.h" in reason and "kernix build" in reason
    (src.parent / "detail" / "more.h").write_text("#define MORE 0\n")
    (src.parent / "offset.h").write_text("#define OFFSET 10\n")
    mod = kernix.prebuilt.load_or_build(out, [src], target_prefix=f"{name}_c", **opts)
    reason = kernix.prebuilt.last_load_reason(out)
    assert reason.startswith("jit: stale: ") and "offset.h" in reason
    np.testing.assert_allclose(mod.scale(x, factor=2.0), [10, 12, 14])  # the edited header's code runs


def test_headers_outside_the_sources_directory_and_a_moved_module(tmp_path):
    """A header outside the sources' directory does not make the module stale; the module
    and its sources moved elsewhere (another machine) are still current; a header that was
    not shipped is not compared, as a source that was not shipped."""
    src, inc = headered_project(tmp_path / "build-machine")
    out = tmp_path / "build-machine" / "m"
    name = unique_name("hdrmove")
    kernix.build_module(src, out, name=name, include_dirs=[str(inc)])
    (inc / "shared.h").write_text("#define SHARED 1\n")
    kernix.prebuilt.load_or_build(out, [src], target_prefix=f"{name}_a", quiet=True)
    assert kernix.prebuilt.last_load_reason(out) == "prebuilt"
    moved = tmp_path / "elsewhere" / "pkg"
    shutil.copytree(tmp_path / "build-machine", moved)
    shutil.rmtree(tmp_path / "build-machine")
    kernix.prebuilt.load_or_build(moved / "m", [moved / "src" / "ops.cpp"], target_prefix=f"{name}_b", quiet=True)
    assert kernix.prebuilt.last_load_reason(moved / "m") == "prebuilt"
    (moved / "src" / "offset.h").unlink()
    kernix.prebuilt.load_or_build(moved / "m", [moved / "src" / "ops.cpp"], target_prefix=f"{name}_c", quiet=True)
    assert kernix.prebuilt.last_load_reason(moved / "m") == "prebuilt"


def test_headers_of_several_sources_are_relative_to_their_common_directory(tmp_path):
    """Sources in two directories: each one's headers count, named from the directory above both."""
    a = write_source(tmp_path / "pkg" / "a", HEADERED.replace('#include "shared.h"\n', ""), "one.cpp")
    (a.parent / "offset.h").write_text("#define OFFSET 1\n")
    (a.parent / "detail").mkdir()
    (a.parent / "detail" / "more.h").write_text("#define MORE 0\n")
    b = write_source(tmp_path / "pkg" / "b", '#include "kernix/common.h"\n#include "two.h"\n'
                     "// @BE twice\nvoid twice(const BE::Tensor& x, BE::Tensor& out) {}\n", "two.cpp")
    (b.parent / "two.h").write_text("// two\n")
    out = tmp_path / "m"
    manifest = kernix.build_module([a, b], out, name=unique_name("hdrtwo"))
    assert sorted(n for n, _ in manifest.headers) == ["a/detail/more.h", "a/offset.h", "b/two.h"]
    (b.parent / "two.h").write_text("// two, edited\n")
    kernix.prebuilt.load_or_build(out, [a, b], target_prefix=unique_name("hdrtwo"), quiet=True)
    reason = kernix.prebuilt.last_load_reason(out)
    assert reason.startswith("jit: stale: ") and "b/two.h" in reason


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside.h", "a/../../b.h", "", "a//b.h"])
def test_manifest_header_paths_must_be_relative_and_inside(prebuilt, tmp_path, bad):
    d = _copy(prebuilt, tmp_path)
    data = json.loads((d / MANIFEST_NAME).read_text())
    data["headers"] = [[bad, "0" * 64]]
    (d / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(kernix.PrebuiltError, match="bad header path") as info:
        kernix.load_prebuilt(d)
    assert info.value.reason == "format"


def test_a_format_1_module_is_refused_as_another_format(prebuilt, tmp_path):
    """A module of the format before headers were recorded cannot say whether a header
    changed: it is refused like any other format, and load_or_build builds the sources."""
    d = _copy(prebuilt, tmp_path)
    data = json.loads((d / MANIFEST_NAME).read_text())
    data["format"] = 1
    del data["headers"]
    (d / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(kernix.PrebuiltError, match=r"has format 1; this kernix reads format 2\. Rebuild it") as info:
        kernix.load_prebuilt(d)
    assert info.value.reason == "format"


def test_a_rebuild_that_cannot_write_leaves_the_module_before_it(tmp_path, monkeypatch):
    """A full disk while publishing: a KernixError naming the directory (was an OSError
    traceback), no temporary file left, and the module built there before still loads."""
    import errno

    from kernix.prebuilt import build as prebuilt_build

    src = write_source(tmp_path / "src")
    out = tmp_path / "m"
    name = unique_name("full")
    kernix.build_module(src, out, name=name, defines=["OFFSET=0"])
    before = sorted(p.name for p in out.iterdir())
    real = shutil.copyfile

    def full(a, b, *args, **kwargs):
        real(a, b, *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device", str(b))

    monkeypatch.setattr(prebuilt_build.shutil, "copyfile", full)
    with pytest.raises(kernix.KernixError, match=rf"cannot write the module into {out}: No space left on device"):
        kernix.build_module(src, out, name=name, defines=["OFFSET=7"])
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == before
    mod = kernix.load_prebuilt(out, target_prefix=unique_name("full"))
    np.testing.assert_allclose(mod.scale(jnp.ones(3, jnp.float32), factor=2.0), [2.0, 2.0, 2.0])


def test_concurrent_builds_into_one_directory_leave_one_module(tmp_path, monkeypatch):
    """Two builds that publish at the same moment: each must see the other's
    manifest when it retires the previous library, so one library remains.

    The first build to write its manifest waits there until the other build
    is writing too (no lock: the race is on) or is seen blocked on the lock of
    the module directory (the lock serialises them); neither is a fixed wait."""
    import fcntl
    import threading

    from kernix.prebuilt import build as prebuilt_build

    src = write_source(tmp_path / "src")
    out = tmp_path / "m"
    out.mkdir()
    where = os.stat(out)
    state = {"writing": 0, "blocked": 0}
    changed = threading.Condition()
    original = PrebuiltManifest.write
    real_flock = prebuilt_build.fcntl.flock

    def flock(fd, operation):
        st = os.fstat(fd)
        if operation == fcntl.LOCK_EX and (st.st_dev, st.st_ino) == (where.st_dev, where.st_ino):
            try:
                return real_flock(fd, operation | fcntl.LOCK_NB)
            except BlockingIOError:  # the other build holds it: say so, then wait for it
                with changed:
                    state["blocked"] += 1
                    changed.notify_all()
        return real_flock(fd, operation)

    def write_together(self):
        with changed:
            state["writing"] += 1
            changed.notify_all()
            met = changed.wait_for(lambda: state["writing"] + state["blocked"] >= 2, timeout=120)
        assert met, "the other build neither wrote its manifest nor waited for the lock"
        original(self)

    monkeypatch.setattr(prebuilt_build.fcntl, "flock", flock)
    monkeypatch.setattr(PrebuiltManifest, "write", write_together)
    errors = []

    def build(offset):
        try:
            kernix.build_module(src, out, name="conc", defines=[f"OFFSET={offset}"])
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    manifest = PrebuiltManifest.read(out)
    assert sorted(os.listdir(out)) == sorted([MANIFEST_NAME, manifest.library])
    kernix.load_prebuilt(out, target_prefix=unique_name("conc"))


def test_build_module_refuses_a_fifo_or_a_directory_as_a_source_by_what_it_is(tmp_path):
    """A source that is there but not a regular file is named for what it is, not "not found"."""
    fifo, folder = tmp_path / "pipe.cpp", tmp_path / "folder.cpp"
    os.mkfifo(fifo)
    folder.mkdir()
    for path, what in ((fifo, "is a FIFO (named pipe)"), (folder, "is a directory")):
        with pytest.raises(kernix.SourceNotFoundError, match=rf"{path}.* {what.replace('(', '[(]').replace(')', '[)]')}"):
            kernix.build_module([path], tmp_path / "out")
    with pytest.raises(kernix.SourceNotFoundError, match="source file not found"):
        kernix.build_module([tmp_path / "missing.cpp"], tmp_path / "out")


def test_a_manifest_is_made_with_only_what_identifies_the_library(tmp_path: Path) -> None:
    """The toolchain, sources, options and creation time keep their defaults (as in 0.3.0), and it writes and
    reads back whole."""
    spec = kernix.FunctionSpec("f", "f", ())
    m = PrebuiltManifest(tmp_path, "ops", "cpu", "ops.so", "0" * 64, 1, (spec,), {"f": "kernix_ffi_f"},
                         kernix.__version__, jax.__version__, (0, 1))
    assert m.compilers == () and m.options == {} and m.created > 0
    assert m.to_json()["name"] == "ops" and m.to_json()["created"] == m.created
