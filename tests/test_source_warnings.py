"""Warnings about a place in a user's source point at that place: Python shows
the source file and line (and that line's text), ``-W`` and
``filterwarnings`` filters by category and by the calling module work, and
the "once per location" default hides only repeats of the same warning.
No compiler and no libclang: the warnings are issued from inference results
built by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import kernix
from kernix import AnnotationWarning
from kernix.errors import SourceError
from kernix.frontend.infer import InferResult
from kernix.language.selection import InputDeclaredOnNonConstTensor, check_spec_matches
from kernix.language.spec import FunctionSpec, Param

SOURCE = textwrap.dedent(
    """\
    #include "kernix/common.h"

    // @Be mixed_case
    void mixed_case(const BE::Tensor& x, BE::Tensor& y) {}
    """
)


def _result(src: Path, *places: tuple[int, str]) -> InferResult:
    warned = tuple(SourceError(message, file=str(src), line=line, column=1) for line, message in places)
    return InferResult(str(src), "cpp", (), (), (), warned)


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    path = tmp_path / "ops.cpp"
    path.write_text(SOURCE)
    return path


def test_the_warning_carries_the_source_file_and_line(src: Path) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _result(src, (3, "`// @Be mixed_case` is not a kernix annotation")).warn()
    (w,) = record
    assert (w.category, w.filename, w.lineno) == (AnnotationWarning, str(src), 3)
    # The message still names the place, so the error -W error raises does too.
    assert str(w.message) == f"{src}:3:1: `// @Be mixed_case` is not a kernix annotation"
    # Python's display quotes the commented line of the user's file.
    shown = warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
    assert shown.startswith(f"{src}:3: AnnotationWarning: {src}:3:1: ")
    assert shown.splitlines()[-1].strip() == "// @Be mixed_case"


def test_default_filter_shows_distinct_warnings_and_hides_repeats(src: Path) -> None:
    result = _result(src, (3, "first problem"), (3, "second problem"), (4, "first problem"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        result.warn()
        result.warn()  # the same warnings at the same places: shown once
    assert [(w.lineno, str(w.message).split(": ", 1)[1]) for w in record] == [
        (3, "first problem"), (3, "second problem"), (4, "first problem")
    ]


def test_filters_by_category_and_by_the_calling_module(src: Path) -> None:
    result = _result(src, (3, "not an annotation"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AnnotationWarning)
        with pytest.raises(kernix.KernixError, match=r"ops\.cpp:3:1: not an annotation"):
            result.warn()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=AnnotationWarning, module="some_other_package")
        result.warn()
        assert len(record) == 1
        warnings.filterwarnings("ignore", category=AnnotationWarning, module=__name__)
        result.warn()
        assert len(record) == 1  # this module's loads are silenced, by the module that called


def test_pytest_warns_sees_it(src: Path) -> None:
    with pytest.warns(AnnotationWarning, match="not a kernix annotation") as record:
        _result(src, (3, "`// @Be mixed_case` is not a kernix annotation")).warn()
    assert record[0].filename == str(src)


def test_an_error_filter_raises_it_naming_the_place(src: Path) -> None:
    """``warnings.simplefilter("error", kernix.AnnotationWarning)``, as the docs advise, turns the
    warning into an exception whose message names the file, line and column.  (``python -W
    error::kernix.AnnotationWarning`` is not advised: Python reads it before installed packages
    can be imported, and ignores it.)"""
    code = (
        "import warnings\nimport kernix\nfrom kernix.errors import SourceError\n"
        "from kernix.frontend.infer import InferResult\n"
        "warnings.simplefilter('error', kernix.AnnotationWarning)\n"
        f"InferResult({str(src)!r}, 'cpp', (), (), (), (SourceError('not an annotation', file={str(src)!r}, "
        "line=3, column=1),)).warn()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == f"kernix.errors.AnnotationWarning: {src}:3:1: not an annotation"


def _spec(file: str) -> FunctionSpec:
    return FunctionSpec(
        name="k", qualified_name="k",
        params=(Param("x", "ret", "BE::Tensor &", "BE::Tensor", "tensor"),
                Param("y", "ret", "BE::Tensor &", "BE::Tensor", "tensor")),
        file=file, line=7,
    )


def test_an_input_on_a_non_const_reference_warns_at_the_function() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        check_spec_matches(["arg", "ret"], _spec("/src/k.cpp"))
    (w,) = record
    assert (w.category, w.filename, w.lineno) == (InputDeclaredOnNonConstTensor, "/src/k.cpp", 7)
    assert "'x'" in str(w.message) and "`const BE::Tensor&`" in str(w.message)


def test_without_a_file_the_warning_points_at_the_caller() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        check_spec_matches(["arg", "ret"], _spec(""))
    (w,) = record
    assert w.filename == __file__ and w.category is InputDeclaredOnNonConstTensor
