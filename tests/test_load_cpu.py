"""End to end on the CPU: real C++ compiled, registered, called from JAX."""

from __future__ import annotations

import platform

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix

jax.config.update("jax_enable_x64", True)  # float64/int64 arrays stay 64-bit
from kernix.backend import toolchain

from helpers import FIXTURES, unique_name

CPU_OPS = FIXTURES / "build" / "cpu_ops.cpp"


def like(x):
    """``out=`` for an output shaped and typed like ``x`` (functions without a shape signature need one)."""
    return jax.ShapeDtypeStruct(jnp.shape(x), x.dtype)


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """One module with many functions, compiled once for this file."""
    return kernix.load_cpp_file(
        CPU_OPS,
        name=unique_name("cpu_ops"),
        extra_include_paths=toolchain.cuda_include_dirs(),
        build_directory=tmp_path_factory.mktemp("cache"),
    )


@pytest.mark.installed
def test_module_object(ops):
    assert ops.platform == "cpu"
    assert ops.path.is_file() and ops.path.suffix == ".so"
    assert ops.specs["scale_by"] == ("arg", "ret", "attr.scale_factor:float32", "stream")
    assert ops.targets["vector_add"] == f"{ops.name}.vector_add"
    assert set(kernix.list_registered_targets()) >= set(ops.targets.values())
    assert "vector_add" in dir(ops) and ops["split"] is ops.split
    with pytest.raises(AttributeError, match="exports"):
        ops.no_such_function  # noqa: B018


@pytest.mark.installed
def test_vector_add_jit_and_vmap(ops):
    a = np.arange(10, dtype=np.float32)
    b = np.linspace(0, 1, 10, dtype=np.float32)
    add = lambda a, b: ops.vector_add(a, b, out=like(a))  # noqa: E731
    np.testing.assert_array_equal(jax.jit(add)(a, b), a + b)
    batch_a, batch_b = np.stack([a, 2 * a, 3 * a]), np.stack([b, b, -b])
    np.testing.assert_array_equal(jax.vmap(add)(batch_a, batch_b), batch_a + batch_b)


def test_seed_style_ffi_call(ops):
    """The target is usable through jax.ffi.ffi_call directly, as the seeds do."""
    a = jnp.ones(16, jnp.float32)
    b = jnp.full(16, 2.0, jnp.float32)
    out = jax.ffi.ffi_call(ops.targets["vector_add"], jax.ShapeDtypeStruct(a.shape, a.dtype))(a, b)
    np.testing.assert_array_equal(out, np.full(16, 3.0, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scale_by_python_float_attr(ops, dtype):
    """A Python float reaches a float32 attribute (coerced); stream is 0 on the CPU."""
    x = np.arange(5, dtype=dtype)
    out = jax.jit(lambda x: ops.scale_by(x, scale_factor=2.5, out=jax.ShapeDtypeStruct(x.shape, x.dtype)))(x)
    np.testing.assert_allclose(out, x * 2.5)
    assert out.dtype == dtype


@pytest.mark.skipif(not toolchain.cuda_include_dirs(), reason="needs cuda_fp16.h for __half attributes")
def test_every_attribute_dtype_round_trips(ops):
    values = dict(
        b=True, i8=-128, i16=-32768, i32=-(2**31), i64=-(2**53), u8=255, u16=65535,
        u32=2**32 - 1, u64=2**53, f16=1.5, bf16=-2.5, f32=0.1, f64=1 / 3,
    )
    out = ops.all_attrs(jnp.zeros(1), out=jax.ShapeDtypeStruct((13,), jnp.float64), **values)
    expected = [float(v) for v in values.values()]
    expected[11] = float(np.float32(0.1))
    np.testing.assert_array_equal(np.asarray(out), np.array(expected))


def test_64_bit_attributes_are_exact(ops):
    out = ops.wide_ints(jnp.zeros(1), lo=-(2**63), hi=2**64 - 1, out=jax.ShapeDtypeStruct((2,), jnp.int64))
    assert int(out[0]) == -(2**63)
    assert int(np.asarray(out).view(np.uint64)[1]) == 2**64 - 1


def test_enum_attribute(ops):
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_array_equal(ops.with_mode(x, mode=1, out=like(x)), x + 1)
    np.testing.assert_array_equal(ops.with_mode(x, mode=2, out=like(x)), x * 2)


@pytest.mark.parametrize(
    "shape,dtype",
    [((2, 3, 4), np.float32), ((7,), np.int16), ((5, 1), np.float64), ((3, 2), ml_dtypes.bfloat16), ((4,), np.bool_)],
)
def test_tensor_accessors(ops, shape, dtype):
    x = jnp.zeros(shape, dtype)
    out = np.asarray(ops.describe(x, out=jax.ShapeDtypeStruct((17,), jnp.int64)))
    nd = len(shape)
    itemsize = np.dtype(dtype).itemsize
    strides = [int(np.prod(shape[i + 1:])) for i in range(nd)]
    pad = lambda xs: list(xs) + [-1] * (3 - len(xs))  # noqa: E731
    xla_codes = {np.float32: 11, np.int16: 3, np.float64: 12, ml_dtypes.bfloat16: 16, np.bool_: 1}
    name = np.dtype(dtype).name
    expected = [nd, *pad(shape), *pad(shape), *pad(strides), int(np.prod(shape)),
                int(np.prod(shape)) * itemsize, itemsize, xla_codes[dtype], shape[-1], 1, len(name)]
    assert out.tolist() == expected


def test_two_outputs_and_prefix_names(ops):
    x = jnp.arange(6, dtype=jnp.float32)
    lo, hi = ops.split(x, out=[jax.ShapeDtypeStruct((2,), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)])
    np.testing.assert_array_equal(lo, [0, 1])
    np.testing.assert_array_equal(hi, [2, 3, 4, 5])
    np.testing.assert_array_equal(ops.split_impl(x, out=like(x)), -x)


def test_one_output_is_an_array_however_out_is_given(ops):
    """Was: a one-output function without a shape signature returned a 1-tuple for
    ``out=[struct]`` (an array with a signature, and as its stub declares)."""
    x = jnp.arange(4, dtype=jnp.float32)
    struct = jax.ShapeDtypeStruct((4,), jnp.float32)
    for out in (struct, [struct], (struct,)):
        y = ops.typed_square(x, out=out)
        assert isinstance(y, jax.Array), out
        np.testing.assert_array_equal(y, x * x)


def test_signature_and_stub_require_out_where_the_call_does(ops):
    """Was: every signature and stub had ``out=None``, though a call without a shape
    signature and with two outputs fails without ``out=``."""
    import inspect

    from kernix.runtime.stubs import stub_text

    assert str(inspect.signature(ops.split)) == "(x, /, *, out, vmap_method: str = 'sequential')"
    with pytest.raises(kernix.CallError, match=r"(?s)split\(\) has no shape signature.*out=\[jax.ShapeDtypeStruct"):
        ops.split(jnp.arange(6, dtype=jnp.float32))
    assert "split(x, /, *, out, vmap_method='sequential')" in ops.split.__doc__
    # One output without a shape signature: out= is required too (no shape is guessed).
    assert str(inspect.signature(ops.typed_square)) == "(x, /, *, out, vmap_method: str = 'sequential')"
    with pytest.raises(kernix.CallError, match=r"typed_square\(\) has no shape signature"):
        ops.typed_square(jnp.arange(4, dtype=jnp.float32))
    text = stub_text([ops.split.spec, ops.typed_square.spec])
    assert ("def split(x: ArrayLike, /, *, out: Sequence[jax.ShapeDtypeStruct], vmap_method: str = 'sequential')"
            " -> tuple[jax.Array, jax.Array]:") in text
    assert "def typed_square(x: ArrayLike, /, *, out: _Out, vmap_method" in text


TYPED_POINTERS = """
#include "kernix/common.h"
// @BE twice
void twice(const BE::Tensor& x, BE::Tensor& y) {
  const double* a = x.data_ptr<double>();
  double* o = y.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = 2 * a[i];
}
// @BE bytes
void bytes(const BE::Tensor& x, BE::Tensor& y) {  // void and the untyped pointer: any dtype
  const unsigned char* a = static_cast<const unsigned char*>(x.data_ptr<void>());
  unsigned char* o = static_cast<unsigned char*>(y.data_ptr());
  for (int64_t i = 0; i < x.nbytes(); ++i) o[i] = a[i];
}
"""


def test_a_typed_pointer_of_the_wrong_size_is_an_error_not_an_overrun(tmp_path):
    """Was: x.data_ptr<double>() of a float32 tensor read and wrote past the buffers."""
    mod = kernix.load_cpp_inline(unique_name("typed_ptrs"), TYPED_POINTERS, build_directory=tmp_path)
    x = jnp.arange(3, dtype=jnp.float32)
    with pytest.raises(Exception, match=r"kernix: twice: BE::Tensor::data_ptr<double>\(\): parameter 'x' is "
                                        r"float32 \(shape \[3\]\), but double views float64 elements \(8 bytes, not "
                                        r"4: reading numel\(\) of them would run past the buffer\)\. Give 'x' dtype "
                                        r"float64, or read it as data_ptr<float>\(\)"):
        jax.block_until_ready(mod.twice(x, out=like(x)))
    with pytest.raises(Exception, match=r"parameter 'x' is int16 \(shape \[2, 3\]\)"):
        i16 = jnp.ones((2, 3), jnp.int16)
        jax.block_until_ready(mod.twice(i16, out=like(i16)))
    f64 = jnp.arange(3, dtype=jnp.float64)
    np.testing.assert_array_equal(mod.twice(f64, out=like(f64)), [0, 2, 4])
    np.testing.assert_array_equal(mod.bytes(x, out=like(x)), x)
    z = jnp.array([1 + 2j, 3 - 4j], jnp.complex64)
    np.testing.assert_array_equal(mod.bytes(z, out=like(z)), z)


def test_typed_ffi_buffer(ops):
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(ops.typed_square(x, out=like(x)), x * x)
    with pytest.raises(kernix.CallError, match="'x' must be float32"):
        ops.typed_square(x.astype(jnp.float64), out=like(x))
    with pytest.raises(kernix.CallError, match="rank 1"):
        ops.typed_square(x.reshape(2, 2), out=like(x))


def test_failed_check_raises_with_message(ops):
    with pytest.raises(Exception, match="a has 3 elements, b has 4") as info:
        ops.vector_add(jnp.zeros(3, jnp.float32), jnp.zeros(4, jnp.float32),
                       out=jax.ShapeDtypeStruct((3,), jnp.float32)).block_until_ready()
    assert "cpu_ops.cpp" in str(info.value)
    # The process and the backend keep working.
    ones = jnp.ones(2, jnp.float32)
    np.testing.assert_array_equal(ops.vector_add(ones, ones, out=like(ones)), [2.0, 2.0])


def test_call_errors_name_function_and_parameter(ops):
    x = jnp.ones(3, jnp.float32)
    with pytest.raises(kernix.CallError, match=r"vector_add\(\) takes 2 input array\(s\) \(a, b\), got 1"):
        ops.vector_add(x)
    with pytest.raises(kernix.CallError, match="missing attribute.*'scale_factor' \\(float32\\)"):
        ops.scale_by(x)
    with pytest.raises(kernix.CallError, match="unknown attribute.*'scale'"):
        ops.scale_by(x, scale=1.0, scale_factor=1.0)
    with pytest.raises(kernix.CallError, match="'mode' is int16"):
        ops.with_mode(x, mode=1.5)
    with pytest.raises(kernix.CallError, match="does not fit in int16"):
        ops.with_mode(x, mode=70000)
    # float attributes are range-checked too (no silent inf), and every attribute must be a scalar
    with pytest.raises(kernix.CallError, match="'scale_factor' is float32.*1e\\+300 does not fit in float32"):
        ops.scale_by(x, scale_factor=1e300)
    with pytest.raises(kernix.CallError, match="expected a scalar, got an array of shape \\(1,\\)"):
        ops.scale_by(x, scale_factor=np.array([2.0]))


def test_same_content_again_is_a_noop(ops):
    again = kernix.load_cpp_file(
        CPU_OPS, name=ops.name, extra_include_paths=toolchain.cuda_include_dirs(),
        build_directory=ops.path.parents[3],
    )
    assert again.path == ops.path
    ones = jnp.ones(2, jnp.float32)
    np.testing.assert_array_equal(again.vector_add(ones, ones, out=like(ones)), [2.0, 2.0])


def test_a_module_under_a_taken_prefix_is_versioned_only_where_taken(ops, tmp_path):
    # A module whose second function has other code under a registered target: that
    # one is registered under its content-versioned name, the first (a name still
    # free) under its plain name, and the module loaded first keeps its code.
    src = """
    #include "kernix/common.h"
    // @BE fresh_one
    void fresh_one(const BE::Tensor a, BE::Tensor out) {
      for (int64_t i = 0; i < a.numel(); ++i) out.data_ptr<float>()[i] = 7.0f;
    }
    // @BE split_impl
    void split_impl(const BE::Tensor x, BE::Tensor out) {
      for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = 10 * x.data_ptr<float>()[i];
    }
    """
    taken = f"{ops.name}.split_impl"
    with pytest.warns(kernix.ReloadWarning, match=rf"'{taken}' \(cpu\) is already registered.*"
                                                  rf"'{taken}' -> '{taken}@[0-9a-f]{{12}}'"):
        clash = kernix.load_cpp_inline(ops.name + "_clash", src, build_directory=tmp_path, target_prefix=ops.name)
    assert clash.targets == {"fresh_one": f"{ops.name}.fresh_one", "split_impl": f"{taken}@{clash.digest[:12]}"}
    assert kernix.list_registered_targets()[f"{ops.name}.fresh_one"] == "cpu"
    x = jnp.ones(2, jnp.float32)
    np.testing.assert_array_equal(clash.split_impl(x, out=like(x)), [10.0, 10.0])
    np.testing.assert_array_equal(clash.fresh_one(x, out=like(x)), [7.0, 7.0])
    np.testing.assert_array_equal(ops.split_impl(x, out=like(x)), [-1.0, -1.0])


def test_a_missing_handler_symbol_registers_none_of_the_library(ops):
    """Every handler is found before XLA is told of any: a library without one
    of its symbols (damaged, or of another kernix) leaves no target behind."""
    from kernix.runtime import registry

    prefix = unique_name("missing_symbol")
    symbols = {f"{prefix}.first": ops.handlers["vector_add"], f"{prefix}.second": "kernix_handler_99_absent"}
    with pytest.raises(kernix.RegistrationError, match="no handler symbol 'kernix_handler_99_absent'"):
        registry.register_targets(ops.platform, ops.path, ops.digest, symbols)
    assert not [t for t in kernix.list_registered_targets() if t.startswith(prefix)]


def test_different_content_under_a_registered_name_loads_beside_it(ops, tmp_path):
    src = """
    #include "kernix/common.h"
    // @BE vector_add
    void vector_add(const BE::Tensor a, const BE::Tensor b, BE::Tensor out) {
      const float* x = a.data_ptr<float>();
      for (int64_t i = 0; i < a.numel(); ++i) out.data_ptr<float>()[i] = x[i] - b.data_ptr<float>()[i];
    }
    """
    target = f"{ops.name}.vector_add"
    with pytest.warns(kernix.ReloadWarning, match=rf"'{target}' -> '{target}@[0-9a-f]{{12}}'.*module.targets"):
        edited = kernix.load_cpp_inline(ops.name, src, build_directory=tmp_path)
    assert edited.targets["vector_add"] == f"{target}@{edited.digest[:12]}"
    assert ops.targets["vector_add"] == target
    # The new module runs the new code, the first module (and its plain target name) the first code.
    ones = jnp.ones(2, jnp.float32)
    np.testing.assert_array_equal(edited.vector_add(ones, ones, out=like(ones)), [0.0, 0.0])
    np.testing.assert_array_equal(ops.vector_add(ones, ones, out=like(ones)), [2.0, 2.0])
    np.testing.assert_array_equal(jax.ffi.ffi_call(target, like(ones))(ones, ones), [2.0, 2.0])
    # Under another prefix it loads under the plain name.
    other = kernix.load_cpp_inline(ops.name, src, build_directory=tmp_path, target_prefix=unique_name("other"))
    assert other.targets["vector_add"] == f"{other.target_prefix}.vector_add"


def test_a_bool_attribute_must_be_a_scalar():
    from kernix.runtime.arguments import coerce_attr
    from kernix.language.spec import Param

    flag = Param("neg", "attr", "bool", "bool", "scalar", "bool")
    assert coerce_attr("f", flag, True) is np.True_
    with pytest.raises(kernix.CallError, match="'neg' is bool.*expected a scalar, got an array of shape \\(1,\\)"):
        coerce_attr("f", flag, np.array([True]))


def test_a_traced_attribute_is_refused_with_the_fix(ops):
    """Was: a traced value reached np.asarray, and the CallError carried JAX's
    conversion error instead of saying that attributes are constants."""
    x = np.arange(3, dtype=np.float32)
    scale = lambda x, s: ops.scale_by(x, scale_factor=s, out=like(x))  # noqa: E731
    with pytest.raises(kernix.CallError, match="attribute 'scale_factor'.*this value is traced.*static_argnames"):
        jax.jit(scale)(x, 2.0)
    with pytest.raises(kernix.CallError, match="this value is traced"):
        jax.vmap(scale)(np.stack([x, x]), np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(jax.jit(scale, static_argnames="s")(x, 2.0), x * 2)


MACRO_TYPED = """#include "kernix/common.h"
#ifdef __OPTIMIZE__
typedef double T;
#else
typedef float T;
#endif
// @BE k
void k(const BE::Tensor& x, BE::Tensor& out, T a) {
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i] * float(a);
}
"""


@pytest.mark.parametrize("level, dtype", [(3, "float64"), (0, "float32")])
def test_inference_sees_the_macros_of_the_builds_optimization_level(tmp_path, level, dtype):
    """Was: the parse took g++'s macros without -O3, so __OPTIMIZE__ code got the
    other type, and the build failed in a generated unit (or, called by name,
    passed the wrong type)."""
    mod = kernix.load_cpp_inline(unique_name("macros"), MACRO_TYPED, optimization_level=level,
                                 build_directory=tmp_path)
    assert mod.k.spec.arg_spec == ("arg", "ret", f"attr.a:{dtype}")
    ones = jnp.ones(2, jnp.float32)
    np.testing.assert_array_equal(mod.k(ones, a=2.0, out=like(ones)), [2.0, 2.0])


TYPE_FLAGS_SRC = """#include "kernix/common.h"
enum Small { S0, S1 };
// @BE k
void k(const BE::Tensor& x, BE::Tensor& out, char c, Small s) {
  out.data_ptr<double>()[0] = c;
  out.data_ptr<double>()[1] = double(sizeof(s));
}
"""


@pytest.mark.parametrize("flag, c_dtype, s_dtype, s_size, c", [
    ("-fsigned-char", "int8", "uint32", 4, -56),
    ("-funsigned-char", "uint8", "uint32", 4, 200),
    pytest.param("-fshort-enums", "int8", "uint8", 1, -56, marks=pytest.mark.skipif(
        platform.machine() not in ("x86_64", "AMD64"), reason="a plain char is unsigned on this processor")),
])
def test_inference_types_char_and_enums_as_the_build_flags_do(tmp_path, flag, c_dtype, s_dtype, s_size, c):
    """Was: clang never saw -funsigned-char or -fshort-enums, so a `char` stayed
    int8 (200 refused, -56 arriving as 200) and a short enum stayed 4 bytes."""
    mod = kernix.load_cpp_inline(unique_name("typeflags"), TYPE_FLAGS_SRC, extra_cflags=[flag],
                                 build_directory=tmp_path)
    assert mod.k.spec.arg_spec == ("arg", "ret", f"attr.c:{c_dtype}", f"attr.s:{s_dtype}")
    out = mod.k(jnp.zeros(1), c=c, s=1, out=jax.ShapeDtypeStruct((2,), jnp.float64))
    np.testing.assert_array_equal(np.asarray(out), [c, s_size])
