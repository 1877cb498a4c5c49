"""The arg_spec grammar and FunctionSpec (kernix/language/spec.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kernix.errors import ArgSpecError, SourceError
from kernix.language.selection import check_spec_matches
from kernix.language.spec import (
    ATTR_DTYPES,
    FunctionSpec,
    Param,
    Token,
    is_identifier,
    parse_arg_spec,
    parse_token,
)
from kernix.language.spelling import is_function_type


@pytest.mark.parametrize(
    "text, token",
    [
        ("arg", Token("arg")),
        ("ret", Token("ret")),
        ("stream", Token("stream")),
        ("args", Token("arg")),
        ("rets", Token("ret")),
        ("ctx.stream", Token("stream")),
        ("attr.alpha", Token("attr", "alpha")),
        ("attrs.alpha", Token("attr", "alpha")),
        ("attr.alpha:float32", Token("attr", "alpha", "float32")),
        ("attrs.n:int64", Token("attr", "n", "int64")),
        ("  ret ", Token("ret")),
    ],
)
def test_parse_token(text: str, token: Token) -> None:
    assert parse_token(text) == token


@pytest.mark.parametrize("dtype", sorted(ATTR_DTYPES))
def test_every_attr_dtype(dtype: str) -> None:
    tok = parse_token(f"attr.x:{dtype}")
    assert tok.dtype == dtype and str(tok) == f"attr.x:{dtype}"


@pytest.mark.parametrize(
    "text, words",
    [
        ("input", "unknown arg_spec token"),
        ("attr.", "bad attribute name"),
        ("attr.1x", "bad attribute name"),
        ("attr.for", "bad attribute name"),
        ("attr.a-b", "bad attribute name"),
        ("attr.x:float", "unknown attribute dtype"),
        ("attr.x:complex64", "unknown attribute dtype"),
        ("attr.x:", "unknown attribute dtype"),
    ],
)
def test_bad_tokens(text: str, words: str) -> None:
    with pytest.raises(ArgSpecError, match=words):
        parse_token(text)


def test_token_must_be_a_string() -> None:
    with pytest.raises(ArgSpecError, match="must be strings"):
        parse_token(3)  # type: ignore[arg-type]


def test_parse_arg_spec_list_and_string() -> None:
    expected = (Token("arg"), Token("ret"), Token("attr", "k", "int32"), Token("stream"))
    assert parse_arg_spec(["args", "ret", "attrs.k:int32", "ctx.stream"]) == expected
    assert parse_arg_spec("arg  ret attr.k:int32\tstream") == expected


@pytest.mark.parametrize(
    "tokens, words",
    [
        (["arg", "ret", "attr.x", "attr.x:int32"], "appears twice"),
        (["ret", "stream", "ctx.stream"], "more than one 'stream'"),
        (["arg", "stream"], "no 'ret' token"),
        ([], "no 'ret' token"),
        (["arg", "bogus", "ret"], "unknown arg_spec token"),
    ],
)
def test_bad_specs(tokens: list[str], words: str) -> None:
    with pytest.raises(ArgSpecError, match=words):
        parse_arg_spec(tokens, function="f")


def test_spec_error_names_function() -> None:
    with pytest.raises(ArgSpecError, match="function 'scale'"):
        parse_arg_spec(["arg"], function="scale")


def test_is_identifier() -> None:
    assert is_identifier("x_1") and is_identifier("_a")
    assert not is_identifier("1x") and not is_identifier("int") and not is_identifier("é")
    assert not is_identifier("")


def _spec() -> FunctionSpec:
    return FunctionSpec(
        name="scale",
        qualified_name="ops::scale",
        params=(
            Param("x", "arg", "const BE::Tensor &", "BE::Tensor", "tensor"),
            Param("y", "ret", "BE::Tensor &", "BE::Tensor", "tensor"),
            Param("alpha", "attr", "float", "float", "scalar", "float32"),
            Param("stream", "stream", "cudaStream_t", "CUstream_st *", "stream"),
        ),
        file="/src/a.cu",
        line=7,
    )


def test_function_spec_views() -> None:
    spec = _spec()
    assert spec.arg_spec == ("arg", "ret", "attr.alpha:float32", "stream")
    assert [p.name for p in spec.inputs] == ["x"]
    assert [p.name for p in spec.outputs] == ["y"]
    assert [p.name for p in spec.attrs] == ["alpha"]
    assert spec.has_stream
    parse_arg_spec(spec.arg_spec)  # the canonical spec is valid


def test_function_spec_json_round_trip_and_stable() -> None:
    spec = _spec()
    data = spec.to_json()
    assert list(data) == ["name", "qualified_name", "file", "line", "arg_spec", "params"]
    assert FunctionSpec.from_json(json.loads(json.dumps(data))) == spec
    assert json.dumps(spec.to_json(), sort_keys=True) == json.dumps(FunctionSpec.from_json(data).to_json(), sort_keys=True)
    assert json.loads(json.dumps(spec.to_json()))["arg_spec"] == list(spec.arg_spec)


def test_function_type_round_trips_and_is_not_part_of_identity() -> None:
    typed = dataclasses.replace(_spec(), function_type="void (const BE::Tensor &, BE::Tensor &, float, CUstream_st *)")
    data = json.loads(json.dumps(typed.to_json()))
    assert data["function_type"] == typed.function_type
    assert FunctionSpec.from_json(data).function_type == typed.function_type
    assert typed == _spec()  # a code-generation detail: comparisons ignore it


@pytest.mark.parametrize(
    "text",
    [
        "",
        "void (const BE::Tensor &, BE::Tensor &, float)",
        "int (ns::Mode, long, unsigned long long) noexcept",
        "void (void (*)(int), float *, const std::vector<int, std::allocator<int>> &)",
        "void (xla::ffi::Buffer<xla::ffi::DataType::F32, 2>, int (&)[4])",
    ],
)
def test_function_types_clang_spells_are_accepted(text: str) -> None:
    assert is_function_type(text)


@pytest.mark.parametrize(
    "text",
    [
        "void ((anonymous namespace)::Mode)",  # no declaration at file scope can name it
        "void ((lambda at a.cpp:3:5))",
        "void (type-parameter-0-0)",
        "void (int); system(0)",  # would end the statement it is written into
        "void (int) { }",
        "void (int) // comment",
        "void (const char *) \"",
        "void",  # not a function type
        "void (int) __attribute__((x))",
    ],
)
def test_function_types_that_cannot_be_written_are_refused(text: str) -> None:
    assert not is_function_type(text)
    data = dict(_spec().to_json(), function_type=text)
    with pytest.raises(ValueError, match="bad function type"):
        FunctionSpec.from_json(data)  # a tampered cache record is refused before it reaches generated C++


@pytest.mark.parametrize(
    "declared",
    [
        ["arg", "ret", "attr.alpha", "stream"],
        ["args", "rets", "attrs.alpha:float32", "ctx.stream"],
        "arg ret attr.alpha:float32 stream",
    ],
)
def test_check_spec_matches_accepts(declared: object) -> None:
    check_spec_matches(declared, _spec())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "declared, words, param",
    [
        (["arg", "ret", "stream"], "3 tokens but the function has 4", None),
        (["ret", "ret", "attr.alpha", "stream"], "is 'arg', not 'ret'", "x"),
        (["arg", "ret", "attr.beta", "stream"], "named 'alpha', not 'beta'", "alpha"),
        (["arg", "ret", "attr.alpha:float64", "stream"], "dtype float32", "alpha"),
    ],
)
def test_check_spec_matches_rejects(declared: list[str], words: str, param: str | None) -> None:
    with pytest.raises(SourceError, match=words) as info:
        check_spec_matches(declared, _spec(), source="annotation")
    err = info.value
    assert err.file == "/src/a.cu" and err.line == 7 and err.function == "scale"
    assert err.parameter == param
    assert "annotation arg_spec" in err.message


def _by_value_spec() -> FunctionSpec:
    return FunctionSpec(
        name="k",
        qualified_name="k",
        params=(
            Param("x", "ret", "BE::Tensor", "BE::Tensor", "tensor"),
            Param("y", "ret", "BE::Tensor &", "BE::Tensor", "tensor"),
            Param("bits", "attr", "uint16_t", "unsigned short", "scalar", "uint16"),
            Param("n", "attr", "int64_t", "long", "scalar", "int64"),
        ),
        file="/src/k.cu",
        line=3,
    )


def test_check_spec_matches_returns_the_inferred_spec_when_equal() -> None:
    assert check_spec_matches(["arg", "ret", "attr.alpha", "stream"], _spec()) == _spec()


def test_explicit_arg_for_a_non_const_by_value_tensor_is_an_input() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # by value: the reference's documented form, no warning
        out = check_spec_matches(["arg", "ret", "attr.bits", "attr.n"], _by_value_spec())
    assert out.arg_spec == ("arg", "ret", "attr.bits:uint16", "attr.n:int64")
    assert [p.name for p in out.inputs] == ["x"] and [p.name for p in out.outputs] == ["y"]


def test_explicit_arg_for_a_non_const_reference_warns() -> None:
    from kernix.language.selection import InputDeclaredOnNonConstTensor

    base = _by_value_spec()
    spec = dataclasses.replace(base, params=(*base.params, Param("z", "ret", "BE::Tensor", "BE::Tensor", "tensor")))
    with pytest.warns(InputDeclaredOnNonConstTensor, match="'y'.*non-const reference"):
        out = check_spec_matches(["arg", "arg", "attr.bits", "attr.n", "ret"], spec)
    assert out.arg_spec == ("arg", "arg", "attr.bits:uint16", "attr.n:int64", "ret")


def test_explicit_ret_for_a_const_tensor_is_still_refused() -> None:
    with pytest.raises(SourceError, match="is 'arg', not 'ret'"):
        check_spec_matches(["ret", "ret", "attr.alpha", "stream"], _spec())


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_half_attribute_on_a_uint16_parameter_passes_the_bits(half: str) -> None:
    out = check_spec_matches(["ret", "ret", f"attr.bits:{half}", "attrs.n:int64"], _by_value_spec())
    assert out.arg_spec == ("ret", "ret", f"attr.bits:{half}", "attr.n:int64")
    assert out.attrs[0].canonical_type == "unsigned short"


def test_half_attribute_on_another_integer_is_refused() -> None:
    with pytest.raises(SourceError, match="dtype int64\\), not float16.*raw bits"):
        check_spec_matches(["ret", "ret", "attr.bits", "attr.n:float16"], _by_value_spec())


@pytest.mark.parametrize(
    "declared, expected",
    [
        ("args rets attrs.bits attrs.n", ("arg", "ret", "attr.bits:uint16", "attr.n:int64")),
        (["rets", "ret", "attr.bits:uint16", "attr.n:int64"], ("ret", "ret", "attr.bits:uint16", "attr.n:int64")),
        (" ret  ret attr.bits:float16 attrs.n:int64 ", ("ret", "ret", "attr.bits:float16", "attr.n:int64")),
    ],
)
def test_the_reference_spellings_are_accepted(declared: object, expected: tuple[str, ...]) -> None:
    assert check_spec_matches(declared, _by_value_spec()).arg_spec == expected  # type: ignore[arg-type]
