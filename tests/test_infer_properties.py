"""Property tests: random valid signatures infer to their generated truth,
random invalid ones name the offending parameter.

Each example writes several functions into one translation unit (parsing is
the cost), with a minimal ``BE::Tensor`` so a parse takes a few milliseconds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernix import infer_file

PRELUDE = """\
#include <cstddef>
#include <cstdint>
namespace BE { class Tensor { public: Tensor() = default; }; }
typedef struct CUstream_st* cudaStream_t;
struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
struct Opaque { int v; };
using TIn = const BE::Tensor&;
using TOut = BE::Tensor;
namespace en { enum class E8 : unsigned char { A }; enum E32 { B }; enum class E64 : long long { C }; }
"""

SCALARS: dict[str, list[str]] = {
    "bool": ["bool"],
    "int8": ["signed char", "int8_t", "std::int8_t", "char"],
    "uint8": ["unsigned char", "uint8_t", "en::E8"],
    "int16": ["short", "short int", "signed short", "int16_t"],
    "uint16": ["unsigned short", "uint16_t"],
    "int32": ["int", "signed", "signed int", "int32_t"],
    "uint32": ["unsigned", "unsigned int", "uint32_t", "en::E32"],
    "int64": ["long", "long long", "int64_t", "std::int64_t", "ptrdiff_t", "en::E64"],
    "uint64": ["unsigned long", "size_t", "std::size_t", "uint64_t", "unsigned long long"],
    "float16": ["__half"],
    "bfloat16": ["__nv_bfloat16"],
    "float32": ["float"],
    "float64": ["double"],
}
INPUTS = ["const BE::Tensor", "BE::Tensor const", "const BE::Tensor&", "BE::Tensor const &", "TIn", "const TOut&"]
OUTPUTS = ["BE::Tensor", "BE::Tensor&", "BE::Tensor &", "TOut", "TOut&"]
STREAMS = [
    ("cudaStream_t", None),
    ("int64_t", "stream"),
    ("std::int64_t", "stream"),
    ("const int64_t", "stream"),
    ("[[maybe_unused]] int64_t", "stream"),
    ("long", "stream"),
    ("const std::int64_t&", "stream"),
]
SEPS = [" ", "  ", "\n    ", " /* , ) */ ", "\t"]
# Defaults that fit every generated type (numeric forms like `float(1e-5)` and
# `(3, 4)` are in fixtures/rules.cpp).
DEFAULTS = ["= {}", "= decltype(x0){}", "= decltype(x0)( /* ) , */ )", "= decltype(x0){ }"]
ANNOTATION_STYLES = ["// @BE {}", "//@BE {}", "//   @BE   {}  ", "// @BE {}\n// describes it (a, b)"]
INVALID = [
    ("float*", "pointers cannot cross"),
    ("const BE::Tensor*", "tensor cannot be passed by pointer"),
    ("long double", "long double"),
    ("Opaque", "struct or class"),
    ("float&", "non-const reference"),
    ("BE::Tensor&&", "rvalue"),
]


@dataclass
class Fn:
    name: str
    params: list[tuple[str, str, str]]  # (type text, name, token)
    namespaces: list[str]
    macro: bool
    annotation: str
    defaults_from: int
    typedefs: list[str] = field(default_factory=list)

    @property
    def qualified(self) -> str:
        return "::".join([*self.namespaces, self.exported])

    @property
    def exported(self) -> str:
        return f"{self.name}_m" if self.macro else self.name

    @property
    def spec(self) -> tuple[str, ...]:
        return tuple(t for _, _, t in self.params)


@st.composite
def params_strategy(draw: st.DrawFn, fname: str) -> tuple[list[tuple[str, str, str]], list[str], int]:
    n = draw(st.integers(0, 7))
    roles = draw(st.lists(st.sampled_from(["arg", "attr", "attr", "ret"]), min_size=n, max_size=n))
    roles.insert(draw(st.integers(0, len(roles))), "ret")
    if draw(st.booleans()):
        roles.insert(draw(st.integers(0, len(roles))), "stream")
    out: list[tuple[str, str, str]] = []
    typedefs: list[str] = []
    for i, role in enumerate(roles):
        pname = f"x{i}"
        if role == "arg":
            out.append((draw(st.sampled_from(INPUTS)), pname, "arg"))
        elif role == "ret":
            out.append((draw(st.sampled_from(OUTPUTS)), pname, "ret"))
        elif role == "stream":
            text, forced = draw(st.sampled_from(STREAMS))
            out.append((text, forced or pname, "stream"))
        else:
            dtype = draw(st.sampled_from(sorted(SCALARS)))
            text = draw(st.sampled_from(SCALARS[dtype]))
            for depth in range(draw(st.integers(0, 2))):  # typedef / using chains
                alias = f"{fname}_t{i}_{depth}"
                typedefs.append(f"using {alias} = {text};" if draw(st.booleans()) else f"typedef {text} {alias};")
                text = alias
            text = draw(st.sampled_from(["{}", "const {}", "{} const", "const {}&"])).format(text)
            out.append((text, pname, f"attr.{pname}:{dtype}"))
    # default arguments on a trailing run of by-value scalars/streams
    start = len(out)
    while start > 0 and out[start - 1][2] != "ret" and out[start - 1][2] != "arg" and "&" not in out[start - 1][0]:
        start -= 1
    start = draw(st.integers(start, len(out)))
    return out, typedefs, start


@st.composite
def function_strategy(draw: st.DrawFn, index: int) -> Fn:
    name = f"f{index}"
    params, typedefs, defaults_from = draw(params_strategy(name))
    namespaces = draw(st.lists(st.sampled_from(["ns", "ops", "inner"]), max_size=2, unique=True))
    fn = Fn(
        name=name,
        params=params,
        namespaces=namespaces,
        macro=draw(st.booleans()),
        annotation=draw(st.sampled_from(ANNOTATION_STYLES)),
        defaults_from=defaults_from,
        typedefs=typedefs,
    )
    return fn


def render(fn: Fn, draw_sep: list[str]) -> str:
    seps = itertools.cycle(draw_sep)
    parts = []
    for i, (text, pname, _tok) in enumerate(fn.params):
        words = text.split(" ")
        typed = next(seps).join(words) if not fn.macro else " ".join(words)
        default = ""
        if i >= fn.defaults_from:
            default = " " + DEFAULTS[i % len(DEFAULTS)].replace("x0", pname)
        parts.append(f"{typed} {pname}{default}")
    sep = next(seps)
    joined = ("," + (sep if not fn.macro else " ")).join(parts)
    lines = list(fn.typedefs)
    lines += [f"namespace {ns} {{" for ns in fn.namespaces]
    lines.append(fn.annotation.format(fn.exported))
    if fn.macro:
        lines.insert(len(fn.typedefs), f"#define DEF_{fn.name}(NAME) void NAME##_m({joined}) {{}}")
        lines.append(f"DEF_{fn.name}({fn.name})")
    else:
        lines.append(f"void{sep}{fn.name}({sep}{joined}){sep}{{ /* body */ }}")
    lines += ["}" for _ in fn.namespaces]
    return "\n".join(lines)


@st.composite
def translation_unit(draw: st.DrawFn) -> tuple[list[Fn], str]:
    count = draw(st.integers(1, 5))
    fns = [draw(function_strategy(i)) for i in range(count)]
    seps = draw(st.lists(st.sampled_from(SEPS), min_size=1, max_size=4))
    crlf = draw(st.booleans())
    body = PRELUDE + "\n\n".join(render(fn, seps) for fn in fns) + "\n"
    if crlf:
        body = body.replace("\n", "\r\n")
    return fns, body


_COUNTER = itertools.count()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(tu=translation_unit())
def test_valid_signatures_infer_exactly(tu: tuple[list[Fn], str], tmp_path: Path) -> None:
    fns, text = tu
    src = tmp_path / f"gen{next(_COUNTER)}.cpp"
    src.write_bytes(text.encode())
    r = infer_file(src, use_cache=False)
    assert r.errors == (), "\n".join(str(e) for e in r.errors) + "\n" + text
    got = [(f.name, f.qualified_name, f.arg_spec) for f in r.functions]
    assert got == [(fn.exported, fn.qualified, fn.spec) for fn in fns], text
    for f, fn in zip(r.functions, fns):
        assert [p.name for p in f.params] == [n for _, n, _ in fn.params]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(tu=translation_unit(), data=st.data())
def test_invalid_parameters_are_named(tu: tuple[list[Fn], str], data: st.DataObject, tmp_path: Path) -> None:
    fns, _ = tu
    expected = {}
    for fn in fns:
        bad_type, words = data.draw(st.sampled_from(INVALID))
        unnamed = data.draw(st.booleans()) and bad_type in ("float", "double")
        pos = data.draw(st.integers(0, len(fn.params)))
        fn.params.insert(pos, (bad_type, "bad", "?"))
        fn.defaults_from = len(fn.params)
        expected[fn.exported] = ("bad", words)
        del unnamed
    text = PRELUDE + "\n\n".join(render(fn, [" "]) for fn in fns) + "\n"
    src = tmp_path / f"bad{next(_COUNTER)}.cpp"
    src.write_text(text)
    r = infer_file(src, use_cache=False)
    assert r.functions == (), text
    by_fn = {e.function: e for e in r.errors}
    assert len(r.errors) == len(fns), "\n".join(map(str, r.errors))
    for name, (param, words) in expected.items():
        err = by_fn[name]
        assert err.parameter == param and words in err.message, str(err)
        assert err.line > 0 and err.file == str(src)


@pytest.mark.parametrize("scalar", ["float", "double", "int"])
def test_unnamed_scalar_is_named_by_position(scalar: str, tmp_path: Path) -> None:
    src = tmp_path / "u.cpp"
    src.write_text(PRELUDE + f"// @BE f\nvoid f(BE::Tensor& y, {scalar}) {{}}\n")
    (err,) = infer_file(src, use_cache=False).errors
    assert err.parameter == "#2" and "give the parameter a name" in err.message


# ---------------------------------------------------------------- CUDA: what nvcc's host pass compiles

CUDA_PRELUDE = """\
#include <cstdint>
#include <cuda_runtime.h>
#include <xla/ffi/api/ffi.h>
#include "kernix/common.h"
#define LB(n) __launch_bounds__(n)
#define PASTE_LB(a, b) __launch_bounds__(a##b)
"""

# (opening line, closing line, active in nvcc's host pass given CUDA major version)
CUDA_GUARDS = [
    ("", "", lambda major: True),
    ("#ifdef __CUDACC__", "#endif", lambda major: True),
    ("#ifndef __CUDACC__", "#endif", lambda major: False),
    ("#if defined(__NVCC__) && !defined(__CUDA_ARCH__)", "#endif", lambda major: True),
    ("#ifdef __CUDA_ARCH__", "#endif", lambda major: False),
    ("#if __CUDACC_VER_MAJOR__ >= 12", "#endif", lambda major: major >= 12),
    ("#if __CUDACC_VER_MAJOR__ < 12", "#endif", lambda major: major < 12),
    ("#ifdef __clang__", "#endif", lambda major: False),
    ("#if defined(__GNUC__)", "#endif", lambda major: True),
]
CUDA_ATTRIBUTES = ["", "[[nodiscard]]\n", '[[deprecated("old; use {new}")]]\n', "[[maybe_unused]]\n",
                   "[[nodiscard]] [[deprecated]]\n"]
LAUNCH_BOUNDS = ["", "__launch_bounds__(256) ", "LB(128) ", "PASTE_LB(2, 56) ", "__launch_bounds__(1024, 1) "]
CUDA_ATTRS = [("float", "float32"), ("__half", "float16"), ("double", "float64"), ("int", "int32"),
              ("__nv_bfloat16", "bfloat16")]


def _cuda_major() -> int:
    from kernix.frontend.compiler_view import view

    v = view("cuda")
    return int(v.defined("__CUDACC_VER_MAJOR__")) if v is not None else 0


@st.composite
def cuda_unit(draw: st.DrawFn) -> tuple[str, dict[str, tuple[str, ...]]]:
    """A .cu file of guarded kernels, launchers and macro stacks, and what nvcc would export."""
    major = _cuda_major()
    lines = [CUDA_PRELUDE, "#include <cuda_fp16.h>", "#include <cuda_bf16.h>"]
    expected: dict[str, tuple[str, ...]] = {}
    for i in range(draw(st.integers(1, 4))):
        open_, close, active = draw(st.sampled_from(CUDA_GUARDS))
        ctype, dtype = draw(st.sampled_from(CUDA_ATTRS))
        bounds = draw(st.sampled_from(LAUNCH_BOUNDS))
        spec = ("arg", "ret", f"attr.a:{dtype}", "stream")
        lines += [open_, f"__global__ void {bounds}k{i}(const float* __restrict__ x, float* y) {{}}"]
        if draw(st.booleans()):  # one macro invocation defines two functions, annotations stacked
            names = [f"fa{i}", f"fb{i}"]
            lines.append(f"#define DEF{i}(S, T) \\\n"
                         f"  void fa{i}##S(const BE::Tensor& x, BE::Tensor& y, T a, cudaStream_t s) {{}} \\\n"
                         f"  void fb{i}##S(const BE::Tensor& x, BE::Tensor& y, T a, int64_t stream) {{}}")
            for name in draw(st.permutations(names)):
                lines.append(f"// @BE {name}_x")
            lines.append(f"DEF{i}(_x, {ctype})")
            if active(major):
                expected.update({f"{n}_x": spec for n in names})
        else:
            attribute = draw(st.sampled_from(CUDA_ATTRIBUTES))
            # [[nodiscard]] wants a result: the one kind an exported function may return.
            ret = "xla::ffi::Error" if "nodiscard" in attribute else "void"
            body = "{ return xla::ffi::Error::Success(); }" if "nodiscard" in attribute else "{}"
            lines += [f"// @BE f{i}", attribute.rstrip("\n"),
                      f"{ret} f{i}(const BE::Tensor& x, BE::Tensor& y, {ctype} a, cudaStream_t stream) {body}"]
            if active(major):
                expected[f"f{i}"] = spec
        lines.append(close)
    return "\n".join(lines) + "\n", expected


@pytest.mark.skipif(_cuda_major() == 0, reason="needs nvcc and the CUDA headers")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(unit=cuda_unit())
def test_cuda_infers_what_nvcc_compiles(unit: tuple[str, dict[str, tuple[str, ...]]], tmp_path: Path) -> None:
    text, expected = unit
    src = tmp_path / f"k{next(_COUNTER)}.cu"
    src.write_text(text)
    r = infer_file(src, use_cache=False)
    assert r.errors == (), "\n".join(map(str, r.errors)) + "\n" + text
    assert {f.name: f.arg_spec for f in r.functions} == expected, text
