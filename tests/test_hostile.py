"""Hostile and wrong input: names, flags, sources and calls.

Every case ends in a correct result or a clear :class:`kernix.KernixError`
(never a hang, a crash of the interpreter, or a traceback from deep inside),
and bad names are rejected before anything touches the disk or a compiler.
"""

from __future__ import annotations

import faulthandler
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax
import jax.numpy as jnp

import kernix
from kernix.loaders import default_module_name
from kernix.errors import ArgSpecError, KernixError
from kernix import InferResult, infer_file
from kernix import InvalidNameError
from kernix.language.names import check_module_name

from helpers import FIXTURES, unique_name

ADD_ONE = (FIXTURES / "reliability" / "add_one.cpp").read_text()


@pytest.fixture(autouse=True)
def _no_hang():
    """A hang anywhere in this file dumps every thread's stack and ends the run."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# --------------------------------------------------------------------- names

BAD_MODULE_NAMES = [
    "../x", "..", ".", "a/b", "/abs", "a\\b", "a\0b", "", " ", "a b", "a..b", "a.", ".a", "-a", "a-",
    "caf\u00e9", "a\nb", "a:b", "a*", "x" * 129, "1abc", 7, None, b"bytes",
]
BAD_PREFIXES = ["../x", "a/b", "a..b", ".a", "a.", "a b", "", "a-b", "a\0", "x." * 70, 3]
BAD_FUNCTIONS = [["../f"], ["f g"], ["f\0"], ["1f"], ["a.b"], [""], {"f/g": ["arg", "ret"]}, [3]]


@pytest.fixture
def untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A cache root that must not be created, and no process may be started."""
    root = tmp_path / "cache"
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(root))

    def no_process(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    src_dir = tmp_path / "srcs"
    src_dir.mkdir()
    (src_dir / "k.cpp").write_text(ADD_ONE)
    (src_dir / "k.cu").write_text(ADD_ONE)
    yield root, src_dir
    assert not root.exists(), sorted(str(p) for p in root.rglob("*"))
    assert sorted(p.name for p in src_dir.iterdir()) == ["k.cpp", "k.cu"]


def _loaders(src_dir: Path):
    return [
        lambda **kw: kernix.load_cpp_inline(kw.pop("name"), ADD_ONE, **kw),
        lambda **kw: kernix.load_cuda_inline(kw.pop("name"), ADD_ONE, **kw),
        lambda **kw: kernix.load_cpp_file(src_dir / "k.cpp", **kw),
        lambda **kw: kernix.load_cuda_file(src_dir / "k.cu", **kw),
        lambda **kw: kernix.load_cpp_dir(src_dir, **kw),
        lambda **kw: kernix.load_cuda_dir(src_dir, **kw),
    ]


@pytest.mark.parametrize("bad", BAD_MODULE_NAMES, ids=repr)
def test_bad_module_names_are_rejected_before_any_io(untouched, bad) -> None:
    _, src_dir = untouched
    loaders = _loaders(src_dir)
    if bad is None:  # the file and directory loaders take None as "from the file name"
        loaders = loaders[:2]
    for load in loaders:
        with pytest.raises(InvalidNameError, match="module name"):
            load(name=bad)
    if bad is not None:  # clear_cache(None) clears everything
        with pytest.raises(InvalidNameError):
            kernix.clear_cache(bad)


@pytest.mark.parametrize("bad", BAD_PREFIXES, ids=repr)
def test_bad_target_prefixes_are_rejected_before_any_io(untouched, bad) -> None:
    _, src_dir = untouched
    for load in _loaders(src_dir):
        with pytest.raises(InvalidNameError, match="target_prefix"):
            load(name="fine", target_prefix=bad)


@pytest.mark.parametrize("bad", BAD_FUNCTIONS, ids=repr)
def test_bad_function_names_are_rejected_before_any_io(untouched, bad) -> None:
    _, src_dir = untouched
    for load in _loaders(src_dir):
        with pytest.raises(InvalidNameError, match="function name"):
            load(name="fine", functions=bad)


def test_colliding_function_names_are_rejected(untouched) -> None:
    _, src_dir = untouched
    for load in _loaders(src_dir):
        with pytest.raises(ArgSpecError, match="twice"):
            load(name="fine", functions=["add_one", "add_one"])
    with pytest.raises(ArgSpecError, match="not the string"):
        kernix.load_cpp_inline("fine", ADD_ONE, functions="add_one")


@pytest.mark.parametrize("stem", ["my ops", "caf\u00e9", "-", "1st", "a..b", "..", "x" * 300, "\u4e2d\u6587"])
def test_default_names_from_hostile_file_names_are_valid(stem) -> None:
    name = default_module_name(Path(f"/d/{stem}.cpp"))
    if len(name) <= 128:
        assert check_module_name(name) == name
    else:
        with pytest.raises(InvalidNameError):
            check_module_name(name)


def test_valid_names_are_accepted() -> None:
    for good in ["ops", "_x", "pkg.ops", "ops-v2", "a.b-c_d", "x" * 128]:
        assert check_module_name(good) == good


_NAME_TEXT = st.text(alphabet=st.sampled_from("aZ_09.-/ \x00\u00e9\u0661"), max_size=12)


@settings(max_examples=400, deadline=None)
@given(text=_NAME_TEXT)
def test_name_checks_match_their_grammar(text: str) -> None:
    """The checks (plain string tests, no regular expressions at import) accept
    exactly the documented grammars; Arabic-Indic digits and accents are not ASCII."""
    import re

    from kernix.language.names import check_target_prefix, is_handler_symbol, is_module_name

    module_ok = bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:[.-][A-Za-z0-9_]+)*", text))
    assert is_module_name(text) == module_ok
    prefix_ok = bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", text))
    try:
        check_target_prefix(text)
        assert prefix_ok
    except InvalidNameError:
        assert not prefix_ok
    symbol = "kernix_handler_" + text
    assert is_handler_symbol(symbol) == bool(re.fullmatch(r"kernix_handler_[0-9]+_[A-Za-z0-9_]+", symbol))


# --------------------------------------------------------------------- one compiled module

LATIN1_COMMENT = "// caf\xe9 na\xefve: bytes that are not UTF-8\n".encode("latin-1")
SOURCE = LATIN1_COMMENT + b"""
#include "kernix/common.h"
#include "xla/ffi/api/ffi.h"

#define KX_STR_(x) #x
#define KX_STR(x) KX_STR_(x)

// @BE flag_length
void flag_length(const BE::Tensor x, BE::Tensor out) {
  static const char s[] = KX_STR(KX_FLAG);
  out.data_ptr<int64_t>()[0] = static_cast<int64_t>(sizeof(s) - 1);
}

// @BE affine (...)->(...)
void affine(const BE::Tensor x, BE::Tensor out, float factor, int32_t offset, bool negate) {
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = in[i] * factor + static_cast<float>(offset);
    o[i] = negate ? -v : v;
  }
}

// @BE typed_double
void typed_double(xla::ffi::Buffer<xla::ffi::DataType::F32, 1> x,
                  xla::ffi::ResultBuffer<xla::ffi::DataType::F32, 1> out) {
  for (size_t i = 0; i < x.element_count(); ++i) out->typed_data()[i] = 2 * x.typed_data()[i];
}
"""


@pytest.fixture(scope="module")
def shell_markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def mod(tmp_path_factory: pytest.TempPathFactory, shell_markers: Path):
    d = tmp_path_factory.mktemp("hostile-src")
    src = d / "hostile.cpp"
    src.write_bytes(SOURCE)
    m = shell_markers
    flag_value = f"$(touch {m}/a);touch {m}/b|touch {m}/c&&touch {m}/d"
    module = kernix.load_cpp_file(
        src, name=unique_name("hostile"), build_directory=tmp_path_factory.mktemp("hostile-cache"),
        extra_cflags=[f"-DKX_FLAG={flag_value}", "-DUNUSED=`touch " + str(m) + "/e`"],
    )
    module.flag_value = flag_value
    return module


def test_flags_are_arguments_not_shell_text(mod, shell_markers: Path) -> None:
    """Shell syntax in a flag reaches the compiler literally and runs nothing."""
    out = mod.flag_length(jnp.zeros(1), out=jax.ShapeDtypeStruct((1,), jnp.int64))
    assert int(out[0]) == len(mod.flag_value)
    assert list(shell_markers.iterdir()) == []


def test_non_utf8_source_builds_and_runs(mod) -> None:
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_allclose(mod.affine(x, factor=2.0, offset=1, negate=True), -(2 * np.arange(3) + 1))
    np.testing.assert_array_equal(mod.typed_double(x, out=jax.ShapeDtypeStruct(x.shape, x.dtype)), 2 * np.arange(3))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m, x: m.affine(x, x, factor=1.0, offset=0, negate=False),
         r"affine\(\) takes 1 input array\(s\) \(x\), got 2"),
        (lambda m, x: m.affine(factor=1.0, offset=0, negate=False), r"affine\(\) takes 1 input array\(s\) \(x\), got 0"),
        (lambda m, x: m.affine(x, factor="2", offset=0, negate=False), r"affine\(\): attribute 'factor' is float32.*str"),
        (lambda m, x: m.affine(x, factor=1.0, offset="1", negate=False), r"affine\(\): attribute 'offset' is int32"),
        (lambda m, x: m.affine(x, factor=1.0, offset=0, negate="yes"), r"affine\(\): attribute 'negate' is bool"),
        (lambda m, x: m.affine(x, factor=None, offset=0, negate=False), r"affine\(\): attribute 'factor' is float32"),
        (lambda m, x: m.affine(x, factor=[1.0, 2.0], offset=0, negate=False), r"attribute 'factor'.*scalar"),
        (lambda m, x: m.affine(x, factor=1.0, offset=0.5, negate=False), r"attribute 'offset' is int32"),
        (lambda m, x: m.affine(x, factor=1.0, offset=2**40, negate=False), r"'offset'.*does not fit in int32"),
        (lambda m, x: m.affine(x, factor=1 + 2j, offset=0, negate=False), r"attribute 'factor' is float32"),
        (lambda m, x: m.affine(x, factor=1.0, negate=False), r"affine\(\) is missing attribute\(s\) 'offset' \(int32\)"),
        (lambda m, x: m.affine(x, factor=1.0, offset=0, negate=False, scale=2),
         r"affine\(\) got unknown attribute\(s\) 'scale'"),
        (lambda m, x: m.affine("abc", factor=1.0, offset=0, negate=False), r"affine\(\): input 'x' must be an array"),
        (lambda m, x: m.typed_double(x.astype(jnp.int32)), r"typed_double\(\): input 'x' must be float32.*int32"),
        (lambda m, x: m.typed_double(x, out=jax.ShapeDtypeStruct((3,), jnp.float64)),
         r"typed_double\(\): output 'out' must be float32"),
        (lambda m, x: m.typed_double(x, out=[jax.ShapeDtypeStruct((3,), jnp.float32)] * 2),
         r"typed_double\(\): out= describes 2 outputs, the function has 1"),
        # An attribute passed positionally: the message says attributes are keywords, and how.
        (lambda m, x: m.affine(x, 2.0, 1, False),
         r"affine\(\) takes 1 input array\(s\) \(x\), got 4; attributes are keyword arguments: "
         r"affine\(x, factor=\.\.\., offset=\.\.\., negate=\.\.\.\)"),
        # A misspelt vmap_method is refused by the call, naming it and the accepted values.
        (lambda m, x: m.affine(x, factor=1.0, offset=0, negate=False, vmap_method="sequental"),
         r"affine\(\): vmap_method='sequental' is not one of 'sequential', 'sequential_unrolled', "
         r"'expand_dims', 'broadcast_all', 'legacy_vectorized'"),
        (lambda m, x: jax.vmap(lambda v: m.typed_double(v, vmap_method="loop"))(x[None]),
         r"typed_double\(\): vmap_method='loop' is not one of"),
    ],
    ids=[
        'too_many_inputs', 'no_inputs', 'str_for_float', 'str_for_int', 'str_for_bool', 'none_for_float',
        'list_for_float', 'float_for_int', 'int_overflow', 'complex_for_float', 'missing_attr',
        'unknown_attr', 'str_input', 'typed_wrong_dtype', 'typed_wrong_out_dtype', 'wrong_out_count',
        'attrs_positional', 'bad_vmap_method', 'bad_vmap_method_no_signature',
    ],
)
def test_call_errors_name_function_and_parameter(mod, call, match) -> None:
    x = jnp.arange(3, dtype=jnp.float32)
    with pytest.raises(kernix.CallError, match=match):
        call(mod, x)


def test_pickling_a_module_or_function_says_what_to_do_instead(mod) -> None:
    """Native code loaded in this process cannot travel in a pickle: a clear TypeError, not
    a complaint about a local object inside kernix."""
    import copy
    import pickle

    for obj, what in ((mod, f"module {mod.name!r}"), (mod.affine, f"function {mod.affine.target!r}")):
        with pytest.raises(TypeError, match=f"kernix {what} cannot be pickled.*load the same sources.*kernix.export"):
            pickle.dumps(obj)
    # copy.copy / copy.deepcopy of a function still work (they share the loaded module).
    x = jnp.arange(3, dtype=jnp.float32)
    for c in (copy.copy(mod.typed_double), copy.deepcopy(mod.typed_double)):
        np.testing.assert_array_equal(c(x, out=jax.ShapeDtypeStruct(x.shape, x.dtype)), 2 * np.arange(3))


# --------------------------------------------------------------------- sources

BAD_SOURCES = {
    "empty": "",
    "whitespace": "   \n\t\n",
    "no_annotation": "int f(int x) { return x; }\n",
    "annotation_without_function": "// @BE ghost\n",
    "syntax_error_in_signature": '#include "kernix/common.h"\n// @BE f\nvoid f(const BE::Tensor x BE::Tensor out);\n',
    "unbalanced": "// @BE f\nvoid f( {{{{ \n",
    "nul_bytes": "\0\0// @BE f\0\nvoid f(\0);\n",
    "garbage_text": "".join(chr(c) for c in range(1, 0x2FF)) * 4,
    "unknown_type": "// @BE f\nvoid f(const Tensr x, Tensr out);\n",
    "recursive_include": '#include __FILE__\n// @BE f\nvoid f(int a);\n',
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_inline_sources_are_clear_errors(case) -> None:
    with pytest.raises(KernixError) as info:
        kernix.load_cpp_inline(unique_name(f"bad_{case}"), BAD_SOURCES[case])
    assert str(info.value).strip()


def test_unencodable_inline_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KernixError, match="UTF-8"):
        kernix.load_cpp_inline(unique_name("surrogate"), "// \ud800\n" + ADD_ONE, build_directory=tmp_path)


@pytest.mark.parametrize("size", [1, 4096, 200_000])
def test_binary_garbage_file_is_a_clear_error(tmp_path: Path, size: int) -> None:
    rng = np.random.default_rng(size)
    src = tmp_path / "garbage.cpp"
    src.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    with pytest.raises(KernixError):
        kernix.load_cpp_file(src, name=unique_name("garbage"), build_directory=tmp_path / "c")


def test_huge_source_thousands_of_functions(tmp_path: Path) -> None:
    n = 3000
    parts = ['#include "kernix/common.h"\n']
    for i in range(n):
        parts.append(f"// @BE f{i}\nvoid f{i}(const BE::Tensor x, BE::Tensor out, int32_t k{i});\n")
    src = tmp_path / "huge.cpp"
    src.write_text("".join(parts))
    result = infer_file(src, use_cache=False)
    assert not result.errors
    assert len(result.functions) == n
    assert result.functions[-1].arg_spec == ("arg", "ret", f"attr.k{n - 1}:int32")


def test_non_utf8_bytes_in_inference(tmp_path: Path) -> None:
    src = tmp_path / "latin1.cpp"
    src.write_bytes(SOURCE)
    result = infer_file(src, use_cache=False)
    assert not result.errors
    assert [f.name for f in result.functions] == ["flag_length", "affine", "typed_double"]


def test_interpreter_survives_hostile_sources(tmp_path: Path) -> None:
    """The same inputs in a fresh interpreter: it exits normally (no crash inside libclang)."""
    for case, text in BAD_SOURCES.items():
        (tmp_path / f"{case}.cpp").write_bytes(text.encode("utf-8", "surrogateescape"))
    (tmp_path / "random.cpp").write_bytes(np.random.default_rng(0).integers(0, 256, 65536, dtype=np.uint8).tobytes())
    code = (
        "import sys, pathlib\n"
        "from kernix import infer_file\n"
        "from kernix.errors import KernixError\n"
        "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.cpp')):\n"
        "    try:\n"
        "        infer_file(p, use_cache=False)\n"
        "    except KernixError:\n"
        "        pass\n"
        "print('survived')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "survived" in proc.stdout


# --------------------------------------------------------------------- fuzzing inference

FRAGMENTS = [
    '#include "kernix/common.h"\n', "// @BE f\n", "// @BE g arg ret\n", "// @BE\n", "// @BE 1bad\n",
    "void f(const BE::Tensor x, BE::Tensor out);\n", "void g(BE::Tensor& out, float s);\n",
    "template <typename T> void h(T x);\n", "namespace n {", "}", "{", ")", "(", ";", "#if 0\n", "#endif\n",
    "#define M(x) x\n", "M(void f(const BE::Tensor x, BE::Tensor out);)\n", "enum class E : int { A };\n",
    "void f(E e, BE::Tensor out);\n", "void f(int* p, BE::Tensor out);\n", "struct S { int a; };\n",
    "void f(S s, BE::Tensor out);\n", '__attribute__((annotate("BE"))) ', "/* unterminated ",
    '"unterminated string\n', "\\\n", "#include <nonexistent_header.h>\n", "#error boom\n", "\xff\xfe",
    "\0", "extern \"C\" ", "static ", "inline ", "constexpr ", "void f(...);\n", "auto f() -> void;\n",
]


def _infer_outcome(tmp_path: Path, data: bytes) -> None:
    src = tmp_path / "fuzz.cpp"
    src.write_bytes(data)
    try:
        result = infer_file(src, use_cache=False)
    except KernixError:
        return
    assert isinstance(result, InferResult)
    for f in result.functions:  # whatever was found is a well-formed spec
        assert f.name and isinstance(f.arg_spec, tuple)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2048))
def test_fuzz_random_bytes(tmp_path: Path, data: bytes) -> None:
    _infer_outcome(tmp_path, data)


@st.composite
def near_valid_cpp(draw) -> bytes:
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=12))
    text = "".join(parts).encode("latin-1", "replace")
    if draw(st.booleans()) and text:  # flip, drop or insert a few bytes
        pos = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["flip", "drop", "insert"]))
        byte = bytes([draw(st.integers(0, 255))])
        text = text[:pos] + (byte if op != "drop" else b"") + text[pos + (op != "insert"):]
    return text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=near_valid_cpp())
def test_fuzz_near_valid_cpp(tmp_path: Path, data: bytes) -> None:
    _infer_outcome(tmp_path, data)


# --------------------------------------------------------------------- sources that are not regular files


def _not_regular(tmp_path: Path, kind: str) -> Path:
    """A path named like a C++ source that is no regular file: a FIFO no one
    writes to (opening it to read blocks), or ``/dev/zero`` (reading it never ends)."""
    if kind == "fifo":
        path = tmp_path / "pipe.cpp"
        os.mkfifo(path)
        return path
    path = tmp_path / "zero.cpp"
    path.symlink_to("/dev/zero")
    return path


def _run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A fresh process with a time limit: a hang is a failure, not a stuck run."""
    env = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=120,
                          check=False, cwd=tmp_path)


@pytest.mark.parametrize("kind, what", [("fifo", "a FIFO"), ("zero", "a character device")])
def test_loaders_refuse_a_source_that_is_not_a_regular_file(tmp_path: Path, kind: str, what: str) -> None:
    """Was: "source file not found" for a file that is there."""
    path = _not_regular(tmp_path, kind)
    with pytest.raises(kernix.SourceNotFoundError, match=f"{path} is {what}.* not a regular file"):
        kernix.load_cpp_file(path, name=unique_name("pipe"), build_directory=tmp_path / "c")
    (tmp_path / "ok.cpp").write_text(ADD_ONE)
    with pytest.raises(kernix.SourceNotFoundError, match=f"{path} is {what}"):  # not silently left out
        kernix.load_cpp_dir(tmp_path, name=unique_name("pipe_dir"), build_directory=tmp_path / "c")


@pytest.mark.parametrize("kind, what", [("fifo", "a FIFO"), ("zero", "a character device")])
def test_infer_file_refuses_a_source_that_is_not_a_regular_file(tmp_path: Path, kind: str, what: str) -> None:
    """Was: infer_file opened the FIFO and waited forever, or read /dev/zero until memory ran out."""
    path = _not_regular(tmp_path, kind)
    code = f"import kernix\ntry:\n    kernix.infer_file({str(path)!r})\nexcept kernix.KernixError as e:\n    print(e)\n"
    out = _run(["-c", code], tmp_path)
    assert out.returncode == 0 and f"{path} is {what}" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--no-cache"], ["stubs"], ["build", "-o", "out"]])
@pytest.mark.parametrize("kind, what", [("fifo", "a FIFO"), ("zero", "a character device")])
def test_commands_refuse_a_source_that_is_not_a_regular_file(tmp_path: Path, command: list[str], kind: str,
                                                             what: str) -> None:
    """Was: `kernix inspect` and `kernix stubs` hung on a FIFO and read /dev/zero until memory ran out."""
    path = _not_regular(tmp_path, kind)
    out = _run(["-m", "kernix", *command, str(path)], tmp_path)
    assert out.returncode == 2 and f"{path} is {what}" in out.stderr and "Traceback" not in out.stderr, out.stderr


# --------------------------------------------------------------------- paths and flags that are not UTF-8

def _not_utf8(tmp_path: Path) -> str:
    """A path under ``tmp_path`` whose last name holds a byte that is not UTF-8, as Python holds it."""
    return os.fsdecode(os.fsencode(tmp_path) + b"/kernix-\xff")


@pytest.mark.parametrize("option, value, shown", [
    ("extra_include_paths", lambda bad: [bad], "extra_include_paths[0] = '{}'"),
    ("extra_cflags", lambda bad: ["-DX=\udcff"], "extra_cflags[0] = '-DX=\\xff'"),
    ("extra_cflags", lambda bad: ["-isystem", bad], "extra_cflags[1] = '{}'"),
    ("extra_ldflags", lambda bad: ["-L" + bad], "extra_ldflags[0] = '-L{}'"),
    ("build_directory", lambda bad: bad, "build_directory = '{}'"),
])
def test_a_path_or_flag_that_is_not_utf8_is_refused_naming_it(tmp_path: Path, option: str, value, shown: str) -> None:
    """Was: a raw UnicodeEncodeError from deep inside the build."""
    src = tmp_path / "k.cpp"
    src.write_text(ADD_ONE)
    bad = _not_utf8(tmp_path)
    kw = {"build_directory": tmp_path / "c", option: value(bad)}
    expected = re.escape(shown.format(f"{tmp_path}/kernix-\\xff")) + ".* not valid UTF-8"
    with pytest.raises(kernix.OptionError, match=expected):
        kernix.load_cpp_file(src, name=unique_name("utf8"), **kw)
    assert not os.path.lexists(os.fsencode(bad))  # nothing was made there


@pytest.mark.parametrize("option, value", [
    ("include_dirs", lambda bad: [bad]), ("defines", lambda bad: ["X=\udcff"]), ("flags", lambda bad: ["-I" + bad]),
])
def test_infer_file_refuses_an_option_that_is_not_utf8(tmp_path: Path, option: str, value) -> None:
    src = tmp_path / "k.cpp"
    src.write_text(ADD_ONE)
    with pytest.raises(KernixError, match=re.escape(f"{option}[0] = '") + ".*\\\\xff.* not valid UTF-8"):
        infer_file(src, **{option: value(_not_utf8(tmp_path))}, cache_dir=tmp_path / "c")


@pytest.mark.parametrize("flag", ["-I", "-D"])
def test_commands_refuse_an_option_that_is_not_utf8(tmp_path: Path, flag: str) -> None:
    (tmp_path / "k.cpp").write_text(ADD_ONE)
    value = os.fsencode(tmp_path) + b"/kernix-\xff" if flag == "-I" else b"X=\xff"
    code = ("import os, sys; from kernix.cli import main; "
            f"sys.exit(main(['inspect', {flag!r}, os.fsdecode({value!r}), 'k.cpp']))")
    out = _run(["-c", code], tmp_path)
    assert out.returncode == 2 and "\\xff' is not valid UTF-8" in out.stderr and "Traceback" not in out.stderr, \
        out.stderr
