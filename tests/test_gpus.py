"""Finding the GPUs' architectures from the driver, never from JAX: NVML, the
CUDA driver API where NVML is missing, CUDA_VISIBLE_DEVICES, and the memo a
warm process reads instead of asking.

The driver's libraries are stood in for by a small C++ library
(fixtures/driver/fake_driver.cpp) loaded under their names, and its /proc
directory by files written here, so all of it runs on a machine without a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import FIXTURES

from kernix.backend import arch, gpus
from kernix.backend.toolchain import find_host_compiler
from kernix.errors import ToolchainError

H100 = "9.0/NVIDIA H100 80GB HBM3/GPU-11111111-aaaa"
A10 = "8.6/NVIDIA A10/GPU-22222222-bbbb"


@pytest.fixture(scope="session")
def fake_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stand-in libnvidia-ml.so.1 and libcuda.so.1
    (two copies: one library loaded under both names would share its state)."""
    out = tmp_path_factory.mktemp("driver")
    built = out / "fake_driver.so"
    subprocess.run([find_host_compiler().path, "-shared", "-fPIC", "-O1", "-o", str(built),
                    str(FIXTURES / "driver" / "fake_driver.cpp")], check=True)
    for name in ("libnvidia-ml.so.1", "libcuda.so.1"):
        shutil.copy(built, out / name)
    return out


def proc_dir(where: Path, version: str = "NVRM version: 580.65.06", uuids: tuple[str, ...] = ("GPU-1111",)) -> Path:
    """A stand-in for /proc/driver/nvidia: the driver's version and one
    ``information`` file per GPU."""
    for i, uuid in enumerate(uuids):
        bus = where / "gpus" / f"0000:{0x18 + i:02x}:00.0"
        bus.mkdir(parents=True, exist_ok=True)
        (bus / "information").write_text(f"Model: \t NVIDIA H100\nGPU UUID: \t {uuid}\nDevice Minor: \t {i}\n")
    (where / "version").write_text(version + "\n")
    return where


@pytest.fixture
def driver(fake_driver: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in driver in place of the real one, with no answers remembered
    from before; returns the file where it logs each initialisation."""
    monkeypatch.setattr(gpus, "NVML_LIBRARY", str(fake_driver / "libnvidia-ml.so.1"))
    monkeypatch.setattr(gpus, "CUDA_LIBRARY", str(fake_driver / "libcuda.so.1"))
    monkeypatch.setattr(gpus, "DRIVER_PROC", str(tmp_path / "no-proc"))
    monkeypatch.setattr(gpus, "_known", {})
    for name in ("KERNIX_CUDA_ARCH", "KERNIX_CUDA_ARCH_LIST", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                 "FAKE_GPUS", "FAKE_CUDA_GPUS", "FAKE_FAIL"):
        monkeypatch.delenv(name, raising=False)
    log = tmp_path / "driver.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def calls(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_nvml_gives_every_visible_gpu_and_the_architectures_are_all_of_theirs(driver, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", f"{H100};{A10}")
    found = gpus.survey()
    assert found.source == "nvml"
    assert found.gpus == (gpus.Gpu("sm_90", "NVIDIA H100 80GB HBM3"), gpus.Gpu("sm_86", "NVIDIA A10"))
    assert arch.detect_compute_capability() == "sm_86,sm_90"
    assert calls(driver) == ["nvmlInit"]  # the CUDA driver was not initialised


@pytest.mark.parametrize("visible,order,expected", [
    ("0", None, "sm_90,sm_86"),                 # different models, CUDA's own order: not known which, so both
    ("1", "PCI_BUS_ID", "sm_86"),
    ("1,0", "PCI_BUS_ID", "sm_86,sm_90"),
    ("GPU-2222", None, "sm_86"),                # a UUID's prefix
    ("GPU-2222,7,GPU-1111", None, "sm_86"),     # CUDA stops at the first entry that names no GPU
    ("GPU-2222,GPU-2222,GPU-1111", None, "sm_86"),  # ... or one named already
    ("MIG-5a3f", None, "sm_90,sm_86"),          # a MIG instance's GPU is not known here: both
])
def test_cuda_visible_devices_is_applied_to_what_nvml_lists(driver, monkeypatch, visible, order, expected):
    monkeypatch.setenv("FAKE_GPUS", f"{H100};{A10}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    if order:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", order)
    assert ",".join(g.arch for g in gpus.survey().gpus) == expected


def test_an_index_of_identical_gpus_needs_no_order(driver, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", f"{H100};9.0/NVIDIA H100 80GB HBM3/GPU-3333")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus.survey().gpus == (gpus.Gpu("sm_90", "NVIDIA H100 80GB HBM3"),)


@pytest.mark.parametrize("visible", ["", "-1", "7"])
def test_cuda_visible_devices_that_hides_every_gpu_is_a_clear_error(driver, monkeypatch, visible):
    monkeypatch.setenv("FAKE_GPUS", H100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(ToolchainError, match=rf"CUDA_VISIBLE_DEVICES='{visible}' shows none of the 1 GPUs.*"
                                             r"compute_capability='sm_90'.*KERNIX_CUDA_ARCH=sm_90"):
        arch.detect_compute_capability()


def test_the_cuda_driver_answers_where_nvml_is_missing(driver, fake_driver, monkeypatch):
    """A container started with NVIDIA_DRIVER_CAPABILITIES=compute has
    libcuda.so.1 but not libnvidia-ml.so.1 (the ``utility`` capability's): a
    CUDA load there finds the architecture without being told it."""
    monkeypatch.setenv("FAKE_GPUS", f"{H100};{A10}")
    monkeypatch.setenv("FAKE_CUDA_GPUS", A10)  # as the driver would show CUDA_VISIBLE_DEVICES=1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(gpus, "NVML_LIBRARY", str(driver.parent / "missing" / "libnvidia-ml.so.1"))
    assert arch.detect_compute_capability() == "sm_86"
    assert gpus.survey().source == "cuda driver" and calls(driver) == ["cuInit"]
    monkeypatch.setattr(gpus, "_known", {})
    monkeypatch.setattr(gpus, "NVML_LIBRARY", str(fake_driver / "libnvidia-ml.so.1"))
    monkeypatch.setenv("FAKE_FAIL", "nvml")  # (NVML present, failing: asked too)
    found = gpus.survey()
    assert (found.source, found.gpus) == ("cuda driver", (gpus.Gpu("sm_86", "NVIDIA A10"),))
    assert calls(driver) == ["cuInit", "nvmlInit", "cuInit"]


def test_without_any_driver_the_error_says_what_was_tried_and_what_to_set(driver, monkeypatch, tmp_path):
    monkeypatch.setattr(gpus, "NVML_LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))
    monkeypatch.setenv("FAKE_FAIL", "cuda")
    monkeypatch.setenv("FAKE_GPUS", H100)
    with pytest.raises(ToolchainError) as info:
        arch.detect_compute_capability()
    message = str(info.value)
    assert "libnvidia-ml.so.1 cannot be loaded" in message
    assert "cuInit failed: CUDA_ERROR_UNKNOWN (999)" in message
    assert "compute_capability='sm_90'" in message and "KERNIX_CUDA_ARCH=sm_90" in message
    monkeypatch.delenv("FAKE_FAIL")
    monkeypatch.setenv("FAKE_CUDA_GPUS", "")
    with pytest.raises(ToolchainError, match=r"the driver lists no GPU \(cuda driver\)"):
        arch.detect_compute_capability()
    monkeypatch.setenv("KERNIX_CUDA_ARCH", "sm_80")  # the fix the error names works
    assert arch.detect_compute_capability() == "sm_80"


def test_a_failing_nvml_is_reported_with_its_own_words(driver, monkeypatch):
    monkeypatch.setattr(gpus, "CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    monkeypatch.setenv("FAKE_FAIL", "nvml")
    found = gpus.survey()
    assert found.gpus == () and "NVML's nvmlInit_v2 failed: Driver Not Loaded (9)" in found.problem


def test_the_answer_is_remembered_per_driver_and_devices(driver, monkeypatch, tmp_path):
    """A fresh process reads the memo: no driver library is loaded; another
    driver version, another GPU or another CUDA_VISIBLE_DEVICES asks again."""
    proc = proc_dir(tmp_path / "proc")
    monkeypatch.setattr(gpus, "DRIVER_PROC", str(proc))
    monkeypatch.setenv("FAKE_GPUS", f"{H100};{A10}")
    root = tmp_path / "cache"
    assert arch.detect_compute_capability(root=root) == "sm_86,sm_90"
    assert len(list((root / "toolchain").glob("gpus-*.rec"))) == 1
    assert calls(driver) == ["nvmlInit"]

    def fresh() -> str:
        monkeypatch.setattr(gpus, "_known", {})  # as in a new process
        return arch.detect_compute_capability(root=root)

    assert fresh() == "sm_86,sm_90" and calls(driver) == ["nvmlInit"]
    monkeypatch.setenv("FAKE_GPUS", H100)  # the machine's GPUs change...
    proc_dir(proc, uuids=("GPU-1111", "GPU-9999"))  # ... and so does what /proc shows
    assert fresh() == "sm_90" and calls(driver) == ["nvmlInit"] * 2
    proc_dir(proc, version="NVRM version: 590.1")
    fresh()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fresh()
    assert calls(driver) == ["nvmlInit"] * 4
    fresh()
    assert calls(driver) == ["nvmlInit"] * 4
    # A damaged memo is asked again, and replaced.
    for memo in (root / "toolchain").glob("gpus-*.rec"):
        memo.write_bytes(b"garbage")
    assert fresh() == "sm_90" and calls(driver) == ["nvmlInit"] * 5


def test_no_memo_without_the_drivers_proc_directory_or_when_asked_not_to(driver, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_GPUS", H100)
    root = tmp_path / "cache"
    gpus.survey(root)
    assert not (root / "toolchain").exists()
    monkeypatch.setattr(gpus, "_known", {})
    monkeypatch.setattr(gpus, "DRIVER_PROC", str(proc_dir(tmp_path / "proc")))
    gpus.survey(root, remember=False)
    assert not (root / "toolchain").exists()


def test_explicit_and_environment_come_before_the_driver(driver, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", H100)
    monkeypatch.setenv("KERNIX_CUDA_ARCH", "sm_86")
    assert arch.detect_compute_capability("sm_80") == "sm_80"
    assert arch.detect_compute_capability() == "sm_86"
    monkeypatch.setenv("KERNIX_CUDA_ARCH_LIST", "90;80")
    assert arch.detect_compute_capability() == "sm_80,sm_90"
    assert calls(driver) == []


def test_the_cuda_driver_showing_no_gpu_names_cuda_visible_devices(driver, monkeypatch):
    monkeypatch.setattr(gpus, "NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
    monkeypatch.setenv("FAKE_GPUS", H100)
    monkeypatch.setenv("FAKE_CUDA_GPUS", "")  # as the driver answers CUDA_VISIBLE_DEVICES=""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.survey().problem == "no GPU is visible with CUDA_VISIBLE_DEVICES='' (cuda driver)"


def _real_gpus() -> tuple[gpus.Gpu, ...]:
    gpus._known.clear()
    return gpus.survey(remember=False).gpus


@pytest.mark.gpu
@pytest.mark.skipif(not _real_gpus(), reason="needs an NVIDIA GPU and its driver")
def test_every_way_of_asking_the_real_driver_agrees_with_jax():
    import jax

    from kernix.backend.arch import normalize_arch

    want = sorted(normalize_arch(d.compute_capability) for d in jax.devices("gpu"))
    nvml, cuda = gpus._nvml(), gpus._cuda_driver()
    assert not isinstance(nvml, str) and not isinstance(cuda, str), (nvml, cuda)
    assert sorted(d.arch for d in gpus.visible(nvml)) == want
    assert sorted(g.arch for g in cuda) == want
