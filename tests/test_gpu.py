"""On an NVIDIA GPU: the seed workflow, dtypes, attributes, CUDA graphs, errors, several GPUs.

Every test here is skipped on a machine without a CUDA device (CI has none).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from functools import partial

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.backend import arch

from helpers import FIXTURES, ROOT, gpus, unique_name

jax.config.update("jax_enable_x64", True)


def like(x):
    """``out=`` for an output shaped and typed like ``x`` (functions without a shape signature need one)."""
    return jax.ShapeDtypeStruct(jnp.shape(x), x.dtype)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")]

# Seed tutorial 002's sources, verbatim (sections 1 and 2, plus the FAQ's entry point).
SEED_SOURCE = (FIXTURES / "seed_vector_add.cu").read_text()


@pytest.fixture(scope="module")
def cuda_ops():
    return kernix.load_cuda_file(FIXTURES / "build" / "cuda_ops.cu", name=unique_name("cuda_ops"))


@pytest.fixture(scope="module")
def checks():
    return kernix.load_cuda_file(FIXTURES / "gpu" / "gpu_checks.cu", name=unique_name("gpu_checks"))


def test_compute_capability_is_the_real_device(cuda_ops):
    detected = arch.detect_compute_capability()
    cc = gpus()[0].compute_capability
    assert detected == "sm_" + cc.replace(".", "")
    assert cuda_ops.platform == "cuda"


def test_seed_tutorial_script():
    """examples/seed_gpu_tutorial.py (the tutorial with `import kernix`) prints what the tutorial says."""
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "seed_gpu_tutorial.py")], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["[3. 3. 3. 3. 3.]"] * 4


def test_seed_vector_add():
    name = unique_name("my_kernels")
    kernix.load_cuda_inline(name=name, cuda_sources=SEED_SOURCE, functions=["vector_add"])
    a = jnp.ones(1024, dtype=jnp.float32)
    b = jnp.full(1024, 2.0, dtype=jnp.float32)
    result = jax.ffi.ffi_call(f"{name}.vector_add", jax.ShapeDtypeStruct(a.shape, a.dtype))(a, b)
    np.testing.assert_array_equal(result[:5], [3.0] * 5)

    @jax.jit
    def add_jit(a, b):
        return jax.ffi.ffi_call(f"{name}.vector_add", jax.ShapeDtypeStruct(a.shape, a.dtype))(a, b)

    np.testing.assert_array_equal(add_jit(a, b), np.full(1024, 3.0, np.float32))


@pytest.mark.parametrize("fast_math", [False, True])
def test_seed_scale_by_and_compiler_options(fast_math):
    name = unique_name("scale_ops")
    mod = kernix.load_cuda_inline(name=name, cuda_sources=SEED_SOURCE, functions=["scale_by"], optimization_level=3,
                                  use_fast_math=fast_math)
    a = jnp.ones(1024, dtype=jnp.float32)
    result = jax.ffi.ffi_call(f"{name}.scale_by", jax.ShapeDtypeStruct(a.shape, a.dtype))(a, scale_factor=np.float32(3.0))
    np.testing.assert_array_equal(result[:5], [3.0] * 5)
    np.testing.assert_array_equal(mod.scale_by(a, scale_factor=3.0, out=like(a)), np.full(1024, 3.0, np.float32))


def test_load_cuda_file_under_jit(cuda_ops):
    a = jnp.arange(3000, dtype=jnp.float32)
    b = jnp.ones(3000, dtype=jnp.float32)
    np.testing.assert_array_equal(jax.jit(partial(cuda_ops.vector_add, out=like(a)))(a, b), np.arange(3000) + 1.0)
    np.testing.assert_allclose(jax.jit(partial(cuda_ops.typed_axpy, a=2.0, out=like(a)))(a, b), 2 * np.arange(3000) + 1)
    for dtype in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64):
        x = jnp.arange(10).astype(dtype)
        y = cuda_ops.scale_by(x, scale_factor=0.5, out=like(x))
        np.testing.assert_allclose(np.asarray(y, np.float64), np.arange(10) * 0.5)
    h16 = jnp.arange(4, dtype=jnp.float16)
    h = cuda_ops.half_scale(h16, k=np.float16(1.5), out=like(h16))
    np.testing.assert_array_equal(np.asarray(h, np.float32), [0, 1.5, 3, 4.5])


def test_vmap(cuda_ops):
    a = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    np.testing.assert_array_equal(jax.vmap(lambda v: cuda_ops.vector_add(v, v, out=like(v)))(a), 2 * np.asarray(a))


ALL_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
XLA_CODES = {np.float16: 10, ml_dtypes.bfloat16: 16, np.float32: 11, np.float64: 12, np.int8: 2, np.int16: 3,
             np.int32: 4, np.int64: 5, np.uint8: 6, np.uint16: 7, np.uint32: 8, np.uint64: 9, np.bool_: 1}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_tensor_dtype_passes_through(checks, dtype):
    rng = np.random.default_rng(0)
    host = (rng.integers(0, 2, 37) if dtype is np.bool_ else rng.integers(0, 100, 37)).astype(dtype)
    x = jnp.asarray(host)
    out, code = checks.copy_tensor(
        x, out=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((1,), jnp.int32)]
    )
    np.testing.assert_array_equal(np.asarray(out), host)
    assert int(code[0]) == XLA_CODES[dtype]
    np.testing.assert_array_equal(np.asarray(checks.copy_any(x, out=like(x))), host)


def test_every_attribute_dtype_arrives(checks):
    values = dict(b=True, i8=-100, i16=-30000, i32=-(2**31), i64=-(2**40), u8=200, u16=60000, u32=2**32 - 1,
                  u64=2**40, f16=1.5, bf16=-2.5, f32=0.25, f64=1 / 3)
    out = checks.all_attrs(out=jax.ShapeDtypeStruct((13,), jnp.float64), **values)
    np.testing.assert_array_equal(np.asarray(out), [float(v) for v in values.values()])


def _loop(fn, n):
    def body(_, x):
        return fn(x)
    return jax.jit(lambda x: jax.lax.fori_loop(0, n, body, x))


@pytest.mark.parametrize("graphs", [True, False])
def test_inside_fori_loop_and_scan(graphs):
    mod = kernix.load_cuda_inline(unique_name("loop_ops"), SEED_SOURCE, ["scale_by"], allow_cuda_graph=graphs)
    x = jnp.ones(256, jnp.float32)
    out = _loop(lambda v: mod.scale_by(v, scale_factor=1.5, out=like(v)), 8)(x)
    np.testing.assert_allclose(out, np.full(256, 1.5**8, np.float32), rtol=1e-6)

    def step(carry, _):
        y = mod.scale_by(carry, scale_factor=2.0, out=like(carry))
        return y, y[0]

    carry, ys = jax.jit(lambda c: jax.lax.scan(step, c, None, length=5))(x)
    np.testing.assert_allclose(np.asarray(ys), [2.0, 4.0, 8.0, 16.0, 32.0])


GRAPH_PROBE = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, kernix
    mod = kernix.load_cuda_file(CU, name="graph_probe", allow_cuda_graph=GRAPHS)
    def body(i, carry):
        x, flags = carry
        for _ in range(4):
            x, flags = mod.capture_probe(x, out=[jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                 jax.ShapeDtypeStruct((1,), jnp.int32)])
        return x, flags
    f = jax.jit(lambda x: jax.lax.fori_loop(0, 20, body, (x, jnp.zeros(1, jnp.int32))))
    x, flags = f(jnp.zeros(1024, jnp.float32))
    assert float(x[0]) == 80.0, x[:4]
    print("CAPTURED" if int(flags[0]) == 1 else "NOT_CAPTURED")
    """
)


@pytest.mark.parametrize("graphs", [True, False])
def test_cuda_graph_capture(tmp_path, graphs):
    """allow_cuda_graph=True lets XLA record the handler into a CUDA graph; False keeps it out.

    The handler asks the CUDA runtime whether its stream is being captured and
    bakes the answer into the kernel it launches, so a replayed graph reports 1.
    """
    env = {
        **os.environ,
        "KERNIX_CACHE_DIR": str(tmp_path / "cache"),
        "XLA_FLAGS": "--xla_gpu_enable_command_buffer=+CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
    }
    code = GRAPH_PROBE.replace("CU", repr(str(FIXTURES / "gpu" / "gpu_checks.cu"))).replace("GRAPHS", str(graphs))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == ("CAPTURED" if graphs else "NOT_CAPTURED")


def test_host_check_failure_is_a_python_error(checks):
    x = jnp.zeros(8, jnp.float32)
    with pytest.raises(Exception, match="x is 32 bytes, out is 16"):
        checks.copy_tensor(x, out=[jax.ShapeDtypeStruct((4,), jnp.float32),
                                   jax.ShapeDtypeStruct((1,), jnp.int32)])[0].block_until_ready()
    np.testing.assert_array_equal(checks.fill(x, value=2.0, threads=128, out=like(x)), np.full(8, 2.0))


def test_a_typed_pointer_of_the_wrong_size_is_a_python_error(checks):
    """fill reads out as float: a float64 out (like x) would be half written; the host's data_ptr<float>()
    refuses it before the launch."""
    x = jnp.zeros(8, jnp.float64)
    with pytest.raises(Exception, match=r"kernix: fill: BE::Tensor::data_ptr<float>\(\): parameter 'out' is float64 "
                                        r"\(shape \[8\]\), but float views float32 elements \(4 bytes, not 8\)"):
        checks.fill(x, value=1.0, threads=128, out=like(x)).block_until_ready()
    x32 = x.astype(jnp.float32)
    np.testing.assert_array_equal(checks.fill(x32, value=2.0, threads=128, out=like(x32)), np.full(8, 2.0))


def test_an_eager_call_whose_kernel_refuses_raises_kernix_error_on_the_gpu_too(checks):
    """As on the CPU (tests/test_dtype_exact.py): eagerly kernix.KernelRuntimeError, under jit JAX's error."""
    x = jnp.zeros(8, jnp.float64)
    said = r"kernix: fill: BE::Tensor::data_ptr<float>\(\): parameter 'out' is float64"
    with pytest.raises(kernix.KernelRuntimeError, match=said):
        jax.block_until_ready(checks.fill(x, value=5.0, threads=128, out=like(x)))
    with pytest.raises(jax.errors.JaxRuntimeError, match=said):
        jax.block_until_ready(jax.jit(lambda x: checks.fill(x, value=6.0, threads=128, out=like(x)))(x))


def test_kernel_launch_error_is_a_python_error(checks):
    x = jnp.zeros(8, jnp.float32)
    with pytest.raises(Exception, match=r"cudaGetLastError\(\) returned cudaError"):
        checks.fill(x, value=1.0, threads=4096, out=like(x)).block_until_ready()
    # The GPU stays usable.
    np.testing.assert_array_equal(checks.fill(x, value=3.0, threads=256, out=like(x)), np.full(8, 3.0))
    np.testing.assert_array_equal(jnp.arange(4) + 1, [1, 2, 3, 4])


@pytest.mark.skipif(len(gpus()) < 2, reason="needs 2 GPUs")
def test_shard_map_over_two_gpus(cuda_ops):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map

    devices = np.array(gpus()[:2])
    mesh = Mesh(devices, ("x",))
    x = jax.device_put(jnp.arange(2048, dtype=jnp.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(shard_map(lambda v: cuda_ops.scale_by(v, scale_factor=2.0, out=like(v)), mesh=mesh,
                          in_specs=P("x"), out_specs=P("x")))
    out = f(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(2048, dtype=np.float32))
    assert {s.device for s in out.addressable_shards} == set(devices.tolist())
    for shard in out.addressable_shards:
        start = shard.index[0].start
        np.testing.assert_array_equal(np.asarray(shard.data), 2 * np.arange(start, start + 1024, dtype=np.float32))
