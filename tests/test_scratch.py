"""Scratch memory (``BE::Scratch`` and ``scratch=EXPR``): XLA allocates as many
bytes as the expression says per problem, times the batch under ``...``
dimensions and jax.vmap; the caller never sees it; size errors are caught at
inference and at the call; on the GPU too."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix import infer_file
from kernix.language.sizes import evaluate, parse_size, size_names

from helpers import first_gpu, infer_cuda_text, unique_name

CPP = textwrap.dedent(
    """\
    #include "kernix/common.h"

    // Prefix sums accumulated in double precision in the scratch buffer, which
    // must hold exactly rows * (n doubles + pad bytes).
    // @BE cumsum (...,n)->(...,n) scratch=n*8+pad
    void cumsum(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& work, int64_t pad) {
      const int64_t n = x.shape(-1), rows = x.numel() / n;
      BE_CHECK(work.nbytes() == rows * (n * 8 + pad)) << "scratch has " << work.nbytes() << " bytes";
      double* acc = work.data_ptr<double>(0, rows * n);
      const float* in = x.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) acc[r * n + i] = (s += in[r * n + i]);
      }
      for (int64_t i = 0; i < rows * n; ++i) y.data_ptr<float>()[i] = static_cast<float>(acc[i]);
    }

    // No shape signature: the size names attributes only.
    // @BE fill scratch=max(bytes,1)
    void fill(BE::Tensor& y, BE::Scratch work, int64_t bytes) {
      BE_CHECK(work.nbytes() == (bytes > 1 ? bytes : 1)) << "scratch has " << work.nbytes() << " bytes";
      y.data_ptr<float>()[0] = static_cast<float>(work.nbytes());
    }

    // @BE too_big (n)->(n) scratch=n*2
    void too_big(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& work) { work.data_ptr<double>(0, x.shape(0)); }
    """
)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("scratch"), CPP, build_directory=tmp_path_factory.mktemp("b"))


def test_spec(mod):
    spec = mod.cumsum.spec
    assert spec.arg_spec == ("arg", "ret", "scratch", "attr.pad:int64")
    assert spec.scratch == "n*8+pad"
    assert [p.name for p in spec.results] == ["y", "work"] and [p.name for p in spec.outputs] == ["y"]
    assert spec.to_json()["scratch"] == "n*8+pad"
    assert kernix.FunctionSpec.from_json(spec.to_json()) == spec


def test_values_and_size(mod):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5)), jnp.float32)
    want = np.cumsum(np.asarray(x, np.float64), axis=-1)
    for fn in (mod.cumsum, jax.jit(mod.cumsum, static_argnames="pad")):
        y = fn(x, pad=3)
        assert not isinstance(y, tuple)  # the scratch buffer is the kernel's own
        np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_allclose(mod.cumsum(x[0], pad=0), want[0], rtol=1e-6)


def test_vmap_sizes_it_for_the_batch(mod):
    x = jnp.ones((2, 3, 4), jnp.float32)
    got = jax.vmap(lambda r: mod.cumsum(r, pad=1))(x)  # one call, rows = 2 * 3
    np.testing.assert_array_equal(got, np.tile(np.arange(1, 5), (2, 3, 1)))
    got = jax.jit(jax.vmap(jax.vmap(lambda r: mod.cumsum(r, pad=2))))(x)
    np.testing.assert_array_equal(got, np.tile(np.arange(1, 5), (2, 3, 1)))


def test_without_signature(mod):
    out = jax.ShapeDtypeStruct((1,), jnp.float32)
    assert float(mod.fill(bytes=100, out=out)[0]) == 100
    assert float(mod.fill(bytes=0, out=out)[0]) == 1


def test_negative_size_is_refused(mod):
    with pytest.raises(kernix.CallError, match=r"cumsum\(\): scratch size 'n\*8\+pad' is -2 bytes"):
        mod.cumsum(jnp.ones((1, 1), jnp.float32), pad=-10)


def test_a_kernel_that_asks_for_more_than_it_declared_is_stopped(mod):
    with pytest.raises(Exception, match=r"BE::Scratch::data_ptr: 4 elements of 8 bytes at offset 0 do not fit the 8 "
                                        r"bytes of scratch 'work'"):
        jax.block_until_ready(mod.too_big(jnp.ones(4, jnp.float32)))


def test_export(mod):
    exp = kernix.export(jax.jit(lambda x: mod.cumsum(x, pad=4)), jax.ShapeDtypeStruct((2, 6), jnp.float32))
    again = kernix.deserialize(exp.serialize())
    np.testing.assert_array_equal(again.call(jnp.ones((2, 6), jnp.float32)), np.tile(np.arange(1, 7), (2, 1)))


def test_size_expressions():
    assert size_names("max(n,k)*4+m//2-(p%3)/1") == ["n", "k", "m", "p"]
    assert evaluate("max(n,k)*4+m//2", {"n": 3, "k": 5, "m": 7}) == 23
    assert evaluate("n/2", {"n": 7}) == 3  # integer division
    for bad in ("n**2", "f(n)", "n*", "'a'", "-n", "n if k else m", "max(n)", "1.5*n"):
        with pytest.raises(ValueError, match="size expression|not an expression|two or more"):
            parse_size(bad)
    with pytest.raises(kernix.CallError, match="divides by zero"):
        evaluate("n//k", {"n": 1, "k": 0})


REJECTED = textwrap.dedent(
    """\
    #include "kernix/common.h"
    // @BE no_size (n)->(n)
    void no_size(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& s) {}
    // @BE no_param (n)->(n) scratch=n*4
    void no_param(const BE::Tensor& x, BE::Tensor& y) {}
    // @BE unknown_name (n)->(n) scratch=m*4
    void unknown_name(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& s) {}
    // @BE dims_without_signature scratch=n*4
    void dims_without_signature(BE::Tensor& y, BE::Scratch& s) {}
    // @BE bad_expression (n)->(n) scratch=n**2
    void bad_expression(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& s) {}
    // @BE two_scratches (n)->(n) scratch=n
    void two_scratches(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& a, BE::Scratch& b) {}
    // @BE float_attr (n)->(n) scratch=n*f
    void float_attr(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& s, float f) {}
    """
)


def test_rejected(tmp_path):
    path = tmp_path / "rejected.cpp"
    path.write_text(REJECTED)
    result = infer_file(str(path))
    assert result.functions == ()
    messages = {e.function: e.message for e in result.errors}
    assert ("'no_size' takes scratch memory ('s', `BE::Scratch &`), but its annotation does not say how many bytes: "
            "add `scratch=EXPR` to it, e.g. `// @BE no_size (...,n)->(...,n) scratch=n*4`") in messages["no_size"]
    assert "scratch=n*4 but 'no_param' takes no scratch memory: add a `BE::Scratch& scratch` parameter" in messages[
        "no_param"]
    assert "scratch=m*4 names 'm', which is no dimension of the shape signature's inputs and no integer attribute; " \
           "it can name: n" in messages["unknown_name"]
    assert "(without a shape signature only integer attributes can be named)" in messages["dims_without_signature"]
    assert "'n ** 2' is not allowed in a size expression" in messages["bad_expression"]
    assert "takes more than one scratch parameter ('a', 'b'); take one (one scratch buffer can hold several " \
           "arrays)" in messages["two_scratches"]
    assert "scratch=n*f names 'f'" in messages["float_attr"]


def test_the_suggested_fix_works(tmp_path):
    fixed = "#include \"kernix/common.h\"\n// @BE no_size (...,n)->(...,n) scratch=n*4\n" \
            "void no_size(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& s) {}\n"
    path = tmp_path / "fixed.cpp"
    path.write_text(fixed)
    result = infer_file(str(path))
    assert result.errors == () and result.functions[0].scratch == "n*4"


CUDA = textwrap.dedent(
    """\
    #include "kernix/common.h"
    __global__ void square_k(const float* x, float* tmp, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) { tmp[i] = x[i] * x[i]; y[i] = tmp[i] + 1; }
    }
    // @BE square_plus_one (...,n)->(...,n) scratch=n*4
    void square_plus_one(const BE::Tensor& x, BE::Tensor& y, BE::Scratch& tmp, cudaStream_t s) {
      BE_CHECK(tmp.nbytes() == x.numel() * 4) << "scratch has " << tmp.nbytes() << " bytes";
      square_k<<<(unsigned)((x.numel() + 255) / 256), 256, 0, s>>>(
          x.data_ptr<float>(), tmp.data_ptr<float>(0, x.numel()), y.data_ptr<float>(), x.numel());
      BE_CHECK_KERNEL_LAUNCH();
    }
    """
)


def test_cuda_source_infers(tmp_path):
    result = infer_cuda_text(tmp_path, "scratch.cu", CUDA)
    assert result.errors == () and result.functions[0].arg_spec == ("arg", "ret", "scratch", "stream")


@pytest.mark.gpu
@pytest.mark.skipif(first_gpu() is None, reason="needs an NVIDIA GPU")
def test_cuda_scratch():
    mod = kernix.load_cuda_inline(unique_name("scratch_cuda"), CUDA)
    with jax.default_device(first_gpu()):
        x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
        want = np.arange(12).reshape(3, 4) ** 2 + 1
        np.testing.assert_array_equal(mod.square_plus_one(x), want)
        np.testing.assert_array_equal(jax.jit(jax.vmap(mod.square_plus_one))(x), want)
