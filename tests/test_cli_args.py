"""The fast parse of the command line (kernix/cli/args.py) against argparse:
every command line it reads means what argparse reads, and it reads the
common ones."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernix.cli import COMMANDS, _module, build_parser
from kernix.cli.args import parse_fast


def _argparse(argv: list[str]) -> dict | None:
    """What argparse makes of ``argv`` (``None``: help or a usage error)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return vars(build_parser().parse_args(argv))
    except SystemExit:
        return None


def _fast(argv: list[str]) -> dict | None:
    values = parse_fast(_module(argv[0]).COMMAND, argv[1:])
    return None if values is None else {**values, "command": argv[0]}


def _tokens(command: str) -> st.SearchStrategy[str]:
    """Words a command line of ``command`` may hold: its options (bare, with
    a value attached, with ``=``), values, paths, and forms argparse alone reads."""
    cmd = _module(command).COMMAND
    args = [a for c in (cmd.actions.values() if cmd.actions else [cmd]) for a in c.args]
    flags = sorted({f for a in args if a.kind != "positional" for f in a.flags})
    values = st.sampled_from(["a.cu", "b.cpp", "x", "", "-", "-1", "0", "2", "3", "7", " 1", "1_0", "=v", "N=1",
                              "sm_80,sm_90", "a b", "--json", "-I", "info", "clear"])
    attached = st.builds(lambda f, v, eq: f + ("=" if eq else "") + v, st.sampled_from(flags), values, st.booleans())
    odd = st.sampled_from(["-h", "--help", "--", "--js", "--jo", "--no", "-x", "--nope", "-vv", "--cuda=1",
                           *cmd.actions])
    return st.one_of(st.sampled_from(flags), values, attached, odd)


@settings(max_examples=1500, deadline=None)
@given(data=st.data(), command=st.sampled_from(COMMANDS))
def test_the_fast_parse_reads_only_what_argparse_reads_alike(data: st.DataObject, command: str) -> None:
    argv = [command, *data.draw(st.lists(_tokens(command), max_size=8))]
    fast = _fast(argv)
    if fast is not None:
        assert fast == _argparse(argv), argv


@pytest.mark.parametrize("argv", [
    ["inspect", "a.cu", "b.cu", "-I", "inc", "-Iinc2", "-DX=1", "-D", "Y", "--cuda", "--json", "-j", "2"],
    ["inspect", "--cpp", "--no-cache", "--jobs=3", "-DNDEBUG", "dir"],
    ["stubs", "a.cpp", "-o", "a.pyi", "-I", "inc"],
    ["cache", "info", "--json"],
    ["cache", "info"],
    ["cache", "clear", "mod"],
    ["cache", "clear"],
    ["build", "a.cu", "b.cu", "-o", "out", "--name=m", "-O2", "--arch", "sm_80", "--fast-math", "-v"],
    ["build", "-o", "out", "a.cpp", "-O", "0", "--verbose"],
])
def test_common_command_lines_take_the_fast_path(argv: list[str]) -> None:
    fast = _fast(argv)
    assert fast is not None and fast == _argparse(argv)


def test_the_fast_parse_values() -> None:
    fast = _fast(["inspect", "a.cu", "b.cu", "-I", "inc", "-Iinc2", "-DX=1", "-D", "Y", "--cuda", "-j", "2"])
    assert fast == {"command": "inspect", "files": ["a.cu", "b.cu"], "include_dirs": ["inc", "inc2"],
                    "defines": ["X=1", "Y"], "cuda": True, "cpp": False, "json": False, "no_cache": False,
                    "jobs": 2}
    assert _fast(["build", "a.cu", "-o", "out"])["opt"] == 3


@pytest.mark.parametrize("argv", [
    ["inspect"],                                  # no file
    ["inspect", "a.cu", "--cuda", "--cpp"],       # both languages
    ["inspect", "a.cu", "-j", "many"],            # not a number
    ["inspect", "a.cu", "--js"],                  # abbreviated (argparse's rules)
    ["inspect", "a.cu", "-I", "inc", "b.cu"],     # a second run of paths
    ["inspect", "--help"],
    ["build", "a.cu"],                            # -o is required
    ["build", "a.cu", "-o", "out", "-O", "4"],    # not a choice
    ["cache"],                                    # no action
    ["cache", "clear", "a", "b"],                 # one name at most
])
def test_help_errors_and_rare_forms_are_left_to_argparse(argv: list[str]) -> None:
    assert _fast(argv) is None
