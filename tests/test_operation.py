"""Kernels as complete JAX operations: signatures, checked calls, vmap, grad, sharding."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.test_util import check_grads

import kernix

jax.config.update("jax_enable_x64", True)

from helpers import FIXTURES, gpus, unique_name

OPS = FIXTURES / "ops" / "ops_cpu.cpp"


@pytest.fixture(scope="module")
def ops_build(tmp_path_factory):
    """The name and the cache of the module of OPS: built here, found again by the sharded test's process."""
    return unique_name("ops"), tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def ops(ops_build):
    name, cache = ops_build
    return kernix.load_cpp_file(OPS, name=name, build_directory=cache)


def rms_norm_ref(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def kernel_calls(fn, *args, target):
    """How many times the lowered program calls ``target``, and whether it loops."""
    text = jax.jit(fn).lower(*args).as_text()
    return text.count(f"@{target}(") + text.count(f'"{target}"'), "while" in text


# -- shape signatures and checked calls -------------------------------------------------

def test_specs_carry_signature_vjp_and_doc(ops):
    f = ops.functions
    assert f["matmul"].signature == "(m,k):float64,(k,n):float64->(m,n)"
    assert f["rms_norm"].signature == "(...,d),(d)->(...,d)"
    assert f["rms_norm_bwd"].vjp_of == "rms_norm"
    assert f["head"].signature == "(n)->(k)"
    assert f["plain_copy"].signature is None
    assert f["rms_norm"].doc == "Root-mean-square normalisation of each row of x, scaled by w."
    # The arg_spec part of an annotation with a signature is still the arg_spec.
    assert ops.specs["rms_norm"] == ("arg", "arg", "ret", "attr.eps:float64")


def test_output_shape_from_signature(ops):
    a, b = np.random.rand(3, 4), np.random.rand(4, 5)
    c = ops.matmul(a, b)
    assert c.shape == (3, 5)
    np.testing.assert_allclose(c, a @ b)
    np.testing.assert_allclose(jax.jit(ops.matmul)(a, b), a @ b)


def test_attribute_dimension(ops):
    x = jnp.arange(8, dtype=jnp.float32)
    np.testing.assert_array_equal(ops.head(x, k=3), [0, 1, 2])
    assert jax.jit(lambda x: ops.head(x, k=5))(x).shape == (5,)


def test_batch_dims_and_default_dtype(ops):
    x, w = np.random.rand(2, 3, 4), np.random.rand(4)
    y = ops.rms_norm(x, w, eps=1e-6)
    assert y.shape == (2, 3, 4) and y.dtype == jnp.float64
    np.testing.assert_allclose(y, rms_norm_ref(x, w, 1e-6), rtol=1e-12)
    y32 = ops.rms_norm(x.astype(np.float32), w.astype(np.float32), eps=1e-6)
    assert y32.dtype == jnp.float32


def test_mismatched_dimension_names_function_input_dim_and_values(ops):
    with pytest.raises(kernix.CallError) as info:
        ops.matmul(np.zeros((3, 4)), np.zeros((5, 2)))
    msg = str(info.value)
    assert "matmul()" in msg and "'b'" in msg and "k=5" in msg and "k=4" in msg and "'a'" in msg


def test_wrong_rank_and_pinned_dtype(ops):
    with pytest.raises(kernix.CallError, match=r"matmul\(\): input 'a' must have rank 2.*\(3,\)"):
        ops.matmul(np.zeros(3), np.zeros((3, 2)))
    with pytest.raises(kernix.CallError, match=r"input 'b' must be float64.*got float32"):
        ops.matmul(np.zeros((2, 3)), np.zeros((3, 2), np.float32))
    with pytest.raises(kernix.CallError, match=r"rms_norm\(\): input 'x' must have rank at least 1"):
        ops.rms_norm(np.float64(1.0), np.zeros(1), eps=0.1)


def test_batch_shapes_must_agree(ops):
    with pytest.raises(kernix.CallError, match=r"input 'count' has batch dimensions '\.\.\.'=\(3,\).*'x' has '\.\.\.'=\(2,\)"):
        ops.scale_rows(np.zeros((2, 4)), np.zeros(3, np.int32))


def test_checks_happen_under_jit_at_trace_time(ops):
    with pytest.raises(kernix.CallError, match="d=5"):
        jax.jit(lambda x, w: ops.rms_norm(x, w, eps=0.1))(np.zeros((2, 4)), np.zeros(5))


def test_out_must_agree_with_signature(ops):
    a, b = np.zeros((3, 4)), np.zeros((4, 5))
    ok = ops.matmul(a, b, out=jax.ShapeDtypeStruct((3, 5), jnp.float64))
    assert ok.shape == (3, 5)
    with pytest.raises(kernix.CallError, match=r"out= gives output 'c' shape \(3, 4\).*gives shape \(3, 5\)"):
        ops.matmul(a, b, out=jax.ShapeDtypeStruct((3, 4), jnp.float64))


def test_without_signature_out_gives_the_outputs(ops):
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(ops.plain_copy(x, out=jax.ShapeDtypeStruct((4,), jnp.float32)), x)
    with pytest.raises(kernix.CallError, match=r"plain_copy\(\) has no shape signature"):
        ops.plain_copy(x)  # no output shape is guessed


def test_seed_style_ffi_call_still_works(ops):
    a, b = np.random.rand(2, 3), np.random.rand(3, 2)
    c = jax.ffi.ffi_call(ops.targets["matmul"], jax.ShapeDtypeStruct((2, 2), jnp.float64))(a, b)
    np.testing.assert_allclose(c, a @ b)


# -- batching ---------------------------------------------------------------------------

def test_vmap_is_one_kernel_call(ops):
    x, w = np.random.rand(5, 3, 4), np.random.rand(4)
    f = jax.vmap(lambda x: ops.rms_norm(x, w, eps=1e-5))
    np.testing.assert_allclose(f(x), rms_norm_ref(x, w, 1e-5), rtol=1e-12)
    assert kernel_calls(f, x, target=ops.targets["rms_norm"]) == (1, False)


def test_nested_vmap_is_one_kernel_call(ops):
    x, w = np.random.rand(2, 3, 4), np.random.rand(4)
    f = jax.vmap(jax.vmap(lambda x: ops.rms_norm(x, w, eps=1e-5)))
    np.testing.assert_allclose(jax.jit(f)(x), rms_norm_ref(x, w, 1e-5), rtol=1e-12)
    assert kernel_calls(f, x, target=ops.targets["rms_norm"]) == (1, False)


def test_vmap_broadcasts_an_unbatched_batch_input(ops):
    x, c = np.random.rand(6, 2, 3), np.array([2, 3], np.int32)
    f = jax.vmap(ops.scale_rows, in_axes=(0, None))
    np.testing.assert_allclose(f(x, c), x * c[None, :, None])
    assert kernel_calls(f, x, c, target=ops.targets["scale_rows"]) == (1, False)


def test_vmap_falls_back_to_a_loop(ops):
    """A batched input without '...' (w) or an output without '...' cannot be folded."""
    x, w = np.random.rand(3, 4), np.random.rand(5, 4)
    out = jax.vmap(lambda w: ops.rms_norm(x, w, eps=1e-5))(w)
    np.testing.assert_allclose(out, np.stack([rms_norm_ref(x, wi, 1e-5) for wi in w]), rtol=1e-12)
    f = jax.vmap(lambda w: ops.rms_norm(x, w, eps=1e-5))
    assert kernel_calls(f, w, target=ops.targets["rms_norm"]) == (1, True)
    m = np.random.rand(4, 3, 2)
    np.testing.assert_allclose(jax.vmap(ops.row_sums)(m), m.sum(-1))
    np.testing.assert_allclose(jax.vmap(ops.matmul, in_axes=(0, None))(m, np.eye(2)), m)


# -- gradients ---------------------------------------------------------------------------

def test_grad_matches_check_grads(ops):
    x, w = np.random.rand(3, 4) + 0.5, np.random.rand(4) + 0.5
    f = lambda x, w: ops.rms_norm(x, w, eps=1e-3)  # noqa: E731
    check_grads(f, (x, w), order=1, modes=["rev"])
    check_grads(jax.jit(f), (x, w), order=1, modes=["rev"])


def test_grad_against_jax_reference(ops):
    x, w = np.random.rand(2, 3, 4), np.random.rand(4)

    def ref(x, w):
        return jnp.sum(jnp.sin(x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-3) * w))

    got = jax.grad(lambda x, w: jnp.sum(jnp.sin(ops.rms_norm(x, w, eps=1e-3))), argnums=(0, 1))(x, w)
    want = jax.grad(ref, argnums=(0, 1))(x, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-10)


def test_vmap_of_grad(ops):
    x, w = np.random.rand(5, 4), np.random.rand(4)
    g = jax.vmap(jax.grad(lambda x: jnp.sum(ops.rms_norm(x, w, eps=1e-3) ** 2)))(x)
    want = np.stack([jax.grad(lambda x: jnp.sum(ops.rms_norm(x, w, eps=1e-3) ** 2))(xi) for xi in x])
    np.testing.assert_allclose(g, want, rtol=1e-12)
    gw = jax.vmap(jax.grad(lambda w, x: jnp.sum(ops.rms_norm(x, w, eps=1e-3))), in_axes=(None, 0))(w, x)
    want_w = np.stack([jax.grad(lambda w: jnp.sum(ops.rms_norm(xi, w, eps=1e-3)))(w) for xi in x])
    np.testing.assert_allclose(gw, want_w, rtol=1e-12)


def test_integer_input_gets_float0_cotangent(ops):
    x, c = np.random.rand(2, 3), np.array([2, -1], np.int32)
    _, vjp = jax.vjp(ops.scale_rows, x, c)
    dx, dc = vjp(jnp.ones((2, 3)))
    np.testing.assert_allclose(dx, np.broadcast_to(c[:, None], (2, 3)))
    assert dc.dtype == jax.dtypes.float0 and dc.shape == (2,)
    check_grads(lambda x: ops.scale_rows(x, c), (x,), order=1, modes=["rev"])


def test_no_backward_no_grad(ops):
    """Differentiating a kernel no backward declares names the function and how to declare one."""
    with pytest.raises(kernix.CallError, match=r"matmul\(\) cannot be differentiated: no backward kernel "
                       r"declares vjp=matmul\. .*`// @BE matmul_bwd vjp=matmul` \(its inputs: matmul's inputs "
                       r"\(a, b\), then the cotangents of its outputs \(c\).*custom_vjp") as e:
        jax.grad(lambda a: jnp.sum(ops.matmul(a, a)))(np.eye(2))
    assert "shape signature" not in str(e.value)  # matmul has one
    x = jnp.ones(4, jnp.float32)
    # Also a gradient of a jitted function: its program is differentiated after the kernel call returned.
    for differentiate in (jax.grad, lambda f: jax.jit(jax.grad(f)), lambda f: jax.grad(jax.jit(f)),
                          lambda f: lambda x: jax.jvp(f, (x,), (x,))):
        with pytest.raises(kernix.CallError, match=r"plain_copy\(\) cannot be differentiated.*give plain_copy a "
                           r"shape signature \(`// @BE plain_copy \(\.\.\.,n\)->\(\.\.\.,n\)`"):
            differentiate(lambda x: jnp.sum(ops.plain_copy(x, out=jax.ShapeDtypeStruct(x.shape, x.dtype))))(x)
    # A gradient of a gradient differentiates the backward kernel: the error names the kernel it needs.
    x2, w2 = jnp.ones((2, 3), jnp.float32), jnp.ones(3, jnp.float32)
    loss = lambda x: jnp.sum(ops.rms_norm(x, w2, eps=1e-6) ** 2)
    for inner in (loss, jax.jit(loss)):
        with pytest.raises(kernix.CallError, match=r"rms_norm_bwd\(\) cannot be differentiated: no backward kernel "
                           r"declares vjp=rms_norm_bwd\..*`// @BE rms_norm_bwd_bwd vjp=rms_norm_bwd`.*"
                           r"rms_norm_bwd\(\) is the backward kernel of rms_norm"):
            jax.grad(lambda x: jnp.sum(jax.grad(inner)(x)))(x2)
    # Not differentiated through the kernel: no error.
    copied = jax.lax.stop_gradient(ops.plain_copy(x, out=jax.ShapeDtypeStruct(x.shape, x.dtype)))
    assert float(jax.grad(lambda w: jnp.sum(w * copied))(2.0)) == 4.0


def test_every_operation_passes_kernix_check(ops):
    """kernix.check: eager, jit, vmap (one call), grad, export, guarded buffers and drawn inputs, against JAX."""
    rng = np.random.default_rng(0)
    x, w = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(0.5, 1.5, 4)
    v = np.arange(6, dtype=np.float32)
    cases = [
        (ops.rms_norm, lambda x, w, eps: x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w, (x, w),
         {"eps": 1e-3}),
        (ops.scale_rows, lambda x, c: x * c[..., None], (x, np.array([2, -1, 3], np.int32)), {}),
        (ops.matmul, lambda a, b: a @ b, (x, x.T), {}),
        (ops.row_sums, lambda m: m.sum(-1), (x,), {}),
        (ops.head, lambda v, k: v[:k], (v,), {"k": 3, "sizes": {"n": [3, 4, 7]}}),  # the kernel needs n >= k
        (ops.plain_copy, lambda v: v, (v,), {}),
    ]
    for fn, ref, args, attrs in cases:
        report = kernix.check(fn, ref, *args, **attrs, examples=4)
        assert report["buffers"].passed, report
        assert report["grad"].passed == (fn.spec.name in ("rms_norm", "scale_rows")), report


# -- Python signatures and stubs ----------------------------------------------------------

def test_python_signature(ops):
    sig = inspect.signature(ops.rms_norm)
    assert str(sig) == "(x, w, /, *, eps: float, out=None, vmap_method: str = 'sequential')"
    assert str(inspect.signature(ops.head)) == "(x, /, *, k: int, out=None, vmap_method: str = 'sequential')"
    doc = ops.rms_norm.__doc__
    assert "Root-mean-square normalisation" in doc
    assert "(...,d),(d)->(...,d)" in doc and "double eps" in doc and "rms_norm_bwd" in doc


def test_stub_text_is_valid_python(ops):
    from kernix.runtime.stubs import stub_text

    text = stub_text(ops.functions.values(), source="ops_cpu.cpp")
    compile(text, "ops.pyi", "exec")
    assert "def rms_norm(x: ArrayLike, w: ArrayLike, /, *, eps: float | np.floating," in text
    assert "-> tuple[jax.Array, jax.Array]" in text  # rms_norm_bwd
    assert "class Module(Protocol)" in text
    # Inputs take what the call takes (NumPy arrays, as in the tutorial), not only jax.Array:
    # a type checker must accept ops.rms_norm(np.ones((4, 8)), w, eps=1e-6).
    import typing

    ns: dict = {}
    exec(text, ns)
    for fn in (ns["rms_norm"], ns["Module"].rms_norm):
        hints = typing.get_type_hints(fn)
        assert {np.ndarray, jax.Array} <= set(typing.get_args(hints["x"])), hints["x"]
        assert hints["return"] is jax.Array
        # Attributes too: the call takes NumPy scalars (np.float32(1e-6)), as the stub must say.
        assert set(typing.get_args(hints["eps"])) == {float, np.floating}, hints["eps"]


def test_inputs_python_cannot_name_are_renamed_in_signature_and_stub():
    # Inputs are positional-only: the names are only shown, so `in`, `out` and `self` get a `_`.
    from kernix.runtime.stubs import call_signature, stub_text
    from kernix.language.spec import FunctionSpec, Param

    spec = FunctionSpec("f", "f", (Param("in", "arg"), Param("out", "arg"), Param("self", "arg"), Param("y", "ret")))
    assert str(call_signature(spec)) == "(in_, out_, self_, /, *, out, vmap_method: str = 'sequential')"
    text = stub_text([spec])
    compile(text, "f.pyi", "exec")
    assert "def f(self, in_: ArrayLike, out_: ArrayLike, self_: ArrayLike, /, *," in text


def test_symbolic_shapes_are_refused_with_a_reason(ops):
    (b,) = jax.export.symbolic_shape("b")
    with pytest.raises(kernix.CallError, match="symbolic dimensions.*export it with concrete shapes"):
        kernix.export(jax.jit(lambda x: ops.rms_norm(x, np.ones(4), eps=1e-5)), jax.ShapeDtypeStruct((b, 4), np.float64))


@pytest.mark.installed
def test_package_is_typed():
    assert (Path(kernix.__file__).parent / "py.typed").is_file()


# -- sharding ------------------------------------------------------------------------------

SHARDED = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import kernix
    jax.config.update("jax_enable_x64", True)
    assert jax.device_count() == 4, jax.devices()
    ops = kernix.load_cpp_file(sys.argv[1], name=sys.argv[3], build_directory=sys.argv[2])  # built by the test: a hit
    mesh = Mesh(np.array(jax.devices()), ("b",))
    x = np.random.rand(8, 16)
    w = np.random.rand(16)
    xs = jax.device_put(x, NamedSharding(mesh, P("b", None)))
    f = jax.jit(lambda x, w: ops.rms_norm(x, w, eps=1e-5))
    hlo = f.lower(xs, w).compile().as_text()
    assert "all-gather" not in hlo, hlo
    out = f(xs, w)
    np.testing.assert_allclose(out, ops.rms_norm(x, w, eps=1e-5), rtol=1e-12)
    assert out.sharding.spec[0] == "b", out.sharding
    # Each device ran the kernel on its own 2 rows.
    assert "x1,16]" not in hlo and "f64[2,16]" in hlo, hlo
    g = jax.jit(jax.grad(lambda x, w: jnp.sum(ops.rms_norm(x, w, eps=1e-5) ** 2)))(xs, w)
    np.testing.assert_allclose(g, jax.grad(lambda x: jnp.sum(ops.rms_norm(x, w, eps=1e-5) ** 2))(x), rtol=1e-10)
    # Inside jax.shard_map each device calls the kernel on its shard; the outputs vary
    # over the mesh axis as the inputs do, so psum and grad (through the replicated w too) are right.
    ref = ops.rms_norm(x, w, eps=1e-5)
    per_shard = jax.shard_map(lambda x, w: ops.rms_norm(x, w, eps=1e-5), mesh=mesh,
                              in_specs=(P("b", None), P()), out_specs=P("b", None))
    np.testing.assert_allclose(jax.jit(per_shard)(xs, w), ref, rtol=1e-12)
    total = jax.shard_map(lambda x, w: jax.lax.psum(jnp.sum(ops.rms_norm(x, w, eps=1e-5)), "b"), mesh=mesh,
                          in_specs=(P("b", None), P()), out_specs=P())
    np.testing.assert_allclose(jax.jit(total)(xs, w), np.sum(ref), rtol=1e-10)
    loss = lambda f: (lambda x, w: jnp.sum(f(x, w) ** 2))
    want = jax.grad(loss(lambda x, w: ops.rms_norm(x, w, eps=1e-5)), argnums=(0, 1))(x, w)
    got = jax.jit(jax.grad(loss(per_shard), argnums=(0, 1)))(xs, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    x32 = jax.device_put(np.float32(x), NamedSharding(mesh, P("b", None)))
    copy = lambda v: ops.plain_copy(v, out=jax.ShapeDtypeStruct(v.shape, v.dtype))
    copied = jax.shard_map(lambda v: jax.lax.psum(jnp.sum(copy(v)), "b"), mesh=mesh,
                           in_specs=P("b", None), out_specs=P())
    np.testing.assert_allclose(jax.jit(copied)(x32), np.sum(np.float32(x)), rtol=1e-5)
    # jax.export cannot serialise the per-shard layer: a clear error, and the shard_map it suggests exports
    f = jax.jit(lambda x, w: ops.rms_norm(x, w, eps=1e-5))
    try:
        kernix.export(f, xs, w)
    except kernix.KernixError as e:
        assert "jax.shard_map" in str(e), e
    else:
        raise AssertionError("exported the per-shard layer")
    artifact = kernix.deserialize(kernix.export(jax.jit(per_shard), xs, w).serialize())
    np.testing.assert_allclose(artifact(xs, w), ref, rtol=1e-12)
    print("OK")
    """
)


def test_sharded_batch_runs_per_shard(tmp_path, ops_build, ops):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    name, cache = ops_build
    proc = subprocess.run(
        [sys.executable, str(script), str(OPS), str(cache), name],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


# -- on the GPU ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_ops():
    return kernix.load_cuda_file(FIXTURES / "ops" / "ops_cuda.cu", name=unique_name("ops_cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_cuda_operation_checks_vmap_and_grad(cuda_ops):
    gpu = gpus()[0]
    x = jax.device_put(np.random.rand(4, 3, 8), gpu)
    s = jax.device_put(np.random.rand(8) + 0.5, gpu)
    np.testing.assert_allclose(cuda_ops.scale_cols(x, s), np.asarray(x) * np.asarray(s))
    with pytest.raises(kernix.CallError, match="n=5"):
        cuda_ops.scale_cols(x, s[:5])
    f = jax.vmap(cuda_ops.scale_cols, in_axes=(0, None))
    assert kernel_calls(f, x, s, target=cuda_ops.targets["scale_cols"]) == (1, False)
    check_grads(cuda_ops.scale_cols, (x, s), order=1, modes=["rev"])
    g = jax.vmap(jax.grad(lambda s, x: jnp.sum(cuda_ops.scale_cols(x, s) ** 2)), in_axes=(None, 0))(s, x)
    np.testing.assert_allclose(g, 2 * np.sum(np.asarray(x) ** 2, axis=1) * np.asarray(s), rtol=1e-10)
    report = kernix.check(cuda_ops.scale_cols, lambda x, s: x * s, x, s)
    assert report["vmap_one_call"].passed and report["buffers"].passed, report


@pytest.mark.gpu
@pytest.mark.skipif(len(gpus()) < 2, reason="needs 2 GPUs")
def test_cuda_sharded_batch_runs_per_shard(cuda_ops):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(gpus()[:2]), ("b",))
    x, s = np.random.rand(8, 16), np.random.rand(16)
    xs = jax.device_put(x, NamedSharding(mesh, P("b", None)))
    ss = jax.device_put(s, NamedSharding(mesh, P()))
    f = jax.jit(cuda_ops.scale_cols)
    hlo = f.lower(xs, ss).compile().as_text()
    assert "all-gather" not in hlo and "f64[4,16]" in hlo, hlo
    out = f(xs, ss)
    np.testing.assert_allclose(out, x * s)
    assert out.sharding.spec[0] == "b"


# -- NumPy inputs outside jit, and backward kernels without a signature --------------------------

EAGER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import jax, jax.numpy as jnp
    import kernix
    assert not jax.config.jax_enable_x64  # JAX's default
    m = kernix.load_cpp_inline("eager_numpy", r'''
    #include "kernix/common.h"
    #include <cstring>
    // @BE copy_elems
    void copy_elems(const BE::Tensor& x, BE::Tensor& out) { std::memcpy(out.data_ptr(), x.data_ptr(), out.nbytes()); }
    // @BE pick (n),(k):int64->(k)
    void pick(const BE::Tensor& x, const BE::Tensor& idx, BE::Tensor& out) {}
    // @BE sq (n)->(n)
    void sq(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i] * x.data_ptr<float>()[i];
    }
    // @BE sq_bwd vjp=sq
    void sq_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {
      for (int64_t i = 0; i < x.numel(); ++i) dx.data_ptr<float>()[i] = 2 * x.data_ptr<float>()[i] * g.data_ptr<float>()[i];
    }
    ''', build_directory=sys.argv[1])
    a = np.arange(4, dtype=np.float64)  # JAX passes it as float32, with or without jit
    copy = lambda x: m.copy_elems(x, out=jax.ShapeDtypeStruct(np.shape(x), jnp.float32))
    eager, jitted = copy(a), jax.jit(copy)(a)
    assert eager.dtype == jitted.dtype == jnp.float32, (eager.dtype, jitted.dtype)
    np.testing.assert_array_equal(eager, [0, 1, 2, 3])
    for call in (m.pick, jax.jit(m.pick)):
        try:
            call(np.ones(3, np.float32), np.array([1, 2], np.int64))
        except kernix.CallError as e:
            assert "must be int64" in str(e) and "jax_enable_x64" in str(e), e
        else:
            raise AssertionError("an int64 input became int32 and was passed")
    # one input, a backward without a signature: one cotangent, not a tuple of one
    np.testing.assert_allclose(jax.grad(lambda v: m.sq(v).sum())(np.arange(3.0)), [0, 2, 4])
    print("OK")
    """
)


def test_numpy_inputs_outside_jit_are_passed_as_jax_passes_them(tmp_path):
    script = tmp_path / "eager.py"
    script.write_text(EAGER)
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "cache")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
