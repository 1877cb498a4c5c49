"""kernix in multi-process (``jax.distributed``) programs.

No kernix call starts JAX's backend -- a load of any kind, cold or warm, a
prebuilt module, ``build_module``, inference -- so ``jax.distributed.initialize()``
still works after it, and the kernels registered before it run afterwards.
Two processes on this machine (gloo collectives on the CPU; NCCL on a
machine with two GPUs) load one module into one cache at the same moment
(one build), and run a kernel sharded over every process's devices, and its
gradient.

Each test runs its processes with a deadline and shows their output when
one fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import FIXTURES, has_nvcc

from kernix.backend import gpus
from kernix.backend.toolchain import find_host_compiler

DEADLINE_S = 240


def free_port() -> int:
    """A TCP port nothing listens on now (for the coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_all(commands: list[list[str]], envs: list[dict[str, str]], timeout: float = DEADLINE_S) -> list[str]:
    """Run the commands at once; the stdout of each, or a failure that shows
    every process's exit status and output (all are killed at the deadline)."""
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c, e in zip(commands, envs)]
    outputs = []
    try:
        for p in procs:
            try:
                outputs.append(p.communicate(timeout=timeout))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outputs.append(p.communicate())
                outputs += [q.communicate() for q in procs[len(outputs):]]
                break
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    report = "\n".join(f"--- process {i}: exit {p.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-6000:]}"
                       for i, (p, (out, err)) in enumerate(zip(procs, outputs)))
    if any(p.returncode != 0 for p in procs):
        pytest.fail(f"a process failed (or passed the {timeout:.0f} s deadline):\n{report}")
    return [out for out, _ in outputs] + [err for _, err in outputs]


def child_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "KERNIX_VERBOSE")}
    env.update(more)
    return env


@pytest.fixture(scope="module")
def stand_in_driver(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment that lets a fresh process find a GPU: the real driver where
    there is one, else the stand-in libnvidia-ml.so.1 (an H100) on its
    library path (fixtures/driver/fake_driver.cpp)."""
    if gpus.survey(remember=False).gpus:
        return {}
    out = tmp_path_factory.mktemp("driver")
    subprocess.run([find_host_compiler().path, "-shared", "-fPIC", "-o", str(out / "libnvidia-ml.so.1"),
                    str(FIXTURES / "driver" / "fake_driver.cpp")], check=True)
    path = os.pathsep.join(p for p in (str(out), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return {"LD_LIBRARY_PATH": path, "FAKE_GPUS": "9.0/NVIDIA H100 80GB HBM3/GPU-1111", "STAND_IN": "1"}


# -- no load starts the backend ---------------------------------------------------------------

CPP = """\
#include "kernix/common.h"
// @BE add_one (n)->(n)
void add_one(const BE::Tensor& x, BE::Tensor& y) {
  for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i] + 1.0f;
}
"""

CUDA = """\
#include <cuda_runtime.h>
#include "kernix/common.h"
__global__ void add_two_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 2.0f;
}
// @BE add_two (n)->(n)
void add_two(const BE::Tensor& x, BE::Tensor& y, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n) add_two_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
}
"""

LOADS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import jax
    from jax._src import xla_bridge
    import kernix

    work, port, kinds = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
    checked = []

    def check(what):
        assert not xla_bridge.backends_are_initialized(), f"{what} started JAX's backend"
        checked.append(what)

    cpu, cuda = {}, {}
    if "cpp" in kinds:
        cpu["inline"] = kernix.load_cpp_inline("k_inline", (work / "k.cpp").read_text()); check("load_cpp_inline")
        cpu["file"] = kernix.load_cpp_file(work / "k.cpp", name="k_file"); check("load_cpp_file")
        cpu["dir"] = kernix.load_cpp_dir(work / "dir", name="k_dir"); check("load_cpp_dir")
        kernix.build_module(work / "k.cpp", work / "prebuilt", name="k_prebuilt"); check("build_module")
        cpu["prebuilt"] = kernix.load_prebuilt(work / "prebuilt"); check("load_prebuilt")
        kernix.infer_file(work / "k.cpp"); check("infer_file")
        cpu["inline"].functions, cpu["inline"].add_one; check("a module's functions")
    if "cuda" in kinds:
        cuda["inline"] = kernix.load_cuda_inline("c_inline", (work / "k.cu").read_text()); check("load_cuda_inline")
        cuda["file"] = kernix.load_cuda_file(work / "k.cu", name="c_file"); check("load_cuda_file")
        cuda["dir"] = kernix.load_cuda_dir(work / "cudir", name="c_dir"); check("load_cuda_dir")
        kernix.build_module(work / "k.cu", work / "cuprebuilt", name="c_prebuilt"); check("build_module (CUDA)")
        cuda["prebuilt"] = kernix.load_prebuilt(work / "cuprebuilt"); check("load_prebuilt (CUDA)")
        kernix.infer_file(work / "k.cu"); check("infer_file (CUDA)")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=1, process_id=0, initialization_timeout=60)
    x = np.arange(4, dtype=np.float32)
    for m in cpu.values():
        with jax.default_device(jax.devices("cpu")[0]):
            np.testing.assert_array_equal(m.add_one(x), x + 1)
    ran = []
    if cuda and any(d.platform == "gpu" for d in jax.devices()):
        for m in cuda.values():
            np.testing.assert_array_equal(m.add_two(jax.device_put(x, jax.devices("gpu")[0])), x + 2)
            ran.append(m.name)
    print("OK " + json.dumps({"checked": checked, "cuda_ran": ran}))
    """
)


@pytest.fixture(scope="module")
def loads_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sources the loads read and one cache for the file's load tests: the CUDA test's
    C++ loads find the modules the C++ test built (each kind is built cold once)."""
    work = tmp_path_factory.mktemp("loads")
    for d, name, text in (("", "k.cpp", CPP), ("dir", "k.cpp", CPP), ("", "k.cu", CUDA), ("cudir", "k.cu", CUDA)):
        (work / d).mkdir(exist_ok=True)
        (work / d / name).write_text(text)
    return work


def _loads(work: Path, kinds: str, **env: str) -> dict:
    script = work / "loads.py"
    script.write_text(LOADS)
    environment = child_env(KERNIX_CACHE_DIR=str(work / "cache"), **env)
    out = run_all([[sys.executable, str(script), str(work), str(free_port()), kinds]], [environment])[0]
    return json.loads(out.split("OK ", 1)[1])


def test_no_cpp_load_starts_the_backend_and_distributed_initialize_still_works(loads_work: Path) -> None:
    """Cold (the first process builds everything) and warm (the second finds it)."""
    for _ in ("cold", "warm"):
        report = _loads(loads_work, "cpp", JAX_PLATFORMS="cpu")
        assert report["checked"] == ["load_cpp_inline", "load_cpp_file", "load_cpp_dir", "build_module",
                                     "load_prebuilt", "infer_file", "a module's functions"]


@pytest.mark.skipif(not has_nvcc(), reason="needs nvcc to build CUDA modules")
def test_no_cuda_load_starts_the_backend(loads_work: Path, stand_in_driver: dict[str, str]) -> None:
    """The architecture comes from the driver (here, where there is no GPU, a
    stand-in NVML that reports an H100), cold and warm; with a GPU the
    kernels then run; without one, the C++ kernels loaded beside them run."""
    for _ in ("cold", "warm"):
        env = {"JAX_PLATFORMS": "cpu" if stand_in_driver else "cuda"}
        for name in ("KERNIX_CUDA_ARCH", "KERNIX_CUDA_ARCH_LIST"):
            env[name] = ""
        report = _loads(loads_work, "cpp,cuda" if stand_in_driver else "cuda", **env, **stand_in_driver)
        assert report["checked"][-6:] == ["load_cuda_inline", "load_cuda_file", "load_cuda_dir",
                                          "build_module (CUDA)", "load_prebuilt (CUDA)", "infer_file (CUDA)"]
        assert stand_in_driver or len(report["cuda_ran"]) == 4
    if stand_in_driver:  # built for the stand-in's H100
        prebuilt = json.loads((loads_work / "cuprebuilt" / "kernix-prebuilt.json").read_text())
        assert "sm_90" in json.dumps(prebuilt), prebuilt


NO_GPU = textwrap.dedent(
    """
    import sys
    import jax
    from jax._src import xla_bridge
    import kernix
    from kernix.backend import gpus

    # No driver at all, whatever this machine has.
    gpus.NVML_LIBRARY = gpus.CUDA_LIBRARY = "/nonexistent/libnvidia.so.1"
    try:
        kernix.load_cuda_inline("no_gpu", sys.argv[2])
    except kernix.ToolchainError as e:
        assert "could not detect the GPU's compute capability" in str(e) and "KERNIX_CUDA_ARCH=sm_90" in str(e), e
    else:
        raise AssertionError("a CUDA load with no GPU and no architecture named did not fail")
    assert not xla_bridge.backends_are_initialized(), "the failed detection started JAX's backend"
    jax.distributed.initialize(f"127.0.0.1:{sys.argv[1]}", num_processes=1, process_id=0, initialization_timeout=60)
    print("OK {}")
    """
)


def test_a_cuda_load_without_a_gpu_fails_cleanly_and_starts_no_backend(tmp_path: Path) -> None:
    script = tmp_path / "no_gpu.py"
    script.write_text(NO_GPU)
    env = child_env(JAX_PLATFORMS="cpu", KERNIX_CACHE_DIR=str(tmp_path / "cache"), KERNIX_CUDA_ARCH="",
                    KERNIX_CUDA_ARCH_LIST="")
    run_all([[sys.executable, str(script), str(free_port()), CUDA]], [env])


# -- two processes, one cache, one sharded kernel ---------------------------------------------

SHARDED = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    platform, me, port, barrier, source, cache = sys.argv[1:7]
    me = int(me)
    if platform == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_x64", True)
    from jax._src import xla_bridge
    import kernix

    # Both processes load at the same moment: a barrier of files (JAX is not started yet).
    Path(barrier, f"ready-{me}").touch()
    deadline = time.monotonic() + 60
    while len(list(Path(barrier).glob("ready-*"))) < 2:
        if time.monotonic() > deadline:
            sys.exit("the other process never reached the barrier")
        time.sleep(0.005)
    load = kernix.load_cpp_file if platform == "cpu" else kernix.load_cuda_file
    ops = load(source, name="shared_ops", build_directory=cache, verbose=True)
    assert not xla_bridge.backends_are_initialized(), "the load started JAX's backend"

    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=me, initialization_timeout=60)
    devices = jax.devices()
    assert jax.process_count() == 2 and len(devices) == (4 if platform == "cpu" else 2), devices
    mesh = Mesh(np.array(devices), ("b",))
    rng = np.random.default_rng(0)  # the same data in both processes
    x, w = rng.random((8, 16)), rng.random(16) + 0.5
    if platform == "cpu":
        kernel = lambda x, w: ops.rms_norm(x, w, eps=1e-5)
        reference = lambda x, w: x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w
    else:
        kernel = ops.scale_cols
        reference = lambda x, w: x * w
    xs = jax.make_array_from_callback(x.shape, NamedSharding(mesh, P("b", None)), lambda i: x[i])
    ws = jax.make_array_from_callback(w.shape, NamedSharding(mesh, P()), lambda i: w[i])

    f = jax.jit(kernel)
    hlo = f.lower(xs, ws).compile().as_text()
    assert "all-gather" not in hlo, hlo
    shard = f"f64[{8 // len(devices)},16]"
    assert shard in hlo, hlo  # each device ran the kernel on its own rows
    out = f(xs, ws)
    assert out.sharding.spec[0] == "b", out.sharding
    loss = lambda k: (lambda x, w: jnp.sum(k(x, w) ** 2))
    grads = jax.jit(jax.grad(loss(kernel), argnums=(0, 1)))(xs, ws)
    with jax.default_device(jax.local_devices()[0]):  # the reference, in JAX, on this process's own device
        want = np.asarray(reference(x, w))
        want_grads = [np.asarray(g) for g in jax.grad(loss(reference), argnums=(0, 1))(x, w)]
    for got, expected in ((out, want), *zip(grads, want_grads)):
        for s in got.addressable_shards:
            np.testing.assert_allclose(np.asarray(s.data), expected[s.index], rtol=1e-10)
    jax.distributed.shutdown()
    print("OK " + json.dumps({"library": str(ops.path), "shard": shard}))
    """
)


def _two_processes(tmp_path: Path, platform: str, source: Path, envs: list[dict[str, str]]) -> None:
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    (tmp_path / "barrier").mkdir()
    port = str(free_port())
    commands = [[sys.executable, str(script), platform, str(i), port, str(tmp_path / "barrier"), str(source),
                 str(tmp_path / "cache")] for i in range(2)]
    out0, out1, err0, err1 = run_all(commands, envs)
    reports = [json.loads(out.split("OK ", 1)[1]) for out in (out0, out1)]
    assert reports[0]["library"] == reports[1]["library"], reports  # one cache entry...
    builds = (err0 + err1).count("shared_ops: building in ")
    assert builds == 1, f"{builds} builds (one expected):\n{err0}\n{err1}"  # ... built once


def test_two_processes_share_a_cache_and_shard_a_kernel_with_its_gradient(tmp_path: Path) -> None:
    """Two jax.distributed processes on the CPU (gloo), two devices each."""
    env = child_env(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    _two_processes(tmp_path, "cpu", FIXTURES / "ops" / "ops_cpu.cpp", [env, env])


def _two_gpus() -> bool:
    return len(gpus.survey(remember=False).gpus) >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not has_nvcc(), reason="needs nvcc to build CUDA modules")
@pytest.mark.skipif(not _two_gpus(), reason="needs 2 NVIDIA GPUs (one per process, NCCL between them)")
def test_two_gpu_processes_share_a_cache_and_shard_a_kernel_with_its_gradient(tmp_path: Path) -> None:
    """One GPU per process (CUDA_VISIBLE_DEVICES), NCCL between them."""
    envs = [child_env(JAX_PLATFORMS="cuda", CUDA_VISIBLE_DEVICES=str(i), KERNIX_CUDA_ARCH="",
                      KERNIX_CUDA_ARCH_LIST="") for i in range(2)]
    _two_processes(tmp_path, "cuda", FIXTURES / "ops" / "ops_cuda.cu", envs)



# -- a shared cache on a file system that refuses locks ---------------------------------------

def test_a_cache_whose_file_system_refuses_flock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As an NFS mount without lock support (flock fails with ENOLCK): a module
    already built there loads, a build is refused with what to do, and what
    it suggests (a cache on a local disk) works."""
    import errno
    import fcntl

    import jax
    import numpy as np
    from helpers import unique_name

    import kernix
    from kernix.store import lock

    shared, local = tmp_path / "nfs", tmp_path / "local"
    name = unique_name("on_nfs")
    first = kernix.load_cpp_inline(name, CPP, build_directory=shared)  # built while locks worked
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(shared)):
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        real_flock(fd, operation)

    monkeypatch.setattr(lock.fcntl, "flock", flock)
    again = kernix.load_cpp_inline(name, CPP, build_directory=shared)  # a hit takes no lock
    assert again.path == first.path
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(again.add_one(jax.numpy.asarray(x)), x + 1)
    edited = CPP.replace("+ 1.0f", "+ 3.0f")
    with pytest.raises(kernix.CacheError, match=r"refuses the lock .*No locks available.*NFS.*"
                                                r"local disk \(KERNIX_CACHE_DIR, or build_directory=\)") as info:
        kernix.load_cpp_inline(name + "_v2", edited, build_directory=shared)
    assert "on_nfs" in str(info.value)
    with pytest.raises(kernix.CacheError, match="refuses the lock"):
        kernix.clear_cache(name, root=shared)
    built = kernix.load_cpp_inline(name + "_v2", edited, build_directory=local)  # the fix it names
    np.testing.assert_array_equal(built.add_one(jax.numpy.asarray(x)), x + 3)
