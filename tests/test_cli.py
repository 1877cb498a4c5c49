"""``kernix inspect`` and the other commands (kernix/cli/)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kernix
from kernix.cli import COMMANDS, build_parser, main
from helpers import FIXTURES, ROOT, unique_name

#: The command line is part of what is installed (the ``kernix`` entry point, ``python -m kernix``).
pytestmark = pytest.mark.installed



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
    [[], ["inspect"], ["inspect", "--cuda", "--cpp", "x.cu"], ["bogus"], ["inspect", "missing.cu"],
     ["inspect", "a.txt"], ["inspect", "x.cu", "-j", "many"], ["build", "x.cpp"],
     ["build", "x.cpp", "-o", "out", "-O", "4"], ["cache"], ["cache", "clear", "a", "b"]],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err


def test_the_parsed_values() -> None:
    """Repeated options accumulate, attached values (``-Iinc``, ``--jobs=3``) read as separate ones, defaults hold."""
    args = vars(build_parser().parse_args(["inspect", "a.cu", "b.cu", "-I", "inc", "-Iinc2", "-DX=1", "-D", "Y",
                                           "--cuda", "--jobs=2"]))
    assert args == {"command": "inspect", "files": ["a.cu", "b.cu"], "include_dirs": ["inc", "inc2"],
                    "defines": ["X=1", "Y"], "cuda": True, "cpp": False, "json": False, "no_cache": False, "jobs": 2}
    args = vars(build_parser().parse_args(["build", "a.cu", "-o", "out"]))
    assert (args["opt"], args["library_dirs"], args["libraries"], args["name"]) == (3, [], [], None)
    assert vars(build_parser().parse_args(["cache", "clear"])) == {"command": "cache", "action": "clear", "name": None}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kernix {kernix.__version__}\n"
    out = subprocess.run([sys.executable, "-m", "kernix", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"kernix {kernix.__version__}\n"


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
    assert "def head(x: ArrayLike, /, *, k: int | np.integer, out: _Out | None = None, vmap_method: str = 'sequential') -> jax.Array:" in text
    assert "Shape signature: ``(n)->(k)``" in text
    assert main(["stubs", str(FIXTURES / "ops" / "ops_cpu.cpp")]) == 0
    assert capsys.readouterr().out == text


def test_stubs_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "bad.cpp"
    src.write_text('#include "kernix/common.h"\n// @BE g vjp=nothing\nvoid g(const BE::Tensor& x, BE::Tensor& y) {}\n')
    assert main(["stubs", str(src)]) == 1
    assert "the module exports no function 'nothing'" in capsys.readouterr().err


def test_stubs_and_inspect_parse_as_a_default_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: ``kernix stubs`` parsed without -O3 (``inspect`` and a load with it), so code
    under ``#ifdef __OPTIMIZE__`` got another type in the stub than in the module."""
    src = tmp_path / "macros.cpp"
    src.write_text('#include "kernix/common.h"\n#ifdef __OPTIMIZE__\ntypedef double T;\n#else\ntypedef float T;\n'
                   '#endif\n// @BE k\nvoid k(const BE::Tensor& x, BE::Tensor& y, T a) {}\n')
    assert main(["stubs", str(src)]) == 0
    assert "(passed as float64)" in capsys.readouterr().out
    assert main(["inspect", "--json", str(src)]) == 0
    assert '"attr.a:float64"' in capsys.readouterr().out


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


def _annotated(name: str) -> str:
    """A C++ source exporting one function, ``name``."""
    return f'#include "kernix/common.h"\n// @BE {name}\nvoid {name}(const BE::Tensor& x, BE::Tensor& y) {{}}\n'


def _run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m kernix ARGV...`` in a fresh process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "kernix", *argv], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.mark.parametrize("extra", [[], ["--no-cache", "-j", "2"], ["--json"]])
def test_inspect_reports_a_file_name_that_is_not_utf8_and_inspects_the_others(tmp_path: Path, extra) -> None:
    """Such a name (possible on POSIX) is an error of its own file, printed with the byte
    escaped; the run does not stop, and no output stream has to encode the raw name."""
    fd = os.open(os.fsencode(tmp_path) + b"/bad\xff.cpp", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, _annotated("f").encode())
    os.close(fd)
    (tmp_path / "ok.cpp").write_text(_annotated("g"))
    proc = _run_cli("inspect", *extra, str(tmp_path), env={"KERNIX_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{tmp_path}/bad\\xff.cpp: error: bad\\xff.cpp is not a valid UTF-8 name" in proc.stderr
    assert "rename it" in proc.stderr
    if "--json" in extra:
        files = json.loads(proc.stdout)["files"]
        assert [os.fsencode(f["path"]) for f in files] == [os.fsencode(tmp_path) + b"/bad\xff.cpp",
                                                           os.fsencode(tmp_path / "ok.cpp")]
        assert files[0]["functions"] == [] and len(files[0]["errors"]) == 1
        assert [fn["name"] for fn in files[1]["functions"]] == ["g"] and files[1]["errors"] == []
    else:
        assert f"{tmp_path}/bad\\xff.cpp (cpp)\n  (no functions inferred)" in proc.stdout
        assert f"{tmp_path / 'ok.cpp'} (cpp)" in proc.stdout and "arg ret" in proc.stdout
        assert "2 files, 1 functions, 1 with errors" in proc.stdout


def test_stubs_and_infer_file_refuse_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    import kernix

    bad = os.fsdecode(os.fsencode(tmp_path) + b"/k\xfe.cpp")
    Path(bad).write_text(_annotated("f"))
    proc = _run_cli("stubs", bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot parse {tmp_path}/k\\xfe.cpp: k\\xfe.cpp is not a valid UTF-8 name" in proc.stderr
    with pytest.raises(kernix.KernixError, match=r"k\\xfe\.cpp is not a valid UTF-8 name"):
        kernix.infer_file(bad, use_cache=False)


def test_build_output_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o of `kernix build` is the module directory (created when missing): a file in its
    place, or in its path, is a usage error named before anything is compiled."""
    src = tmp_path / "k.cpp"
    src.write_text(_annotated("f"))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["build", str(src), "-o", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"kernix build: error: cannot write the module into {a_file}: {a_file} is not a directory" in err
    assert "give -o a directory" in err
    assert main(["build", str(src), "-o", str(a_file / "sub")]) == 2
    assert f"{a_file / 'sub'}: {a_file} is not a directory" in capsys.readouterr().err
    assert a_file.is_file() and a_file.read_text() == ""


def test_build_module_refuses_a_file_as_output_directory(tmp_path: Path) -> None:
    import kernix

    src = tmp_path / "k.cpp"
    src.write_text(_annotated("f"))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(kernix.KernixError, match=r"a_file is not a directory; choose another output directory"):
        kernix.build_module(src, tmp_path / "a_file" / "sub")


def test_stubs_output_is_a_file_whose_missing_directories_are_created(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    src = FIXTURES / "ops" / "ops_cpu.cpp"
    nested = tmp_path / "typings" / "ops" / "ops_cpu.pyi"
    assert main(["stubs", str(src), "-o", str(nested)]) == 0
    assert "def head(" in nested.read_text()
    assert main(["stubs", str(src), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"kernix stubs: error: -o {tmp_path} is a directory, not a file: name the file, e.g. -o " in err
    suggested = err.rstrip().rpartition("-o ")[2]
    assert main(["stubs", str(src), "-o", suggested]) == 0  # the suggestion works
    assert Path(suggested).read_text() == nested.read_text()
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["stubs", str(src), "-o", str(a_file / "x.pyi")]) == 2
    err = capsys.readouterr().err
    assert f"kernix stubs: error: cannot write {a_file / 'x.pyi'}: {a_file} is not a directory" in err


def test_stubs_output_that_is_a_source_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `kernix stubs k.cpp -o k.cpp` replaced the C++ source with the stub."""
    src = tmp_path / "k.cpp"
    src.write_text(_annotated("f"))
    before = src.read_bytes()
    link = tmp_path / "link.cpp"
    link.symlink_to(src)
    for out in (src, link):
        assert main(["stubs", str(src), "-o", str(out)]) == 2
        assert f"kernix stubs: error: -o {out} is the source {src}: writing it would overwrite the code" in (
            capsys.readouterr().err)
    assert src.read_bytes() == before
    assert main(["stubs", str(src), "-o", str(tmp_path / "k.pyi")]) == 0


@pytest.mark.parametrize("command", [["inspect"], ["stubs"], ["build", "-o", "OUT"]])
def test_an_unknown_extension_names_the_command_line_flags(command: list[str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.txt"
    src.write_text(_annotated("f"))
    argv = [c.replace("OUT", str(tmp_path / "out")) for c in command]
    assert main([*argv, str(src)]) == 2
    err = capsys.readouterr().err
    assert f"cannot tell the language of {str(src)!r} from its extension '.txt'" in err
    assert "pass --cuda or --cpp" in err and "language=" not in err
    assert main([*argv, "--cpp", str(src)]) == 0  # the flag it names is the remedy


def test_the_python_api_names_its_keyword_for_an_unknown_extension(tmp_path: Path) -> None:
    import kernix

    src = tmp_path / "k.txt"
    src.write_text(_annotated("f"))
    with pytest.raises(kernix.KernixError, match="pass language='cuda' or language='cpp'$"):
        kernix.infer_file(src)


def test_build_of_mixed_languages_names_the_command_line_flags(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.cu").write_text(_annotated("f"))
    (tmp_path / "b.cpp").write_text(_annotated("g"))
    assert main(["build", str(tmp_path / "a.cu"), str(tmp_path / "b.cpp"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"the sources mix CUDA and C++ files ({tmp_path / 'a.cu'}, {tmp_path / 'b.cpp'})" in err
    assert "with --cuda or --cpp" in err and "language=" not in err


def test_build_module_names_its_keyword_for_mixed_languages(tmp_path: Path) -> None:
    """build_module words its argument checks for Python (the command line's own words above)."""
    import kernix

    (tmp_path / "a.cu").write_text(_annotated("f"))
    (tmp_path / "b.cpp").write_text(_annotated("g"))
    with pytest.raises(kernix.OptionError, match="with language='cuda' or language='cpp'$"):
        kernix.build_module([tmp_path / "a.cu", tmp_path / "b.cpp"], tmp_path / "out")
    (tmp_path / "k.txt").write_text(_annotated("h"))
    with pytest.raises(kernix.OptionError, match=r"pass language='cuda' or language='cpp'$"):
        kernix.build_module(tmp_path / "k.txt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["stubs"], ["build", "-o", "OUT"]])
def test_a_name_exported_by_two_files_is_refused(command: list[str], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`kernix stubs` refuses what `kernix build` (and a load) refuses: a module's names are unique."""
    (tmp_path / "a.cpp").write_text("\n" + _annotated("f"))
    (tmp_path / "b.cpp").write_text(_annotated("f"))
    argv = [c.replace("OUT", str(tmp_path / "out")) for c in command]
    assert main([*argv, str(tmp_path / "a.cpp"), str(tmp_path / "b.cpp")]) == 1
    out, err = capsys.readouterr()
    assert f"{tmp_path / 'b.cpp'}:3: error: function name 'f' is exported twice (also at {tmp_path / 'a.cpp'}:4)" in err
    assert out == ""


@pytest.mark.parametrize("command", [["stubs"], ["build", "-o", "OUT"]])
def test_a_source_given_twice_is_refused(command: list[str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.cpp").write_text(_annotated("f"))
    argv = [c.replace("OUT", str(tmp_path / "out")) for c in command]
    twice = [str(tmp_path / "a.cpp"), os.path.join(tmp_path, ".", "a.cpp")]
    assert main([*argv, *twice]) == 2
    out, err = capsys.readouterr()
    assert f"error: the source {twice[1]} is given twice (also as {twice[0]}): give each file once" in err
    assert out == "" and not (tmp_path / "out").exists()


def test_build_module_refuses_a_source_given_twice(tmp_path: Path) -> None:
    import kernix

    (tmp_path / "a.cpp").write_text(_annotated("f"))
    with pytest.raises(kernix.KernixError, match="is given twice"):
        kernix.build_module([tmp_path / "a.cpp", tmp_path / "a.cpp"], tmp_path / "out")


def test_every_command_and_option_is_documented() -> None:
    """docs/reference/cli.rst has a section for each command naming each of its options."""
    text = (ROOT / "docs" / "reference" / "cli.rst").read_text()
    sections = dict(zip(*[iter(re.split(r"^``kernix (\w+)``\n-+\n", text, flags=re.M)[1:])] * 2))
    assert sorted(sections) == sorted(COMMANDS)

    def flags(parser: argparse.ArgumentParser) -> list[str]:
        """The option strings of ``parser`` and of its subcommands (but their help)."""
        out = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                out += [f for sub in action.choices.values() for f in flags(sub)]
            else:
                out += [f for f in action.option_strings if f not in ("-h", "--help")]
        return out

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in COMMANDS:
        for flag in flags(commands[name]):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", sections[name]), f"kernix {name}: {flag}"


def test_an_undetected_gpu_architecture_names_the_arch_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A CUDA build on a machine with no GPU to ask: each caller is told its own spelling."""
    import kernix
    from kernix.backend import gpus

    for name in ("KERNIX_CUDA_ARCH", "KERNIX_CUDA_ARCH_LIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(gpus, "survey", lambda *a, **k: gpus.Survey((), "", "no NVIDIA driver answered"))
    src = tmp_path / "k.cu"
    src.write_text(_annotated("f"))
    assert main(["build", str(src), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "could not detect the GPU's compute capability" in err and "--arch sm_90" in err
    with pytest.raises(kernix.ToolchainError, match="arch= for build_module"):
        kernix.build_module(src, tmp_path / "out")
    with pytest.raises(kernix.ToolchainError, match="compute_capability='sm_90'"):
        kernix.load_cuda_file(src, name=unique_name("undetected"))


def test_build_of_a_file_without_annotations_names_the_remedy_the_command_line_has(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "plain.cpp"
    src.write_text('#include "kernix/common.h"\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n')
    assert main(["build", str(src), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"no function to export in {src}: annotate each entry point with a `// @BE name` comment" in err
    assert "or pass functions=" not in err and "from Python, name them with functions=[...]" in err


@pytest.mark.parametrize("command", [["inspect"], ["stubs"], ["build", "-o", "OUT"]])
def test_a_missing_source_is_a_usage_error_for_every_command(command: list[str], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = [c.replace("OUT", str(tmp_path / "out")) for c in command]
    assert main([*argv, str(tmp_path / "missing.cpp")]) == 2
    assert str(tmp_path / "missing.cpp") in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _missing_header_source(name: str) -> str:
    return f'#include "kernix/common.h"\n#include "absent_{name}.h"\n// @BE {name}\n' \
           f"void {name}(const BE::Tensor& x, BE::Tensor& y) {{}}\n"


def test_a_missing_header_names_the_include_option_of_the_interface_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kernix inspect (in this process and in its worker processes) and kernix build say
    -I DIR where a header is not found; a load from Python after them still names
    extra_include_paths=[...]."""
    import kernix

    first, second = tmp_path / "one.cpp", tmp_path / "two.cpp"
    first.write_text(_missing_header_source("one"))
    second.write_text(_missing_header_source("two"))
    runs = [["inspect", "--no-cache", str(first)], ["inspect", "--no-cache", "-j", "2", str(first), str(second)],
            ["stubs", str(first)], ["build", str(first), "-o", str(tmp_path / "out")]]
    for argv in runs:
        assert main(argv) == 1
        errors = [ln for ln in capsys.readouterr().err.splitlines() if "file not found" in ln]
        assert len(errors) == argv.count(str(second)) + 1, (argv, errors)
        for line in errors:
            assert "pass the directory that holds" in line and "with -I DIR" in line, (argv, line)
            assert "extra_include_paths" not in line and "load_*_inline" not in line, (argv, line)
    with pytest.raises(kernix.InferenceError, match=r"extra_include_paths=\[\.\.\.\]"):
        kernix.load_cpp_file(first, name=unique_name("nohdr"), build_directory=tmp_path / "cache")


def test_an_undefined_symbol_names_the_link_options_of_the_interface_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kernix build says -L DIR -l NAME for a symbol no library defines; build_module says extra_ldflags."""
    import kernix

    src = tmp_path / "k.cpp"
    src.write_text('#include "kernix/common.h"\nextern "C" float undefined_here(float);\n// @BE f\n'
                   "void f(const BE::Tensor& x, BE::Tensor& y) { undefined_here(1.0f); }\n")
    assert main(["build", str(src), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "undefined symbol(s) undefined_here" in err and "with -L DIR -l NAME" in err
    assert "extra_ldflags" not in err
    with pytest.raises(kernix.CompilationError, match=r"extra_ldflags=\['-L<dir>', '-l<name>'\]"):
        kernix.build_module(src, tmp_path / "out")
