"""What an exported function returns: ``void``, or an ``xla::ffi::Error`` whose
failure reaches the caller (eagerly and under ``jit``, through both kinds of
handler) with its code, its message and the function's name; any other return
type is refused at inference, at the function's line."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import gpus, has_nvcc, unique_name

import kernix
from kernix import infer_file
from kernix.backend import codegen
from kernix.language.spec import FunctionSpec, Param

#: One function per handler kind: tensors and attributes only (the C-API
#: handler of frame.h), and a typed XLA buffer (an ffi.h handler).
CPU_SOURCE = textwrap.dedent(
    """
    #include <cstdint>
    #include "kernix/common.h"
    #include "xla/ffi/api/ffi.h"

    namespace ffi = xla::ffi;
    using Status = xla::ffi::Error;

    // @BE checked_double (...)->(...)
    ffi::Error checked_double(const BE::Tensor& x, BE::Tensor& y, int32_t fail) {
      if (fail == 1) return ffi::Error::InvalidArgument("fail=1 asked for an invalid-argument error");
      if (fail == 2) return ffi::Error(ffi::ErrorCode::kOutOfRange, "index 7 is out of range");
      if (fail == 3) return ffi::Error(ffi::ErrorCode::kInternal, "");
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = 2 * x.data_ptr<float>()[i];
      return ffi::Error::Success();
    }

    // @BE typed_checked (n)->(n)
    Status typed_checked(ffi::Buffer<ffi::DataType::F32, 1> x, ffi::ResultBuffer<ffi::DataType::F32, 1> y,
                         int32_t fail) {
      if (fail) return ffi::Error(ffi::ErrorCode::kFailedPrecondition, "typed: precondition not met");
      for (size_t i = 0; i < x.element_count(); ++i) y->typed_data()[i] = 3 * x.typed_data()[i];
      return ffi::Error::Success();
    }

    // @BE plain (...)->(...)
    void plain(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i] + 1;
    }
    """
)


@pytest.fixture(scope="module")
def cpu_module(tmp_path_factory):
    base = tmp_path_factory.mktemp("returns")
    src = base / "returns.cpp"
    src.write_text(CPU_SOURCE)
    return kernix.load_cpp_file(src, name=unique_name("returns"), build_directory=base / "cache")


def test_the_spec_records_an_error_return(cpu_module):
    specs = cpu_module.functions
    assert specs["checked_double"].returns_error
    assert specs["typed_checked"].returns_error  # through a `using` alias
    assert not specs["plain"].returns_error
    assert specs["checked_double"].to_json()["returns_error"] is True
    assert "returns_error" not in specs["plain"].to_json()  # a void spec's JSON is as before


def test_success_writes_the_outputs(cpu_module):
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(cpu_module.checked_double(x, fail=0), 2 * np.arange(4))
    np.testing.assert_array_equal(cpu_module.typed_checked(x, fail=0), 3 * np.arange(4))
    np.testing.assert_array_equal(jax.jit(lambda v: cpu_module.checked_double(v, fail=0))(x), 2 * np.arange(4))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "function, fail, code, text",
    [
        ("checked_double", 1, "INVALID_ARGUMENT", "fail=1 asked for an invalid-argument error"),
        ("checked_double", 2, "OUT_OF_RANGE", "index 7 is out of range"),
        ("checked_double", 3, "INTERNAL", "the function returned an error without a message"),
        ("typed_checked", 1, "FAILED_PRECONDITION", "typed: precondition not met"),
    ],
)
def test_a_returned_failure_reaches_the_caller(cpu_module, jit, function, fail, code, text):
    """Was: the shim dropped the returned error; the call returned normally with
    its output never written."""
    fn = getattr(cpu_module, function)
    x = jnp.arange(4, dtype=jnp.float32)
    call = jax.jit(lambda v: fn(v, fail=fail)) if jit else (lambda v: fn(v, fail=fail))
    with pytest.raises(RuntimeError) as info:
        jax.block_until_ready(call(x))
    message = str(info.value)
    assert f"kernix: {function}: {text}" in message
    assert message.startswith(code), message  # XLA's error code, kept


def test_generated_shim_checks_only_error_returns():
    x, y = Param("x", "arg"), Param("y", "ret")
    unit = codegen.shim_unit("/src/f.cpp", [
        codegen.ExportedFunction(0, FunctionSpec("f", "f", (x, y), returns_error=True)),
        codegen.ExportedFunction(1, FunctionSpec("g", "g", (x, y))),
    ])
    f_body = unit.split("kernix_shim_0_f")[1].split("}")[0]
    g_body = unit.split("kernix_shim_1_g")[1].split("}")[0]
    assert "::kernix::detail::check_returned(::f(" in f_body
    assert "check_returned" not in g_body and "::g(" in g_body


def test_a_returned_error_code_is_read_as_an_enum_or_an_optional(tmp_path: Path):
    """Some ffi.h versions give ``errc()`` as ``std::optional<ErrorCode>``, others as ``ErrorCode``: the
    shim header reads both (without including <optional> itself), an empty optional as UNKNOWN (2)."""
    program = tmp_path / "codes.cpp"
    program.write_text(textwrap.dedent(
        """
        #include <optional>
        #include <string>
        #include "kernix/detail/shim.h"
        enum class Code { kOk = 0, kOutOfRange = 11 };
        struct Plain { bool success() const { return false; } Code errc() const { return Code::kOutOfRange; }
                       std::string message() const { return "plain"; } };
        struct Optional { bool success() const { return false; }
                          std::optional<Code> errc() const { return Code::kOutOfRange; }
                          std::string message() const { return "optional"; } };
        struct Empty { bool success() const { return false; } std::optional<Code> errc() const { return {}; }
                       std::string message() const { return "empty"; } };
        template <class E> int code_of(const E& e) {
          try { kernix::detail::check_returned(e); } catch (const kernix::detail::ReturnedError& r) { return r.code(); }
          return -1;
        }
        int main() { return code_of(Plain{}) == 11 && code_of(Optional{}) == 11 && code_of(Empty{}) == 2 ? 0 : 1; }
        """
    ))
    from kernix.backend import toolchain
    from kernix.paths import include_dir

    binary = tmp_path / "codes"
    subprocess.run([toolchain.find_host_compiler().path, "-std=c++17", f"-I{include_dir()}", str(program), "-o",
                    str(binary)], check=True, capture_output=True)
    assert subprocess.run([str(binary)]).returncode == 0


def test_spec_json_records_the_return_kind():
    spec = FunctionSpec("f", "f", (Param("y", "ret"),), returns_error=True)
    assert FunctionSpec.from_json(spec.to_json()) == spec
    assert spec != FunctionSpec("f", "f", (Param("y", "ret"),))  # what it returns is part of the spec
    # Only JSON's true says so (a tampered value is no reason to generate the check).
    assert not FunctionSpec.from_json({**spec.to_json(), "returns_error": "yes"}).returns_error


# ------------------------------------------------------------------ refusals

REFUSED = textwrap.dedent(
    """\
    #include <cstdint>
    #include "kernix/common.h"
    #include "xla/ffi/api/ffi.h"

    // @BE returns_int (...)->(...)
    int returns_int(const BE::Tensor& x, BE::Tensor& y) { return 0; }

    // @BE returns_error_or
    xla::ffi::ErrorOr<int> returns_error_or(const BE::Tensor& x, BE::Tensor& y) { return 0; }

    // @BE returns_error_ref
    const xla::ffi::Error& returns_error_ref(const BE::Tensor& x, BE::Tensor& y);

    // @BE returns_auto
    auto returns_auto(const BE::Tensor& x, BE::Tensor& y) { return 1.0f; }

    // @BE returns_void
    void returns_void(const BE::Tensor& x, BE::Tensor& y) {}

    // @BE returns_undeduced
    auto returns_undeduced(const BE::Tensor& x, BE::Tensor& y);
    """
)


@pytest.mark.parametrize(
    "function, line, fragments",
    [
        ("returns_int", 6, ["returns `int`", "would be dropped", ("return `void` and write results to a "
                            "`BE::Tensor&` output, or return `xla::ffi::Error`")]),
        ("returns_error_or", 9, ["`xla::ffi::ErrorOr<int>`", ("return `xla::ffi::Error` and write the value to a "
                                 "`BE::Tensor&` output")]),
        ("returns_error_ref", 12, ["a reference: return `xla::ffi::Error` by value"]),
        ("returns_auto", 15, ["returns `float`", "would be dropped"]),  # deduced: clang reads its body
        ("returns_undeduced", 21, ["returns `auto`", "write the return type out"]),
    ],
)
def test_other_return_types_are_refused_at_their_line(tmp_path: Path, function, line, fragments):
    src = tmp_path / "refused.cpp"
    src.write_text(REFUSED)
    result = infer_file(src, use_cache=False)
    assert [f.name for f in result.functions] == ["returns_void"]
    (error,) = [e for e in result.errors if e.function == function]
    assert (error.file, error.line) == (str(src), line)
    for fragment in fragments:
        assert fragment in error.message, error.message


def test_refused_return_type_fix_works(tmp_path: Path):
    """The suggested fix, returning xla::ffi::Error instead of int, loads and reports."""
    src = tmp_path / "fixed.cpp"
    src.write_text(REFUSED.split("// @BE returns_error_or")[0].replace(
        "int returns_int(const BE::Tensor& x, BE::Tensor& y) { return 0; }",
        "xla::ffi::Error returns_int(const BE::Tensor& x, BE::Tensor& y) {\n"
        "  return xla::ffi::Error::Internal(\"it said no\");\n}",
    ))
    mod = kernix.load_cpp_file(src, name=unique_name("fixed"))
    with pytest.raises(RuntimeError, match="kernix: returns_int: it said no"):
        jax.block_until_ready(mod.returns_int(jnp.zeros(2, jnp.float32)))


# ------------------------------------------------------------------ CUDA

CUDA_SOURCE = textwrap.dedent(
    """
    #include "kernix/common.h"
    #include "xla/ffi/api/ffi.h"

    __global__ void double_kernel(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
      if (i < n) y[i] = 2 * x[i];
    }

    // @BE cuda_checked (...)->(...)
    xla::ffi::Error cuda_checked(const BE::Tensor& x, BE::Tensor& y, int32_t fail, cudaStream_t stream) {
      if (fail) return xla::ffi::Error::InvalidArgument("cuda: fail was set");
      int64_t n = x.numel();
      double_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
      cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return xla::ffi::Error::Internal(cudaGetErrorString(err));
      return xla::ffi::Error::Success();
    }

    // @BE cuda_refused
    cudaError_t cuda_refused(const BE::Tensor& x, BE::Tensor& y, cudaStream_t stream) { return cudaSuccess; }
    """
)


@pytest.mark.skipif(not has_nvcc(), reason="needs nvcc and the CUDA headers")
def test_cuda_inference_and_build_record_error_and_refuse_a_cuda_status(tmp_path: Path):
    src = tmp_path / "checked.cu"
    src.write_text(CUDA_SOURCE)
    result = infer_file(src, use_cache=False)
    assert [(f.name, f.returns_error) for f in result.functions] == [("cuda_checked", True)]
    (error,) = result.errors
    assert error.function == "cuda_refused" and "returns `cudaError_t`" in error.message
    assert "would be dropped" in error.message
    # nvcc compiles the checking shim (running it needs a GPU: the test below).
    src.write_text(CUDA_SOURCE.split("// @BE cuda_refused")[0])
    mod = kernix.load_cuda_file(src, name=unique_name("cuda_checked"), compute_capability="sm_80",
                                auto_register=False, build_directory=tmp_path / "cache")
    assert mod.functions["cuda_checked"].returns_error


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_cuda_returned_failure_reaches_the_caller(tmp_path: Path, jit):
    src = tmp_path / "checked.cu"
    src.write_text(CUDA_SOURCE.split("// @BE cuda_refused")[0])
    mod = kernix.load_cuda_file(src, name=unique_name("cuda_checked"))
    x = jnp.arange(8, dtype=jnp.float32, device=gpus()[0])

    def call(v, fail):
        return mod.cuda_checked(v, fail=fail)

    run = jax.jit(call, static_argnames="fail") if jit else call
    np.testing.assert_array_equal(run(x, fail=0), 2 * np.arange(8))
    with pytest.raises(RuntimeError) as info:
        jax.block_until_ready(run(x, fail=1))
    assert "kernix: cuda_checked: cuda: fail was set" in str(info.value)
    assert str(info.value).startswith("INVALID_ARGUMENT"), str(info.value)


def test_a_prebuilt_module_records_and_reports_the_error(tmp_path: Path):
    """The prebuilt manifest embeds the spec with its return kind; it validates
    when loaded, and the failure still reaches the caller."""
    import json

    src = tmp_path / "prebuilt_returns.cpp"
    src.write_text(CPU_SOURCE.split("// @BE typed_checked")[0])
    out = tmp_path / "out"
    kernix.build_module(src, out, name="prebuilt_returns")
    manifest = json.loads(next(out.glob("*.json")).read_text())
    assert [f.get("returns_error") for f in manifest["functions"]] == [True]
    mod = kernix.load_prebuilt(out, target_prefix=unique_name("prebuilt_returns"))
    assert mod.functions["checked_double"].returns_error
    with pytest.raises(RuntimeError, match="kernix: checked_double: index 7 is out of range"):
        jax.block_until_ready(mod.checked_double(jnp.zeros(2, jnp.float32), fail=2))


def test_inspect_shows_the_return_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    import json

    from kernix.cli import main

    src = tmp_path / "returns.cpp"
    src.write_text(CPU_SOURCE)
    assert main(["inspect", "--json", str(src)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    assert {f["name"]: f["returns_error"] for f in entry["functions"]} == {
        "checked_double": True, "typed_checked": True, "plain": False}
    src.write_text(REFUSED)
    assert main(["inspect", str(src)]) == 1
    assert f"{src}:6:5: error: function 'returns_int' returns `int`" in capsys.readouterr().err
