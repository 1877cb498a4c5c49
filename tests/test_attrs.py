"""Array and string attributes: every C++ spelling infers, the values arrive
exactly (every element type, empty arrays, the extremes of each range), bad
values are refused before anything runs, and the calls work under jax.jit,
jax.vmap, jax.grad and kernix.export."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix import infer_file

from helpers import first_gpu, handler_units_with_ffi_h, unique_name

CPP = textwrap.dedent(
    """\
    #include <string>
    #include <string_view>
    #include <vector>
    #include "kernix/common.h"
    #include "xla/ffi/api/ffi.h"

    // Writes what it received: y[i] = x[i] + the sum of `weights`, y[idx[k]] += 100 * (k + 1),
    // and the string's length and its first character into info.
    // @BE gather (...,n)->(...,n),(2)
    void gather(const BE::Tensor& x, BE::Tensor& y, BE::Tensor& info, BE::Span<const int64_t> idx,
                const std::vector<double>& weights, std::string_view tag) {
      double total = 0;
      for (double w : weights) total += w;
      const float* in = x.data_ptr<float>();
      float* out = y.data_ptr<float>();
      const int64_t n = x.shape(-1);
      for (int64_t r = 0; r < x.numel() / n; ++r)
        for (int64_t i = 0; i < n; ++i) out[r * n + i] = in[r * n + i] + static_cast<float>(total);
      for (size_t k = 0; k < idx.size(); ++k) {
        BE_CHECK(idx[k] >= 0 && idx[k] < n) << "index " << idx[k] << " out of range";
        for (int64_t r = 0; r < x.numel() / n; ++r) out[r * n + idx[k]] += 100.f * (k + 1);
      }
      info.data_ptr<float>()[0] = static_cast<float>(tag.size());
      info.data_ptr<float>()[1] = tag.empty() ? -1.f : static_cast<float>(tag[0]);
    }

    // Backward of gather (the attributes are the forward's).
    // @BE gather_bwd (...,n),(...,n),(2)->(...,n) vjp=gather
    void gather_bwd(const BE::Tensor& x, const BE::Tensor& gy, const BE::Tensor& ginfo, BE::Tensor& gx,
                    BE::Span<const int64_t> idx) {
      for (int64_t i = 0; i < x.numel(); ++i) gx.data_ptr<float>()[i] = gy.data_ptr<float>()[i];
    }

    // @BE echo_string (n)->(n):int32
    void echo_string(const BE::Tensor& x, BE::Tensor& codes, const std::string& text) {
      BE_CHECK(static_cast<int64_t>(text.size()) <= x.shape(0)) << "text longer than x";
      for (int64_t i = 0; i < x.shape(0); ++i)
        codes.data_ptr<int32_t>()[i] = i < static_cast<int64_t>(text.size()) ? static_cast<unsigned char>(text[i]) : -1;
    }

    // @BE ffi_span (n)->(n)
    void ffi_span(const BE::Tensor& x, BE::Tensor& y, xla::ffi::Span<const int32_t> values) {
      for (int64_t i = 0; i < x.numel(); ++i)
        y.data_ptr<float>()[i] = i < static_cast<int64_t>(values.size()) ? static_cast<float>(values[i]) : 0.f;
    }
    """
)

_ELEMENTS = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
             "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "float32": "float",
             "float64": "double"}

# One function per element type, through std::span (C++20): out[i] = double(v[i]) and the bits of v[i].
CPP20 = "#include <span>\n#include \"kernix/common.h\"\n" + "\n".join(
    f"// @BE all_{n}\nvoid all_{n}(BE::Tensor& y, std::span<const {t}> v) {{\n"
    f"  for (size_t i = 0; i < v.size(); ++i) static_cast<double*>(y.data_ptr())[i] = static_cast<double>(v[i]);\n}}"
    for n, t in _ELEMENTS.items()
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("b")


@pytest.fixture(scope="module")
def mod(cache):
    return kernix.load_cpp_inline(unique_name("attrs"), CPP, build_directory=cache)


def test_specs(mod):
    assert mod.gather.spec.arg_spec == ("arg", "ret", "ret", "attr.idx:int64[]", "attr.weights:float64[]",
                                        "attr.tag:str")
    assert mod.echo_string.spec.arg_spec == ("arg", "ret", "attr.text:str")
    assert mod.ffi_span.spec.arg_spec == ("arg", "ret", "attr.values:int32[]")
    p = mod.gather.spec.params[3]
    assert (p.kind, p.dtype, p.attr_type) == ("array", "int64", "int64[]")
    assert mod.gather.spec.params[5].kind == "string" and mod.gather.spec.params[5].dtype is None


def _gather(x, idx, weights, tag):
    want = np.asarray(x, np.float32) + np.float32(sum(weights))
    for k, i in enumerate(idx):
        want[..., i] += 100 * (k + 1)
    return want, [len(tag), ord(tag[0]) if tag else -1]


@pytest.mark.parametrize("idx, weights, tag", [
    ((0, 2), [0.5, 0.25], "abc"),
    ([], (), ""),
    (np.array([3, 1, 1], np.int32), np.array([1.5]), "z" * 300),
])
def test_values_arrive(mod, idx, weights, tag):
    x = jnp.arange(4, dtype=jnp.float32)
    want_y, want_info = _gather(np.arange(4), list(idx), list(weights), tag)
    for call in (mod.gather, jax.jit(lambda x: mod.gather(x, idx=idx, weights=weights, tag=tag))):
        y, info = call(x, idx=idx, weights=weights, tag=tag) if call is mod.gather else call(x)
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(info, want_info)


def test_one_compiled_call_per_value(mod):
    """Arrays that differ in one element (even where a repr would elide it) are different calls."""
    x = jnp.zeros(4, jnp.float32)
    long_a = np.zeros(2000, np.float64)
    long_b = long_a.copy()
    long_b[1000] = 1.0
    ya, _ = mod.gather(x, idx=(), weights=long_a, tag="a")
    yb, _ = mod.gather(x, idx=(), weights=long_b, tag="a")
    np.testing.assert_array_equal(ya, np.zeros(4))
    np.testing.assert_array_equal(yb, np.ones(4))


def test_strings(mod):
    x = jnp.zeros(8, jnp.float32)
    for text in ("", "héllo", "a\tb c"):
        codes = np.asarray(mod.echo_string(x, text=text))
        data = list(text.encode())
        np.testing.assert_array_equal(codes, data + [-1] * (8 - len(data)))
    with pytest.raises(Exception, match=r"text longer than x"):
        jax.block_until_ready(mod.echo_string(jnp.zeros(2, jnp.float32), text="abc"))


def test_xla_ffi_span(mod):
    np.testing.assert_array_equal(mod.ffi_span(jnp.zeros(3, jnp.float32), values=[7, -8]), [7, -8, 0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(idx=(1.5,)), r"attribute 'idx' is int64\[\] \(C\+\+ type 'BE::Span<const int64_t>'\); cannot use \(1.5,\): "
                       r"expected integers"),
    (dict(idx=(2**63,)), r"9223372036854775808 does not fit in int64"),
    (dict(idx="01"), r"expected a tuple, list or 1-D NumPy array of numbers"),
    (dict(idx=[[0]]), r"expected a tuple, list or 1-D NumPy array of numbers"),
    (dict(idx=5), r"expected a tuple, list or 1-D NumPy array of numbers"),
    (dict(weights=["a"]), r"weights' is float64\[\].*expected real numbers"),
    (dict(weights=[1j]), r"expected real numbers"),
    (dict(tag=b"x"), r"'tag' is str \(C\+\+ type 'std::string_view'\); cannot use b'x': expected a str, got bytes "
                     r"\(decode bytes first"),
    (dict(tag=3), r"expected a str, got int"),
])
def test_bad_values_are_refused(mod, kwargs, message):
    call = dict(idx=(0,), weights=[1.0], tag="t")
    call.update(kwargs)
    with pytest.raises(kernix.CallError, match=message):
        mod.gather(jnp.zeros(4, jnp.float32), **call)


def test_string_and_array_attributes_get_c_api_handlers_and_no_ffi_h_unit(mod, cache):
    """Was: every function with a string or array attribute got an ffi.h-bound handler, in a unit
    that costs g++ about 1 s to parse ffi.h and 0.15 s a handler."""
    build = cache / "build" / mod.name
    assert [p.name for p in build.glob("handlers_*.cpp")] == ["handlers_0.cpp"]
    assert handler_units_with_ffi_h(build) == []
    assert '"gather"' in (build / "handlers_0.cpp").read_text()


_GATHER_OUT = (jax.ShapeDtypeStruct((4,), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.float32))


@pytest.mark.parametrize("attrs, message", [
    # (every call its own values: jax caches a lowering by its attributes)
    (dict(idx=np.array([1], np.int32), weights=np.array([1.0]), tag="a"),
     r"kernix: gather: attribute 'idx' is an array of S32, expected an array of S64: pass np\.asarray\(value, "
     r"np\.int64\)"),
    (dict(idx=np.array([1], np.int64), weights=np.array([1.0], np.float32), tag="b"),
     r"kernix: gather: attribute 'weights' is an array of F32, expected an array of F64"),
    (dict(idx=np.int64(1), weights=np.array([1.0]), tag="c"),
     r"kernix: gather: attribute 'idx' is a scalar, expected an array of S64"),
    (dict(idx=np.array([1], np.int64), weights=np.array([1.0]), tag=np.int32(3)),
     r"kernix: gather: attribute 'tag' is a scalar, expected a string"),
    (dict(idx=np.array([2], np.int64), weights=np.array([1.0]), tagg="d"),
     r"kernix: gather: attribute 'tag' is missing"),
    (dict(idx=np.array([3], np.int64), weights=np.array([1.0])),
     r"kernix: gather: wrong number of attributes: expected 3 but got 2: missing 'tag'"),
    (dict(idx=np.array([3], np.int64), weights=np.array([1.0]), tag="e", extra="f"),
     r"kernix: gather: wrong number of attributes: expected 3 but got 4: unexpected 'extra'"),
])
def test_a_direct_call_with_a_wrong_array_or_string_attribute_names_function_attribute_and_types(mod, attrs, message):
    """Past the callable (a direct jax.ffi.ffi_call), the handler refuses what ffi.h's decoding refused
    (there, without naming the function or the attribute: "Wrong array data type: expected S64 but got S32")."""
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(jax.ffi.ffi_call(mod.targets["gather"], _GATHER_OUT)(jnp.zeros(4, jnp.float32), **attrs))


def test_a_direct_call_with_the_right_attributes_reaches_the_kernel(mod):
    y, info = jax.ffi.ffi_call(mod.targets["gather"], _GATHER_OUT)(
        jnp.zeros(4, jnp.float32), idx=np.array([2], np.int64), weights=np.array([0.5, 0.25]), tag="xyz")
    np.testing.assert_array_equal(y, [0.75, 0.75, 100.75, 0.75])
    np.testing.assert_array_equal(info, [3, ord("x")])


def test_traced_values_are_refused(mod):
    with pytest.raises(kernix.CallError, match="traced"):
        jax.jit(lambda x, i: mod.gather(x, idx=i, weights=[1.0], tag="t"))(jnp.zeros(4, jnp.float32),
                                                                            jnp.zeros(1, jnp.int32))


def test_missing_attribute_names_its_type(mod):
    with pytest.raises(kernix.CallError, match=r"missing attribute\(s\) 'idx' \(int64\[\]\), 'tag' \(str\)"):
        mod.gather(jnp.zeros(4, jnp.float32), weights=[1.0])


def test_every_element_type_and_its_range(tmp_path):
    mod = kernix.load_cpp_inline(unique_name("attr_types"), CPP20, extra_cflags=["-std=c++20"],
                                 build_directory=tmp_path)
    out = jax.ShapeDtypeStruct((3,), jnp.float32)  # (read back as float64 bits below)
    for name in _ELEMENTS:
        f = getattr(mod, f"all_{name}")
        assert f.spec.arg_spec == ("ret", f"attr.v:{name}[]")
        info = np.iinfo(name) if name[0] in "iu" else np.finfo(name)
        values = [int(info.min), int(info.max), 1] if name[0] in "iu" else [float(info.min), float(info.max), 1.0]
        got = np.asarray(f(v=values, out=jax.ShapeDtypeStruct((6,), jnp.float32))).view(np.float64)
        np.testing.assert_array_equal(got, np.array(values, np.float64), err_msg=name)
        if name[0] in "iu":
            with pytest.raises(kernix.CallError, match=f"does not fit in {name}"):
                f(v=[int(info.max) + 1], out=out)
        if name == "float32":
            with pytest.raises(kernix.CallError, match="does not fit in float32"):
                f(v=[1e300], out=out)


def test_vmap_and_grad(mod):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32)
    ys, infos = jax.vmap(lambda r: mod.gather(r, idx=(1,), weights=[2.0], tag="ab"))(x)
    want, _ = _gather(np.asarray(x), [1], [2.0], "ab")
    np.testing.assert_allclose(ys, want, rtol=1e-6)
    np.testing.assert_array_equal(infos, [[2, ord("a")]] * 3)
    g = jax.grad(lambda v: jnp.sum(mod.gather(v, idx=(1,), weights=[2.0], tag="ab")[0] * 3))(x)
    np.testing.assert_allclose(g, np.full((3, 4), 3.0))


def test_export_round_trip(mod):
    fn = jax.jit(lambda x: mod.gather(x, idx=(3, 0), weights=[0.5], tag="q")[0])
    exp = kernix.export(fn, jax.ShapeDtypeStruct((2, 4), jnp.float32))
    again = kernix.deserialize(exp.serialize())
    x = jnp.ones((2, 4), jnp.float32)
    want, _ = _gather(np.ones((2, 4)), [3, 0], [0.5], "q")
    np.testing.assert_array_equal(again.call(x), want)


REJECTED = textwrap.dedent(
    """\
    #include <span>
    #include <string>
    #include <string_view>
    #include <vector>
    #include "kernix/common.h"

    // @BE mutable_span
    void mutable_span(BE::Tensor& y, BE::Span<int64_t> v) {}
    // @BE vector_ref
    void vector_ref(BE::Tensor& y, std::vector<int>& v) {}
    // @BE bool_array
    void bool_array(BE::Tensor& y, BE::Span<const bool> v) {}
    // @BE half_array
    void half_array(BE::Tensor& y, const std::vector<__half>& v) {}
    // @BE fixed_span
    void fixed_span(BE::Tensor& y, std::span<const int, 3> v) {}
    // @BE string_ref
    void string_ref(BE::Tensor& y, std::string& s) {}
    // @BE char_pointer
    void char_pointer(BE::Tensor& y, const char* s) {}
    // @BE reserved_name
    void reserved_name(BE::Tensor& y, std::string_view out) {}
    """
)


def test_rejected_spellings(tmp_path):
    path = tmp_path / "rejected.cpp"
    path.write_text(REJECTED)
    result = infer_file(str(path), flags=["-std=c++20"])
    assert result.functions == ()
    messages = {e.function: e.message for e in result.errors}
    assert "an array attribute is read-only; take a `BE::Span<const int64_t>`" in messages["mutable_span"]
    assert "attributes are read-only; take a `const std::vector<T>&`" in messages["vector_ref"]
    assert "XLA passes arrays of int8_t, int16_t" in messages["bool_array"]
    assert "no bool, no 16-bit floats" in messages["half_array"]
    assert "a `std::span` of fixed extent" in messages["fixed_span"]
    assert "take a `std::string` by value or `const&`" in messages["string_ref"]
    assert "take a `std::string_view` for a string attribute" in messages["char_pointer"]
    assert "'out' is reserved by the Python callable" in messages["reserved_name"]


def test_explicit_arg_spec_tokens():
    from kernix import parse_arg_spec

    assert [str(t) for t in parse_arg_spec("arg ret attr.v:int64[] attr.s:str attr.w")] == [
        "arg", "ret", "attr.v:int64[]", "attr.s:str", "attr.w"]
    with pytest.raises(kernix.ArgSpecError, match="unknown array attribute dtype 'bool'"):
        parse_arg_spec("ret attr.v:bool[]")
    with pytest.raises(kernix.ArgSpecError, match="unknown attribute dtype 'string'"):
        parse_arg_spec("ret attr.v:string")


CUDA = textwrap.dedent(
    """\
    #include <string_view>
    #include "kernix/common.h"
    __global__ void add_k(float* y, float v, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] += v;
    }
    // y += the string's length and the sum of idx, in place.
    // @BE shift (n)->(n)
    void shift(BE::InOut& y, BE::Span<const int64_t> idx, std::string_view tag, cudaStream_t s) {
      int64_t total = static_cast<int64_t>(tag.size());
      for (int64_t v : idx) total += v;
      add_k<<<(unsigned)((y.numel() + 255) / 256), 256, 0, s>>>(y.data_ptr<float>(), (float)total, y.numel());
      BE_CHECK_KERNEL_LAUNCH();
    }
    """
)


@pytest.mark.gpu
@pytest.mark.skipif(first_gpu() is None, reason="needs an NVIDIA GPU")
def test_cuda_string_and_array_attributes_and_in_place_tensors_use_c_api_handlers(tmp_path):
    mod = kernix.load_cuda_inline(unique_name("attrs_cuda"), CUDA, build_directory=tmp_path)
    assert handler_units_with_ffi_h(tmp_path / "build" / mod.name) == []
    gpu = first_gpu()
    y = jax.device_put(jnp.zeros(8, jnp.float32), gpu)
    np.testing.assert_array_equal(mod.shift(y, idx=(1, 2), tag="abc"), np.full(8, 6.0))
    np.testing.assert_array_equal(y, np.zeros(8))
    donated = jax.jit(lambda y: mod.shift(y, idx=[10], tag=""), donate_argnums=0)
    np.testing.assert_array_equal(donated(jax.device_put(jnp.ones(8, jnp.float32), gpu)), np.full(8, 11.0))
    direct = jax.jit(lambda y: jax.ffi.ffi_call(mod.targets["shift"], jax.ShapeDtypeStruct((8,), jnp.float32),
                                                input_output_aliases={0: 0})(y, idx=np.array([1], np.int32), tag="x"))
    with pytest.raises(Exception, match=r"kernix: shift: attribute 'idx' is an array of S32, expected an array of S64"):
        jax.block_until_ready(direct(y))


def test_stubs_and_signature(mod):
    import inspect
    from typing import Sequence

    from kernix.runtime.stubs import stub_text

    text = stub_text([mod.gather.spec])
    assert ("idx: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray, tag: str, "
            "out: Sequence[jax.ShapeDtypeStruct] | None = None") in text
    compile(text, "stub.pyi", "exec")
    params = inspect.signature(mod.gather).parameters
    assert params["idx"].annotation == Sequence[int] and params["tag"].annotation is str
    assert "A tuple, list or 1-D NumPy array, passed as int64" in mod.gather.__doc__.replace("(a", "A")
