"""``kernix inspect`` checks ``vjp=`` and ``jvp=`` declarations with the check a load makes
(:func:`kernix.language.annotation.check_pairs`): the same message, and a
non-zero exit status."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers import unique_name

import kernix
from kernix.cli import main

HEAD = '#include "kernix/common.h"\n'
FORWARD = textwrap.dedent(
    """\
    // @BE fwd (n)->(n)
    void fwd(const BE::Tensor& x, BE::Tensor& y, float scale) {}
    """
)

BAD_BACKWARDS = {
    "names_nothing": (FORWARD + "// @BE bwd vjp=nosuch\n"
                      "void bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {}\n",
                      "the module exports no function 'nosuch'; it exports: fwd, bwd"),
    "too_few_inputs": (FORWARD + "// @BE bwd vjp=fwd\nvoid bwd(const BE::Tensor& g, BE::Tensor& dx) {}\n",
                       ("a backward kernel takes the forward's 1 input(s) then the cotangents of its 1 output(s): "
                       "2 inputs, but it takes 1")),
    "attribute_dtype": (FORWARD + "// @BE bwd vjp=fwd\n"
                        "void bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx, double scale) {}\n",
                        "attribute 'scale' is float64 here but float32 in 'fwd'"),
    "forward_without_signature": (FORWARD.replace(" (n)->(n)", "") + "// @BE bwd vjp=fwd\n"
                                  "void bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {}\n",
                                  "'fwd' has no shape signature"),
}


def _load_message(src: Path, tmp_path: Path) -> str:
    with pytest.raises(kernix.InferenceError) as info:
        kernix.load_cpp_file(src, name=unique_name("vjp"), build_directory=tmp_path / "cache")
    return str(info.value)


@pytest.mark.parametrize("case", list(BAD_BACKWARDS))
def test_inspect_fails_with_the_message_a_load_gives(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    case: str) -> None:
    """Was: inspect listed the functions and exited 0 (a load then failed)."""
    body, fragment = BAD_BACKWARDS[case]
    src = tmp_path / f"{case}.cpp"
    src.write_text(HEAD + body)
    message = _load_message(src, tmp_path)
    assert fragment in message
    for _ in range(2):  # parsed, then from the spec cache
        assert main(["inspect", str(src)]) == 1
        err = capsys.readouterr().err
        assert fragment in err
        assert f"{src}:" in err and ": error: 'bwd' (vjp=" in err
        for line in message.splitlines():  # each of the load's errors, word for word
            assert line.split(": ", 1)[1] in err
    assert main(["inspect", "--json", str(src)]) == 1
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    assert any(fragment in e["message"] and e["function"] == "bwd" for e in entry["errors"])


def test_a_good_pair_passes(tmp_path: Path) -> None:
    src = tmp_path / "good.cpp"
    src.write_text(HEAD + FORWARD + "// @BE bwd vjp=fwd\n"
                   "void bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx, float scale) {}\n")
    assert main(["inspect", str(src)]) == 0
    mod = kernix.load_cpp_file(src, name=unique_name("vjp_good"), build_directory=tmp_path / "cache",
                               auto_register=False)
    assert mod.backward_name("fwd") == "bwd"


def test_a_forward_in_another_inspected_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sources of one module given together: the backward's forward is found in the other file
    (as a load of the directory finds it); given alone, the backward's file names no forward."""
    (tmp_path / "a_fwd.cpp").write_text(HEAD + FORWARD)
    (tmp_path / "b_bwd.cpp").write_text(HEAD + "// @BE bwd vjp=fwd\nvoid bwd(const BE::Tensor& g, BE::Tensor& dx) {}\n")
    assert main(["inspect", str(tmp_path)]) == 1  # found, and checked: too few inputs
    assert "2 inputs, but it takes 1" in capsys.readouterr().err
    (tmp_path / "b_bwd.cpp").write_text(
        HEAD + "// @BE bwd vjp=fwd\nvoid bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {}\n")
    assert main(["inspect", str(tmp_path)]) == 0
    kernix.load_cpp_dir(tmp_path, name=unique_name("vjp_dir"), build_directory=tmp_path / "cache",
                        auto_register=False)
    assert main(["inspect", str(tmp_path / "b_bwd.cpp")]) == 1
    assert "the module exports no function 'fwd'" in capsys.readouterr().err


# A tangent kernel of fwd (x -> y, attribute scale): x, then its tangent; the tangent of y.
BAD_TANGENTS = {
    "tangent_shape": ("// @BE tan (n),(m)->(n) jvp=fwd\n"
                      "void tan(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {}\n",
                      "parameter 'dx' (the tangent of input 'x' of fwd()) has shape (m)", "dx"),
    "tangent_output_shape": ("// @BE tan (n),(n)->(n,n) jvp=fwd\n"
                             "void tan(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {}\n",
                             "parameter 'dy' (the tangent of output 'y' of fwd()) has shape (n,n)", "dy"),
    "tangent_dtype": ("// @BE tan jvp=fwd\n"
                      "void tan(const BE::Tensor& x, const BE::TensorOf<double>& dx, BE::Tensor& dy) {}\n",
                      "parameter 'dx' (the tangent of input 'x' of fwd()) is float64 but 'x' is float32", "dx"),
    "too_many_inputs": ("// @BE tan jvp=fwd\nvoid tan(const BE::Tensor& x, const BE::Tensor& dx, "
                        "const BE::Tensor& extra, BE::Tensor& dy) {}\n",
                        "2 inputs, but it takes 3", "extra"),
    "no_tangent_inputs": ("// @BE tan jvp=fwd\nvoid tan(const BE::Tensor& x, BE::Tensor& dy) {}\n",
                          "then their 1 tangent(s), in the same order: 2 inputs, but it takes 1", None),
    "attribute_dtype": ("// @BE tan jvp=fwd\n"
                        "void tan(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy, double scale) {}\n",
                        "attribute 'scale' is float64 here but float32 in 'fwd'", "scale"),
    "names_nothing": ("// @BE tan jvp=nosuch\n"
                      "void tan(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {}\n",
                      "the module exports no function 'nosuch'", None),
}
TYPED_FORWARD = FORWARD.replace("const BE::Tensor& x", "const BE::TensorOf<float>& x")


@pytest.mark.parametrize("case", list(BAD_TANGENTS))
def test_a_bad_tangent_kernel_is_refused_naming_its_parameter(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             case: str) -> None:
    """A load and ``kernix inspect`` refuse it at the tangent kernel's line, with the same message."""
    body, fragment, parameter = BAD_TANGENTS[case]
    src = tmp_path / f"{case}.cpp"
    src.write_text(HEAD + TYPED_FORWARD + body)
    message = _load_message(src, tmp_path)
    assert fragment in message and f"{src}:5:" in message
    assert main(["inspect", str(src)]) == 1
    err = capsys.readouterr().err
    assert fragment in err and ": error: 'tan' (jvp=" in err
    assert main(["inspect", "--json", str(src)]) == 1
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    (error,) = [e for e in entry["errors"] if fragment in e["message"]]
    assert error["function"] == "tan" and error["line"] == 5 and error["parameter"] == parameter


def test_a_good_tangent_kernel_passes_and_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its dimensions may have other names than the function's; inspect shows ``jvp=``."""
    src = tmp_path / "good_tangent.cpp"
    src.write_text(HEAD + FORWARD + "// @BE tan (k),(k)->(k) jvp=fwd\n"
                   "void tan(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy, float scale) {}\n")
    assert main(["inspect", str(src)]) == 0
    assert "(k),(k)->(k) jvp=fwd" in capsys.readouterr().out
    assert main(["inspect", "--json", str(src)]) == 0
    functions = json.loads(capsys.readouterr().out)["files"][0]["functions"]
    assert [f["jvp_of"] for f in functions] == [None, "fwd"]
    mod = kernix.load_cpp_file(src, name=unique_name("jvp_good"), build_directory=tmp_path / "cache",
                               auto_register=False)
    assert mod.tangent_name("fwd") == "tan" and mod.backward_name("fwd") is None
    assert "Differentiable (forward mode) through ``tan``" in mod.fwd.__doc__
    assert "Tangent kernel of ``fwd``" in mod.tan.__doc__


def test_a_kernel_is_a_backward_or_a_tangent_kernel_not_both(tmp_path: Path) -> None:
    src = tmp_path / "both.cpp"
    src.write_text(HEAD + FORWARD + "// @BE tan vjp=fwd jvp=fwd\n"
                   "void tan(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {}\n")
    assert "a kernel is a backward kernel (vjp=) or a tangent kernel (jvp=), not both" in _load_message(src, tmp_path)
