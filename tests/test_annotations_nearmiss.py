"""Comments that look like ``// @BE`` annotations but are not one (``// @Be f``,
``//@be f``, ``/* @BE f */``, ``/// @BE f``) are warnings at their file and
line that say what to write instead, on a load and in ``kernix inspect``;
ordinary text (``@brief``, e-mail addresses, ``@BEGIN``) is not."""

from __future__ import annotations

import json
import os
import textwrap
import warnings
from pathlib import Path

import pytest
from helpers import unique_name

import kernix
from kernix import AnnotationWarning, infer_file
from kernix.cli import main
from kernix.frontend.lexer import find_annotations, find_near_misses

NEAR_MISSES = textwrap.dedent(
    """\
    #include "kernix/common.h"

    // @Be mixed_case
    void mixed_case(const BE::Tensor& x, BE::Tensor& y) {}

    //@be lower_case arg ret
    void lower_case(const BE::Tensor& x, BE::Tensor& y) {}

    /* @BE in_block */
    void in_block(const BE::Tensor& x, BE::Tensor& y) {}

    /**
     * Doubles x.
     * @BE in_doc
     */
    void in_doc(const BE::Tensor& x, BE::Tensor& y) {}

    /// @BE triple_slash
    void triple_slash(const BE::Tensor& x, BE::Tensor& y) {}

    // @BE real
    void real(const BE::Tensor& x, BE::Tensor& y) {}
    """
)

#: (line, column, what was written, the fix the message gives)
EXPECTED = [
    (3, 1, "// @Be mixed_case", "// @BE mixed_case"),
    (6, 1, "//@be lower_case arg ret", "// @BE lower_case arg ret"),
    (9, 4, "/* @BE in_block */", "// @BE in_block"),
    (14, 4, "* @BE in_doc", "// @BE in_doc"),
    (18, 1, "/// @BE triple_slash", "// @BE triple_slash"),
]

ORDINARY = textwrap.dedent(
    """\
    #include "kernix/common.h"
    /**
     * @brief Adds one.  Questions: maintainer@be.example.org, or @bean.
     * @BEGIN_EXAMPLE ... @END_EXAMPLE; see @BE f for the annotation.
     */
    // @BEGIN a region; @be.example is a domain; mail@BE.org
    // see @BE x, and /* // @BE commented_out */
    /* // @BE disabled */
    const char* text = "// @be not_a_comment";
    const char* raw = R"(// @Be also_not)";
    #if 0
    // @be inactive
    #endif
    // @BE add_one
    void add_one(const BE::Tensor& x, BE::Tensor& y) {}
    """
)


def test_each_near_miss_is_found_at_its_place_with_its_fix() -> None:
    found = find_near_misses(NEAR_MISSES)
    assert [(n.line, n.column, n.written) for n in found] == [e[:3] for e in EXPECTED]
    for near, (_, _, written, fix) in zip(found, EXPECTED):
        assert f"`{written}` is not a kernix annotation" in near.message
        assert f"write `{fix}` instead" in near.message
    assert [a.name for a in find_annotations(NEAR_MISSES)] == ["real"]


def test_ordinary_text_is_no_near_miss() -> None:
    found = find_near_misses(ORDINARY)
    assert [n.line for n in found] == [12]  # only the one in `#if 0`, which inference drops


def test_inference_reports_near_misses_as_warnings(tmp_path: Path) -> None:
    src = tmp_path / "near.cpp"
    src.write_text(NEAR_MISSES)
    for use_cache in (False, True, True):  # a spec-cache hit keeps them
        result = infer_file(src, use_cache=use_cache)
        assert result.errors == ()
        assert [f.name for f in result.functions] == ["real"]
        assert [(w.file, w.line, w.column) for w in result.warnings] == [(str(src), e[0], e[1]) for e in EXPECTED]


def test_ordinary_text_loads_without_warning(tmp_path: Path) -> None:
    src = tmp_path / "ordinary.cpp"
    src.write_text(ORDINARY)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AnnotationWarning)  # (the one in `#if 0` too: inactive code)
        mod = kernix.load_cpp_file(src, name=unique_name("ordinary"), build_directory=tmp_path / "cache")
    assert list(mod.functions) == ["add_one"]
    assert infer_file(src, use_cache=False).warnings == ()


def test_a_load_warns_at_the_file_and_line(tmp_path: Path) -> None:
    src = tmp_path / "near.cpp"
    src.write_text(NEAR_MISSES)
    with pytest.warns(AnnotationWarning) as record:
        mod = kernix.load_cpp_file(src, name=unique_name("near"), build_directory=tmp_path / "cache")
    assert list(mod.functions) == ["real"]
    messages = [str(w.message) for w in record if w.category is AnnotationWarning]
    assert len(messages) == len(EXPECTED)
    for message, (line, column, _, fix) in zip(messages, EXPECTED):
        assert message.startswith(f"{src}:{line}:{column}: ") and f"`{fix}`" in message
    # Attributed to the comment's own file and line (not to kernix's internals, nor the load's line),
    # in the module that asked for the load.
    warned = [w for w in record if w.category is AnnotationWarning]
    assert [(w.filename, w.lineno) for w in warned] == [(str(src), line) for line, *_ in EXPECTED]


def test_the_suggested_fix_exports_the_function(tmp_path: Path) -> None:
    src = tmp_path / "fixed.cpp"
    src.write_text(NEAR_MISSES.replace("// @Be mixed_case", "// @BE mixed_case"))
    result = infer_file(src, use_cache=False)
    assert [f.name for f in result.functions] == ["mixed_case", "real"]
    assert len(result.warnings) == len(EXPECTED) - 1


def test_nothing_to_export_names_the_near_misses(tmp_path: Path) -> None:
    src = tmp_path / "only_near.cpp"
    src.write_text(NEAR_MISSES.split("// @BE real")[0])
    with pytest.warns(AnnotationWarning), pytest.raises(kernix.KernixError, match="no function to export") as info:
        kernix.load_cpp_file(src, name=unique_name("only_near"), build_directory=tmp_path / "cache")
    assert f"{src}:3:1: `// @Be mixed_case` is not a kernix annotation" in str(info.value)


def test_an_annotation_naming_nothing_stays_an_error(tmp_path: Path) -> None:
    src = tmp_path / "nameless.cpp"
    src.write_text('#include "kernix/common.h"\n// @BE\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n')
    (error,) = infer_file(src, use_cache=False).errors
    assert (error.line, error.column) == (2, 1)
    assert "names no function: write `// @BE <function_name>`" in error.message


def test_inspect_prints_the_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "near.cpp"
    src.write_text(NEAR_MISSES)
    for _ in range(2):  # parsed, then from the spec cache
        assert main(["inspect", str(src)]) == 0  # warnings do not fail the command
        err = capsys.readouterr().err.splitlines()
        assert len(err) == len(EXPECTED)
        for line, (n, column, written, fix) in zip(err, EXPECTED):
            assert line.startswith(f"{src}:{n}:{column}: warning: `{written}` is not a kernix annotation")
            assert f"write `{fix}` instead" in line
    assert main(["inspect", "--json", str(src)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    assert [(w["line"], w["column"]) for w in entry["warnings"]] == [e[:2] for e in EXPECTED]


def _interpreters_kernix_admits() -> list[str]:
    """Every Python on this machine that ``requires-python`` admits: the one
    running the tests, and the other ``python3``s on PATH or at ``/usr/bin``
    (Debian 12's 3.11.2 matches some patterns differently from later 3.11s)."""
    import shutil
    import subprocess
    import sys

    found = {os.path.realpath(sys.executable): sys.executable}
    for name in ("python3", "python3.11", "python3.12", "python3.13", "python3.14", "/usr/bin/python3"):
        path = shutil.which(name)
        if path and os.path.realpath(path) not in found:
            version = subprocess.run([path, "-c", "import sys; print(sys.version_info >= (3, 11))"],
                                     capture_output=True, text=True).stdout.strip()
            if version == "True":
                found[os.path.realpath(path)] = path
    return sorted(found.values())


@pytest.mark.parametrize("python", _interpreters_kernix_admits())
def test_every_python_kernix_admits_finds_the_annotations_of_a_file(python: str) -> None:
    """The lexer is pure Python: run it in each interpreter, with only the standard library."""
    import subprocess

    text = "#include <x>\n// a comment\n// @BE f\nvoid f();\n/* @BE? no */\n// @BE g arg ret\nvoid g();\n"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from kernix.frontend.lexer import find_annotations; "
            "print([(a.name, a.line) for a in find_annotations(sys.argv[2])])")
    out = subprocess.run([python, "-c", code, str(Path(kernix.__file__).parent.parent), text],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([("f", 3), ("g", 6)])
