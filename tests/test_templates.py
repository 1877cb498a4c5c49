"""Function templates exported per instantiation, and one callable per per-dtype family."""

from __future__ import annotations

import ast
import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FIXTURES, gpus, has_nvcc, unique_name

import kernix
from kernix.frontend.infer import infer_file
from kernix.language.templates import instance_name, parse_template_list
from kernix.runtime.stubs import stub_text
from kernix.language.spec import FunctionSpec

jax.config.update("jax_enable_x64", True)

CPU = FIXTURES / "templates" / "templates_cpu.cpp"
CUDA = FIXTURES / "templates" / "templates_cuda.cu"


# ---- the annotation's template list -------------------------------------------------------------

def test_template_list_grammar():
    tl = parse_template_list("tile<T:", ("float,", "std::complex<float>;", "BLOCK:", "128,", "-2>", "(n)->(n)"))
    assert tl.name == "tile"
    assert tl.groups == (("T", ("float", "std::complex<float>")), ("BLOCK", ("128", "-2")))
    assert tl.rest == ("(n)->(n)",)
    one = parse_template_list("scale<float,", ("ns::half_t>", "vjp=f"))
    assert one.groups == (("", ("float", "ns::half_t")),) and one.rest == ("vjp=f",)
    assert parse_template_list("scale", ("arg",)) is None
    for name, tokens, match in [("f<float", (), "no closing"), ("f<float>arg", (), "space after"),
                                ("f<T: float; double>", (), "each names"), ("f<float,,double>", (), "empty"),
                                ("f<T: a; T: b>", (), "two groups"), ("f<float)+g(>", (), "cannot be written")]:
        with pytest.raises(ValueError, match=match):
            parse_template_list(name, tokens)


def test_instance_names():
    assert instance_name("scale", ["float32"]) == "scale_float32"
    assert instance_name("tile", ["int32", "-3"]) == "tile_int32_m3"
    assert instance_name("f", ["ns::Vec<3>"]) == "f_ns_Vec_3"


def test_spec_round_trip_and_validation():
    r = infer_file(CPU)
    spec = next(f for f in r.functions if f.name == "tile_float32_m3")
    again = FunctionSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.template_args == (("T", "float", "float32"), ("BLOCK", "-3", "-3"))
    for bad in ({"template_args": [["T", "float); evil(", "x"]]},
                {"qualified_name": "ops::tile<float>; evil"}, {"template_args": [["T", "float"]]}):
        with pytest.raises(ValueError):
            FunctionSpec.from_json({**spec.to_json(), **bad})


# ---- inference -----------------------------------------------------------------------------------

def test_each_instantiation_is_inferred_under_its_name():
    r = infer_file(CPU)
    assert not r.errors
    by = {f.name: f for f in r.functions}
    assert list(by) == ["scale_float32", "scale_float64", "scale_bwd_float32", "scale_bwd_float64",
                        "tile_float32_2", "tile_float32_m3", "tile_int32_2", "tile_int32_m3",
                        "dequant_float32", "dequant_float64", "iota_float32", "iota_int32",
                        "negate_f32", "negate_f64"]
    assert by["scale_float64"].arg_spec == ("arg", "ret", "attr.factor:float64")
    assert by["scale_float64"].qualified_name == "ops::scale<double>"
    assert by["scale_float64"].doc == "Multiplies x by factor."
    assert by["scale_bwd_float32"].vjp_of == "scale_float32"  # the backward template's same instance
    assert [p.dtype for p in by["tile_int32_2"].params] == ["int32", "int32"]  # TensorOf<T> pinned per instance
    assert by["tile_int32_2"].qualified_name == "ops::tile<int32_t, 2>"  # OFFSET keeps its default


def _errors(tmp_path, body: str) -> list[str]:
    path = tmp_path / "t.cpp"
    path.write_text('#include "kernix/common.h"\n' + body)
    return [e.format() for e in infer_file(path, use_cache=False).errors]


@pytest.mark.parametrize(("body", "line", "match"), [
    ("// @BE plain<float>\nvoid plain(const BE::Tensor& x, BE::Tensor& out) {}\n", 2,
     r"not a function template: write `// @BE plain`"),
    ("// @BE two<float>\ntemplate <typename T, typename U>\nvoid two(const BE::Tensor& x, BE::Tensor& o, U u) {}\n",
     2, r"'U' .* no default.*`// @BE two<T: float; U: <arguments>>`"),
    ("// @BE unk<X: float>\ntemplate <typename T>\nvoid unk(const BE::Tensor& x, BE::Tensor& o) {}\n", 2,
     r"'X', which is not a template parameter of 'unk'; its parameters are: T"),
    ("// @BE later<B: 1>\ntemplate <typename T, int B>\nvoid later(const BE::Tensor& x, BE::Tensor& o) {}\n", 2,
     r"leaves 'T' out .* list 'T' too"),
    ("// @BE refuses<float, Missing>\ntemplate <typename T>\nvoid refuses(const BE::Tensor& x, BE::Tensor& o, T f) {}\n",
     2, r"cannot be instantiated with T = Missing .*undeclared identifier 'Missing'"),
    ("// @BE ptr<float, char*>\ntemplate <typename T>\nvoid ptr(const BE::Tensor& x, BE::Tensor& o, T f) {}\n",
     4, r"parameter 'f' of 'ptr' is `char \*`: pointers .*\(in `ptr<char\*>`, T = char\*, which the annotation at line 2"),
])
def test_what_cannot_be_instantiated_is_an_error_at_its_line(tmp_path, body, line, match):
    errors = _errors(tmp_path, body)
    assert len(errors) == 1, errors
    assert f"t.cpp:{line}:" in errors[0]
    assert __import__("re").search(match, errors[0]), errors[0]


def test_the_suggested_fix_for_a_parameter_without_argument_works(tmp_path):
    body = ("// @BE two<T: float; U: int>\ntemplate <typename T, typename U>\n"
            "void two(const BE::Tensor& x, BE::Tensor& o, U u) {}\n")
    path = tmp_path / "t.cpp"
    path.write_text('#include "kernix/common.h"\n' + body)
    r = infer_file(path, use_cache=False)
    assert not r.errors and [f.name for f in r.functions] == ["two_float32_int32"]


def test_an_error_in_a_header_is_not_taken_for_a_failed_instantiation(tmp_path):
    # The instantiations are probed on lines appended to the file; an error in a header on one of those
    # line numbers (glibc's _Float32 under some toolchains) belongs to the header, not to a probe.
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "quirky.h").write_text("#pragma once\n" + "\n" * 4 + "inline unknown_type_t quirky();\n")
    path = tmp_path / "k.cpp"
    path.write_text('#include "kernix/common.h"\n#include <quirky.h>\n// @BE twice<T: float, double>\n'
                    "template <typename T>\nvoid twice(const BE::Tensor& x, BE::Tensor& y) {}\n")
    r = infer_file(path, flags=["-isystem", str(tmp_path / "sys")], use_cache=False)
    assert [f.name for f in r.functions] == ["twice_float32", "twice_float64"]
    assert [(e.file, e.line) for e in r.errors] == [(str(tmp_path / "sys" / "quirky.h"), 6)]


def test_a_plain_annotation_on_a_template_is_still_refused(tmp_path):
    errors = _errors(tmp_path, "// @BE t\ntemplate <typename T>\nvoid t(const BE::Tensor& x, BE::Tensor& o) {}\n")
    assert len(errors) == 1 and "template" in errors[0]


# ---- a module: instances and the dispatching callable ---------------------------------------------

@pytest.fixture(scope="module")
def mod_build(tmp_path_factory):
    """The name and the cache of the module of CPU: built here, found again by the sharded test's process."""
    return unique_name("templates"), tmp_path_factory.mktemp("b")


@pytest.fixture(scope="module")
def mod(mod_build):
    name, cache = mod_build
    return kernix.load_cpp_file(CPU, name=name, build_directory=cache)


def test_instances_run(mod):
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(mod.scale_float32(x, factor=2.0), np.arange(4) * 2.0)
    np.testing.assert_array_equal(mod.tile_int32_m3(x.astype(jnp.int32)), np.arange(4) - 3 + 100)
    assert mod.targets["scale_float64"].endswith(".scale_float64")


def test_one_callable_dispatches_on_dtype_and_static_arguments(mod):
    x = jnp.arange(4, dtype=jnp.float32)
    y = mod.scale(x, factor=2.0)
    assert y.dtype == jnp.float32
    z = mod.scale(x.astype(jnp.float64), factor=0.5)
    assert z.dtype == jnp.float64 and np.allclose(z, np.arange(4) * 0.5)
    np.testing.assert_array_equal(mod.tile(x, BLOCK=2), np.arange(4) + 102.0)
    np.testing.assert_array_equal(mod.tile(x.astype(jnp.int32), BLOCK=-3), np.arange(4) + 97)
    assert mod.tile(x.astype(jnp.int32), BLOCK=-3).dtype == jnp.int32
    assert mod["scale"] is mod.scale
    assert {"scale", "tile", "negate"} <= set(dir(mod)) and "scale_bwd" not in dir(mod)


def test_dispatch_under_jit_vmap_and_grad(mod):
    x = jnp.arange(6, dtype=jnp.float64).reshape(2, 3)
    np.testing.assert_allclose(jax.jit(lambda a: mod.scale(a, factor=3.0))(x), x * 3.0)
    np.testing.assert_allclose(jax.vmap(lambda a: mod.scale(a, factor=3.0))(x), x * 3.0)
    g = jax.grad(lambda a: mod.scale(a, factor=3.0).sum())(x)  # through scale_bwd<double>
    np.testing.assert_allclose(g, np.full((2, 3), 3.0))
    g32 = jax.grad(lambda a: mod.scale(a, factor=-1.5).sum())(x.astype(jnp.float32))
    assert g32.dtype == jnp.float32 and np.allclose(g32, -1.5)


def test_dispatch_refuses_what_no_instantiation_fits(mod):
    x = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(kernix.CallError, match=r"no instantiation fits inputs of dtype int16.*scale_float32 "
                                               r"\(T=float\); scale_float64 \(T=double\)"):
        mod.scale(x.astype(jnp.int16), factor=1.0)
    with pytest.raises(kernix.CallError, match=r"fit several instantiations.*pass BLOCK=\.\.\. to choose"):
        mod.tile(x)
    with pytest.raises(kernix.CallError, match=r"no instantiation fits inputs of dtype float32, BLOCK=7"):
        mod.tile(x, BLOCK=7)
    with pytest.raises(AttributeError):
        mod.no_such_family  # noqa: B018


def test_functions_named_with_a_dtype_suffix_form_a_family(mod):
    x = jnp.arange(3, dtype=jnp.float64)
    y = mod.negate(x)
    assert y.dtype == jnp.float64 and np.array_equal(y, -np.arange(3))
    assert [m.name for m in mod.negate.members] == ["negate_f32", "negate_f64"]
    with pytest.raises(kernix.CallError, match=r"negate_f32 \(float32\); negate_f64 \(float64\)"):
        mod.negate(x.astype(jnp.int32))


def test_out_chooses_the_instantiation_when_no_input_decides(mod):
    """dequant<T>'s only input is int8 and iota<T> has none: out='s dtype says which T is meant."""
    q = np.array([1, -2, 3], np.int8)
    for dtype in (jnp.float32, jnp.float64):
        out = jax.ShapeDtypeStruct((3,), dtype)
        assert mod.dequant.select(q, out=out) == f"dequant_{np.dtype(dtype).name}"
        eager = mod.dequant(q, scale=0.5, out=out)
        jitted = jax.jit(lambda v, out=out: mod.dequant(v, scale=0.5, out=out))(q)
        for y in (eager, jitted):
            assert y.dtype == dtype
            np.testing.assert_array_equal(y, [0.5, -1.0, 1.5])
    ints = jax.jit(lambda: mod.iota(start=7, out=jax.ShapeDtypeStruct((3,), jnp.int32)))()
    assert ints.dtype == jnp.int32 and ints.tolist() == [7, 8, 9]
    floats = mod.iota(start=0.5, out=[jax.ShapeDtypeStruct((2,), jnp.float32)])
    assert floats.dtype == jnp.float32 and floats.tolist() == [0.5, 1.5]
    # where the inputs decide, out= is not what chooses (it is the member's to check)
    assert mod.scale.select(jnp.ones(2, jnp.float64), out=jax.ShapeDtypeStruct((2,), jnp.float32)) == "scale_float64"


def test_an_out_that_fits_no_candidate_or_no_out_is_an_error_naming_them(mod):
    q = np.array([1], np.int8)
    with pytest.raises(kernix.CallError, match=r"dequant_float32 .*dequant_float64 .*out=jax\.ShapeDtypeStruct"):
        mod.dequant(q, scale=1.0)  # nothing says which T
    with pytest.raises(kernix.CallError, match=r"out= of dtype int16.*dequant_float32 .*dequant_float64"):
        mod.dequant(q, scale=1.0, out=jax.ShapeDtypeStruct((1,), jnp.int16))
    with pytest.raises(kernix.CallError, match=r"out= of dtype float64.*iota_float32 .*iota_int32"):
        jax.jit(lambda: mod.iota(start=1, out=jax.ShapeDtypeStruct((1,), jnp.float64)))()
    with pytest.raises(kernix.CallError, match=r"out= of dtype float32 fit several.*tile_float32_2 .*tile_float32_m3 "):
        mod.tile(np.zeros(2, np.float32), out=jax.ShapeDtypeStruct((2,), jnp.float32))  # out= cannot tell BLOCK


def _defs(text: str, name: str) -> list[str]:
    """The module-level declarations of ``name`` in stub ``text``, each with its decorator."""
    return [d for d in text.split("\n\n\n") if f"\ndef {name}(" in "\n" + d]


def test_stubs_give_one_overload_per_distinct_signature():
    """Members Python's types cannot tell apart (a float32 and a float64 array are both jax.Array) share
    one signature: identical @overloads are an error to type checkers (mypy's overload-cannot-match)."""
    text = stub_text(infer_file(CPU).functions)
    ast.parse(text)
    for name in ("scale", "negate", "dequant"):  # members differ only by dtype: one plain function
        (one,) = _defs(text, name)
        assert "@overload" not in one and f"Runs ``{name}_" in one
    tiles = _defs(text, "tile")  # BLOCK tells them apart, T does not: 4 members, 2 signatures
    assert [d.count("@overload") for d in tiles] == [1, 1]
    assert "BLOCK: Literal[2]" in tiles[0] and "BLOCK: Literal[-3]" in tiles[1]
    assert "tile_float32_2" in tiles[0] and "tile_int32_2" in tiles[0]
    iotas = _defs(text, "iota")  # start: float and start: int are two signatures
    assert len(iotas) == 2 and "start: float" in iotas[0] and "start: int" in iotas[1]
    assert "    def scale(self, x: ArrayLike" in text and "    @overload\n    def tile(self, x: ArrayLike" in text


@pytest.mark.installed
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (the test extra has it)")
def test_stubs_of_templates_and_families_pass_mypy(tmp_path):
    import subprocess
    import sys

    stub = tmp_path / "templated_ops.pyi"
    stub.write_text(stub_text(infer_file(CPU).functions))
    # jax's own modules are not followed (jax.Array and ArrayLike are then Any, the same in every overload):
    # checking all of jax would take most of a minute; every other type is checked as written.
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n[mypy-jax.*]\nfollow_imports = skip\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
                           str(tmp_path / "cache"), "--no-error-summary", str(stub)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_inspect_lists_each_instance(capsys):
    from kernix.cli import main

    assert main(["inspect", str(CPU)]) == 0
    out = capsys.readouterr().out
    assert "scale_float32 (ops::scale<float>)" in out and "tile_int32_m3 (ops::tile<int32_t, -3>)" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("scale_bwd_float64"))
    assert "arg arg ret attr.factor:float64" in row


# ---- CUDA (inference and compile here; runs on a GPU) ---------------------------------------------

@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed")
def test_cuda_half_and_bfloat16_instances_infer_and_compile(tmp_path):
    r = infer_file(CUDA)
    assert not r.errors, r.errors
    assert [f.name for f in r.functions] == ["scale_float32", "scale_float16", "scale_bfloat16"]
    assert [f.arg_spec[-2] for f in r.functions] == ["attr.factor:float32", "attr.factor:float16",
                                                     "attr.factor:bfloat16"]
    mod = kernix.load_cuda_file(CUDA, name=unique_name("templates_cuda"), compute_capability="sm_80",
                                auto_register=False, build_directory=tmp_path)
    assert set(mod.handlers) == {"scale_float32", "scale_float16", "scale_bfloat16"}


# ---- prebuilt modules and kernix.export -----------------------------------------------------------

def test_prebuilt_module_dispatches_and_exports(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.cpp").write_text(CPU.read_text())
    built = kernix.build_module(src / "t.cpp", tmp_path / "out", name=unique_name("tprebuilt"))
    mod = kernix.load_prebuilt(built.directory)
    assert "scale_float64" in mod.functions and mod.functions["scale_float64"].template_args == (
        ("T", "double", "float64"),)
    x = jnp.arange(3, dtype=jnp.float64)
    np.testing.assert_allclose(mod.scale(x, factor=2.0), x * 2)
    exp = kernix.export(jax.jit(lambda a: mod.scale(a, factor=2.0) + 1), jax.ShapeDtypeStruct((3,), jnp.float32))
    targets = kernix.runtime.export.kernix_targets(exp)
    assert len(targets) == 1 and ".scale_float32@" in targets[0]
    np.testing.assert_allclose(exp.call(jnp.arange(3, dtype=jnp.float32)), [1, 3, 5])


SHARDED = """
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import kernix
assert jax.device_count() == 2, jax.devices()
mod = kernix.load_cpp_file(sys.argv[1], name=sys.argv[3], build_directory=sys.argv[2])  # built by the test: a hit
mesh = Mesh(np.array(jax.devices()), ("b",))
x = np.arange(8, dtype=np.float32).reshape(4, 2)
xs = jax.device_put(x, NamedSharding(mesh, P("b", None)))
f = jax.jit(lambda v: mod.scale(v, factor=2.0))
np.testing.assert_allclose(f(xs), 2 * x)
assert "all-gather" not in f.lower(xs).compile().as_text()  # each device scales its own rows
g = jax.jit(jax.grad(lambda v: jnp.sum(mod.scale(v, factor=2.0))))(xs)
np.testing.assert_allclose(g, np.full_like(x, 2.0))
print("OK")
"""


def test_dispatch_on_sharded_inputs(tmp_path, mod_build, mod):
    import os
    import subprocess
    import sys

    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    name, cache = mod_build
    proc = subprocess.run([sys.executable, str(script), str(CPU), str(cache), name], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


def test_an_explicit_instantiation_points_to_the_template_list_and_that_works(tmp_path):
    head = '#include "kernix/common.h"\n'
    tmpl = "template <typename T> void tf(const BE::Tensor& x, BE::Tensor& y, T v) {}\n"
    path = tmp_path / "inst.cpp"
    path.write_text(head + tmpl + "// @BE tf\ntemplate void tf<float>(const BE::Tensor&, BE::Tensor&, float);\n")
    (err,) = infer_file(path, use_cache=False).errors
    assert "`// @BE tf<float>` right before its `template <...>`" in err.message
    path.write_text(head + "// @BE tf<float>\n" + tmpl)
    r = infer_file(path, use_cache=False)
    assert not r.errors and [f.name for f in r.functions] == ["tf_float32"]


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_cuda_template_dispatches_on_the_gpu(tmp_path):
    mod = kernix.load_cuda_file(CUDA, name=unique_name("templates_gpu"), build_directory=tmp_path)
    x = jnp.arange(1000, dtype=jnp.float32, device=gpus()[0])
    for dtype in (jnp.float32, jnp.float16, jnp.bfloat16):
        y = jax.jit(lambda v: mod.scale(v, factor=2.0))(x.astype(dtype))
        assert y.dtype == dtype
        np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(x.astype(dtype), np.float32) * 2, rtol=1e-2)
    with pytest.raises(kernix.CallError, match="scale_float32 .*scale_float16 .*scale_bfloat16"):
        mod.scale(x.astype(jnp.float64), factor=2.0)


def test_bool_and_enumerator_arguments_keep_their_spelling(tmp_path):
    path = tmp_path / "e.cpp"
    path.write_text('#include "kernix/common.h"\nenum class Mode { Fast, Exact };\n'
                    "// @BE f<T: float; FLAG: true, false; M: Mode::Fast, Mode::Exact> (n)->(n)\n"
                    "template <typename T, bool FLAG, Mode M>\n"
                    "void f(const BE::Tensor& x, BE::Tensor& out) {\n"
                    "  for (int64_t i = 0; i < x.numel(); ++i)\n"
                    "    out.data_ptr<T>()[i] = x.data_ptr<T>()[i] + (FLAG ? 10 : 0) + (M == Mode::Exact ? 1 : 0);\n"
                    "}\n")
    r = infer_file(path, use_cache=False)
    assert not r.errors
    assert [f.name for f in r.functions] == ["f_float32_true_Mode_Fast", "f_float32_true_Mode_Exact",
                                             "f_float32_false_Mode_Fast", "f_float32_false_Mode_Exact"]
    mod = kernix.load_cpp_file(path, name=unique_name("flags"), build_directory=tmp_path / "b")
    x = jnp.zeros(2, jnp.float32)
    np.testing.assert_array_equal(mod.f(x, FLAG=True, M="Mode::Exact"), [11, 11])
    np.testing.assert_array_equal(mod.f(x, FLAG=False, M="Mode::Fast"), [0, 0])
    with pytest.raises(kernix.CallError, match="fit several"):
        mod.f(x, FLAG=True)
    assert "FLAG: Literal[True], M: Literal['Mode::Exact']" in stub_text(r.functions)


def test_a_missing_out_on_an_instantiation_suggests_the_templates_annotation(tmp_path):
    path = tmp_path / "n.cpp"
    body = ("template <typename T> void h(const BE::Tensor& x, BE::Tensor& o) {\n"
            "  for (int64_t i = 0; i < x.numel(); ++i) o.data_ptr<T>()[i] = x.data_ptr<T>()[i];\n}\n")
    path.write_text('#include "kernix/common.h"\n// @BE h<float>\n' + body)
    mod = kernix.load_cpp_file(path, name=unique_name("noout"), build_directory=tmp_path / "b")
    with pytest.raises(kernix.CallError, match=r"// @BE h<\.\.\.> \(n\)->\(n\)") as e:
        mod.h(jnp.zeros(3, jnp.float32))
    with pytest.raises(kernix.CallError, match=r"`// @BE h_bwd<\.\.\.> vjp=h`"):
        jax.grad(lambda v: mod.h(v, out=jax.ShapeDtypeStruct((3,), jnp.float32)).sum())(jnp.zeros(3, jnp.float32))
    # the suggested signature, added to the template's annotation, works
    path.write_text('#include "kernix/common.h"\n// @BE h<float> (n)->(n)\n' + body)
    mod = kernix.load_cpp_file(path, name=unique_name("noout2"), build_directory=tmp_path / "c")
    assert mod.h(jnp.ones(3, jnp.float32)).shape == (3,) and "h<" in str(e.value)


def test_a_template_annotated_at_prototype_and_definition_is_exported_once(tmp_path):
    path = tmp_path / "p.cpp"
    path.write_text('#include "kernix/common.h"\n'
                    "// @BE g<float>\ntemplate <typename T> void g(const BE::Tensor& x, BE::Tensor& o);\n"
                    "// @BE g<float>\ntemplate <typename T> void g(const BE::Tensor& x, BE::Tensor& o) {}\n")
    r = infer_file(path, use_cache=False)
    assert not r.errors and [f.name for f in r.functions] == ["g_float32"]


def test_a_template_id_in_functions_points_to_the_annotation(tmp_path):
    with pytest.raises(kernix.InvalidNameError, match=r"`// @BE tf<float>` right before its `template <\.\.\.>`"):
        kernix.load_cpp_inline(unique_name("fx"), "void f() {}", functions=["tf<float>"],
                               build_directory=tmp_path)


def test_a_warm_load_dispatches_without_libclang_or_compiler(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import subprocess, sys\n"
        "import jax.numpy as jnp\n"
        "sys.modules['clang'] = None; sys.modules['clang.cindex'] = None\n"
        "def no_process(*a, **k): raise AssertionError('warm load started a process')\n"
        "subprocess.Popen = no_process\n"
        "import kernix\n"
        f"mod = kernix.load_cpp_file({str(CPU)!r}, name='twarm', build_directory={str(tmp_path)!r})\n"
        "print(mod.scale(jnp.ones(2, jnp.float64), factor=4.0).tolist(), mod.negate.members[0].name)\n"
    )
    kernix.load_cpp_file(CPU, name="twarm", build_directory=tmp_path)  # the cold build
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1"))
    assert proc.returncode == 0 and "[4.0, 4.0] negate_f32" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_dispatch_on_the_data_beside_inputs_of_a_fixed_dtype():
    """Indices pinned to int32 beside data of the template's type: the data's dtype picks the instance."""
    mod = kernix.load_cpp_inline(unique_name("gather_t"), r"""
#include "kernix/common.h"
// @BE take<T: float, double>
template <typename T>
void take(const BE::TensorOf<int32_t>& idx, const BE::Tensor& data, BE::Tensor& out) {
  for (int64_t i = 0; i < idx.numel(); ++i) out.data_ptr<T>()[i] = data.data_ptr<T>()[idx.data_ptr()[i]];
}
""")
    idx = np.array([2, 0], np.int32)
    assert mod.take.select(idx, np.arange(3, dtype=np.float32)) == "take_float32"
    out = jax.ShapeDtypeStruct((2,), np.float64)
    np.testing.assert_array_equal(mod.take(idx, np.arange(3, dtype=np.float64), out=out), [2.0, 0.0])
    with pytest.raises(kernix.CallError, match="no instantiation fits"):
        mod.take(idx, np.arange(3, dtype=np.int16), out=out)
