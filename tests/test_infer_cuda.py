"""Inference sees what nvcc and g++ see (kernix/frontend/compiler_view.py and
the CUDA rules of binding and classification), over fixtures/cuda_real/."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kernix import InferResult, infer_file
from kernix.paths import include_dir as kernix_include_dir
from helpers import FIXTURES

from kernix.backend import toolchain

REAL = FIXTURES / "cuda_real"

needs_cuda = pytest.mark.skipif(
    toolchain.nvcc_path_or_none() is None or not toolchain.cuda_include_dirs(),
    reason="needs nvcc and the CUDA headers",
)
pytestmark = needs_cuda


def _infer(path: Path, **kw: object) -> InferResult:
    return infer_file(path, use_cache=False, **kw)  # type: ignore[arg-type]


def _nvcc_version() -> tuple[int, int]:
    out = subprocess.run([toolchain.nvcc_path_or_none(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


# ---------------------------------------------------------------- the compiler's view


def test_cuda_view_is_nvcc_host_pass() -> None:
    from kernix.frontend.compiler_view import view

    v = view("cuda")
    assert v is not None
    major, minor = _nvcc_version()
    assert v.defined("__CUDACC__") is not None and v.defined("__NVCC__") is not None
    assert v.defined("__CUDACC_VER_MAJOR__") == str(major)
    assert v.defined("__CUDACC_VER_MINOR__") == str(minor)
    assert v.defined("__CUDACC_VER_BUILD__") is not None
    assert v.defined("__CUDA_ARCH__") is None  # the host pass
    assert v.defined("__GNUC__") is not None and v.defined("__clang__") is None
    assert v.defined("__cplusplus") == "201703L"
    assert "cuda_runtime.h" in v.forced_includes
    assert any(os.path.isfile(os.path.join(d, "cuda_runtime.h")) for d in v.include_dirs)
    if major >= 13:
        assert any(os.path.isdir(os.path.join(d, "cub")) for d in v.system_dirs)
        assert os.path.realpath(toolchain.cuda_cccl_include_dir()) in map(os.path.realpath, v.system_dirs)


def test_cpp_view_is_host_compiler() -> None:
    from kernix.frontend.compiler_view import view

    v = view("cpp")
    assert v is not None
    assert v.defined("__GNUC__") is not None and v.defined("__clang__") is None
    assert v.defined("__CUDACC__") is None
    assert view("cpp", ("-std=c++20",)).defined("__cplusplus") == "202002L"


def test_views_are_remembered_per_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernix.frontend import compiler_view

    compiler_view.forget()
    assert compiler_view.view("cuda") is not None  # memo filled (maybe earlier)
    compiler_view.forget()

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("a compiler was run although its answer is remembered")

    monkeypatch.setattr(compiler_view.subprocess, "run", refuse)
    try:
        assert compiler_view.view("cuda").defined("__CUDACC__") is not None
    finally:
        compiler_view.forget()


def test_dm_output_with_function_like_macros() -> None:
    from kernix.frontend.compiler_view import parse_dm

    assert parse_dm("#define A 1\n#define F(x, y) ((x) + (y))\n#define E\n") == [
        ("A", "1"), ("F(x, y)", "((x) + (y))"), ("E", "")]


# ---------------------------------------------------------------- what nvcc accepts


@pytest.fixture(scope="module")
def accepted() -> InferResult:
    return _infer(REAL / "accepted.cu")


def test_real_cuda_is_accepted(accepted: InferResult) -> None:
    assert accepted.errors == (), [str(e) for e in accepted.errors]
    specs = {f.name: f.arg_spec for f in accepted.functions}
    assert specs == {
        "scale_half": ("arg", "ret", "attr.a:float16", "stream"),
        "scale_bf16": ("arg", "ret", "attr.a:bfloat16", "attr.w:float64", "stream"),
        "mix_halves": ("arg", "ret", "attr.h:float16", "attr.b:bfloat16", "stream"),
        "scaled": ("arg", "ret", "attr.factor:float32"),  # a specialization a call deduces
        "axpy_f32": ("arg", "ret", "attr.a:float32", "stream"),
        "fill_f32": ("ret", "attr.value:float32", "stream"),
        "fill_f64": ("ret", "attr.value:float64", "stream"),
        "axpy_f64": ("arg", "ret", "attr.a:float64", "stream"),
    }
    assert [f.name for f in accepted.functions if f.returns_error] == ["scale_bf16"]


def test_cudacc_guards_follow_nvcc(accepted: InferResult) -> None:
    names = {f.name for f in accepted.functions}
    assert "host_only_view" not in names  # under #ifndef __CUDACC__
    assert "device_pass_only" not in names  # under #ifdef __CUDA_ARCH__
    half = next(f for f in accepted.functions if f.name == "scale_half")
    assert half.params[2].canonical_type == "__half"  # `using accum_t = __half` under #ifdef __CUDACC__


def test_macro_stack_binds_each_name(accepted: InferResult) -> None:
    lines = {f.name: f.line for f in accepted.functions}
    assert lines["axpy_f32"] == lines["fill_f32"] != lines["axpy_f64"] == lines["fill_f64"]


def test_cub_thrust_and_libcudacxx() -> None:
    r = _infer(REAL / "cub_thrust.cu")
    assert r.errors == (), [str(e) for e in r.errors]
    assert [f.arg_spec for f in r.functions] == [("arg", "ret", "stream")]


def test_curand_or_one_error_at_the_include() -> None:
    r = _infer(REAL / "curand.cu")
    present = any(os.path.isfile(os.path.join(d, "curand_kernel.h")) for d in toolchain.cuda_include_dirs())
    if present:
        assert r.errors == (), [str(e) for e in r.errors]
        assert r.functions[0].arg_spec == ("arg", "ret", "attr.offset:uint64", "stream")
    else:
        assert len(r.errors) == 1
        e = r.errors[0]
        assert (e.file, e.line) == (str(REAL / "curand.cu"), 2)
        assert "curand_kernel.h" in e.message and "not found" in e.message


def test_prelude_is_precompiled_once(tmp_path: Path) -> None:
    root = Path(os.environ["KERNIX_CACHE_DIR"])
    _infer(REAL / "curand.cu")
    pchs = list((root / "toolchain").glob("prelude-*.pch"))
    assert pchs, "the CUDA prelude was not precompiled"
    before = {p: p.stat().st_mtime_ns for p in pchs}
    _infer(REAL / "accepted.cu")
    assert {p: p.stat().st_mtime_ns for p in pchs} == before


# ---------------------------------------------------------------- what must be refused


@pytest.fixture(scope="module")
def refused() -> InferResult:
    return _infer(REAL / "refused.cu")


@pytest.mark.parametrize(
    "function, line, fragments",
    [
        ("kern", 7, ["`__global__` kernel", "launcher", "kern<<<"]),
        ("dev_only", 10, ["`__device__` function", "__host__ __device__"]),
        ("gone", 16, ["deleted function", "= delete"]),
        ("method", 20, ["member function of 'Op'", "member functions cannot be exported: annotate a free function"]),
        ("pick", 25, ["explicit specialization", "T cannot be deduced"]),
        ("reserved_out", 28, ["'out' is reserved"]),
        ("reserved_vmap", 31, ["'vmap_method' is reserved"]),
        ("unicode_attr", 34, ["ASCII C++ identifiers"]),
        ("int_stream", 37, ["named `stream`", "`int`", "int64_t stream"]),
        ("u64_stream", 40, ["named `stream`", "`uint64_t`"]),
        ("third_a", 47, ["generates 'first_a', 'second_a', none named 'third_a'"]),
        ("proto", 52, ["attr.n:int32"]),
        ("keyword_attr", 56, ["'lambda' is a Python keyword", "rename the parameter, e.g. to 'lambda_'"]),
    ],
)
def test_refusals_name_function_and_fix(refused: InferResult, function: str, line: int, fragments: list[str]) -> None:
    errs = [e for e in refused.errors if e.function == function]
    assert len(errs) == 1, [str(e) for e in refused.errors]
    e = errs[0]
    assert e.line == line and e.file == str(REAL / "refused.cu")
    for frag in fragments:
        assert frag in e.message, e.message
    assert "bound to nothing" not in e.message


def test_refused_file_still_exports_the_rest(refused: InferResult) -> None:
    assert [f.name for f in refused.functions] == ["both_spaces", "first_a"]
    params = {e.parameter for e in refused.errors if e.parameter}
    assert {"out", "vmap_method", "stream", "lambda"} <= params


# ---------------------------------------------------------------- binding and types


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def test_canonical_types_not_spelling(tmp_path: Path) -> None:
    src = _write(tmp_path, "t.cu", (
        '#include "kernix/common.h"\n'
        "static const float table[4] = {0};\n"
        "enum class Flag : bool { off, on };\n"
        "// @BE typed\n"
        "void typed(const BE::Tensor& x, BE::Tensor& y, decltype(table[0]) w, Flag f,\n"
        "           const cudaStream_t& s) {}\n"))
    r = _infer(src)
    assert r.errors == (), [str(e) for e in r.errors]
    assert r.functions[0].arg_spec == ("arg", "ret", "attr.w:float32", "attr.f:bool", "stream")


def test_cr_only_line_endings(tmp_path: Path) -> None:
    text = (
        '#include "kernix/common.h"\n'
        "// @BE first\n"
        "void first(const BE::Tensor& x, BE::Tensor& y) {}\n"
        "\n"
        "// @BE second\n"
        "[[deprecated]]\n"
        "void second(const BE::Tensor& x, BE::Tensor& y, int n) {}\n"
    )
    r = _infer(_write(tmp_path, "cr.cu", text.replace("\n", "\r").encode()))
    assert r.errors == (), [str(e) for e in r.errors]
    assert [(f.name, f.line) for f in r.functions] == [("first", 3), ("second", 7)]


def test_disagreeing_annotations_on_one_function(tmp_path: Path) -> None:
    src = _write(tmp_path, "p.cu", (
        '#include "kernix/common.h"\n'
        "// @BE f arg ret\n"
        "void f(const BE::Tensor& x, BE::Tensor& y);\n"
        "// @BE f ret arg\n"
        "void f(const BE::Tensor& x, BE::Tensor& y) {}\n"))
    r = _infer(src)
    assert r.functions == ()
    assert [(e.line, e.function) for e in r.errors] == [(4, "f")]
    assert "disagrees with `// @BE f arg ret` (line 2)" in r.errors[0].message


def test_missing_header_is_one_error_at_the_include(tmp_path: Path) -> None:
    src = _write(tmp_path, "m.cu", (
        '#include "kernix/common.h"\n'
        "#include <no_such_cuda_header_kernix.h>\n"
        "// @BE f\n"
        "void f(const BE::Tensor& x, BE::Tensor& y) {}\n"))
    r = _infer(src)
    assert [(e.line, "no_such_cuda_header_kernix.h" in e.message) for e in r.errors] == [(2, True)]


def test_cpp_sees_gcc_not_clang(tmp_path: Path) -> None:
    src = _write(tmp_path, "g.cpp", (
        '#include "kernix/common.h"\n'
        "#include <vector>\n"
        "#ifdef __clang__\n"
        "// @BE only_clang\n"
        "void only_clang(const BE::Tensor& x, BE::Tensor& y) {}\n"
        "#endif\n"
        "#if defined(__GNUC__) && !defined(__clang__)\n"
        "// @BE only_gcc\n"
        "void only_gcc(const BE::Tensor& x, BE::Tensor& y) {}\n"
        "#endif\n"
        "#ifdef __CUDACC__\n"
        "// @BE only_nvcc\n"
        "void only_nvcc(const BE::Tensor& x, BE::Tensor& y) {}\n"
        "#endif\n"))
    r = _infer(src)
    assert r.errors == (), [str(e) for e in r.errors]
    assert [f.name for f in r.functions] == ["only_gcc"]


def test_leading_system_includes() -> None:
    from kernix.frontend.pch import leading

    text = b'// c\n/* d */\n#pragma once\n#include <cub/cub.cuh>  // x\r\n#include <a.h>\n#include "k.h"\n#include <b.h>\n'
    assert [i.line for i in leading(text, None)] == ["#include <cub/cub.cuh>", "#include <a.h>"]
    assert [i.line for i in leading(b"#define X 1\n#include <a.h>\n", None)] == []


def test_precompiled_headers_stay_dependencies() -> None:
    r = _infer(REAL / "cub_thrust.cu")
    deps = set(r.dependencies)
    assert any(d.endswith("cub/cub.cuh") for d in deps)
    assert any(d.endswith("cuda_runtime.h") for d in deps)
    assert any(d.endswith("kernix/common.h") for d in deps)


def test_error_in_a_user_header_is_not_hidden_by_the_precompiled_prelude(tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "broken_user.h").write_text("struct Broken { int x }; // missing ';'\n")
    src = _write(tmp_path, "u.cu", (
        "#include <broken_user.h>\n"
        '#include "kernix/common.h"\n'
        "// @BE f\n"
        "void f(const BE::Tensor& x, BE::Tensor& y) {}\n"))
    r = _infer(src, include_dirs=[str(inc)])
    assert [(Path(e.file).name, e.line) for e in r.errors] == [("broken_user.h", 1)], [str(e) for e in r.errors]


def test_edited_header_in_the_precompiled_prelude_is_seen(tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    header = inc / "attr_type.h"
    header.write_text("using attr_t = float;\n")
    src = _write(tmp_path, "e.cu", (
        "#include <attr_type.h>\n"
        '#include "kernix/common.h"\n'
        "// @BE f\n"
        "void f(const BE::Tensor& x, BE::Tensor& y, attr_t a) {}\n"))
    assert _infer(src, include_dirs=[str(inc)]).functions[0].arg_spec == ("arg", "ret", "attr.a:float32")
    header.write_text("using attr_t = double; // edited\n")
    os.utime(header, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns + 2_000_000_000))
    r = _infer(src, include_dirs=[str(inc)])
    assert r.errors == (), [str(e) for e in r.errors]
    assert r.functions[0].arg_spec == ("arg", "ret", "attr.a:float64")
    # the spec cache watches a header held by the PCH too
    assert infer_file(src, include_dirs=[str(inc)]).functions[0].arg_spec == ("arg", "ret", "attr.a:float64")
    header.write_text("using attr_t = int; // edited again\n")
    os.utime(header, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns + 4_000_000_000))
    assert infer_file(src, include_dirs=[str(inc)]).functions[0].arg_spec == ("arg", "ret", "attr.a:int32")
    assert _infer(src, include_dirs=[str(inc)]).functions[0].arg_spec == ("arg", "ret", "attr.a:int32")


def test_quoted_leading_includes_are_precompiled_and_still_watched(tmp_path: Path) -> None:
    """A project's own common header ("...", next to the file or on -I) goes into the
    precompiled prelude by its absolute path; an edit to it is still seen."""
    from kernix.frontend.pch import leading

    header = tmp_path / "local_types.h"
    header.write_text("#pragma once\nusing attr_t = float;\n")
    src = _write(tmp_path, "q.cu", (
        '#include "local_types.h"\n'
        '#include "kernix/common.h"\n'
        '#include "not_there.h"\n'
        "// @BE f\n"
        "void f(const BE::Tensor& x, BE::Tensor& y, attr_t a) {}\n"))
    lines = [i.line for i in leading(src.read_bytes(), [str(tmp_path), str(kernix_include_dir())])]
    assert lines == [f'#include "{header}"', f'#include "{kernix_include_dir() / "kernix" / "common.h"}"']
    (tmp_path / "not_there.h").write_text("// now it is\n")
    assert _infer(src).functions[0].arg_spec == ("arg", "ret", "attr.a:float32")
    header.write_text("#pragma once\nusing attr_t = double; // edited\n")
    os.utime(header, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns + 2_000_000_000))
    assert _infer(src).functions[0].arg_spec == ("arg", "ret", "attr.a:float64")
    assert infer_file(src).functions[0].arg_spec == ("arg", "ret", "attr.a:float64")


def test_load_cuda_file_builds_what_inference_accepts(tmp_path: Path) -> None:
    """The whole file goes through nvcc: every inferred signature is callable as inferred."""
    import kernix

    m = kernix.load_cuda_file(REAL / "accepted.cu", compute_capability="sm_80", auto_register=False,
                              build_directory=tmp_path / "build")
    assert {"scale_half", "scale_bf16", "mix_halves", "scaled", "axpy_f32", "fill_f64"} <= set(m.specs)
