"""Element types are exact: ``BE::Tensor::data_ptr<T>()`` takes only the C++
types of the tensor's dtype, ``reinterpret_ptr<T>()`` views same-size elements
on purpose, ``BE::TensorOf<T>`` pins a dtype that inference, ``kernix
inspect`` and the callable all know, and kernix's headers compile without
warnings."""

from __future__ import annotations

import platform
import subprocess

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import gpus, has_nvcc, unique_name
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernix
from kernix.backend import toolchain
from kernix.cli import main

jax.config.update("jax_enable_x64", True)  # int64/float64/complex128 arrays stay what they are

# Every kernel body counts its runs in `g_runs` before it touches an element;
# `runs` reads the count, so a test sees whether a refused call ran anything.
SOURCE = r"""
#include "kernix/common.h"
#include "brainevent/common.h"
#include <atomic>
#include <complex>
#include <cstdint>

static std::atomic<int32_t> g_runs{0};

// @BE runs
void runs(BE::TensorOf<int32_t>& out) { out.data_ptr()[0] = g_runs.load(); }

// @BE twice_f32
void twice_f32(const BE::Tensor& x, BE::Tensor& out) {
  const float* a = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  ++g_runs;
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = 2 * a[i];
}

// @BE twice_f64
void twice_f64(const BE::Tensor& x, BE::Tensor& out) {
  const double* a = x.data_ptr<double>();
  double* o = out.data_ptr<double>();
  ++g_runs;
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = 2 * a[i];
}

// out[i][j] = x[i][j] + y[j]: the dtypes pinned by the C++ types, the shapes by the signature.
// @BE add_row (m,n),(n)->(m,n)
void add_row(const BE::TensorOf<float>& x, const BE::TensorOf<int32_t>& y, BE::TensorOf<float>& out) {
  ++g_runs;
  const float* a = x.data_ptr();
  const int32_t* b = y.data_ptr();
  float* o = out.data_ptr();
  for (int64_t i = 0; i < x.shape(0); ++i)
    for (int64_t j = 0; j < x.shape(1); ++j) o[i * x.shape(1) + j] = a[i * x.shape(1) + j] + float(b[j]);
}

// The bits of float32 elements, viewed as uint32_t on purpose.
// @BE bits
void bits(const BE::Tensor& x, BE::Tensor& out) {
  const uint32_t* a = x.reinterpret_ptr<uint32_t>();
  ++g_runs;
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<uint32_t>()[i] = a[i];
}

struct Pair { float x, y; };

// out[k] = 1 when data_ptr<type k>() of x is accepted, 0 when it throws.
// @BE accepts
void accepts(const BE::Tensor& x, BE::TensorOf<int32_t>& out) {
  int32_t* o = out.data_ptr();
  int k = 0;
  auto probe = [&](auto read) {
    try { read(); o[k] = 1; } catch (const BE::Error&) { o[k] = 0; }
    ++k;
  };
  probe([&] { x.data_ptr<bool>(); });
  probe([&] { x.data_ptr<char>(); });
  probe([&] { x.data_ptr<signed char>(); });
  probe([&] { x.data_ptr<unsigned char>(); });
  probe([&] { x.data_ptr<short>(); });
  probe([&] { x.data_ptr<unsigned short>(); });
  probe([&] { x.data_ptr<int>(); });
  probe([&] { x.data_ptr<unsigned int>(); });
  probe([&] { x.data_ptr<long>(); });
  probe([&] { x.data_ptr<unsigned long>(); });
  probe([&] { x.data_ptr<long long>(); });
  probe([&] { x.data_ptr<unsigned long long>(); });
  probe([&] { x.data_ptr<float>(); });
  probe([&] { x.data_ptr<const float>(); });
  probe([&] { x.data_ptr<double>(); });
  probe([&] { x.data_ptr<long double>(); });
  probe([&] { x.data_ptr<std::complex<float>>(); });
  probe([&] { x.data_ptr<std::complex<double>>(); });
  probe([&] { x.data_ptr<Pair>(); });
  probe([&] { x.data_ptr<BE::float16_t>(); });
  probe([&] { x.data_ptr<BE::bfloat16_t>(); });
  probe([&] { x.data_ptr<BE::complex64_t>(); });
  probe([&] { x.data_ptr<void>(); });
  probe([&] { x.data_ptr<const void>(); });
}
"""

#: The C++ types `accepts` tries, in its order.
TYPES = ("bool", "char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int", "long",
         "unsigned long", "long long", "unsigned long long", "float", "const float", "double", "long double",
         "std::complex<float>", "std::complex<double>", "Pair", "BE::float16_t", "BE::bfloat16_t",
         "BE::complex64_t", "void", "const void")

CHAR_IS_SIGNED = platform.machine().lower() not in ("aarch64", "arm64", "ppc64le", "s390x")

#: What the documentation promises: each dtype's own C++ types, the raw bits of
#: 16-bit floats as uint16_t, a bool's bytes as any one-byte integer, and void.
PROMISED = {
    "bool": {"bool", "char", "signed char", "unsigned char"},
    "int8": {"signed char"} | ({"char"} if CHAR_IS_SIGNED else set()),
    "uint8": {"unsigned char"} | (set() if CHAR_IS_SIGNED else {"char"}),
    "int16": {"short"},
    "uint16": {"unsigned short"},
    "int32": {"int"},
    "uint32": {"unsigned int"},
    "int64": {"long", "long long"},
    "uint64": {"unsigned long", "unsigned long long"},
    "float16": {"unsigned short", "BE::float16_t"},
    "bfloat16": {"unsigned short", "BE::bfloat16_t"},
    "float32": {"float", "const float"},
    "float64": {"double"},
    "complex64": {"std::complex<float>", "Pair", "BE::complex64_t"},
    "complex128": {"std::complex<double>"},
}


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("dtype_exact"), SOURCE, build_directory=tmp_path_factory.mktemp("b"))


def runs(mod) -> int:
    return int(np.asarray(mod.runs(out=jax.ShapeDtypeStruct((1,), jnp.int32)))[0])


def array(dtype: str, shape: tuple[int, ...]):
    return jnp.asarray(np.ones(shape, ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype))


def test_int32_read_as_float_is_refused_naming_function_parameter_dtype_shape_and_type(mod) -> None:
    before = runs(mod)
    x = jnp.arange(6, dtype=jnp.int32).reshape(2, 3)
    with pytest.raises(Exception, match=(
            r"kernix: twice_f32: BE::Tensor::data_ptr<float>\(\): parameter 'x' is int32 \(shape \[2, 3\]\), "
            r"but float views float32 elements\. Give 'x' dtype float32, or read it as data_ptr<int32_t>\(\)")):
        jax.block_until_ready(mod.twice_f32(x, out=jax.ShapeDtypeStruct((2, 3), jnp.float32)))
    assert runs(mod) == before  # refused before the kernel's loop
    # The fix the message gives works:
    np.testing.assert_array_equal(mod.twice_f32(x.astype(jnp.float32), out=jax.ShapeDtypeStruct((2, 3), jnp.float32)), 2 * np.arange(6).reshape(2, 3))
    assert runs(mod) == before + 1


def test_a_dtype_error_reaches_an_eager_caller_as_kernix_error_and_a_jitted_one_when_xla_runs_it(mod) -> None:
    """Was: a JaxRuntimeError for the eager call too. Under jax.jit the kernel runs inside XLA's
    execution, past kernix's code: the error is JAX's there, with the same text (docs/troubleshooting.rst)."""
    x = jnp.arange(6, dtype=jnp.int32).reshape(2, 3)
    out = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    said = r"kernix: twice_f32: BE::Tensor::data_ptr<float>\(\): parameter 'x' is int32"
    with pytest.raises(kernix.KernelRuntimeError, match=said) as info:
        mod.twice_f32(x, out=out)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
    with pytest.raises(jax.errors.JaxRuntimeError, match=said):
        jax.block_until_ready(jax.jit(lambda x: mod.twice_f32(x, out=out))(x))
    from kernix.runtime.function import kernel_refusal  # any other error of XLA's is left as it is

    assert kernel_refusal("twice_f32", jax.errors.JaxRuntimeError("INTERNAL: kernix: twice_f64: no")) is None


def test_a_wider_type_than_the_element_says_it_would_run_past_the_buffer(mod) -> None:
    with pytest.raises(Exception, match=(
            r"kernix: twice_f64: BE::Tensor::data_ptr<double>\(\): parameter 'x' is float32 \(shape \[4\]\), but "
            r"double views float64 elements \(8 bytes, not 4: reading numel\(\) of them would run past the buffer\)")):
        jax.block_until_ready(mod.twice_f64(jnp.ones(4, jnp.float32), out=jax.ShapeDtypeStruct((4,), jnp.float32)))
    # An output is checked like an input: float64 in, float32 out.
    with pytest.raises(Exception, match=r"data_ptr<double>\(\): parameter 'out' is float32 \(shape \[4\]\)"):
        jax.block_until_ready(mod.twice_f64(jnp.ones(4, jnp.float64), out=jax.ShapeDtypeStruct((4,), jnp.float32)))


@pytest.mark.parametrize("dtype", sorted(PROMISED))
def test_each_dtype_is_viewed_by_its_own_types_only(mod, dtype: str) -> None:
    got = np.asarray(mod.accepts(array(dtype, (2,)), out=jax.ShapeDtypeStruct((len(TYPES),), jnp.int32)))
    accepted = {t for t, ok in zip(TYPES, got) if ok}
    assert accepted == PROMISED[dtype] | {"void", "const void"}


def test_reinterpret_ptr_views_same_size_elements_on_purpose(mod) -> None:
    x = jnp.array([1.0, -2.5, 3.0], jnp.float32)
    got = mod.bits(x, out=jax.ShapeDtypeStruct((3,), jnp.uint32))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(x).view(np.uint32))
    before = runs(mod)
    with pytest.raises(Exception, match=(
            r"kernix: bits: BE::Tensor::reinterpret_ptr<unsigned int>\(\): parameter 'x' is float64 \(shape \[3\]\), "
            r"elements of 8 bytes, but unsigned int is 4 bytes")):
        jax.block_until_ready(mod.bits(x.astype(jnp.float64), out=jax.ShapeDtypeStruct((3,), jnp.uint32)))
    assert runs(mod) == before


def test_a_typed_tensor_pins_its_dtype_in_the_spec_and_the_callable_refuses_others(mod) -> None:
    params = {p.name: p for p in mod.add_row.spec.params}
    assert (params["x"].role, params["x"].dtype, params["x"].canonical_type) == ("arg", "float32", "BE::TensorOf<float>")
    assert (params["y"].role, params["y"].dtype) == ("arg", "int32")
    assert (params["out"].role, params["out"].dtype) == ("ret", "float32")
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y = jnp.array([10, 20, 30], jnp.int32)
    before = runs(mod)
    wrong = y.astype(jnp.float32)
    with pytest.raises(kernix.CallError, match=(
            r"add_row\(\): input 'y' must be int32 \(C\+\+ type 'const BE::TensorOf<int32_t> &'\), got float32; "
            r"convert it first: \.astype\(jnp\.int32\)")):
        mod.add_row(x, wrong)
    assert runs(mod) == before
    np.testing.assert_array_equal(mod.add_row(x, wrong.astype(jnp.int32)), np.asarray(x) + [10, 20, 30])  # the fix
    assert runs(mod) == before + 1


def test_a_typed_tensor_checks_its_dtype_in_cpp_too(mod) -> None:
    """Past the callable (a direct jax.ffi.ffi_call), the tensor's constructor refuses the buffer before the
    function is entered."""
    before = runs(mod)
    call = jax.ffi.ffi_call(mod.add_row.target, jax.ShapeDtypeStruct((2, 3), jnp.float32))
    with pytest.raises(Exception, match=(
            r"kernix: add_row: BE::TensorOf<float>: parameter 'x' is int32 \(shape \[2, 3\]\), not float32\. "
            r"Give 'x' dtype float32")):
        jax.block_until_ready(call(jnp.zeros((2, 3), jnp.int32), jnp.zeros(3, jnp.int32)))
    assert runs(mod) == before


DTYPES = ("float32", "float64", "int32", "int16", "int8", "uint8", "bool", "float16", "complex64")
# Extents from 1: XLA runs no custom call at all whose outputs have no elements.
shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["add_row", "twice_f64"]), dtypes=st.tuples(*[st.sampled_from(DTYPES)] * 2),
       shape_x=shapes, shape_y=shapes)
def test_mismatched_dtypes_shapes_and_ranks_never_reach_the_kernel(mod, which, dtypes, shape_x, shape_y) -> None:
    """Whatever arrays a call passes, the kernel runs exactly when they are what it reads."""
    if which == "add_row":
        args = (array(dtypes[0], shape_x), array(dtypes[1], shape_y))
        fits = (dtypes == ("float32", "int32") and len(shape_x) == 2 and len(shape_y) == 1
                and shape_x[1] == shape_y[0])
    else:
        args = (array(dtypes[0], shape_x),)
        fits = dtypes[0] == "float64"
    # twice_f64 has no shape signature: its output is given, like its input.
    out = None if which == "add_row" else jax.ShapeDtypeStruct(args[0].shape, args[0].dtype)
    before = runs(mod)
    try:
        result = jax.block_until_ready(getattr(mod, which)(*args, out=out))
    except (kernix.CallError, kernix.KernelRuntimeError):  # the callable refused, or the kernel's BE::Error
        assert not fits
        assert runs(mod) == before, "a refused call ran the kernel"
        return
    assert fits, f"{which} accepted {dtypes} {shape_x} {shape_y}"
    assert runs(mod) == before + 1
    expected = np.asarray(args[0]) + np.asarray(args[1]) if which == "add_row" else 2 * np.asarray(args[0])
    np.testing.assert_array_equal(np.asarray(result), expected)


def test_inspect_shows_the_pinned_dtypes(tmp_path, capsys) -> None:
    src = tmp_path / "typed.cpp"
    src.write_text('#include "kernix/common.h"\n'
                   "// @BE scale\n"
                   "void scale(const BE::TensorOf<double>& x, BE::TensorOf<int64_t>& out, float k) {}\n"
                   "// @BE plain\n"
                   "void plain(const BE::Tensor& x, BE::Tensor& out) {}\n")
    assert main(["inspect", "--no-cache", str(src)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["function", "line", "arg_spec", "buffer", "dtypes", "attribute", "dtypes"]
    assert "x: float64, out: int64" in lines[2] and "k: float32 (float)" in lines[2]
    assert lines[3].split()[-2:] == ["-", "-"]
    assert main(["inspect", "--json", str(src)]) == 0
    import json

    params = json.loads(capsys.readouterr().out)["files"][0]["functions"][0]["params"]
    assert [(p["name"], p["kind"], p["dtype"]) for p in params[:2]] == [("x", "tensor", "float64"),
                                                                        ("out", "tensor", "int64")]


def test_a_typed_tensor_of_a_type_without_a_known_dtype_is_refused_at_inference(tmp_path) -> None:
    src = tmp_path / "odd.cpp"
    src.write_text('#include "kernix/common.h"\n'
                   "struct Pair { float x, y; };\n"
                   "// @BE odd\n"
                   "void odd(const BE::TensorOf<Pair>& x, BE::Tensor& out) {}\n")
    result = kernix.infer_file(str(src), use_cache=False)
    assert not result.functions
    (error,) = result.errors
    assert (error.line, error.function, error.parameter) == (4, "odd", "x")
    assert "`Pair` is not the C++ type of a dtype kernix can pin" in str(error)
    assert "take a `BE::Tensor` and read it with data_ptr<T>()" in str(error)


# ---- the headers: warning-free, with g++ and nvcc -------------------------------------------------

HEADERS_PROBE = r"""
#include "kernix/common.h"
#include "kernix/dispatch.h"
#include "kernix/detail/shim.h"
#include "kernix/detail/run_shim.h"
#include "kernix/detail/frame.h"
#include "kernix/detail/handler.h"
#include "brainevent/common.h"
#include "brainevent/check.h"
#include "brainevent/dispatch.h"
#include "brainevent/dtypes.h"
#include "brainevent/ffi_compat.h"
#include "brainevent/tensor.h"
#include <complex>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void probe_kernel(BE::TensorOf<float> x, BE::TensorOf<__half> h, BE::Tensor y) {
  x.data_ptr()[0] = static_cast<float>(y.numel()) + y.data_ptr<float>()[0] + __half2float(h.data_ptr()[0]);
}
#endif

int probe(const BE::Tensor& x, BE::TensorOf<int32_t>& out, BE::TensorOf<std::complex<float>> c) {
  int n = 0;
  n += x.data_ptr<float>() != nullptr;
  n += x.data_ptr<const void>() != nullptr;
  n += x.reinterpret_ptr<uint32_t>() != nullptr;
  n += out.data_ptr()[0] + out.data_ptr<int32_t>()[0];
  n += c.data_ptr() != nullptr;
  BE_CHECK(x.ndim() == 1) << "rank " << x.ndim() << " " << x.dtype();
  BE_DISPATCH_FLOATING(x.dtype(), scalar_t, { n += x.data_ptr<scalar_t>() != nullptr; });
  BE_DISPATCH_FLOATING_AND_HALF(x.dtype(), scalar_t, { n += x.data_ptr<scalar_t>() != nullptr; });
  BE_DISPATCH_INTEGRAL(x.dtype(), scalar_t, { n += x.data_ptr<scalar_t>() != nullptr; });
  BE_DISPATCH_COMPLEX(x.dtype(), scalar_t, { n += x.data_ptr<scalar_t>() != nullptr; });
  BE_DISPATCH_FLOATING_TYPES(x.dtype(), "probe", [&] { n += x.data_ptr<scalar_t>() != nullptr; });
  kernix::TensorView view{nullptr, 11, 0, nullptr};
  BE::Tensor t = kernix::detail::tensor_from<BE::Tensor>(&view, "t");
  BE::TensorOf<float> f = kernix::detail::tensor_from<BE::TensorOf<float>>(&view, "f");
  n += static_cast<int>(t.numel() + f.numel()) + (BE::element_dtype<long long>::value == BE::DType::Int64);
  return n;
}
"""


def _compile_probe(compiler: list[str], path) -> None:
    include = str(kernix.paths.include_dir())
    cmd = [*compiler, "-std=c++17", f"-I{include}", "-isystem", toolchain.jax_ffi_include_dir(), "-c", str(path),
           "-o", str(path.with_suffix(".o"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and not proc.stderr.strip(), f"{' '.join(cmd)}\n{proc.stderr}"


def test_the_headers_compile_without_warnings_under_gxx(tmp_path) -> None:
    src = tmp_path / "probe.cpp"
    src.write_text(HEADERS_PROBE)
    _compile_probe([toolchain.host_compiler_path(), "-Wall", "-Wextra", "-Werror"], src)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed")
def test_the_headers_compile_without_warnings_under_nvcc(tmp_path) -> None:
    src = tmp_path / "probe.cu"
    src.write_text(HEADERS_PROBE)
    _compile_probe([toolchain.find_nvcc().path, "-arch=sm_80", "-Werror", "all-warnings",
                    "-Xcompiler", "-Wall,-Wextra,-Werror"], src)


# ---- CUDA: the shim builds typed tensors with nvcc; on a GPU, the checks run -----------------------

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include "kernix/common.h"

__global__ void half_twice_kernel(BE::TensorOf<__half> x, BE::TensorOf<__half> out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out.data_ptr()[i] = __hadd(x.data_ptr()[i], x.data_ptr()[i]);
}

// @BE half_twice
void half_twice(const BE::TensorOf<__half>& x, BE::TensorOf<__half>& out, cudaStream_t stream) {
  int n = x.numel_checked_int();
  half_twice_kernel<<<(n + 127) / 128, 128, 0, stream>>>(x, out, n);
  BE_CHECK_KERNEL_LAUNCH();
}

__global__ void copy_bits_kernel(const uint16_t* x, uint16_t* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i];
}

// The 16 bits of float16 or bfloat16 elements (uint16_t is their documented raw view).
// @BE copy_bits
void copy_bits(const BE::Tensor& x, BE::Tensor& out, cudaStream_t stream) {
  int n = x.numel_checked_int();
  copy_bits_kernel<<<(n + 127) / 128, 128, 0, stream>>>(x.data_ptr<uint16_t>(), out.data_ptr<uint16_t>(), n);
  BE_CHECK_KERNEL_LAUNCH();
}
"""


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed")
def test_typed_tensors_build_with_nvcc(tmp_path) -> None:
    src = tmp_path / "typed.cu"
    src.write_text(CUDA_SOURCE)
    mod = kernix.load_cuda_file(src, name=unique_name("typed_cuda"), compute_capability="sm_80",
                                auto_register=False, build_directory=tmp_path / "b")
    assert [(p.name, p.dtype) for p in mod.half_twice.spec.inputs + mod.half_twice.spec.outputs] == [
        ("x", "float16"), ("out", "float16")]


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_typed_tensors_and_raw_bits_on_a_gpu(tmp_path) -> None:
    src = tmp_path / "typed.cu"
    src.write_text(CUDA_SOURCE)
    mod = kernix.load_cuda_file(src, name=unique_name("typed_cuda_run"), build_directory=tmp_path / "b")
    gpu = jax.devices("gpu")[0]
    x = jax.device_put(jnp.array([1.5, -2.0, 3.25], jnp.float16), gpu)
    np.testing.assert_array_equal(np.asarray(mod.half_twice(x, out=jax.ShapeDtypeStruct((3,), jnp.float16))),
                                  np.asarray(x) * 2)
    with pytest.raises(kernix.CallError, match=r"half_twice\(\): input 'x' must be float16 .* got bfloat16"):
        mod.half_twice(x.astype(jnp.bfloat16), out=jax.ShapeDtypeStruct((3,), jnp.float16))
    for dtype in (jnp.float16, jnp.bfloat16):
        y = x.astype(dtype)
        np.testing.assert_array_equal(np.asarray(mod.copy_bits(y, out=jax.ShapeDtypeStruct((3,), jnp.uint16))).view(np.uint16), np.asarray(y).view(np.uint16))
    with pytest.raises(Exception, match=r"kernix: copy_bits: BE::Tensor::data_ptr<short unsigned int>\(\): "
                                        r"parameter 'x' is float32 \(shape \[3\]\)"):
        jax.block_until_ready(mod.copy_bits(x.astype(jnp.float32), out=jax.ShapeDtypeStruct((3,), jnp.uint16)))


def test_a_typed_tensor_spec_round_trips_and_a_tampered_one_is_refused(mod) -> None:
    from kernix.language.spec import FunctionSpec

    spec = mod.add_row.spec
    assert FunctionSpec.from_json(spec.to_json()) == spec
    for change in ({"dtype": None}, {"rank": 2}, {"canonical_type": "BE::Tensor"}, {"canonical_type": "BE::TensorOf<"}):
        data = spec.to_json()
        data["params"][0] = {**data["params"][0], **change}
        with pytest.raises(ValueError, match="bad parameter"):
            FunctionSpec.from_json(data)
