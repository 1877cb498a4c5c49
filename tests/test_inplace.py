"""Tensors updated in place (``BE::InOut``, the ``inout`` token): the callable
returns the new value; without donation the caller's array is never
modified; under ``jax.jit`` with donation XLA aliases the buffers (the
compiled program has no copy); correct under jax.vmap, jax.grad and
kernix.export; the CUDA side on a GPU."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix import infer_file

from helpers import first_gpu, handler_units_with_ffi_h, infer_cuda_text, unique_name

CPP = textwrap.dedent(
    """\
    #include "kernix/common.h"

    // y += a * x, in place.
    // @BE axpy (...,n),(...,n)->(...,n)
    void axpy(BE::InOut& y, const BE::Tensor& x, float a) {
      float* out = y.data_ptr<float>();
      const float* in = x.data_ptr<float>();
      for (int64_t i = 0; i < y.numel(); ++i) out[i] += a * in[i];
    }

    // @BE axpy_bwd (...,n),(...,n),(...,n)->(...,n),(...,n) vjp=axpy
    void axpy_bwd(const BE::Tensor& y, const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& gy, BE::Tensor& gx,
                  float a) {
      for (int64_t i = 0; i < y.numel(); ++i) {
        gy.data_ptr<float>()[i] = g.data_ptr<float>()[i];
        gx.data_ptr<float>()[i] = a * g.data_ptr<float>()[i];
      }
    }

    // No shape signature and no other output: out= is not needed.
    // @BE increment
    void increment(BE::InOutOf<int32_t>& counts) {
      for (int64_t i = 0; i < counts.numel(); ++i) counts.data_ptr()[i] += 1;
    }

    // In place and a new output; a BE::Tensor declared in place by its token.
    // @BE clip_and_count inout ret attr.limit:float32 (n)->(n),():int32
    void clip_and_count(BE::Tensor& x, BE::Tensor& clipped, float limit) {
      int32_t n = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        float& v = x.data_ptr<float>()[i];
        if (v > limit) { v = limit; ++n; }
      }
      *clipped.data_ptr<int32_t>() = n;
    }
    """
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("b")


@pytest.fixture(scope="module")
def mod(cache):
    return kernix.load_cpp_inline(unique_name("inplace"), CPP, build_directory=cache)


def test_specs(mod):
    assert mod.axpy.spec.arg_spec == ("inout", "arg", "attr.a:float32")
    assert [p.name for p in mod.axpy.spec.inputs] == ["y", "x"]
    assert [p.name for p in mod.axpy.spec.outputs] == ["y"]
    assert mod.increment.spec.arg_spec == ("inout",)
    assert mod.increment.spec.params[0].dtype == "int32"
    assert mod.clip_and_count.spec.arg_spec == ("inout", "ret", "attr.limit:float32")


def test_returns_the_new_value_and_leaves_the_caller_s_array(mod):
    y = jnp.ones(4, jnp.float32)
    x = jnp.arange(4, dtype=jnp.float32)
    for call in (lambda y, x: mod.axpy(y, x, a=2.0), jax.jit(lambda y, x: mod.axpy(y, x, a=2.0))):
        np.testing.assert_array_equal(call(y, x), [1, 3, 5, 7])
        np.testing.assert_array_equal(y, [1, 1, 1, 1])  # not donated: never modified
    counts = jnp.zeros(3, jnp.int32)
    np.testing.assert_array_equal(mod.increment(counts), [1, 1, 1])
    np.testing.assert_array_equal(jax.jit(mod.increment)(counts), [1, 1, 1])
    np.testing.assert_array_equal(counts, [0, 0, 0])
    x = jnp.asarray([0.5, 3.0, 9.0], jnp.float32)
    clipped, n = mod.clip_and_count(x, limit=2.0)
    np.testing.assert_array_equal(clipped, [0.5, 2.0, 2.0])
    assert int(n) == 2
    np.testing.assert_array_equal(x, [0.5, 3.0, 9.0])


def test_donation_updates_in_place_without_a_copy(mod):
    f = jax.jit(lambda y, x: mod.axpy(y, x, a=2.0), donate_argnums=0)
    y = jnp.ones(1024, jnp.float32)
    x = jnp.ones(1024, jnp.float32)
    hlo = f.lower(y, x).compile().as_text()
    assert "output_to_operand_aliasing={{}: (0, {})}" in hlo  # the custom call writes its operand
    assert "input_output_alias={ {}: (0, {}" in hlo  # ... which is the caller's donated buffer
    assert " copy(" not in hlo and "copy-start" not in hlo
    pointer = y.unsafe_buffer_pointer()
    out = f(y, x)
    assert y.is_deleted()
    assert out.unsafe_buffer_pointer() == pointer  # the same memory, updated
    np.testing.assert_array_equal(out, np.full(1024, 3.0))


def test_without_donation_xla_copies_once(mod):
    """A program that still needs the input after the update gets it intact."""
    f = jax.jit(lambda y, x: (mod.axpy(y, x, a=1.0), y * 10))
    y = jnp.ones(3, jnp.float32)
    new, old = f(y, jnp.ones(3, jnp.float32))
    np.testing.assert_array_equal(new, [2, 2, 2])
    np.testing.assert_array_equal(old, [10, 10, 10])


def test_vmap(mod):
    y = jnp.ones((3, 4), jnp.float32)
    x = jnp.asarray(np.arange(12).reshape(3, 4), jnp.float32)
    np.testing.assert_array_equal(jax.vmap(lambda y, x: mod.axpy(y, x, a=1.0))(y, x), 1 + np.arange(12).reshape(3, 4))
    np.testing.assert_array_equal(jax.vmap(lambda y: mod.axpy(y, x[0], a=1.0))(y), 1 + np.tile(np.arange(4), (3, 1)))
    np.testing.assert_array_equal(jax.vmap(mod.increment)(jnp.zeros((2, 3), jnp.int32)), np.ones((2, 3)))
    np.testing.assert_array_equal(y, np.ones((3, 4)))


def test_grad(mod):
    y = jnp.ones(4, jnp.float32)
    x = jnp.arange(4, dtype=jnp.float32)
    gy, gx = jax.grad(lambda y, x: jnp.sum(mod.axpy(y, x, a=3.0) ** 2), argnums=(0, 1))(y, x)
    new = 1 + 3 * np.arange(4)
    np.testing.assert_allclose(gy, 2 * new)
    np.testing.assert_allclose(gx, 3 * 2 * new)
    gy = jax.jit(jax.grad(lambda y: jnp.sum(mod.axpy(y, x, a=3.0))), donate_argnums=0)(jnp.ones(4, jnp.float32))
    np.testing.assert_allclose(gy, np.ones(4))


def test_export(mod):
    exp = kernix.export(jax.jit(lambda y, x: mod.axpy(y, x, a=0.5), donate_argnums=0),
                        jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((2, 3), jnp.float32))
    again = kernix.deserialize(exp.serialize())
    y = jnp.zeros((2, 3), jnp.float32)
    np.testing.assert_array_equal(again.call(y, jnp.full((2, 3), 4.0, jnp.float32)), np.full((2, 3), 2.0))


def test_in_place_functions_get_c_api_handlers_and_no_ffi_h_unit(mod, cache):
    """Was: every function with an in-place tensor got an ffi.h-bound handler, in a unit that costs
    g++ about 1 s to parse ffi.h and 0.15 s a handler."""
    build = cache / "build" / mod.name
    assert [p.name for p in build.glob("handlers_*.cpp")] == ["handlers_0.cpp"]
    assert handler_units_with_ffi_h(build) == []
    assert '"clip_and_count"' in (build / "handlers_0.cpp").read_text()


def _direct(mod, name, out, *args, **attrs):
    """Straight through jax.ffi.ffi_call, without the aliasing the callable asks XLA for."""
    return jax.block_until_ready(jax.ffi.ffi_call(mod.targets[name], out)(*args, **attrs))


def test_an_in_place_tensor_xla_did_not_alias_is_refused_naming_function_and_parameter(mod):
    counts = jnp.zeros(3, jnp.int32)
    with pytest.raises(Exception, match=r"kernix: increment: .*in-place parameter 'counts' are different buffers"):
        _direct(mod, "increment", jax.ShapeDtypeStruct((3,), jnp.int32), counts)
    x = jnp.ones(2, jnp.float32)
    with pytest.raises(Exception, match=r"kernix: clip_and_count: .*in-place parameter 'x' are different buffers"):
        _direct(mod, "clip_and_count", (jax.ShapeDtypeStruct((2,), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)),
                x, limit=np.float32(0.5))
    # A wrong attribute is found first, as ffi.h's handlers decode every parameter before that check.
    with pytest.raises(Exception, match=r"clip_and_count: attribute 'limit' .*F64.*expected F32"):
        _direct(mod, "clip_and_count", (jax.ShapeDtypeStruct((2,), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)),
                x, limit=np.float64(0.25))
    # An empty buffer has nothing to read: two of them are no error.
    assert _direct(mod, "increment", jax.ShapeDtypeStruct((0,), jnp.int32), jnp.zeros(0, jnp.int32)).shape == (0,)
    # Aliased, under jax.jit (what the callable asks for), the update happens.
    f = jax.jit(lambda c: jax.ffi.ffi_call(mod.targets["increment"], jax.ShapeDtypeStruct((3,), jnp.int32),
                                           input_output_aliases={0: 0})(c))
    np.testing.assert_array_equal(f(counts), [1, 1, 1])


def test_an_in_place_tensor_counts_as_an_operand_and_a_result(mod):
    y = jnp.ones(3, jnp.float32)
    with pytest.raises(Exception, match=r"kernix: axpy: wrong number of operands: expected 2 but got 1"):
        _direct(mod, "axpy", jax.ShapeDtypeStruct((3,), jnp.float32), y, a=np.float32(1.0))
    with pytest.raises(Exception, match=r"kernix: axpy: wrong number of results: expected 1 but got 2"):
        _direct(mod, "axpy", (jax.ShapeDtypeStruct((3,), jnp.float32),) * 2, y, y, a=np.float32(2.0))


def test_out_lists_only_the_new_outputs(mod):
    x = jnp.ones(2, jnp.float32)
    with pytest.raises(kernix.CallError, match=r"out= describes 2 outputs, the function has 1 \(and 1 updated in "
                                               r"place, which out= does not list\)"):
        mod.clip_and_count(x, limit=1.0, out=[jax.ShapeDtypeStruct((2,), jnp.float32)] * 2)
    clipped, n = mod.clip_and_count(x, limit=0.5, out=jax.ShapeDtypeStruct((), jnp.int32))
    assert int(n) == 2


REJECTED = textwrap.dedent(
    """\
    #include "kernix/common.h"
    // @BE const_inout
    void const_inout(const BE::InOut& y) {}
    // @BE group_differs (n)->(m)
    void group_differs(BE::InOut& y, int64_t m) {}
    // @BE wrong_token inout arg
    void wrong_token(const BE::Tensor& a, BE::Tensor& b) {}
    """
)


def test_rejected(tmp_path):
    path = tmp_path / "rejected.cpp"
    path.write_text(REJECTED)
    result = infer_file(str(path))
    assert result.functions == ()
    messages = {e.function: e.message for e in result.errors}
    assert "a tensor updated in place is written, so it cannot be const; take a `BE::InOut&`" in messages[
        "const_inout"]
    assert "'y' is updated in place, so its output group must be its input group (n), not (m)" in messages[
        "group_differs"]
    assert "parameter 1 ('a', type 'const BE::Tensor &') is 'arg', not 'inout'" in messages["wrong_token"]


CUDA = textwrap.dedent(
    """\
    #include "kernix/common.h"
    __global__ void axpy_k(float* y, const float* x, float a, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] += a * x[i];
    }
    // @BE axpy (...,n),(...,n)->(...,n)
    void axpy(BE::InOut& y, const BE::Tensor& x, float a, cudaStream_t s) {
      axpy_k<<<(unsigned)((y.numel() + 255) / 256), 256, 0, s>>>(y.data_ptr<float>(), x.data_ptr<float>(), a,
                                                                  y.numel());
      BE_CHECK_KERNEL_LAUNCH();
    }
    """
)


def test_cuda_source_infers(tmp_path):
    result = infer_cuda_text(tmp_path, "axpy.cu", CUDA)
    assert result.errors == () and result.functions[0].arg_spec == ("inout", "arg", "attr.a:float32", "stream")


@pytest.mark.gpu
@pytest.mark.skipif(first_gpu() is None, reason="needs an NVIDIA GPU")
def test_cuda_in_place_with_donation():
    mod = kernix.load_cuda_inline(unique_name("inplace_cuda"), CUDA)
    gpu = first_gpu()
    f = jax.jit(lambda y, x: mod.axpy(y, x, a=2.0), donate_argnums=0)
    y = jax.device_put(jnp.ones(1 << 20, jnp.float32), gpu)
    x = jax.device_put(jnp.ones(1 << 20, jnp.float32), gpu)
    hlo = f.lower(y, x).compile().as_text()
    assert "output_to_operand_aliasing" in hlo and " copy(" not in hlo
    pointer = y.unsafe_buffer_pointer()
    out = f(y, x)
    assert y.is_deleted() and out.unsafe_buffer_pointer() == pointer
    np.testing.assert_array_equal(np.asarray(out)[:4], [3, 3, 3, 3])
    kept = jax.device_put(jnp.ones(8, jnp.float32), gpu)
    np.testing.assert_array_equal(mod.axpy(kept, kept, a=1.0), np.full(8, 2.0))
    np.testing.assert_array_equal(kept, np.ones(8))


def test_stubs(mod):
    from kernix.runtime.stubs import out_required, stub_text

    assert not out_required(mod.increment.spec) and not out_required(mod.axpy.spec)
    text = stub_text([mod.increment.spec, mod.clip_and_count.spec])
    assert "def increment(counts: ArrayLike, /, *, out: _Out | None = None" in text
    assert "def clip_and_count(x: ArrayLike, /, *, limit: float | np.floating, out: _Out | None = None" in text
    assert "Updated in place (its new value is returned)" in mod.axpy.__doc__
