"""JAX transformations of kernel calls: what works gives the right numbers, and
every transformation kernix does not support is a CallError that names the
function and what to write instead -- on one device, on several CPU devices
(in a subprocess, ``--xla_force_host_platform_device_count``), and on GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix

from helpers import gpus, unique_name

# Elementwise kernels over any leading dimensions, with every combination of derivative kernels:
# `twice` has none, `cube` a backward kernel, `square` a tangent kernel, `sine` both, and its backward
# kernel a tangent kernel of its own (forward over reverse: jax.hessian).  The same code as C++ and as CUDA.
CPP = textwrap.dedent(
    """\
    #include <cmath>
    #include "kernix/common.h"
    // @BE twice (...,n)->(...,n)
    void twice(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = 2 * x.data_ptr<float>()[i];
    }
    // @BE cube (...,n)->(...,n)
    void cube(const BE::Tensor& x, BE::Tensor& y) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = a[i] * a[i] * a[i];
    }
    // @BE cube_bwd (...,n),(...,n)->(...,n) vjp=cube
    void cube_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) dx.data_ptr<float>()[i] = 3 * a[i] * a[i] * g.data_ptr<float>()[i];
    }
    // @BE square (...,n)->(...,n)
    void square(const BE::Tensor& x, BE::Tensor& y) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = a[i] * a[i];
    }
    // @BE square_jvp (...,n),(...,n)->(...,n) jvp=square
    void square_jvp(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) dy.data_ptr<float>()[i] = 2 * a[i] * dx.data_ptr<float>()[i];
    }
    // @BE sine (...,n)->(...,n)
    void sine(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = std::sin(x.data_ptr<float>()[i]);
    }
    // @BE sine_jvp (...,n),(...,n)->(...,n) jvp=sine
    void sine_jvp(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) dy.data_ptr<float>()[i] = std::cos(a[i]) * dx.data_ptr<float>()[i];
    }
    // @BE sine_bwd (...,n),(...,n)->(...,n) vjp=sine
    void sine_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) dx.data_ptr<float>()[i] = std::cos(a[i]) * g.data_ptr<float>()[i];
    }
    // @BE sine_bwd_jvp (...,n),(...,n),(...,n),(...,n)->(...,n) jvp=sine_bwd
    void sine_bwd_jvp(const BE::Tensor& x, const BE::Tensor& g, const BE::Tensor& dx, const BE::Tensor& dg,
                      BE::Tensor& ddx) {
      const float *a = x.data_ptr<float>(), *b = g.data_ptr<float>();
      const float *c = dx.data_ptr<float>(), *d = dg.data_ptr<float>();
      float* o = ddx.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) o[i] = std::cos(a[i]) * d[i] - std::sin(a[i]) * b[i] * c[i];
    }
    """
)

CUDA = textwrap.dedent(
    """\
    #include "kernix/common.h"
    __global__ void twice_k(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = 2 * x[i];
    }
    __global__ void cube_k(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = x[i] * x[i] * x[i];
    }
    __global__ void cube_bwd_k(const float* x, const float* g, float* dx, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) dx[i] = 3 * x[i] * x[i] * g[i];
    }
    __global__ void square_k(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = x[i] * x[i];
    }
    __global__ void square_jvp_k(const float* x, const float* dx, float* dy, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) dy[i] = 2 * x[i] * dx[i];
    }
    __global__ void sine_k(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = sinf(x[i]);
    }
    // cos(x) * t: sine's tangent (t the tangent of x) and its cotangent (t the output's cotangent)
    __global__ void cos_times_k(const float* x, const float* t, float* out, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) out[i] = cosf(x[i]) * t[i];
    }
    __global__ void sine_bwd_jvp_k(const float* x, const float* g, const float* dx, const float* dg, float* ddx,
                                   int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) ddx[i] = cosf(x[i]) * dg[i] - sinf(x[i]) * g[i] * dx[i];
    }
    static int blocks(int64_t n) { return (int)((n + 255) / 256); }
    // @BE twice (...,n)->(...,n)
    void twice(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s) {
      twice_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    // @BE cube (...,n)->(...,n)
    void cube(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s) {
      cube_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    // @BE cube_bwd (...,n),(...,n)->(...,n) vjp=cube
    void cube_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx, cudaStream_t s) {
      cube_bwd_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), g.data_ptr<float>(), dx.data_ptr<float>(),
                                                   x.numel());
    }
    // @BE square (...,n)->(...,n)
    void square(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s) {
      square_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    // @BE square_jvp (...,n),(...,n)->(...,n) jvp=square
    void square_jvp(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy, cudaStream_t s) {
      square_jvp_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), dx.data_ptr<float>(),
                                                     dy.data_ptr<float>(), x.numel());
    }
    // @BE sine (...,n)->(...,n)
    void sine(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s) {
      sine_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    // @BE sine_jvp (...,n),(...,n)->(...,n) jvp=sine
    void sine_jvp(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy, cudaStream_t s) {
      cos_times_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), dx.data_ptr<float>(),
                                                    dy.data_ptr<float>(), x.numel());
    }
    // @BE sine_bwd (...,n),(...,n)->(...,n) vjp=sine
    void sine_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx, cudaStream_t s) {
      cos_times_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), g.data_ptr<float>(),
                                                    dx.data_ptr<float>(), x.numel());
    }
    // @BE sine_bwd_jvp (...,n),(...,n),(...,n),(...,n)->(...,n) jvp=sine_bwd
    void sine_bwd_jvp(const BE::Tensor& x, const BE::Tensor& g, const BE::Tensor& dx, const BE::Tensor& dg,
                      BE::Tensor& ddx, cudaStream_t s) {
      sine_bwd_jvp_k<<<blocks(x.numel()), 256, 0, s>>>(x.data_ptr<float>(), g.data_ptr<float>(),
                                                       dx.data_ptr<float>(), dg.data_ptr<float>(),
                                                       ddx.data_ptr<float>(), x.numel());
    }
    """
)

#: Each kernel's first and second derivatives (elementwise, in NumPy), from which every transformation's numbers follow.
DERIVATIVES = {
    "twice": (lambda x: np.full_like(x, 2), np.zeros_like),
    "cube": (lambda x: 3 * x ** 2, lambda x: 6 * x),
    "square": (lambda x: 2 * x, lambda x: np.full_like(x, 2)),
    "sine": (np.cos, lambda x: -np.sin(x)),
}


def expected(kernel: str, transform: str, x: np.ndarray) -> np.ndarray:
    """What ``transform`` (a name of :func:`_transforms`) of elementwise ``kernel`` gives at ``x``."""
    d1, d2 = (d(x) for d in DERIVATIVES[kernel])
    diagonal = lambda d: np.einsum("ij,ik,jl->ijkl", d, np.eye(x.shape[0]), np.eye(x.shape[1]))  # noqa: E731
    if transform in ("jacrev", "jacfwd", "jit(jacfwd)"):
        return diagonal(d1)
    if transform in HESSIAN:
        return diagonal(d2)
    if transform in REVERSE_OVER_REVERSE:
        return d2
    if transform in FORWARD:  # the tangent is x (2 x under vmap(jvp))
        return d1 * x * (2 if transform == "vmap(jvp)" else 1)
    return d1  # a gradient of the sum


def _transforms(f):
    """name -> a callable of one array that applies a transformation to ``f`` (an array -> array function)."""
    loss = lambda x: jnp.sum(f(x))  # noqa: E731
    return {
        "grad": jax.grad(loss),
        "jit(grad)": jax.jit(jax.grad(loss)),
        "grad(jit)": jax.grad(jax.jit(loss)),
        "vjp": lambda x: jax.vjp(f, x)[1](jnp.ones_like(x))[0],
        "jacrev": lambda x: jax.jacrev(f)(x),
        "vmap(grad)": jax.vmap(jax.grad(loss)),
        "grad(vmap)": jax.grad(lambda x: jnp.sum(jax.vmap(f)(x))),
        "jit(vmap(grad))": jax.jit(jax.vmap(jax.grad(loss))),
        "checkpoint": jax.grad(jax.checkpoint(loss)),
        "jvp": lambda x: jax.jvp(f, (x,), (x,))[1],
        "jit(jvp)": jax.jit(lambda x: jax.jvp(f, (x,), (x,))[1]),
        "jvp(jit)": lambda x: jax.jvp(jax.jit(f), (x,), (x,))[1],
        "jacfwd": jax.jacfwd(f),
        "jit(jacfwd)": jax.jit(jax.jacfwd(f)),
        "linearize": lambda x: jax.linearize(f, x)[1](x),
        "vmap(jvp)": jax.vmap(lambda x: jax.jvp(f, (x,), (2 * x,))[1]),
        "jvp(vmap)": lambda x: jax.jvp(jax.vmap(f), (x,), (x,))[1],
        "hessian": jax.hessian(loss),
        "jit(hessian)": jax.jit(jax.hessian(loss)),
        "hessian(jit)": jax.hessian(jax.jit(loss)),
        "grad(grad)": jax.grad(lambda x: jnp.sum(jax.grad(loss)(x))),
        "grad(jit(grad))": jax.grad(lambda x: jnp.sum(jax.jit(jax.grad(loss))(x))),
    }


REVERSE = ("grad", "jit(grad)", "grad(jit)", "vjp", "jacrev", "vmap(grad)", "grad(vmap)", "jit(vmap(grad))",
           "checkpoint")
FORWARD = ("jvp", "jit(jvp)", "jvp(jit)", "jacfwd", "jit(jacfwd)", "linearize", "vmap(jvp)", "jvp(vmap)")
HESSIAN = ("hessian", "jit(hessian)", "hessian(jit)")
REVERSE_OVER_REVERSE = ("grad(grad)", "grad(jit(grad))")

# Each error names the function and the kernel to write (its annotation).
NO_DERIVATIVES = (r"twice\(\) cannot be differentiated: no backward kernel declares vjp=twice\. For reverse mode.*"
                  r"`// @BE twice_bwd vjp=twice`.*For forward mode.*`// @BE twice_jvp jvp=twice`")
FORWARD_MODE = (r"cube\(\) cannot be differentiated in forward mode \(jax\.jvp, jax\.jacfwd, jax\.hessian.*"
                r"backward kernel cube_bwd\(\) gives reverse mode only\. Write jax\.jacrev instead of jax\.jacfwd.*"
                r"`// @BE cube_jvp jvp=cube`")
# forward over reverse: cube_bwd differentiated in forward mode (under jit, cube's own tangents are unused)
CUBE_BWD = (r"cube_bwd\(\) cannot be differentiated: no backward kernel declares vjp=cube_bwd.*"
            r"`// @BE cube_bwd_jvp jvp=cube_bwd`.*cube_bwd\(\) is the backward kernel of cube")
REVERSE_MODE = (r"square\(\) cannot be differentiated in reverse mode \(jax\.grad.*its tangent kernel square_jvp\(\) "
                r"gives forward mode only\. Write jax\.jacfwd instead of jax\.jacrev.*`// @BE square_bwd vjp=square`")
SINE_BWD = (r"sine_bwd\(\) cannot be differentiated in reverse mode.*`// @BE sine_bwd_bwd vjp=sine_bwd`.*"
            r"sine_bwd\(\) is the backward kernel of sine")


def expected_error(kernel: str, transform: str) -> str | None:
    """The pattern of the CallError that ``transform`` of ``kernel`` raises, or ``None`` where it works."""
    if kernel == "twice":
        return NO_DERIVATIVES
    if kernel == "cube":
        if transform in REVERSE:
            return None
        return CUBE_BWD if transform in ("jit(hessian)", *REVERSE_OVER_REVERSE) else FORWARD_MODE
    if kernel == "square":
        return None if transform in FORWARD else REVERSE_MODE
    return SINE_BWD if transform in REVERSE_OVER_REVERSE else None


def check_transforms(mod, x) -> list[str]:
    """Run every transformation of every kernel of ``mod`` on ``x`` (a float32 array of shape (b, n),
    maybe sharded along b): each gives the numbers of :func:`expected`, or the CallError of
    :func:`expected_error`; return the names of those checked (raises AssertionError on
    the first wrong one)."""
    import re

    done = []
    for kernel in DERIVATIVES:
        for name, fn in _transforms(mod[kernel]).items():
            pattern = expected_error(kernel, name)
            if pattern is None:
                want = expected(kernel, name, np.asarray(x, np.float64))
                np.testing.assert_allclose(np.asarray(fn(x)), want, rtol=2e-5, atol=1e-6, err_msg=f"{kernel} {name}")
            else:
                try:
                    fn(x)
                except kernix.CallError as e:
                    assert re.search(pattern, str(e), re.S), f"{kernel}, {name}: {e}"
                else:
                    raise AssertionError(f"{kernel}, {name}: no error")
            done.append(f"{kernel} {name}")
    return done


@pytest.fixture(scope="module")
def cpu_build(tmp_path_factory):
    """The name and the cache of the module of CPP: built here, found again by the test's process."""
    return unique_name("transforms"), tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def cpu_mod(cpu_build):
    name, cache = cpu_build
    return kernix.load_cpp_inline(name, CPP, build_directory=cache)


def test_transforms_on_one_device(cpu_mod):
    x = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (2, 3)), jnp.float32)
    done = check_transforms(cpu_mod, x)
    assert len(done) == len(DERIVATIVES) * len(_transforms(cpu_mod.cube))


def test_forward_call_is_unchanged_under_every_layer(cpu_mod):
    x = jnp.asarray(np.arange(6).reshape(2, 3), jnp.float32)
    np.testing.assert_array_equal(cpu_mod.cube(x), np.asarray(x) ** 3)
    np.testing.assert_array_equal(jax.jit(cpu_mod.cube)(x), np.asarray(x) ** 3)
    np.testing.assert_array_equal(jax.vmap(cpu_mod.twice)(x), 2 * np.asarray(x))
    # Not differentiated through the kernel (stop_gradient, or a zero tangent): no error.
    g = jax.grad(lambda w: jnp.sum(w * jax.lax.stop_gradient(cpu_mod.twice(x))))(1.0)
    assert float(g) == float(np.sum(2 * np.asarray(x)))
    primal, tangent = jax.jvp(lambda w: w * cpu_mod.cube(x), (2.0,), (1.0,))
    np.testing.assert_array_equal(tangent, np.asarray(x) ** 3)


def test_error_says_what_to_write_and_that_works(cpu_mod):
    """The forward-mode error says jax.jacrev for jax.jacfwd: that gives the Jacobian."""
    x = jnp.asarray([[0.5, 1.0, 2.0]], jnp.float32)
    with pytest.raises(kernix.CallError, match="Write jax.jacrev instead of jax.jacfwd") as e:
        jax.jacfwd(cpu_mod.cube)(x)
    assert isinstance(e.value, TypeError)  # what JAX raised for forward mode of a custom_vjp, as before
    jac = jax.jacrev(cpu_mod.cube)(x)
    np.testing.assert_allclose(jac[0, :, 0, :], np.diag(3 * np.asarray(x[0]) ** 2), rtol=1e-6)


SEVERAL = textwrap.dedent(
    """
    import re, sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import kernix
    import test_transforms as t
    assert jax.device_count() == int(sys.argv[3]), jax.devices()
    mod = kernix.load_cpp_inline(sys.argv[4], t.CPP, build_directory=sys.argv[2])  # built by the test: a hit
    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 3)).astype(np.float32)
    done = t.check_transforms(mod, jnp.asarray(x))  # unsharded: the kernels run through custom_partitioning
    mesh = Mesh(np.array(jax.devices()), ("b",))
    xs = jax.device_put(x, NamedSharding(mesh, P("b", None)))
    done += t.check_transforms(mod, xs)  # sharded along the batch dimension
    f = jax.jit(jax.grad(lambda v: jnp.sum(mod.cube(v))))
    assert "all-gather" not in f.lower(xs).compile().as_text()  # the backward runs per shard too
    f = jax.jit(lambda v: jax.jvp(mod.sine, (v,), (v,))[1])
    assert "all-gather" not in f.lower(xs).compile().as_text()  # and the tangent kernel
    # Inside jax.shard_map, each device calls the kernels on its own shard.
    in_shards = lambda k: jax.shard_map(k, mesh=mesh, in_specs=P("b", None), out_specs=P("b", None))
    g = jax.jit(jax.grad(lambda v: jnp.sum(in_shards(mod.cube)(v))))(xs)
    np.testing.assert_allclose(g, 3 * x.astype(np.float64) ** 2, rtol=1e-5)
    tangent = jax.jit(lambda v: jax.jvp(in_shards(mod.sine), (v,), (v,))[1])(xs)
    np.testing.assert_allclose(tangent, np.cos(x.astype(np.float64)) * x, rtol=1e-5)
    for k, pattern in ((mod.cube, t.FORWARD_MODE), (mod.twice, t.NO_DERIVATIVES)):
        try:
            jax.jit(lambda v: jax.jvp(in_shards(k), (v,), (v,))[1])(xs)
        except kernix.CallError as e:
            assert re.search(pattern, str(e), re.S), e
        else:
            raise AssertionError("jvp through shard_map: no error")
    try:
        jax.jit(jax.grad(lambda v: jnp.sum(in_shards(mod.square)(v))))(xs)
    except kernix.CallError as e:
        assert re.search(t.REVERSE_MODE, str(e), re.S), e
    else:
        raise AssertionError("grad through shard_map of a kernel with a tangent kernel only: no error")
    print("OK", len(done))
    """
)


def test_transforms_on_several_cpu_devices(tmp_path, cpu_build, cpu_mod, devices=2):
    script = tmp_path / "several.py"
    script.write_text(SEVERAL)
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    name, cache = cpu_build
    proc = subprocess.run(
        [sys.executable, str(script), str(Path(__file__).parent), str(cache), str(devices), name],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stdout.split()[-1] == str(2 * len(DERIVATIVES) * len(_transforms(lambda x: x)))


# -- on GPUs -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_mod():
    return kernix.load_cuda_inline(unique_name("transforms_cuda"), CUDA)


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_transforms_on_one_gpu(cuda_mod):
    x = jax.device_put(np.random.default_rng(0).uniform(0.5, 1.5, (2, 3)).astype(np.float32), gpus()[0])
    with jax.default_device(gpus()[0]):
        done = check_transforms(cuda_mod, x)
    assert len(done) == len(DERIVATIVES) * len(_transforms(cuda_mod.cube))


@pytest.mark.gpu
@pytest.mark.skipif(len(gpus()) < 2, reason="needs 2 GPUs")
def test_transforms_on_two_gpus(cuda_mod, cpu_mod):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    two = gpus()[:2]
    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 3)).astype(np.float32)
    with jax.default_device(two[0]):
        check_transforms(cuda_mod, jnp.asarray(x))
        mesh = Mesh(np.array(two), ("b",))
        check_transforms(cuda_mod, jax.device_put(x, NamedSharding(mesh, P("b", None))))
    # A C++ module's kernels on the CPU of a machine with 2 GPUs (jax.device_count() counts the GPUs).
    with jax.default_device(jax.devices("cpu")[0]):
        check_transforms(cpu_mod, jnp.asarray(x))
