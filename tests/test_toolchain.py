"""Finding compilers (kernix/backend/toolchain.py) and the GPU architecture (kernix/backend/arch.py)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from kernix import arch
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


@pytest.mark.parametrize("value", ["", "sm90x", "gpu", "9.0.1"])
def test_bad_arch_is_an_error(value):
    with pytest.raises(ToolchainError, match="bad compute capability"):
        arch.normalize_arch(value)


def test_compute_capability_order(monkeypatch):
    monkeypatch.setattr(arch, "_arch_from_jax", lambda: "sm_80")
    monkeypatch.setattr(arch, "_arch_from_nvidia_smi", lambda: "sm_70")
    monkeypatch.setenv("KERNIX_CUDA_ARCH", "sm_86")
    assert arch.detect_compute_capability("sm_90") == "sm_90"
    assert arch.detect_compute_capability() == "sm_86"
    monkeypatch.delenv("KERNIX_CUDA_ARCH")
    assert arch.detect_compute_capability() == "sm_80"
    monkeypatch.setattr(arch, "_arch_from_jax", lambda: None)
    assert arch.detect_compute_capability() == "sm_70"
    monkeypatch.setattr(arch, "_arch_from_nvidia_smi", lambda: None)
    with pytest.raises(ToolchainError, match="compute_capability='sm_90'.*KERNIX_CUDA_ARCH"):
        arch.detect_compute_capability()


@pytest.mark.parametrize("answer,expected", [("9.0", "sm_90"), ("\n12.0\n8.6", "sm_120"), ("N/A", None), ("", None)])
def test_nvidia_smi_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, expected: str | None):
    """Without a JAX GPU device, the first GPU nvidia-smi lists decides; an answer
    that is not a compute capability is no answer (not an error)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{answer}\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert arch._arch_from_nvidia_smi() == expected


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
    """normalize_arch accepts exactly ``[sm_|compute_]X[.Y][a|f]`` with two digits at least (after
    trimming and lower-casing), arch_key orders what it returns, and a list is its items, sorted and
    distinct."""

    def grammatical(name: str) -> re.Match[str] | None:
        m = _ARCH_GRAMMAR.fullmatch(name.strip().lower())
        return m if m and len(m[1] + (m[2] or "")) >= 2 else None

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
