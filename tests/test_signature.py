"""Shape signatures (kernix/language/shapes.py): grammar, inference checks, binding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernix
from kernix.errors import CallError, InferenceError, SignatureError
from kernix.frontend.lexer import Annotation
from kernix.language.annotation import annotate_spec, check_pairs, leading_comment
from kernix.language.shapes import Group, bind, parse_signature
from kernix.language.spec import FunctionSpec, Param

from helpers import unique_name


def spec(name, n_in, n_out, attrs=(), signature=None, vjp_of=None, jvp_of=None):
    params = [Param(f"x{i}", "arg") for i in range(n_in)] + [Param(f"y{i}", "ret") for i in range(n_out)]
    params += [Param(a, "attr", kind="scalar", dtype=d, type=d) for a, d in attrs]
    return FunctionSpec(name, name, tuple(params), file="k.cpp", line=3, signature=signature, vjp_of=vjp_of,
                        jvp_of=jvp_of)


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("(m,k),(k,n)->(m,n)", "(m,k),(k,n)->(m,n)"),
        ("( m , k ), (k,n) -> (m, n)", "(m,k),(k,n)->(m,n)"),
        ("(...,d),(d)->(...,d)", "(...,d),(d)->(...,d)"),
        ("(n):float32->(k)", "(n):float32->(k)"),
        ("(),(3)->(...)", "(),(3)->(...)"),
        ("->(n)", "->(n)"),
    ],
)
def test_parse_round_trips(text, canonical):
    sig = parse_signature(text)
    assert str(sig) == canonical
    assert str(parse_signature(str(sig))) == canonical


def test_parse_groups():
    sig = parse_signature("(...,d):float64,(3)->(...,d)")
    assert sig.inputs == (Group(("d",), True, "float64"), Group((3,)))
    assert sig.batched and sig.names == ("d",)


@pytest.mark.parametrize(
    "text,match",
    [
        ("(m,k)(k,n)->(m)", "expected ','"),
        ("(m,k)", "exactly one '->'"),
        ("(m)->(m)->(m)", "exactly one '->'"),
        ("(m,...)->(m)", "'...' may only come first"),
        ("(m-1)->(m)", "neither a name nor"),
        ("(m):float->(m)", "unknown dtype 'float'"),
        ("(m)->", "no output group"),
        ("m->(m)", "expected a group"),
    ],
)
def test_parse_errors(text, match):
    with pytest.raises(SignatureError, match=match):
        parse_signature(text)


def test_an_annotation_splits_into_arg_spec_tokens_a_shape_signature_from_the_first_group_and_vjp_anywhere():
    def split(*tokens):
        used, annotated, errors = annotate_spec(spec("f", 1, 1), Annotation("f", tokens, 3, 1, 3), "")
        assert errors == []
        return used, annotated.signature, annotated.vjp_of

    assert split("arg", "ret", "(n)", "->", "(n)", "vjp=g") == (("arg", "ret"), "(n)->(n)", "g")
    assert split("vjp=g", "(n)->(n)") == ((), "(n)->(n)", "g")
    assert split("arg", "ret") == (("arg", "ret"), None, None)


def test_bind_shapes_and_errors():
    s = spec("matmul", 2, 1)
    sig = parse_signature("(m,k),(k,n)->(m,n)")
    b = bind(sig, s, [(2, 3), (3, 4)], ["float32", "float32"], {})
    assert b.out_shapes == ((2, 4),) and b.out_dtypes == ("float32",) and dict(b.dims) == {"m": 2, "k": 3, "n": 4}
    with pytest.raises(CallError) as info:
        bind(sig, s, [(2, 3), (5, 4)], ["float32", "float32"], {})
    assert str(info.value) == (
        "matmul(): input 'x1' has dimension k=5 (shape (5, 4)), but input 'x0' set k=3"
    )


def test_bind_batch_and_attribute_dims():
    s = spec("top", 1, 1, attrs=[("k", "int64")])
    sig = parse_signature("(...,n)->(...,k)")
    b = bind(sig, s, [(7, 2, 10)], ["float64"], {"k": 3})
    assert b.batch_shape == (7, 2) and b.out_shapes == ((7, 2, 3),)
    s2 = spec("same", 1, 1, attrs=[("k", "int32")])
    with pytest.raises(CallError, match="has dimension k=4.*attribute 'k' set k=3"):
        bind(parse_signature("(k)->(k)"), s2, [(4,)], ["float32"], {"k": 3})


def test_bind_pinned_output_dtype():
    s = spec("f", 1, 2)
    b = bind(parse_signature("(n)->(n),(n):int32"), s, [(5,)], ["float64"], {})
    assert b.out_dtypes == ("float64", "int32")


@pytest.mark.parametrize(
    "sig,attrs,match",
    [
        ("(n)->(n),(n)", (), "1 input and 2 output group"),
        ("(n)->(k)", (), "'k' of output 'y' is bound by no input"),
        ("(n)->(k)", (("k", "float32"),), "names attribute 'k', which is float32"),
        ("(n)->(...,n)", (), "'...' batch dimensions but no input"),
    ],
)
def test_inference_errors_at_the_annotation(tmp_path, sig, attrs, match):
    from kernix.frontend.infer import infer_file

    extra = "".join(f", {'float' if d == 'float32' else 'int64_t'} {a}" for a, d in attrs)
    src = tmp_path / "k.cpp"
    src.write_text(
        '#include "kernix/common.h"\n'
        "// a comment\n"
        f"// @BE f {sig}\n"
        f"void f(const BE::Tensor& x, BE::Tensor& y{extra}) {{}}\n"
    )
    result = infer_file(src, use_cache=False)
    assert result.functions == ()
    (err,) = result.errors
    assert err.line == 3 and err.function == "f" and err.file == str(src)
    assert match in err.message


def test_annotation_with_arg_spec_and_signature(tmp_path):
    from kernix.frontend.infer import infer_file

    src = tmp_path / "k.cpp"
    src.write_text(
        '#include "kernix/common.h"\n'
        "/** Adds.\n *  Twice. */\n"
        "// @BE f arg ret attr.k:int64 (...,n)->(...,k)\n"
        "void f(const BE::Tensor& x, BE::Tensor& y, int64_t k) {}\n"
        "// @BE g arg ret attr.k:int32 (n)->(n)\n"
        "void g(const BE::Tensor& x, BE::Tensor& y, int64_t k) {}\n"
    )
    result = infer_file(src, use_cache=False)
    (f,) = result.functions
    assert f.signature == "(...,n)->(...,k)" and f.doc == "Adds.\nTwice."
    (err,) = result.errors  # g's arg_spec part is still checked
    assert err.function == "g" and "int64" in err.message


def test_vjp_pair_checks():
    fwd = spec("f", 2, 1, attrs=[("eps", "float64")], signature="(...,d),(d)->(...,d)")
    good = spec("f_bwd", 3, 2, attrs=[("eps", "float64")], vjp_of="f")
    assert check_pairs([fwd, good]) == []
    cases = [
        (spec("b", 2, 2, vjp_of="f"), "takes the forward's 2 input(s) then the cotangents of its 1 output(s): 3 inputs"),
        (spec("b", 3, 1, vjp_of="f"), "one cotangent per forward input (2), but it has 1"),
        (spec("b", 3, 2, attrs=[("alpha", "float32")], vjp_of="f"), "attribute 'alpha' is not an attribute of 'f'"),
        (spec("b", 3, 2, attrs=[("eps", "float32")], vjp_of="f"), "'eps' is float32 here but float64"),
        (spec("b", 3, 2, vjp_of="nope"), "exports no function 'nope'"),
    ]
    for bwd, match in cases:
        (err,) = check_pairs([fwd, bwd])
        assert match in err.message and err.function == "b" and err.line == 3
    unsigned = spec("f", 2, 1)
    (err,) = check_pairs([unsigned, spec("f_bwd", 3, 2, vjp_of="f")])
    assert "'f' has no shape signature" in err.message


def test_jvp_pair_checks():
    fwd = spec("f", 2, 1, attrs=[("eps", "float64")], signature="(...,d),(d)->(...,d)")
    good = spec("f_jvp", 4, 1, attrs=[("eps", "float64")], signature="(...,k),(k),(...,k),(k)->(...,k)", jvp_of="f")
    bwd = spec("f_bwd", 3, 2, signature="(...,d),(d),(...,d)->(...,d),(d)", vjp_of="f")
    bwd_jvp = spec("f_bwd_jvp", 6, 2, jvp_of="f_bwd")  # forward over reverse: a backward kernel's tangent kernel
    bwd_bwd = spec("f_bwd_bwd", 5, 3, vjp_of="f_bwd")  # reverse over reverse
    assert check_pairs([fwd, good, bwd, bwd_jvp, bwd_bwd]) == []
    cases = [
        (spec("t", 4, 1, signature="(...,k),(k),(...,m),(k)->(...,k)", jvp_of="f"),
         "'x2' (the tangent of input 'x0'", "x2"),
        (spec("t", 4, 1, signature="(...,k),(k),(...,k),(k)->(k)", jvp_of="f"), "'y0' (the tangent of output 'y0'",
         "y0"),
        (spec("t", 4, 1, signature="(...,k),(m),(...,k),(m)->(...,m)", jvp_of="f"), "'x1'", "x1"),  # m and k: both d
        (spec("t", 4, 2, jvp_of="f"), "one tangent per output of 'f' (1), but it has 2", "y1"),
        (spec("t", 4, 1, attrs=[("eps", "float32")], jvp_of="f"), "'eps' is float32 here but float64", "eps"),
        (spec("t", 4, 1, jvp_of="t"), "a function cannot be its own tangent kernel", None),
    ]
    for tangent, match, parameter in cases:
        err = check_pairs([fwd, tangent])[0]
        assert match in err.message and err.function == "t" and err.line == 3, err.message
        assert err.parameter == parameter
    pinned = spec("f", 1, 1, signature="(n):float64->(n)")
    (err,) = check_pairs([pinned, spec("t", 2, 1, signature="(n),(n):float32->(n)", jvp_of="f")])
    assert err.parameter == "x1" and "(n):float32" in err.message
    (err,) = check_pairs([fwd, good, spec("g_jvp", 4, 1, jvp_of="f")])
    assert "'f' already has a tangent kernel, 'f_jvp'" in err.message
    (err,) = check_pairs([spec("f", 2, 1), spec("f_jvp", 4, 1, jvp_of="f")])
    assert "'f' has no shape signature" in err.message and "their tangents" in err.message


def test_vjp_errors_fail_the_load(tmp_path):
    src = (
        '#include "kernix/common.h"\n'
        "// @BE f (n)->(n)\n"
        "void f(const BE::Tensor& x, BE::Tensor& y) {}\n"
        "// @BE f_bwd vjp=f\n"
        "void f_bwd(const BE::Tensor& x, BE::Tensor& dx, double eps) {}\n"
    )
    with pytest.raises(InferenceError) as info:
        kernix.load_cpp_inline(unique_name("badvjp"), src, build_directory=tmp_path)
    text = str(info.value)
    assert ":5:" in text and "'eps' is not an attribute of 'f'" in text and "2 inputs, but it takes 1" in text


def test_spec_json_round_trip_and_validation():
    s = spec("f", 2, 1, attrs=[("k", "int64")], signature="(...,n),(n)->(...,k)")
    data = json.loads(json.dumps(s.to_json()))
    assert FunctionSpec.from_json(data) == s
    assert FunctionSpec.from_json(json.loads(json.dumps(spec("g", 2, 1, jvp_of="f").to_json()))).jvp_of == "f"
    for key, bad in [("signature", "(n)->"), ("signature", "(n)->(n),(n)"), ("vjp_of", "a;b"), ("jvp_of", "a b"),
                     ("doc", 3)]:
        with pytest.raises(ValueError):
            FunctionSpec.from_json({**data, key: bad})
    old = {k: v for k, v in data.items() if k not in ("signature", "vjp_of", "doc")}
    assert FunctionSpec.from_json(old).signature is None


def test_leading_comment():
    text = "x\n// one\n/// two\n// @BE f\n// three\nvoid f();\n"
    assert leading_comment(text, 4, 6) == "one\ntwo\nthree"
    assert leading_comment("int a;\n// @BE f\nvoid f();\n", 2, 3) == ""


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, kernix.language.shapes, kernix.language.spec; print('jax' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.split() == ["False", "False"], out.stderr
