"""Calls kernix refuses rather than guess: a function without a shape signature
called without ``out=``, and a kernel compiled for a platform its module was
not built for -- each a CallError naming the function and a fix that works."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix

from helpers import gpus, has_nvcc, unique_name

SRC = textwrap.dedent(
    """\
    #include "kernix/common.h"
    // @BE add_rows
    void add_rows(const BE::Tensor& x, const BE::Tensor& b, BE::Tensor& y) {
      const int64_t n = b.numel();
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = a[i] + b.data_ptr<float>()[i % n];
    }
    // @BE halves
    void halves(const BE::Tensor& x, BE::Tensor& lo, BE::Tensor& hi) {
      const int64_t h = x.numel() / 2;
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < h; ++i) { lo.data_ptr<float>()[i] = a[i]; hi.data_ptr<float>()[i] = a[h + i]; }
    }
    """
)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("callerr"), SRC, build_directory=tmp_path_factory.mktemp("cache"))


def _suggestions(message: str) -> tuple[str, str]:
    """The out= call and the annotation a missing-out error suggests."""
    call = re.search(r"\n    (\w+\(.*out=.*\))\n", message).group(1)
    annotation = re.search(r"\n    (// @BE .*)\n", message).group(1)
    return call, annotation


def test_no_output_shape_is_guessed(mod):
    """Was: without out=, the output got the first input's shape and dtype, whatever
    the kernel writes (a kernel writing more read and wrote past the buffers)."""
    x, b = jnp.ones((4, 3), jnp.float32), jnp.arange(3, dtype=jnp.float32)
    for call in (mod.add_rows, jax.jit(mod.add_rows), jax.vmap(mod.add_rows, in_axes=(0, None))):
        with pytest.raises(kernix.CallError, match=r"add_rows\(\) has no shape signature, so kernix does not know "
                                                   r"the shape and dtype of its output\(s\) 'y' and will not guess"):
            call(x, b)
    with pytest.raises(kernix.CallError, match=r"halves\(\) has no shape signature.*'lo', 'hi'"):
        mod.halves(jnp.arange(6, dtype=jnp.float32))


def test_the_suggested_out_call_works(mod):
    x, b = jnp.ones((4, 3), jnp.float32), jnp.arange(3, dtype=jnp.float32)
    with pytest.raises(kernix.CallError) as e:
        mod.add_rows(x, b)
    call, _ = _suggestions(str(e.value))
    assert call == "add_rows(x, b, out=jax.ShapeDtypeStruct(x.shape, x.dtype))"
    got = eval(call, {"add_rows": mod.add_rows, "x": x, "b": b, "jax": jax})
    np.testing.assert_array_equal(got, np.ones((4, 3)) + np.arange(3))
    with pytest.raises(kernix.CallError) as e:
        mod.halves(jnp.arange(6, dtype=jnp.float32))
    assert _suggestions(str(e.value))[0] == (
        "halves(x, out=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype)])")


def test_the_suggested_annotation_works(mod, tmp_path):
    x, b = jnp.ones((4, 3), jnp.float32), jnp.arange(3, dtype=jnp.float32)
    with pytest.raises(kernix.CallError) as e:
        mod.add_rows(x, b)
    message = str(e.value)
    _, annotation = _suggestions(message)
    assert annotation == "// @BE add_rows (n,m),(m)->(n,m)"
    assert re.search(r"annotation \(above .*:\d+\)", message) and "input shapes: (4, 3), (3,)" in message
    fixed = kernix.load_cpp_inline(unique_name("callerr_fixed"), SRC.replace("// @BE add_rows", annotation),
                                   build_directory=tmp_path)
    np.testing.assert_array_equal(fixed.add_rows(x, b), np.ones((4, 3)) + np.arange(3))
    np.testing.assert_array_equal(jax.jit(fixed.add_rows)(x, b), np.ones((4, 3)) + np.arange(3))


def test_an_attribute_name_is_not_taken_for_a_dimension(tmp_path):
    src = ('#include "kernix/common.h"\n// @BE fill\n'
           "void fill(const BE::Tensor& x, BE::Tensor& y, int64_t n) {}\n")
    m = kernix.load_cpp_inline(unique_name("callerr_attr"), src, build_directory=tmp_path)
    with pytest.raises(kernix.CallError) as e:
        m.fill(jnp.ones(5, jnp.float32), n=2)
    call, annotation = _suggestions(str(e.value))
    assert annotation == "// @BE fill (m)->(m)"  # `n` is the attribute: an (n) group would mean its value
    assert call == "fill(x, n=..., out=jax.ShapeDtypeStruct(x.shape, x.dtype))"


# -- the platform a program is compiled for ---------------------------------------------------------

def test_lowering_a_cpu_kernel_for_cuda_names_the_function_and_fix(mod):
    """Was: XLA's `No FFI handler registered` when the program was compiled."""
    x, b = jnp.ones((4, 3), jnp.float32), jnp.arange(3, dtype=jnp.float32)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    f = jax.jit(lambda x, b: mod.add_rows(x, b, out=out))
    assert "custom_call" in f.trace(x, b).lower(lowering_platforms=("cpu",)).as_text()
    pattern = (rf"add_rows\(\) of module '{mod.name}' cannot be compiled for CUDA GPUs: the module was built for the "
               r"CPU, so XLA has no handler of its target .* there .*run the computation on the CPU: put its inputs "
               r"there with jax\.device_put\(x, jax\.devices\('cpu'\)\[0\]\).*kernix\.load_cuda_file\(\.\.\., "
               rf"target_prefix='{mod.name}'\).*platforms=\['cpu'\]")
    for lowering in (("cuda",), ("cpu", "cuda")):
        with pytest.raises(kernix.CallError, match=pattern):
            f.trace(x, b).lower(lowering_platforms=lowering)
    vmapped = jax.jit(jax.vmap(lambda x: mod.add_rows(x, b, out=jax.ShapeDtypeStruct(x.shape, x.dtype))))
    with pytest.raises(kernix.CallError, match=r"add_rows\(\) .* cannot be compiled for CUDA GPUs"):
        vmapped.trace(x[None]).lower(lowering_platforms=("cuda",))
    with pytest.raises(kernix.CallError, match=r"add_rows\(\) .* cannot be compiled for CUDA GPUs"):
        jax.export.export(f, platforms=["cuda"])(x, b)


@pytest.fixture(scope="module")
def cuda_mod(tmp_path_factory):
    from test_transforms import CUDA

    if not has_nvcc():
        pytest.skip("needs nvcc to build a CUDA module")
    return kernix.load_cuda_inline(unique_name("callerr_cuda"), CUDA, compute_capability="sm_90",
                                   build_directory=tmp_path_factory.mktemp("cuda"))


def test_a_cuda_kernel_under_jit_on_the_cpu_names_the_function_and_fix(cuda_mod):
    """A CUDA module loads without a GPU; a program that calls its kernel, compiled for
    the CPU, is refused with kernix's error, eagerly and under jit."""
    x = jax.device_put(jnp.ones((2, 3), jnp.float32), jax.devices("cpu")[0])
    with pytest.raises(kernix.CallError, match=r"cube\(\): module .* was built for CUDA GPUs, but input 'x' is on cpu"):
        cuda_mod.cube(x)
    pattern = (r"cube\(\) of module .* cannot be compiled for the CPU: the module was built for CUDA GPUs.*"
               r"run the computation on CUDA GPUs: put its inputs there with jax\.device_put\(x, "
               r"jax\.devices\('gpu'\)\[0\]\).*kernix\.load_cpp_file.*platforms=\['cuda'\]")
    for f in (jax.jit(cuda_mod.cube), jax.jit(lambda v: jax.vmap(cuda_mod.cube)(v)),
              jax.jit(jax.grad(lambda v: jnp.sum(cuda_mod.cube(v))))):
        with pytest.raises(kernix.CallError, match=pattern.replace("cube", "cube(_bwd)?", 1)):
            f.trace(x).lower(lowering_platforms=("cpu",))
    if not gpus():
        with pytest.raises(kernix.CallError, match=pattern):
            jax.jit(cuda_mod.cube)(x)
    assert "custom_call" in jax.jit(cuda_mod.cube).trace(x).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_a_cpu_kernel_under_jit_on_the_gpu_names_the_function_and_the_fix_works(tmp_path):
    m = kernix.load_cpp_inline(unique_name("callerr_gpu"), SRC, build_directory=tmp_path)
    x, b = np.ones((4, 3), np.float32), np.arange(3, dtype=np.float32)
    f = jax.jit(lambda x, b: m.add_rows(x, b, out=jax.ShapeDtypeStruct(x.shape, x.dtype)))
    with jax.default_device(gpus()[0]):
        with pytest.raises(kernix.CallError, match=r"add_rows\(\) .* cannot be compiled for CUDA GPUs"):
            f(x, b)
    with jax.default_device(jax.devices("cpu")[0]):  # the fix the message gives
        np.testing.assert_array_equal(f(x, b), x + b)


def test_the_platform_check_starts_no_backend():
    code = ("import kernix.runtime.operation\n"
            "from jax._src import xla_bridge\nprint(bool(xla_bridge._backends))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
