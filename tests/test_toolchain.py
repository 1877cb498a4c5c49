"""Finding compilers (kernix/backend/toolchain.py) and the GPU architecture (kernix/backend/arch.py)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from kernix.backend import arch
from kernix.backend import toolchain
from kernix.errors import ToolchainError


@pytest.fixture(autouse=True)
def _fresh_lookups():
    """The finders remember their answer per process; forget it around each test."""
    toolchain.forget()
    yield
    toolchain.forget()


def _fake_compiler(path: Path, banner: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{banner}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_nvcc_search_order(tmp_path, monkeypatch):
    explicit = _fake_compiler(tmp_path / "explicit" / "nvcc", "explicit nvcc 1.0")
    home = _fake_compiler(tmp_path / "home" / "bin" / "nvcc", "home nvcc 2.0")
    on_path = _fake_compiler(tmp_path / "path" / "nvcc", "path nvcc 3.0")
    monkeypatch.setenv("PATH", f"{on_path.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KERNIX_NVCC", str(explicit))
    assert toolchain.find_nvcc().path == str(explicit)
    assert "explicit nvcc 1.0" in toolchain.find_nvcc().identity
    toolchain.forget()
    monkeypatch.delenv("KERNIX_NVCC")
    assert toolchain.find_nvcc().path == str(home)
    toolchain.forget()
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert toolchain.find_nvcc().path == str(on_path)


def test_missing_nvcc_says_what_to_install(tmp_path, monkeypatch):
    for var in ("KERNIX_NVCC", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolchain, "_pip_nvcc", lambda: None)
    with pytest.raises(ToolchainError, match="nvcc was not found.*nvidia-cuda-nvcc.*KERNIX_NVCC"):
        toolchain.find_nvcc()


def test_bad_explicit_nvcc_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNIX_NVCC", str(tmp_path / "nope"))
    with pytest.raises(ToolchainError, match="KERNIX_NVCC"):
        toolchain.find_nvcc()


def test_host_compiler_from_cxx_then_missing(tmp_path, monkeypatch):
    cxx = _fake_compiler(tmp_path / "bin" / "my-c++", "my c++ 9")
    monkeypatch.setenv("CXX", str(cxx))
    found = toolchain.find_host_compiler()
    assert found.path == str(cxx) and "my c++ 9" in found.identity
    toolchain.forget()
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolchainError, match="no C\\+\\+ compiler was found.*apt-get install g\\+\\+"):
        toolchain.find_host_compiler()


def test_compiler_identity_is_remembered(tmp_path, monkeypatch):
    """The second lookup reads the remembered banner: it does not run the compiler."""
    log = tmp_path / "runs"
    cxx = tmp_path / "bin" / "c++"
    cxx.parent.mkdir()
    cxx.write_text(f"#!/bin/sh\necho run >> {log}\necho 'counting c++ 1'\n")
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    first = toolchain.find_host_compiler().identity
    toolchain.forget()
    assert toolchain.find_host_compiler().identity == first
    assert log.read_text().count("run") == 1


@pytest.mark.parametrize("value,expected", [("sm_90", "sm_90"), ("90", "sm_90"), ("9.0", "sm_90"), (86, "sm_86"),
                                            ("sm_90a", "sm_90a"), ("compute_80", "sm_80"), ("12.0", "sm_120")])
def test_normalize_arch(value, expected):
    assert arch.normalize_arch(value) == expected


@pytest.mark.parametrize("value", ["", "sm90x", "gpu", "9.0.1", "99999", "sm_1000", "sm_09"])
def test_bad_arch_is_an_error(value):
    with pytest.raises(ToolchainError, match="bad compute capability"):
        arch.normalize_arch(value)


def test_compute_capability_order(monkeypatch):
    """An explicit architecture, then the variables, then the GPUs the driver
    shows (tests/test_gpus.py: how it is asked), else an error naming the fixes."""
    from kernix.backend import gpus

    found = gpus.Survey((gpus.Gpu("sm_80", "NVIDIA A100"),), "nvml", "")
    monkeypatch.setattr(gpus, "survey", lambda *a, **k: found)
    monkeypatch.delenv("KERNIX_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setenv("KERNIX_CUDA_ARCH", "sm_86")
    assert arch.detect_compute_capability("sm_90") == "sm_90"
    assert arch.detect_compute_capability() == "sm_86"
    monkeypatch.delenv("KERNIX_CUDA_ARCH")
    assert arch.detect_compute_capability() == "sm_80"
    found = gpus.Survey((), "", "no NVIDIA driver answered: libnvidia-ml.so.1 cannot be loaded")
    with pytest.raises(ToolchainError, match="libnvidia-ml.so.1 cannot be loaded.*compute_capability='sm_90'"
                                             ".*KERNIX_CUDA_ARCH"):
        arch.detect_compute_capability()


@pytest.mark.parametrize("source,value", [
    ("KERNIX_CUDA_ARCH", "sm_abc"), ("KERNIX_CUDA_ARCH", "9.x"), ("KERNIX_CUDA_ARCH", "sm_90;rm"),
    ("KERNIX_CUDA_ARCH", "99999"), ("KERNIX_CUDA_ARCH_LIST", "sm_80,sm_9x"), ("explicit", "99999"),
    ("driver", "sm_-10"),
])
def test_a_bad_architecture_names_where_it_came_from_and_the_fix(monkeypatch, source, value):
    """Refused when the request is fingerprinted, before any compiler runs."""
    from kernix.backend import gpus

    monkeypatch.delenv("KERNIX_CUDA_ARCH_LIST", raising=False)
    monkeypatch.delenv("KERNIX_CUDA_ARCH", raising=False)
    found = gpus.Survey((gpus.Gpu(value, "NVIDIA Odd GPU"),), "nvml", "")  # (NVML said -1.0: sm_-10)
    monkeypatch.setattr(gpus, "survey", lambda *a, **k: found)
    if source.startswith("KERNIX"):
        monkeypatch.setenv(source, value)
    where = {"explicit": "compute_capability=", "driver": "the driver (nvml) for the NVIDIA Odd GPU"}.get(source, source)
    with pytest.raises(ToolchainError) as caught:
        arch.detect_compute_capability(value if source == "explicit" else None)
    message = str(caught.value)
    assert where in message and "bad compute capability" in message
    assert "KERNIX_CUDA_ARCH=sm_90" in message and "compute_capability='sm_90'" in message


_ARCH_GRAMMAR = re.compile(r"(?:sm_|compute_)?([0-9]+)(?:\.([0-9]+))?([af]?)")


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.text(alphabet="0123456789._afxsmcompute_ ,;", max_size=12),
    st.from_regex(r"(sm_|compute_)?[0-9]{1,3}(\.[0-9])?[af]?", fullmatch=True),
))
@example("9.")
@example("9")
@example("8.x")
@example(" SM_90A ")
@example("sm_")
@example("compute_9.0f")
@example("90;80, 86")
def test_arch_names_follow_the_documented_grammar(text: str) -> None:
    """normalize_arch accepts exactly ``[sm_|compute_]X[.Y][a|f]`` with two or three digits, the first not 0 (after
    trimming and lower-casing), arch_key orders what it returns, and a list is its items, sorted and
    distinct."""

    def grammatical(name: str) -> re.Match[str] | None:
        m = _ARCH_GRAMMAR.fullmatch(name.strip().lower())
        return m if m and 2 <= len(m[1] + (m[2] or "")) <= 3 and m[1][0] != "0" else None

    m = grammatical(text)
    if m is None:
        with pytest.raises(ToolchainError, match="bad compute capability"):
            arch.normalize_arch(text)
    else:
        major, minor, suffix = m.groups()
        digits = major + (minor or "")
        name = arch.normalize_arch(text)
        assert name == f"sm_{digits}{suffix}"
        assert arch.arch_key(name) == (int(digits[:-1]), int(digits[-1]), suffix)
    items = text.replace(",", " ").replace(";", " ").split()
    if items and all(grammatical(i) for i in items):
        names = arch.normalize_arch_list(text)
        assert set(names) == {arch.normalize_arch(i) for i in items}
        assert list(names) == sorted(set(names), key=arch.arch_key)
    else:
        with pytest.raises(ToolchainError):
            arch.normalize_arch_list(text)


# -- an imperfect machine: what a first load meets, each in a process of its own -------------------------------

_LOAD = """
import sys, kernix
src = '#include "kernix/common.h"\\n// @BE twice\\nvoid twice(const BE::Tensor& x, BE::Tensor& out) {}\\n'
try:
    kernix.load_cpp_inline("toolchain_check", src)
except kernix.KernixError as exc:
    print(type(exc).__name__ + ": " + str(exc))
    sys.exit(3)
print("loaded")
"""


def _load_in_a_process(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A first load of a small C++ module in a fresh process, with a cache of its own and ``env``."""
    full = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path / "cache"), "JAX_PLATFORMS": "cpu", **env}
    return subprocess.run([sys.executable, "-c", _LOAD], env=full, capture_output=True, text=True, timeout=300)


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("kind", ["true", "garbage", "no-c++17", "c++14"])
def test_cxx_that_is_no_cpp17_compiler_is_named_before_inference(tmp_path: Path, kind: str) -> None:
    """$CXX set to something that is not a C++17 compiler is a ToolchainError naming it, what it
    answered and the fix, before any inference (which would only report <cstddef> as missing)."""
    body = {
        "garbage": "echo 'hello, not a compiler'\n",
        "no-c++17": 'for a; do [ "$a" = -std=c++17 ] && { echo "unrecognized option $a" >&2; exit 1; }; done\n'
                    'exec g++ "$@"\n',
        "c++14": 'exec g++ "$@" -std=c++14\n',
    }.get(kind)
    cxx = Path("/bin/true") if body is None else _script(tmp_path / "bin" / "cxx", body)
    proc = _load_in_a_process(tmp_path, CXX=str(cxx))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ToolchainError: the host C++ compiler ")
    assert str(cxx) in proc.stdout and "from $CXX" in proc.stdout and "set $CXX to a C++17 compiler" in proc.stdout
    assert "cstddef" not in proc.stdout
    said = {"true": "printed: nothing", "garbage": "hello, not a compiler",
            "no-c++17": "unrecognized option -std=c++17", "c++14": "__cplusplus 201402"}[kind]
    assert said in proc.stdout


def test_inspect_with_a_broken_cxx_names_the_compiler_not_the_headers(tmp_path: Path) -> None:
    """`kernix inspect` does not build, so only the parse saw the broken compiler: its missing
    standard header now says what is wrong with $CXX, not which -I to add."""
    src = tmp_path / "k.cpp"
    src.write_text('#include "kernix/common.h"\n// @BE f\nvoid f(const BE::Tensor x, BE::Tensor out) {}\n')
    env = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path / "cache"), "CXX": "/bin/true"}
    proc = subprocess.run([sys.executable, "-m", "kernix", "inspect", str(src)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "file not found; the C++ standard headers are found through the host compiler, and the host C++ " \
           "compiler /bin/true" in proc.stderr
    assert "set $CXX to a C++17 compiler" in proc.stderr and "extra_include_paths" not in proc.stderr


def test_a_fixed_compiler_is_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed answer is not remembered: a compiler wrapper that failed once (here, while a flag
    file exists) is asked again, both for its C++17 check and for its include directories."""
    from kernix.frontend import clangparse

    broken = tmp_path / "broken"
    broken.touch()
    cxx = _script(tmp_path / "bin" / "cxx", f'[ -e {broken} ] && exit 1\nexec g++ "$@"\n')
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(tmp_path / "cache"))
    clangparse._host_cxx_include_dirs.cache_clear()
    try:
        with pytest.raises(ToolchainError, match="exit code 1"):
            toolchain.check_host_compiler()
        assert clangparse.host_cxx_include_dirs() == ()
        broken.unlink()
        clangparse._host_cxx_include_dirs.cache_clear()
        toolchain.check_host_compiler()
        assert clangparse.host_cxx_include_dirs()
    finally:
        clangparse._host_cxx_include_dirs.cache_clear()


def test_cxx_naming_a_missing_file_says_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "nope" / "g++"))
    with pytest.raises(ToolchainError, match=r"is not an executable file\. Point \$CXX at .*or unset it"):
        toolchain.find_host_compiler()


def test_relative_xdg_cache_home_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative $XDG_CACHE_HOME is invalid (XDG Base Directory spec): it must not put a cache
    into whatever directory a program starts from."""
    from kernix import paths

    monkeypatch.setattr(paths, "_override", None)
    monkeypatch.delenv("KERNIX_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    assert str(paths.cache_root()) == str(tmp_path / "home" / ".cache" / "kernix")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert str(paths.cache_root()) == str(tmp_path / "xdg" / "kernix")


@pytest.mark.parametrize("broken", ["missing", "no-library"])
def test_missing_or_broken_libclang_says_how_to_install_it(tmp_path: Path, broken: str) -> None:
    """Without libclang's bindings, or with bindings whose native library is missing (the `clang`
    package of PyPI, a damaged install), inference raises a ToolchainError that says to install
    libclang-ng, not an ImportError or clang's LibclangError."""
    import clang.cindex

    shadow = tmp_path / "shadow" / "clang"
    shadow.mkdir(parents=True)
    if broken == "missing":
        (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'clang'\", name='clang')\n")
    else:
        (shadow / "__init__.py").write_text("")
        shutil.copy(clang.cindex.__file__, shadow / "cindex.py")  # no native/libclang.so beside it
    path = os.pathsep.join([str(shadow.parent), *sys.path[1:]])
    proc = _load_in_a_process(tmp_path, PYTHONPATH=path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ToolchainError: inferring signatures needs libclang")
    assert "pip install --force-reinstall libclang-ng" in proc.stdout


def _failing_nvcc(path: Path) -> Path:
    """An nvcc that rejects what the real one rejects: a host compiler's option given to it bare."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in -Wall|--no-such-option)\n"
                    "  echo \"nvcc fatal   : Unknown option '$a'\" >&2; exit 1;; esac; done\n"
                    "echo 'Cuda compilation tools, release 12.4 (a stand-in)'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.parametrize("option, host", [("-Wall", True), ("--no-such-option", False)])
def test_an_option_nvcc_rejects_is_named_with_how_to_give_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             option: str, host: bool) -> None:
    """Was: `nvcc fatal : Unknown option '-Wall'` and nothing more. A host compiler's option is
    given to nvcc behind -Xcompiler; one neither compiler knows is a misspelling."""
    from kernix.backend import ninja
    from kernix.backend.flags import BuildConfig
    from kernix.errors import CompilationError

    monkeypatch.setenv("KERNIX_NVCC", str(_failing_nvcc(tmp_path / "cuda" / "bin" / "nvcc")))
    src = tmp_path / "k.cu"
    src.write_text("void f() {}\n")
    config = BuildConfig(platform="cuda", arch="sm_90", extra_cflags=(option,))
    with pytest.raises(CompilationError) as info:
        ninja.compile_library(tmp_path / "build", [(str(src), [])], config, name="unknown_option")
    message = str(info.value).split("\n", 1)[0]
    assert option in message and "extra_cuda_cflags" in message
    assert (f"-Xcompiler={option}" in message) is host
    assert ("spelling" in message) is not host
    assert f"Unknown option '{option}'" in info.value.output  # nvcc's own words are kept
