"""Signature inference over the sources in fixtures/ (kernix/frontend/infer.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernix.errors import InferenceError, KernixError
from kernix import InferResult, infer_file, language_of
from helpers import FIXTURES



def _infer(name: str, **kw: object) -> InferResult:
    return infer_file(FIXTURES / name, use_cache=False, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def rules() -> dict[str, object]:
    r = _infer("rules.cpp")
    assert r.errors == (), [str(e) for e in r.errors]
    return {f.name: f for f in r.functions} | {"__result__": r}


def test_function_type_is_the_exact_type_with_typedefs_resolved(rules: dict) -> None:
    # What the shim takes the function's address with: the annotated overload,
    # references and constness of referred-to types kept, top-level const
    # dropped (as in any function type), aliases and enums spelled in full.
    assert rules["overload"].function_type == "void (const BE::Tensor &, BE::Tensor &, float)"
    assert rules["east_const"].function_type == "void (BE::Tensor, const BE::Tensor &, BE::Tensor)"
    assert rules["scale_by"].function_type == "void (const BE::Tensor &, BE::Tensor &, double, float, int, long)"
    assert rules["modes"].function_type == (
        "void (const BE::Tensor &, BE::Tensor &, ops::Mode, ops::Plain, unsigned long, const long &)")


def test_function_type_is_left_out_where_it_cannot_be_written(tmp_path: Path) -> None:
    # clang spells a type of an anonymous namespace "(anonymous namespace)::Hidden",
    # which no code can write: the shim then calls the function by name.
    src = tmp_path / "anon.cpp"
    src.write_text(
        '#include "kernix/common.h"\n'
        "namespace { enum Hidden { H0 }; }\n"
        "// @BE uses_hidden\n"
        "void uses_hidden(const BE::Tensor& x, BE::Tensor& y, Hidden h) {}\n"
    )
    r = infer_file(src, use_cache=False)
    assert r.errors == () and [f.function_type for f in r.functions] == [""]


@pytest.fixture(scope="module")
def errors() -> InferResult:
    return _infer("errors.cpp")


# ---------------------------------------------------------------- valid rules


def test_source_order_and_nothing_extra(rules: dict) -> None:
    r = rules["__result__"]
    assert [f.name for f in r.functions] == [
        "east_const", "scale_by", "modes", "c_linkage", "all_ints", "proto_first",
        "proto_second", "overload", "add_op", "mul_op", "spaced",
    ]
    lines = [f.line for f in r.functions]
    assert lines == sorted(lines)
    assert r.language == "cpp" and r.path == str(FIXTURES / "rules.cpp")
    assert all(os.path.isabs(d) for d in r.dependencies)
    assert any(d.endswith("kernix/common.h") for d in r.dependencies)


def test_east_const_and_using_alias(rules: dict) -> None:
    f = rules["east_const"]
    assert f.arg_spec == ("arg", "arg", "ret")
    assert f.qualified_name == "ops::east_const"
    assert [p.type for p in f.params] == ["const BE::Tensor", "const BE::Tensor &", "Out"]
    assert {p.canonical_type for p in f.params} == {"BE::Tensor"}
    assert {p.kind for p in f.params} == {"tensor"}


def test_typedefs_macros_default_arguments_and_stream(rules: dict) -> None:
    f = rules["scale_by"]
    assert f.arg_spec == ("arg", "ret", "attr.factor:float64", "attr.eps:float32", "attr.n:int32", "stream")
    factor, eps, stream = f.params[2], f.params[3], f.params[5]
    assert (factor.type, factor.canonical_type, factor.kind) == ("real", "double", "scalar")
    assert (eps.type, eps.canonical_type) == ("f32_t", "float")
    assert (stream.type, stream.canonical_type, stream.kind) == ("std::int64_t", "long", "stream")
    assert f.params[0].type == "const BE::Tensor &"  # written through a macro


def test_enums_size_t_and_const_refs(rules: dict) -> None:
    f = rules["modes"]
    assert f.qualified_name == "ops::inner::modes"
    assert f.arg_spec == ("arg", "ret", "attr.mode:uint8", "attr.plain:uint32", "attr.count:uint64", "attr.l:int64")
    assert f.params[2].canonical_type == "ops::Mode"
    assert f.params[3].canonical_type == "ops::Plain"
    assert f.params[4].canonical_type == "unsigned long"
    assert f.params[5].canonical_type == "long"


def test_extern_c(rules: dict) -> None:
    f = rules["c_linkage"]
    assert f.qualified_name == "c_linkage" and f.arg_spec == ("arg", "ret", "attr.flag:bool")


def test_every_integer_spelling(rules: dict) -> None:
    f = rules["all_ints"]
    assert [p.dtype for p in f.attrs] == [
        "int8", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "int64", "uint64", "int8", "uint16", "int64",
    ]
    # an int64_t not named `stream` is an attribute
    assert f.params[-1].role == "attr" and f.params[-1].name == "not_stream"


def test_prototype_then_definition(rules: dict) -> None:
    first, second = rules["proto_first"], rules["proto_second"]
    assert first.arg_spec == ("arg", "ret", "stream")
    assert first.line == 38  # the annotated prototype
    assert second.line == 46  # the annotated definition
    assert first.params[2].canonical_type == "long"


def test_overload_annotation_picks_the_next_declaration(rules: dict) -> None:
    f = rules["overload"]
    assert f.arg_spec == ("arg", "ret", "attr.a:float32")
    assert f.line == 49


def test_token_pasting_macro(rules: dict) -> None:
    add, mul = rules["add_op"], rules["mul_op"]
    assert add.arg_spec == ("arg", "ret", "attr.alpha:float32") and add.line == 56
    assert mul.arg_spec == ("arg", "ret", "attr.alpha:float64") and mul.line == 58
    assert add.file == str(FIXTURES / "rules.cpp")


def test_odd_whitespace_comments_and_inline_spec(rules: dict) -> None:
    f = rules["spaced"]
    assert f.arg_spec == ("arg", "ret", "attr.k:int32")


def test_strings_block_comments_and_if0_are_not_annotations(rules: dict) -> None:
    names = {f.name for f in rules["__result__"].functions}
    assert not names & {"in_string", "in_block", "mid_comment", "disabled"}


def test_seed_tutorial_sources() -> None:
    r = _infer("seed_vector_add.cu")
    assert r.errors == ()
    got = {f.name: f.arg_spec for f in r.functions}
    assert got == {
        "vector_add": ("arg", "arg", "ret", "stream"),
        "scale_by": ("arg", "ret", "attr.scale_factor:float32", "stream"),
        "my_kernel": ("arg", "arg", "ret", "stream"),
    }
    assert r.language == "cuda"
    my = r.functions[2]
    assert my.params[3].type == "cudaStream_t" and my.params[3].kind == "stream"
    assert my.params[3].canonical_type == "CUstream_st *"


def test_cuda_half_bfloat16_and_ffi_types() -> None:
    r = _infer("cuda_types.cu")
    assert r.errors == (), [str(e) for e in r.errors]
    halves, ffi = r.functions
    assert halves.arg_spec == ("arg", "ret", "attr.h:float16", "attr.b:bfloat16", "attr.h2:float16", "stream")
    assert [p.canonical_type for p in halves.attrs] == ["__half", "__nv_bfloat16", "__half"]
    assert ffi.arg_spec == ("arg", "arg", "arg", "arg", "ret", "ret", "ret", "stream")
    assert [(p.canonical_type, p.dtype, p.rank) for p in ffi.params[:7]] == [
        ("xla::ffi::AnyBuffer", None, None),
        ("xla::ffi::Buffer<xla::ffi::DataType::F32, 2>", "float32", 2),
        ("xla::ffi::Buffer<xla::ffi::DataType::S32, 1>", "int32", 1),
        ("xla::ffi::Buffer<xla::ffi::DataType::BF16>", "bfloat16", None),
        ("xla::ffi::Result<xla::ffi::AnyBuffer>", None, None),
        ("xla::ffi::Result<xla::ffi::Buffer<xla::ffi::DataType::F64>>", "float64", None),
        ("xla::ffi::Result<xla::ffi::Buffer<xla::ffi::DataType::U8, 2>>", "uint8", 2),
    ]
    assert {p.kind for p in ffi.params[:7]} == {"ffi"}


def test_cuda_without_cuda_headers_uses_stub_prelude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernix.frontend import clangparse

    monkeypatch.setattr(clangparse, "cuda_dirs", lambda: ())
    src = tmp_path / "k.cu"
    src.write_text(
        '#include "kernix/common.h"\n'
        "__global__ void k(float* x) {}\n"
        "// @BE f\n"
        "void f(const BE::Tensor& x, BE::Tensor& y, __half h, __nv_bfloat16 b, cudaStream_t s) {}\n"
    )
    r = infer_file(src, use_cache=False)
    assert r.errors == (), [str(e) for e in r.errors]
    assert r.functions[0].arg_spec == ("arg", "ret", "attr.h:float16", "attr.b:bfloat16", "stream")


def test_crlf_source(tmp_path: Path) -> None:
    text = (FIXTURES / "rules.cpp").read_text()
    src = tmp_path / "crlf.cpp"
    src.write_bytes(text.replace("\n", "\r\n").encode())
    r = infer_file(src, use_cache=False)
    assert r.errors == ()
    lf = _infer("rules.cpp")
    assert [(f.name, f.line, f.arg_spec) for f in r.functions] == [(f.name, f.line, f.arg_spec) for f in lf.functions]


# ---------------------------------------------------------------- errors


def _error_for(result: InferResult, function: str) -> list:
    return [e for e in result.errors if e.function == function]


@pytest.mark.parametrize(
    "function, parameter, line, words",
    [
        ("raw_pointer", "x", 8, "pointers cannot cross the FFI boundary"),
        ("tensor_pointer", "x", 11, "tensor cannot be passed by pointer"),
        ("array_param", "w", 14, "arrays cannot cross"),
        ("variadic", None, 17, "variadic"),
        ("unnamed_scalar", "#3", 20, "give the parameter a name: it becomes attr.<name>"),
        ("long_double", "v", 23, "`long double` has no XLA attribute type"),
        ("struct_param", "p", 26, "a struct or class cannot cross"),
        ("no_output", None, 29, "no output tensor"),
        ("wrong_name", None, 41, "bound to function 'other_name'"),
        ("bound_to_nothing", None, 44, "bound to nothing"),
        ("inline_count", None, 48, "2 tokens but the function has 3"),
        ("inline_role", "x", 51, "is 'arg', not 'ret'"),
        ("inline_dtype", "a", 54, "dtype float32), not float64"),
        ("templated", None, 58, "write them after its name, e.g. `// @BE templated<T: float, double>`"),
        ("scalar_out", "a", 61, "non-const reference"),
        ("two_streams", "s2", 64, "more than one stream"),
    ],
)
def test_errors_name_place_function_and_parameter(
    errors: InferResult, function: str, parameter: str | None, line: int, words: str
) -> None:
    found = _error_for(errors, function)
    assert len(found) == 1, [str(e) for e in errors.errors]
    err = found[0]
    assert words in err.message
    assert err.parameter == parameter
    assert err.line == line
    assert err.file == str(FIXTURES / "errors.cpp")
    assert function not in {f.name for f in errors.functions}


def test_one_name_annotated_twice(errors: InferResult) -> None:
    dup = _error_for(errors, "dup")
    assert len(dup) == 1 and "one name annotated twice" in dup[0].message and dup[0].line == 37
    assert [f.qualified_name for f in errors.functions if f.name == "dup"] == ["a::dup"]


def test_errors_do_not_hide_good_functions(errors: InferResult) -> None:
    assert {f.name for f in errors.functions} == {"dup", "fine"}
    with pytest.raises(InferenceError) as info:
        errors.raise_for_errors()
    assert len(info.value.errors) == len(errors.errors)
    assert "errors.cpp:8:" in str(info.value)


def test_misspelled_type_is_an_error_never_int() -> None:
    r = _infer("misspelled.cpp")
    assert [f.name for f in r.functions] == ["ok"]
    (err,) = r.errors
    assert (err.line, err.column) == (7, 47)
    assert "unknown type name 'flaot'" in err.message and err.function == "typo"


def test_missing_include_is_reported(tmp_path: Path) -> None:
    src = tmp_path / "m.cpp"
    src.write_text('#include "no_such_header.h"\n#include "kernix/common.h"\n// @BE f\nvoid f(BE::Tensor& y) {}\n')
    r = infer_file(src, use_cache=False)
    assert any("no_such_header.h" in e.message and e.line == 1 for e in r.errors)


def test_explicit_instantiation_is_named_and_the_suggested_wrapper_works(tmp_path: Path) -> None:
    """Was: an annotation before `template void f<float>(...);` was "bound to
    nothing", as if no declaration followed it."""
    head = '#include "kernix/common.h"\ntemplate <typename T> void tf(const BE::Tensor& x, BE::Tensor& y, T v) {}\n'
    src = tmp_path / "inst.cpp"
    src.write_text(head + "// @BE tf\n/* float only */\ntemplate void tf<float>(const BE::Tensor&, BE::Tensor&, float);\n"
                   "// @BE tf_i\nextern template void tf<int>(const BE::Tensor&, BE::Tensor&, int);\n")
    r = infer_file(src, use_cache=False)
    assert r.functions == ()
    first, second = r.errors
    assert (first.line, first.function) == (3, "tf") and (second.line, second.function) == (6, "tf_i")
    assert "explicit instantiation (`template void tf<float>(const BE::Tensor&, BE::Tensor&, float)`)" in first.message
    assert "`// @BE tf_float` before `void tf_float(...)`" in first.message and "`tf<float>(...)`" in first.message
    assert "`// @BE tf_i` before `void tf_i(...)`" in second.message and "`tf<int>(...)`" in second.message
    assert "bound to nothing" not in first.message + second.message
    # The fix the message suggests infers.
    src.write_text(head + "// @BE tf_float\n"
                   "void tf_float(const BE::Tensor& x, BE::Tensor& y, float v) { tf<float>(x, y, v); }\n")
    r = infer_file(src, use_cache=False)
    assert r.errors == () and [f.arg_spec for f in r.functions] == [("arg", "ret", "attr.v:float32")]


FRIEND_SRC = """#include "kernix/common.h"
namespace ns {
struct S {
  // @BE hidden
  friend void hidden(const BE::Tensor& x, BE::Tensor& y, int k) noexcept {}
  // @BE declared
  friend void declared(const BE::Tensor& x, BE::Tensor& y) {}
};
void declared(const BE::Tensor& x, BE::Tensor& y);
}  // namespace ns
"""


def test_friend_function_in_a_class(tmp_path: Path) -> None:
    """Was: an annotation before a friend function defined in a class was "bound
    to nothing", and functions=[...] did not find it."""
    src = tmp_path / "friend.cpp"
    src.write_text(FRIEND_SRC)
    for functions in (None, ["hidden", "declared"]):
        r = infer_file(src, functions=functions, use_cache=False)
        assert [(f.name, f.qualified_name) for f in r.functions] == [("declared", "ns::declared")]
        (err,) = r.errors
        assert (err.line, err.column, err.function) == (5, 15, "hidden")
        assert "friend function declared only inside class 'S'" in err.message
    # The declaration the message suggests makes it exportable.
    suggested = err.message.split("after the class: `")[1].rstrip("`")
    assert suggested == "void hidden(const BE::Tensor & x, BE::Tensor & y, int k) noexcept;"
    src.write_text(FRIEND_SRC.replace("};\n", "};\n" + suggested + "\n"))
    r = infer_file(src, use_cache=False)
    assert r.errors == ()
    assert [(f.qualified_name, f.arg_spec) for f in r.functions] == [
        ("ns::hidden", ("arg", "ret", "attr.k:int32")), ("ns::declared", ("arg", "ret"))]


def test_missing_kernix_header_is_named_and_the_fix_works(tmp_path: Path) -> None:
    src = tmp_path / "nohdr.cpp"
    body = "// @BE f\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n"
    src.write_text(body)
    r = infer_file(src, use_cache=False)
    assert r.functions == () and len(r.errors) == 2
    for err in r.errors:
        assert (err.line, err.function) == (2, "f")
        assert err.message.endswith('add `#include "kernix/common.h"` before the first function that uses it')
    src.write_text('#include "kernix/common.h"\n' + body)
    r = infer_file(src, use_cache=False)
    assert r.errors == () and [f.arg_spec for f in r.functions] == [("arg", "ret")]


def test_non_ascii_exported_name_says_why(tmp_path: Path) -> None:
    """A UTF-8 identifier is valid C++ (g++ compiles it); the error says an
    exported name must be ASCII, not that the name is invalid."""
    src = tmp_path / "utf8.cpp"
    src.write_text('#include "kernix/common.h"\n// @BE größe\nvoid größe(const BE::Tensor& x, BE::Tensor& y) {}\n',
                   encoding="utf-8")
    r = infer_file(src, use_cache=False)
    (err,) = r.errors
    assert (err.line, err.function) == (2, "größe")
    assert "'größe' is not an ASCII identifier" in err.message and "annotate a wrapper" in err.message


# ---------------------------------------------------------------- functions=, flags


def test_functions_list_needs_no_annotation(tmp_path: Path) -> None:
    src = tmp_path / "plain.cpp"
    src.write_text(
        '#include "kernix/common.h"\n'
        "namespace ns { void plain(const BE::Tensor& x, BE::Tensor& y, double a) {} }\n"
        "void proto(BE::Tensor& y);\nvoid proto(BE::Tensor& y) {}\n"
        "void over(BE::Tensor& y, int a) {}\nvoid over(BE::Tensor& y, float a) {}\n"
    )
    r = infer_file(src, functions=["plain", "proto"], use_cache=False)
    assert r.errors == ()
    assert [(f.name, f.qualified_name, f.arg_spec) for f in r.functions] == [
        ("plain", "ns::plain", ("arg", "ret", "attr.a:float64")),
        ("proto", "proto", ("ret",)),
    ]
    assert r.functions[1].line == 4  # the definition
    r = infer_file(src, functions=["missing", "over"], use_cache=False)
    msgs = [e.message for e in r.errors]
    assert any("no function named 'missing'" in m and "over, plain, proto" in m for m in msgs)
    assert any("'over' is overloaded" in m for m in msgs)


def test_function_only_a_header_declares_is_located_and_the_fix_works(tmp_path: Path) -> None:
    """Was: "no function named 'scale' in this file; ... none", with no word of
    the included header that declares it."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "ops.hpp").write_text(
        '#pragma once\n#include "kernix/common.h"\nnamespace ops {\n'
        "inline void scale(const BE::Tensor& x, BE::Tensor& y, double k) {}\n}\nusing ops::scale;\n")
    src = tmp_path / "main.cpp"
    src.write_text('#include "ops.hpp"\n')
    r = infer_file(src, functions=["scale"], include_dirs=[str(tmp_path / "inc")], use_cache=False)
    (err,) = r.errors
    assert err.message.startswith("no function named 'scale' in this file")
    assert f"declared in {tmp_path / 'inc' / 'ops.hpp'}:4, which this file includes" in err.message
    fix = "`namespace ops {`, `// @BE scale` then `void scale(const BE::Tensor & x, BE::Tensor & y, double k);`, `}`"
    assert err.message.endswith(fix)
    src.write_text('#include "ops.hpp"\nnamespace ops {\n// @BE scale\n'
                   "void scale(const BE::Tensor & x, BE::Tensor & y, double k);\n}\n")
    r = infer_file(src, include_dirs=[str(tmp_path / "inc")], use_cache=False)
    assert r.errors == () and [(f.qualified_name, f.arg_spec) for f in r.functions] == [
        ("ops::scale", ("arg", "ret", "attr.k:float64"))]


def test_functions_dict_checks_explicit_spec(tmp_path: Path) -> None:
    src = tmp_path / "d.cpp"
    src.write_text('#include "kernix/common.h"\nvoid f(const BE::Tensor& x, BE::Tensor& y, float a) {}\n')
    ok = infer_file(src, functions={"f": ["args", "rets", "attrs.a"]}, use_cache=False)
    assert ok.errors == () and ok.functions[0].arg_spec == ("arg", "ret", "attr.a:float32")
    bad = infer_file(src, functions={"f": ["arg", "ret", "attr.a:int32"]}, use_cache=False)
    (err,) = bad.errors
    assert "explicit arg_spec of 'f' disagrees" in err.message and err.parameter == "a" and err.line == 2
    bad = infer_file(src, functions={"f": ["arg", "arg", "attr.a"]}, use_cache=False)
    assert "no 'ret' token" in bad.errors[0].message


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple]:
    """Record each call of ``owner.name`` (its arguments), still calling it."""
    calls: list[tuple] = []
    real = getattr(owner, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_functions_across_sources_check_an_explicit_arg_spec_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: an unannotated function's explicit arg_spec was checked by the look-up in
    the sources, then again.  A name a file annotates and another declares (to call
    it) is the annotated one; another file's static function of that name is not asked."""
    import kernix.language.selection
    from kernix.frontend import infer as infer_mod
    from kernix.frontend.units import infer_units

    a, b = tmp_path / "a.cpp", tmp_path / "b.cpp"
    a.write_text('#include "kernix/common.h"\n// @BE f\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n'
                 "static int h(int n) { return n; }\n")
    b.write_text('#include "kernix/common.h"\nvoid f(const BE::Tensor& x, BE::Tensor& y);\n'
                 "void g(const BE::Tensor& x, BE::Tensor& y, float k) {}\nstatic int h(int n) { return -n; }\n")
    checks = [_count_calls(monkeypatch, m, "check_spec_matches") for m in (infer_mod, kernix.language.selection)]
    units = infer_units([a, b], {"f": None, "g": ("arg", "ret", "attr.k")}, language="cpp", flags=(),
                        cache_dir=tmp_path / "cache")
    assert [(src, [(s.name, s.line, s.arg_spec) for s in specs]) for src, specs in units] == [
        (a, [("f", 3, ("arg", "ret"))]), (b, [("g", 3, ("arg", "ret", "attr.k:float32"))])]
    assert [kw.get("source") for calls in checks for _, kw in calls] == ["explicit"]


def test_functions_across_sources_name_the_header_that_declares_a_function(tmp_path: Path) -> None:
    """Was: "no source file of the module declares them" alone, though one file
    includes a header that declares the function (a single file said so)."""
    from kernix.frontend.units import infer_units

    (tmp_path / "ops.hpp").write_text(
        '#pragma once\n#include "kernix/common.h"\nnamespace ops {\n'
        "inline void scale(const BE::Tensor& x, BE::Tensor& y, double k) {}\n}\n")
    a, b = tmp_path / "a.cpp", tmp_path / "b.cpp"
    a.write_text('#include "kernix/common.h"\n// @BE f\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n')
    b.write_text('#include "ops.hpp"\n')
    with pytest.raises(KernixError) as info:
        infer_units([a, b], {"scale": None}, language="cpp", flags=(), cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert message.startswith(f"functions names ['scale'], but no source file of the module declares them; "
                              f"the files: {a}, {b}\n{b}: no function named 'scale' in this file")
    assert f"declared in {tmp_path / 'ops.hpp'}:4, which this file includes" in message
    assert message.endswith(
        "`namespace ops {`, `// @BE scale` then `void scale(const BE::Tensor & x, BE::Tensor & y, double k);`, `}`")
    b.write_text('#include "ops.hpp"\nnamespace ops {\n'
                 "void scale(const BE::Tensor & x, BE::Tensor & y, double k);\n}\n")
    ((src, specs),) = [u for u in infer_units([a, b], {"scale": None}, language="cpp", flags=(),
                                              cache_dir=tmp_path / "cache") if u[1]]
    assert src == b and [(s.qualified_name, s.arg_spec) for s in specs] == [
        ("ops::scale", ("arg", "ret", "attr.k:float64"))]


def test_include_dirs_and_defines(tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "mytypes.h").write_text("#pragma once\nusing scalar_t = SCALAR;\n")
    src = tmp_path / "u.cpp"
    src.write_text('#include "kernix/common.h"\n#include "mytypes.h"\n// @BE f\nvoid f(BE::Tensor& y, scalar_t a) {}\n')
    r = infer_file(src, include_dirs=[str(inc)], defines=["SCALAR=short"], use_cache=False)
    assert r.errors == () and r.functions[0].arg_spec == ("ret", "attr.a:int16")
    assert str(inc / "mytypes.h") in r.dependencies
    r = infer_file(src, include_dirs=[str(inc)], defines=["SCALAR=double"], use_cache=False)
    assert r.functions[0].arg_spec == ("ret", "attr.a:float64")


def test_language_from_extension_and_override(tmp_path: Path) -> None:
    assert language_of("a.cu") == language_of("x/b.CUH") == "cuda"
    assert {language_of(f"a{e}") for e in (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp")} == {"cpp"}
    with pytest.raises(KernixError, match="cannot tell the language"):
        language_of("a.txt")
    src = tmp_path / "k.txt"
    src.write_text('#include "kernix/common.h"\n// @BE f\nvoid f(BE::Tensor& y, cudaStream_t s) {}\n')
    r = infer_file(src, language="cuda", use_cache=False)
    assert r.language == "cuda" and r.functions[0].arg_spec == ("ret", "stream")
    with pytest.raises(KernixError):
        infer_file(tmp_path / "nope.cpp")


# ---------------------------------------------------------------- cache


def test_a_name_the_file_does_not_declare_keeps_its_reason_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module of several sources looks a functions= name up in the other files
    when one file's error says it does not declare it: the error says so by its
    reason (was: its message's first words), also when it comes from the spec
    cache; other errors have none, and their JSON form is unchanged."""
    from kernix.frontend import infer as infer_mod

    src = tmp_path / "m.cpp"
    src.write_text('#include "kernix/common.h"\nvoid f(const BE::Tensor& x, BE::Tensor& y, float a) {}\n')
    wanted = {"g": None, "f": ["arg", "ret", "attr.a:int32"]}
    first = infer_file(src, functions=wanted, cache_dir=tmp_path / "cache")
    monkeypatch.setattr(infer_mod, "infer_source", lambda *a, **k: pytest.fail("parsed again"))
    cached = infer_file(src, functions=wanted, cache_dir=tmp_path / "cache")
    for result in (first, cached):
        assert {e.function: e.reason for e in result.errors} == {"g": "not_declared", "f": None}
        assert [e.message for e in result.errors] == [e.message for e in first.errors]
    g_error = next(e for e in cached.errors if e.function == "g")
    assert g_error.message.startswith("no function named 'g' in this file; the functions it declares are: f")
    assert g_error.to_json()["reason"] == "not_declared"
    assert "reason" not in next(e for e in cached.errors if e.function == "f").to_json()


def test_cache_hit_skips_parse_and_header_edit_invalidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernix.frontend import infer as infer_mod

    inc = tmp_path / "inc"
    inc.mkdir()
    hdr = inc / "t.h"
    hdr.write_text("using T = float;\n")
    src = tmp_path / "c.cpp"
    src.write_text('#include "kernix/common.h"\n#include "t.h"\n// @BE f\nvoid f(BE::Tensor& y, T a) {}\n')
    first = infer_file(src, include_dirs=[str(inc)])
    calls = []
    real = infer_mod.infer_source
    monkeypatch.setattr(infer_mod, "infer_source", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = infer_file(src, include_dirs=[str(inc)])
    assert calls == [] and again == first
    hdr.write_text("using T = double;  // edited\n")
    edited = infer_file(src, include_dirs=[str(inc)])
    assert calls == [1] and edited.functions[0].arg_spec == ("ret", "attr.a:float64")
    # a damaged entry is just a miss
    from kernix.frontend import speccache

    entries = list((Path(os.environ["KERNIX_CACHE_DIR"]) / "specs").rglob("*.rec"))
    assert entries
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:-7])  # cut short
    assert infer_file(src, include_dirs=[str(inc)]) == edited and calls == [1, 1]
    assert speccache.load(Path(os.environ["KERNIX_CACHE_DIR"]), "0" * 64) is None
    # a header replaced by one of the same size and mtime (cp -p, tar x) is seen by its ctime
    st = hdr.stat()
    hdr.write_text("using T = int;     // edited\n")
    os.utime(hdr, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert hdr.stat().st_size == st.st_size
    assert infer_file(src, include_dirs=[str(inc)]).functions[0].arg_spec == ("ret", "attr.a:int32")
    assert calls == [1, 1, 1]


def test_warm_lookup_does_not_import_clang(tmp_path: Path) -> None:
    import subprocess

    src = tmp_path / "w.cpp"
    src.write_text('#include "kernix/common.h"\n// @BE f\nvoid f(BE::Tensor& y, int a) {}\n')
    code = (
        "import sys; from kernix import infer_file; "
        f"r = infer_file({str(src)!r}); assert r.functions, r; "
        "print('clang.cindex' in sys.modules, 'jax' in sys.modules)"
    )
    env = dict(os.environ)  # the kernix under test, whether installed or from a checkout
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    out = subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"]


def test_import_is_cheap() -> None:
    import subprocess

    code = "import sys, kernix.frontend.infer, kernix.cli, kernix.pipeline; print('clang.cindex' in sys.modules)"
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


def test_a_misspelt_kernix_header_is_named_with_the_one_meant_and_nothing_else_is_reported(tmp_path: Path) -> None:
    """Was: the include-path advice, no "did you mean", and a second error calling the output a
    non-const `int &` (clang reads the types the missing header declares as int)."""
    src = tmp_path / "misspelt.cpp"
    src.write_text('#include "kernix/comon.h"\n// @BE f\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n')
    r = infer_file(src, use_cache=False)
    assert len(r.errors) == 1, [str(e) for e in r.errors]
    (error,) = r.errors
    assert error.line == 1 and "kernix/comon.h" in error.message
    assert 'did you mean "kernix/common.h"' in error.message
    assert "extra_include_paths" not in error.message  # kernix's headers need no include path
    assert r.functions == ()


def test_a_missing_header_of_the_users_own_is_reported_alone_with_the_include_path_advice(tmp_path: Path) -> None:
    src = tmp_path / "own.cpp"
    src.write_text('#include "kernix/common.h"\n#include "my/types.h"\n// @BE f\n'
                   "void f(const BE::Tensor& x, my_scale_t& s, BE::Tensor& y) {}\n")  # (s: no int&)
    r = infer_file(src, use_cache=False)
    assert [e.line for e in r.errors] == [2], [str(e) for e in r.errors]
    assert "extra_include_paths" in r.errors[0].message and "did you mean" not in r.errors[0].message
