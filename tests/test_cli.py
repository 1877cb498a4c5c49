"""``kernix inspect`` and the other commands (kernix/cli/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernix.cli import main
from helpers import FIXTURES



def test_inspect_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "seed_vector_add.cu")]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "seed_vector_add.cu (cuda)" in out
    assert "scale_by" in out and "arg ret attr.scale_factor:float32 stream" in out
    assert "scale_factor: float32 (float)" in out


def test_inspect_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(FIXTURES / "rules.cpp")]) == 0
    data = json.loads(capsys.readouterr().out)
    (f,) = data["files"]
    assert f["path"] == str(FIXTURES / "rules.cpp") and f["errors"] == []
    by_name = {fn["name"]: fn for fn in f["functions"]}
    assert set(by_name["modes"]) >= {"name", "qualified_name", "line", "arg_spec", "params"}
    assert by_name["modes"]["qualified_name"] == "ops::inner::modes"
    assert by_name["add_op"]["arg_spec"] == ["arg", "ret", "attr.alpha:float32"]
    assert by_name["add_op"]["params"][2]["dtype"] == "float32"


def test_inspect_errors_exit_1_and_still_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(FIXTURES / "errors.cpp"), str(FIXTURES / "misspelled.cpp")]) == 1
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [fn["name"] for fn in data["files"][0]["functions"]] == ["dup", "fine"]
    assert {"line", "column", "message"} <= set(data["files"][0]["errors"][0])
    assert f"{FIXTURES / 'errors.cpp'}:8:31: error: parameter 'x' of 'raw_pointer'" in err
    assert f"{FIXTURES / 'misspelled.cpp'}:7:47: error: unknown type name 'flaot'" in err


def test_inspect_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "t.h").write_text("using T = SCALAR;\n")
    src = tmp_path / "k.txt"
    src.write_text('#include "kernix/common.h"\n#include "t.h"\n// @BE f\nvoid f(BE::Tensor& y, T a, cudaStream_t s) {}\n')
    assert main(["inspect", "--cuda", "-I", str(inc), "-D", "SCALAR=bool", "--json", str(src)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"][0]["functions"][0]["arg_spec"] == ["ret", "attr.a:bool", "stream"]


@pytest.mark.parametrize(
    "argv",
    [[], ["inspect"], ["inspect", "--cuda", "--cpp", "x.cu"], ["bogus"], ["inspect", "missing.cu"], ["inspect", "a.txt"]],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    """`kernix cache info` lists a built module; `kernix cache clear NAME` removes it."""
    import kernix
    from kernix.cli import main

    monkeypatch.setenv("KERNIX_CACHE_DIR", str(tmp_path))
    src = '#include "kernix/common.h"\n// @BE neg\nvoid neg(const BE::Tensor x, BE::Tensor out) {}\n'
    kernix.load_cpp_inline("cli_cache_demo", src, auto_register=False)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "cli_cache_demo" in out and "neg" in out
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in info["modules"]] == ["cli_cache_demo"]
    assert main(["cache", "clear", "cli_cache_demo"]) == 0
    assert "removed 1 cache entry" in capsys.readouterr().out
    assert kernix.cache_info()["modules"] == []
    assert main(["cache", "clear", "../etc"]) == 1
    assert "invalid module name" in capsys.readouterr().err
    assert main(["cache"]) == 2


def test_inspect_shows_shape_signature(capsys: pytest.CaptureFixture[str]) -> None:
    ops = FIXTURES / "ops" / "ops_cpu.cpp"
    assert main(["inspect", str(ops)]) == 0
    out = capsys.readouterr().out
    assert "shape signature" in out
    assert "(...,d),(d)->(...,d)" in out and "vjp=rms_norm" in out
    assert main(["inspect", "--json", str(ops)]) == 0
    fns = {f["name"]: f for f in json.loads(capsys.readouterr().out)["files"][0]["functions"]}
    assert fns["matmul"]["signature"] == "(m,k):float64,(k,n):float64->(m,n)"
    assert fns["rms_norm_bwd"]["vjp_of"] == "rms_norm"
    assert fns["plain_copy"]["signature"] is None


def test_stubs_writes_pyi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ops.pyi"
    assert main(["stubs", str(FIXTURES / "ops" / "ops_cpu.cpp"), "-o", str(out)]) == 0
    text = out.read_text()
    compile(text, str(out), "exec")
    assert "def head(x: jax.Array, /, *, k: int, out: _Out = None, vmap_method: str = 'sequential') -> jax.Array:" in text
    assert "Shape signature: ``(n)->(k)``" in text
    assert main(["stubs", str(FIXTURES / "ops" / "ops_cpu.cpp")]) == 0
    assert capsys.readouterr().out == text


def test_stubs_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "bad.cpp"
    src.write_text('#include "kernix/common.h"\n// @BE g vjp=nothing\nvoid g(const BE::Tensor& x, BE::Tensor& y) {}\n')
    assert main(["stubs", str(src)]) == 1
    assert "the module exports no function 'nothing'" in capsys.readouterr().err


def test_inspect_a_directory_in_parallel_reports_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory stands for its sources; misses parse in worker processes; the totals close the run."""
    for i in range(3):
        (tmp_path / f"k{i}.cpp").write_text(
            f'#include "kernix/common.h"\n// @BE f{i}\nvoid f{i}(const BE::Tensor& x, BE::Tensor& y, int n{i}) {{}}\n'
        )
    (tmp_path / "skip.h").write_text("// a header is not a translation unit\n")
    assert main(["inspect", "--json", "--no-cache", "-j", "2", str(tmp_path)]) == 0
    parallel = json.loads(capsys.readouterr().out)
    assert [Path(f["path"]).name for f in parallel["files"]] == ["k0.cpp", "k1.cpp", "k2.cpp"]
    assert [f["functions"][0]["arg_spec"] for f in parallel["files"]] == [
        ["arg", "ret", f"attr.n{i}:int32"] for i in range(3)
    ]
    assert parallel["total"]["files"] == 3 and parallel["total"]["functions"] == 3
    assert main(["inspect", "--json", "--no-cache", "-j", "1", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == parallel["files"]
    assert main(["inspect", str(tmp_path)]) == 0
    assert "3 files, 3 functions, 0 with errors" in capsys.readouterr().out


def test_inspect_a_directory_without_sources_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["inspect", str(tmp_path)]) == 2
    assert "no C++ or CUDA source files" in capsys.readouterr().err


def test_help_is_wrapped_to_columns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    assert main(["inspect", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 10 and max(map(len, lines)) <= 50


@pytest.mark.parametrize("argv", [["inspect", "--help"], ["cache", "clear", "--help"], ["build", "--help"],
                                  ["stubs"], ["build", "x.cpp"], ["inspect", "--jobs", "many", "x.cu"]])
def test_a_command_parses_as_with_the_whole_parser(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """main builds only the named command's parser: its help, usage errors and
    exit status are those of the parser with every command."""
    from kernix.cli import build_parser

    status = main(argv)
    alone = capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    whole = capsys.readouterr()
    assert (status, alone.out, alone.err) == (exc.value.code, whole.out, whole.err)
    assert alone.out or alone.err


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`kernix cache info | head -1`: no traceback when the reader stops early."""
    import os
    import subprocess
    import sys

    for i in range(3):
        (tmp_path / "modules" / f"m{i}").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-m", "kernix", "cache", "info"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "KERNIX_CACHE_DIR": str(tmp_path)})
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait() == 1 and "Traceback" not in err and "BrokenPipeError" not in err
