"""The generated XLA FFI handlers: C-API (frame.h) handlers and ffi.h handlers.

Functions without typed XLA FFI parameters get a handler decoding the call
frame through XLA's C API; functions with them keep ffi.h handlers, in units of
their own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernix
from kernix.backend import codegen, ninja
from kernix.backend.ninja import read_depfile
from kernix.language.spec import FunctionSpec, Param

from helpers import unique_name

TENSOR_ONLY = textwrap.dedent(
    """
    #include <cstdint>
    #include "kernix/common.h"
    #include "kernix/threads.h"

    // @BE affine (...)->(...)
    void affine(const BE::Tensor x, BE::Tensor out, float factor, int32_t offset, bool negate) {
      const float* in = x.data_ptr<float>();
      float* o = out.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        float v = in[i] * factor + static_cast<float>(offset);
        o[i] = negate ? -v : v;
      }
    }

    // @BE fill_bits
    void fill_bits(BE::Tensor out, uint16_t half_bits, double d, int64_t big, uint8_t small) {
      int32_t* o = out.data_ptr<int32_t>();
      o[0] = half_bits;
      o[1] = static_cast<int32_t>(d * 4);
      o[2] = static_cast<int32_t>(big);
      o[3] = small;
    }

    // Scratch, state and the thread pool: a result XLA allocates, an object kept per instance, XLA's pool.
    struct Calls { int64_t n = 0; };

    // @BE tripled (n)->(n),(2):int32 scratch=n*4
    void tripled(const BE::Tensor& x, BE::Tensor& y, BE::Tensor& info, BE::Scratch& work, BE::State<Calls>& calls,
                 BE::ThreadPool pool) {
      float* w = work.data_ptr<float>(0, x.numel());
      pool.parallel_for(x.numel(), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) w[i] = 3 * x.data_ptr<float>()[i];
      });
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = w[i];
      info.data_ptr<int32_t>()[0] = static_cast<int32_t>(++calls->n);
      info.data_ptr<int32_t>()[1] = static_cast<int32_t>(pool.num_threads());
    }

    // @BE two_out
    void two_out(const BE::Tensor a, const BE::Tensor b, BE::Tensor sum, BE::Tensor diff) {
      for (int64_t i = 0; i < a.numel(); ++i) {
        sum.data_ptr<float>()[i] = a.data_ptr<float>()[i] + b.data_ptr<float>()[i];
        diff.data_ptr<float>()[i] = a.data_ptr<float>()[i] - b.data_ptr<float>()[i];
      }
    }

    // @BE fails (...)->(...)
    void fails(const BE::Tensor x, BE::Tensor out) {
      throw std::runtime_error("the kernel said no");
    }
    """
)

TYPED = textwrap.dedent(
    """
    #include "xla/ffi/api/ffi.h"

    // @BE typed_double (n)->(n)
    void typed_double(xla::ffi::Buffer<xla::ffi::DataType::F32, 1> x,
                      xla::ffi::ResultBuffer<xla::ffi::DataType::F32, 1> out) {
      for (size_t i = 0; i < x.element_count(); ++i) out->typed_data()[i] = 2 * x.typed_data()[i];
    }

    // @BE typed_scale (n)->(n)
    void typed_scale(xla::ffi::Buffer<xla::ffi::DataType::F32, 1> x,
                     xla::ffi::ResultBuffer<xla::ffi::DataType::F32, 1> out, float factor, int64_t shift) {
      for (size_t i = 0; i < x.element_count(); ++i) out->typed_data()[i] = factor * x.typed_data()[i] + shift;
    }

    // Scratch, state and the pool beside a typed parameter: decoded by ffi.h's bindings.
    // @BE typed_tripled (n)->(n),(2):int32 scratch=n*4
    void typed_tripled(xla::ffi::Buffer<xla::ffi::DataType::F32, 1> x, BE::Tensor& y, BE::Tensor& info,
                       BE::Scratch& work, BE::State<Calls>& calls, BE::ThreadPool pool) {
      const int64_t n = static_cast<int64_t>(x.element_count());
      float* w = work.data_ptr<float>(0, n);
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) w[i] = 3 * x.typed_data()[i];
      });
      for (int64_t i = 0; i < n; ++i) y.data_ptr<float>()[i] = w[i];
      info.data_ptr<int32_t>()[0] = static_cast<int32_t>(++calls->n);
      info.data_ptr<int32_t>()[1] = static_cast<int32_t>(pool.num_threads());
    }
    """
)


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    cache = tmp_path_factory.mktemp("fast-cache")
    mod = kernix.load_cpp_inline(unique_name("fast"), "#include <stdexcept>\n" + TENSOR_ONLY,
                                 build_directory=cache)
    return mod, cache / "build" / mod.name


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    cache = tmp_path_factory.mktemp("mixed-cache")
    mod = kernix.load_cpp_inline(unique_name("mixed"), "#include <stdexcept>\n" + TENSOR_ONLY + TYPED,
                                 build_directory=cache)
    return mod, cache / "build" / mod.name


def _handler_units(build: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(build.glob("handlers_*.cpp"))}


def _includes_ffi_h(deps: list[str]) -> bool:
    return any(re.search(r"xla/ffi/api/(ffi|api)\.h$", d) for d in deps)


def test_fast_module_handler_unit_never_includes_ffi_h(fast):
    mod, build = fast
    units = _handler_units(build)
    assert list(units) == ["handlers_0.cpp"]  # one unit for a small module
    text = units["handlers_0.cpp"]
    assert "kernix/detail/frame.h" in text and "ffi.h" not in text and "handler.h" not in text
    assert "XLA_FFI_DEFINE_HANDLER_SYMBOL" not in text
    deps = read_depfile(build / "handlers_0.o.d")
    assert any(d.endswith("xla/ffi/api/c_api.h") for d in deps)
    assert not _includes_ffi_h(deps), deps
    # One exported handler per function, names unchanged.
    for name, symbol in mod.handlers.items():
        assert symbol == f"kernix_handler_{list(mod.functions).index(name)}_{name}"
        assert f"XLA_FFI_Error* {symbol}(XLA_FFI_CallFrame* f)" in text


def test_fast_handlers_pass_every_parameter_kind(fast):
    mod, _ = fast
    x = jnp.arange(5, dtype=jnp.float32)
    np.testing.assert_allclose(mod.affine(x, factor=2.0, offset=3, negate=True), -(2 * np.arange(5) + 3))
    np.testing.assert_allclose(mod.affine(x, factor=0.5, offset=-1, negate=False), 0.5 * np.arange(5) - 1)
    a, b = jnp.arange(3, dtype=jnp.float32), jnp.full(3, 10.0, jnp.float32)
    s, d = mod.two_out(a, b, out=[jax.ShapeDtypeStruct((3,), jnp.float32)] * 2)
    np.testing.assert_array_equal(s, np.arange(3) + 10)
    np.testing.assert_array_equal(d, np.arange(3) - 10)
    tripled = jax.jit(mod.tripled)
    for calls in (1, 2):  # one instance: its state lives on
        y, info = tripled(jnp.arange(64, dtype=jnp.float32))
        np.testing.assert_array_equal(y, 3 * np.arange(64))
        assert info[0] == calls and info[1] >= 1  # XLA's pool has threads on the CPU


def test_shim_errors_keep_their_text(fast):
    mod, _ = fast
    with pytest.raises(Exception, match=r"kernix: fails: .*the kernel said no"):
        jax.block_until_ready(mod.fails(jnp.zeros(2, jnp.float32)))


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump to read the shim object")
def test_the_shim_calls_the_function_instead_of_compiling_it_again(fast):
    # With the function's exact type known, the shim calls it through a pointer
    # the optimizer cannot see through: at -O3 the body (a loop) would
    # otherwise be inlined into the shim, compiled a second time.
    _, build = fast
    assert "::kernix::detail::opaque<void (BE::Tensor, BE::Tensor, float, int, bool)>(&::affine)" in (
        build / "shim_0.cpp").read_text()
    listing = subprocess.run(["objdump", "-dr", "-C", "--no-show-raw-insn", str(build / "shim_0.o")],
                             capture_output=True, text=True, check=True).stdout
    shim = listing.split("<kernix_shim_0_affine>:", 1)[1].split("\n\n", 1)[0]
    # (BE names kernix's namespace: the symbol spells the namespace's own name.)
    assert "affine(kernix::Tensor, kernix::Tensor, float, int, bool)" in shim  # a reference to the function, not its body


def test_a_function_whose_type_cannot_be_written_is_called_by_name(tmp_path):
    # An enum of an anonymous namespace: no function type to take the address
    # with, so the shim calls the function by name, as written.
    src = textwrap.dedent(
        """
        #include "kernix/common.h"
        namespace { enum Scale : int32_t { One = 1, Three = 3 }; }
        // @BE scaled
        void scaled(const BE::Tensor& x, BE::Tensor& out, Scale s) {
          for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = s * x.data_ptr<float>()[i];
        }
        """
    )
    mod = kernix.load_cpp_inline(unique_name("hidden"), src, build_directory=tmp_path)
    assert "opaque" not in (tmp_path / "build" / mod.name / "shim_0.cpp").read_text()
    out = _call(mod, "scaled", jax.ShapeDtypeStruct((3,), jnp.float32), jnp.arange(3, dtype=jnp.float32),
                s=np.int32(3))
    np.testing.assert_array_equal(out, 3 * np.arange(3))


def _call(mod, name, out, *args, **attrs):
    """Straight through jax.ffi.ffi_call: none of kernix's checks or coercions."""
    return jax.block_until_ready(jax.ffi.ffi_call(mod.targets[name], out)(*args, **attrs))


def test_attribute_values_of_every_width_reach_the_kernel(fast):
    mod, _ = fast
    out = jax.ShapeDtypeStruct((4,), jnp.int32)
    res = _call(mod, "fill_bits", out, half_bits=np.uint16(0xBEEF), d=np.float64(2.5), big=np.int64(-7),
                small=np.uint8(200))
    assert np.asarray(res).tolist() == [0xBEEF, 10, -7, 200]
    res = mod.fill_bits(out=out, half_bits=7, d=0.25, big=3, small=4)
    assert np.asarray(res).tolist() == [7, 1, 3, 4]


def test_wrong_attribute_dtype_names_function_and_attribute(fast):
    mod, _ = fast
    x = jnp.arange(3, dtype=jnp.float32)
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    # Distinct values per call: jax caches lowerings by attribute value, and
    # np.float32(2) == np.float64(2).
    with pytest.raises(Exception, match=r"kernix: affine: attribute 'factor' has type F64, expected F32"):
        _call(mod, "affine", out, x, factor=np.float64(2.0), offset=np.int32(1), negate=True)
    with pytest.raises(Exception, match=r"kernix: affine: attribute 'offset' has type S64, expected S32"):
        _call(mod, "affine", out, x, factor=np.float32(3.0), offset=np.int64(2), negate=True)
    with pytest.raises(Exception, match=r"kernix: affine: attribute 'negate' has type S32, expected PRED"):
        _call(mod, "affine", out, x, factor=np.float32(4.0), offset=np.int32(3), negate=np.int32(1))
    # (XLA has no 16-bit float attribute: float16 travels as U16 bits.)
    with pytest.raises(Exception, match=r"kernix: fill_bits: attribute 'half_bits' has type F32, expected U16"):
        _call(mod, "fill_bits", jax.ShapeDtypeStruct((4,), jnp.int32), half_bits=np.float32(1.0),
              d=np.float64(5.5), big=np.int64(-9), small=np.uint8(201))
    # Still callable correctly afterwards.
    np.testing.assert_allclose(
        _call(mod, "affine", out, x, factor=np.float32(5.0), offset=np.int32(4), negate=False), 5 * np.arange(3) + 4
    )


def test_a_wrong_attribute_dtype_names_the_numpy_scalar_to_pass(fast):
    """Was: "has type F64, expected F32" for a Python float, with no word of the fix."""
    mod, _ = fast
    x = jnp.arange(3, dtype=jnp.float32)
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    with pytest.raises(Exception, match=r"attribute 'factor' has type F64, expected F32: pass np\.float32\(value\)"):
        _call(mod, "affine", out, x, factor=6.5, offset=np.int32(5), negate=True)  # a Python float
    with pytest.raises(Exception, match=r"attribute 'offset' has type S64, expected S32: pass np\.int32\(value\)"):
        _call(mod, "affine", out, x, factor=np.float32(7.0), offset=6, negate=True)  # a Python int
    with pytest.raises(Exception, match=r"attribute 'negate' has type S32, expected PRED: pass np\.bool_\(value\)"):
        _call(mod, "affine", out, x, factor=np.float32(8.0), offset=np.int32(7), negate=np.int32(1))
    with pytest.raises(Exception, match=r"'half_bits' has type F32, expected U16: pass np\.uint16\(value\)"):
        _call(mod, "fill_bits", jax.ShapeDtypeStruct((4,), jnp.int32), half_bits=np.float32(1.5),  # (float16's bits)
              d=np.float64(6.5), big=np.int64(-10), small=np.uint8(202))
    factor = np.float32(6.5)  # what the message says works
    np.testing.assert_allclose(_call(mod, "affine", out, x, factor=factor, offset=np.int32(5), negate=False),
                               6.5 * np.arange(3) + 5)


def test_an_ffi_h_handler_names_the_numpy_scalar_to_pass_too(mixed):
    """The handlers built on ffi.h's bindings (typed XLA FFI parameters) said only XLA's "Wrong scalar
    data type: expected F32 but got F64"."""
    mod, _ = mixed
    x = jnp.arange(3, dtype=jnp.float32)
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    with pytest.raises(Exception, match=r"attribute has type F64: pass np\.float32\(value\)"):
        _call(mod, "typed_scale", out, x, factor=2.5, shift=np.int64(1))
    with pytest.raises(Exception, match=r"attribute has type S32: pass np\.int64\(value\)"):
        _call(mod, "typed_scale", out, x, factor=np.float32(3.5), shift=np.int32(2))
    # (other values: jax caches a lowering by its attributes' values, and np.float32(2.5) == 2.5)
    np.testing.assert_allclose(_call(mod, "typed_scale", out, x, factor=np.float32(1.5), shift=np.int64(3)),
                               1.5 * np.arange(3) + 3)
    np.testing.assert_allclose(mod.typed_scale(x, factor=0.5, shift=-1), 0.5 * np.arange(3) - 1)


def test_missing_or_misnamed_attribute(fast):
    mod, _ = fast
    x = jnp.arange(3, dtype=jnp.float32)
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    with pytest.raises(Exception, match=r"kernix: affine: wrong number of attributes: expected 3 but got 2"):
        _call(mod, "affine", out, x, factor=np.float32(2.0), offset=np.int32(1))
    with pytest.raises(Exception, match=r"kernix: affine: attribute 'negate' is missing"):
        _call(mod, "affine", out, x, factor=np.float32(2.0), offset=np.int32(1), negatee=True)


def test_wrong_number_of_operands_or_results(fast):
    mod, _ = fast
    x = jnp.arange(3, dtype=jnp.float32)
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    attrs = dict(factor=np.float32(2.0), offset=np.int32(1), negate=False)
    with pytest.raises(Exception, match=r"kernix: affine: wrong number of operands: expected 1 but got 2"):
        _call(mod, "affine", out, x, x, **attrs)
    with pytest.raises(Exception, match=r"kernix: affine: wrong number of results: expected 1 but got 2"):
        _call(mod, "affine", (out, out), x, **attrs)
    with pytest.raises(Exception, match=r"kernix: two_out: wrong number of operands: expected 2 but got 1"):
        _call(mod, "two_out", (out, out), x)


def test_mixed_module_keeps_ffi_h_handlers_in_their_own_unit(mixed):
    mod, build = mixed
    units = _handler_units(build)
    assert len(units) == 2
    fast_units = {n for n, t in units.items() if "kernix/detail/frame.h" in t}
    ffi_units = {n for n, t in units.items() if "kernix/detail/handler.h" in t}
    assert len(fast_units) == 1 and len(ffi_units) == 1 and not fast_units & ffi_units
    (fast_unit,), (ffi_unit,) = fast_units, ffi_units
    assert "typed_double" in units[ffi_unit] and "typed_double" not in units[fast_unit]
    assert "affine" in units[fast_unit] and "affine" not in units[ffi_unit]
    assert not _includes_ffi_h(read_depfile(build / fast_unit.replace(".cpp", ".o.d")))
    assert _includes_ffi_h(read_depfile(build / ffi_unit.replace(".cpp", ".o.d")))
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(mod.typed_double(x), 2 * np.arange(4))
    np.testing.assert_allclose(mod.affine(x, factor=3.0, offset=0, negate=False), 3 * np.arange(4))
    # Scratch, state and the pool reach a function ffi.h decodes as they reach a fast handler's.
    assert "typed_tripled" in units[ffi_unit] and "typed_tripled" not in units[fast_unit]
    tripled = jax.jit(mod.typed_tripled)
    for calls in (1, 2):
        y, info = tripled(jnp.arange(64, dtype=jnp.float32))
        np.testing.assert_array_equal(y, 3 * np.arange(64))
        assert info[0] == calls and info[1] >= 1
    s, d = mod.two_out(x, x, out=[jax.ShapeDtypeStruct((4,), jnp.float32)] * 2)
    np.testing.assert_array_equal(s, 2 * np.arange(4))
    np.testing.assert_array_equal(d, np.zeros(4))


def _fn(i: int, typed: bool = False) -> codegen.ExportedFunction:
    x = Param("x", "arg", "xla::ffi::AnyBuffer", "xla::ffi::AnyBuffer", "ffi") if typed else Param("x", "arg")
    return codegen.ExportedFunction(i, FunctionSpec(f"f{i}", f"f{i}", (
        x, Param("out", "ret"), Param("zeta", "attr", "float", "float", "scalar", "float32"),
        Param("alpha", "attr", "__half", "__half", "scalar", "float16"), Param("s", "stream", kind="stream"),
    )))


def test_fast_handler_table_follows_xla_attribute_order_and_dtypes():
    cpu = codegen.handler_unit([_fn(0)], "cpu", True)
    # XLA sorts attributes by name: alpha (index 0) before zeta (index 1).
    assert '{::kernix::detail::Role::kAttr, -1, XLA_FFI_DataType_F32, "zeta", 4, 1}' in cpu
    assert '{::kernix::detail::Role::kAttr, -1, XLA_FFI_DataType_U16, "alpha", 5, 0}' in cpu  # float16 as bits
    # C++ functions get no stream and no command-buffer trait; CUDA ones both.
    assert '{"f0", kernix_params_0, 5, 1, 1, 2, false, false}' in cpu
    cuda = codegen.handler_unit([_fn(0)], "cuda", True)
    assert '{"f0", kernix_params_0, 5, 1, 1, 2, true, true}' in cuda
    assert '{"f0", kernix_params_0, 5, 1, 1, 2, true, false}' in codegen.handler_unit([_fn(0)], "cuda", False)
    typed = codegen.handler_unit([_fn(1, typed=True)], "cuda", True)
    assert "XLA_FFI_DEFINE_HANDLER_SYMBOL" in typed and "frame.h" not in typed


def test_fast_handler_table_describes_in_place_tensors_and_string_and_array_attributes():
    """Was: these took ffi.h-bound handlers.  An in-place tensor is an operand and a result (named for
    the aliasing check); an array's element type is the one ffi.h's Span<const T> decodes."""
    from kernix.language.dtypes import ARRAY_ATTR_DTYPES, BUFFER_DTYPES

    span = "BE::Span<const int64_t>"
    spec = FunctionSpec("g", "g", (
        Param("y", "inout"), Param("x", "arg"), Param("tag", "attr", "std::string_view", "std::string_view", "string"),
        Param("v", "attr", span, span, "array", "int64"), Param("n", "attr", "int32_t", "int32_t", "scalar", "int32"),
        Param("s", "stream", kind="stream"),
    ))
    unit = codegen.handler_unit([codegen.ExportedFunction(0, spec)], "cuda", True)
    assert "frame.h" in unit and "XLA_FFI_DEFINE_HANDLER_SYMBOL" not in unit
    assert '{::kernix::detail::Role::kInOut, -1, XLA_FFI_DataType_INVALID, "y", 1, -1}' in unit
    # Sorted by name: n, tag, v.
    assert '{::kernix::detail::Role::kString, -1, XLA_FFI_DataType_INVALID, "tag", 3, 1}' in unit
    assert '{::kernix::detail::Role::kArray, -1, XLA_FFI_DataType_S64, "v", 1, 2}' in unit
    assert '{"g", kernix_params_0, 6, 2, 1, 3, true, true}' in unit  # operands y and x, result y
    assert "::kernix::ArrayView arrays[2];" in unit and "slots, views, arrays);" in unit
    for dtype in ARRAY_ATTR_DTYPES:
        one = FunctionSpec("h", "h", (Param("v", "attr", "T", "T", "array", dtype),))
        assert f"XLA_FFI_DataType_{BUFFER_DTYPES[dtype]}, \"v\"" in codegen.handler_unit(
            [codegen.ExportedFunction(0, one)], "cpu", True)


def test_fast_handler_table_describes_scratch_state_and_the_thread_pool():
    """Was: these took ffi.h-bound handlers.  Scratch is a result XLA allocates; the state comes from the
    context, with the instantiate handler beside; a CUDA function's pool has no threads."""
    spec = FunctionSpec("k", "k", (Param("y", "inout"), Param("w", "scratch", kind="scratch"),
                                   Param("s", "state", "P", "P", kind="state"), Param("t", "threads", kind="threads")))
    fn = codegen.ExportedFunction(0, spec)
    assert codegen.has_fast_handler(fn)
    cpu = codegen.handler_unit([fn], "cpu", True)
    assert "frame.h" in cpu and "XLA_FFI_DEFINE_HANDLER_SYMBOL" not in cpu
    assert '{::kernix::detail::Role::kScratch, -1, XLA_FFI_DataType_INVALID, nullptr, 0, -1}' in cpu
    assert '{::kernix::detail::Role::kState, -1, XLA_FFI_DataType_INVALID, nullptr, 0, -1}' in cpu
    assert '{::kernix::detail::Role::kThreads, -1, XLA_FFI_DataType_INVALID, nullptr, 0, -1}' in cpu
    assert '{"k", kernix_params_0, 4, 1, 2, 0, false, false}' in cpu  # results: y and the scratch
    assert "::kernix::TensorView views[2];" in cpu
    assert "kernix_instantiate_" in cpu and "::kernix::detail::instantiate(" in cpu
    assert "Role::kNoThreads" in codegen.handler_unit([fn], "cuda", True)


def test_handler_chunks_separate_kinds_and_bound_unit_size():
    fast = [_fn(i) for i in range(40)]
    typed = [_fn(40 + i, typed=True) for i in range(3)]
    assert ninja.handler_chunks(fast) == [fast]  # one unit for a small module
    assert ninja.handler_chunks(fast[:20] + typed + fast[20:]) == [fast, typed]
    many = [_fn(i) for i in range(5000)]
    chunks = ninja.handler_chunks(many)
    assert [fn for c in chunks for fn in c] == many
    assert len(chunks) == ninja.FAST_UNITS and all(len(c) <= ninja.FAST_UNIT_MAX for c in chunks)
    forty = [_fn(i, typed=True) for i in range(40)]
    assert [len(c) for c in ninja.handler_chunks(forty)] == [20] * ninja.FFI_UNITS
    assert [len(c) for c in ninja.handler_chunks(forty[:6])] == [4, 2]  # at least FFI_UNIT_MIN a unit
    assert ninja.handler_chunks([]) == [[]]


def test_the_library_does_not_depend_on_the_number_of_jobs():
    """Its SHA-256 names the code in exported artifacts: the same sources built with one job and
    with three give the same library (eight ffi.h handlers, in two units, which more jobs once split more)."""
    src = '#include "xla/ffi/api/ffi.h"\n' + "".join(
        f"// @BE f{i} (n)->(n)\nvoid f{i}(xla::ffi::AnyBuffer x, xla::ffi::Result<xla::ffi::AnyBuffer> y) {{}}\n"
        for i in range(8))
    name = unique_name("jobs_digest")
    one = kernix.load_cpp_inline(name, src, ninja_workers=1, auto_register=False)
    three = kernix.load_cpp_inline(name, src, ninja_workers=3, auto_register=False, force_rebuild=True)
    assert one.digest == three.digest
