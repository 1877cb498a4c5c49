"""A keyword a loader does not take is an OptionError (a TypeError) that says
what to pass instead: the other language's loader for one of its keywords,
kernix's name for another tool's, or the closest keyword.  Nothing here
compiles: every refusal comes before a source is read or written."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from helpers import FIXTURES

import kernix
from kernix import loaders

CPP_FILE = FIXTURES / "reliability" / "add_one.cpp"

CASES = [
    (kernix.load_cpp_inline, {"extra_cuda_cflags": ["-O2"]},
     ("load_cpp_inline() got an unexpected option 'extra_cuda_cflags': that is an option of load_cuda_inline(); "
     "a C++ module is compiled by the host compiler: pass its flags in extra_cflags")),
    (kernix.load_cuda_inline, {"extra_cflags": ["-O2"]},
     ("load_cuda_inline() got an unexpected option 'extra_cflags': that is an option of load_cpp_inline(); CUDA "
     "sources, host code included, are compiled by nvcc: pass nvcc flags in extra_cuda_cflags, and host-compiler "
     "flags there as '-Xcompiler=FLAG'")),
    (kernix.load_cpp_file, {"compute_capability": "sm_90"},
     ("load_cpp_file() got an unexpected option 'compute_capability': that is an option of load_cuda_file(); "
     "a C++ module runs on the CPU and has no GPU architecture; drop it")),
    (kernix.load_cpp_dir, {"allow_cuda_graph": False},
     ("load_cpp_dir() got an unexpected option 'allow_cuda_graph': that is an option of load_cuda_dir(); "
     "a C++ module runs on the CPU, where there are no CUDA graphs; drop it")),
    (kernix.load_cpp_inline, {"cuda_sources": "int x;"},
     ("load_cpp_inline() got an unexpected option 'cuda_sources': that is an option of load_cuda_inline(); "
     "load CUDA source with load_cuda_inline (a module is built for one platform)")),
    (kernix.load_cuda_inline, {"with_cuda": True},
     ("load_cuda_inline() got an unexpected option 'with_cuda' (torch.utils.cpp_extension's name): kernix picks "
     "the compiler by the loader: load_cuda_* compiles with nvcc for the GPU, load_cpp_* with the host compiler "
     "for the CPU; drop it")),
    (kernix.load_cuda_file, {"include_dirs": ["inc"]},
     ("load_cuda_file() got an unexpected option 'include_dirs' (setuptools.Extension's name): kernix calls it "
     "extra_include_paths")),
    (kernix.load_cpp_inline, {"extra_compile_args": ["-O2"]},
     ("load_cpp_inline() got an unexpected option 'extra_compile_args' (setuptools.Extension's name): kernix "
     "calls it extra_cflags")),
    (kernix.load_cuda_inline, {"extra_compile_args": ["-O2"]},
     ("load_cuda_inline() got an unexpected option 'extra_compile_args' (setuptools.Extension's name): kernix "
     "calls it extra_cuda_cflags")),
    (kernix.load_cuda_inline, {"arch": "sm_90"},
     ("load_cuda_inline() got an unexpected option 'arch' (nvcc's name): kernix calls it compute_capability "
     "('sm_90', '90' or '9.0')")),
    (kernix.load_cpp_inline, {"optimisation_level": 2},
     "load_cpp_inline() got an unexpected option 'optimisation_level': did you mean 'optimization_level'?"),
    (kernix.load_cuda_file, {"extra_cuda_flags": ["-G"]},
     "load_cuda_file() got an unexpected option 'extra_cuda_flags': did you mean 'extra_cuda_cflags'?"),
]


def _call(loader, kwargs, tmp_path: Path):
    kwargs = {**kwargs}
    if loader.__name__.endswith("_inline"):
        return loader("m", "int x;", build_directory=str(tmp_path / "cache"), **kwargs)
    return loader(tmp_path / "missing" / "src.cpp", **kwargs)  # (an option is refused before the path)


@pytest.mark.parametrize("loader, kwargs, message", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_an_unknown_keyword_says_what_to_pass(loader, kwargs, message: str, tmp_path: Path) -> None:
    with pytest.raises(kernix.OptionError) as info:
        _call(loader, kwargs, tmp_path)
    assert str(info.value) == message
    assert isinstance(info.value, TypeError)
    assert not (tmp_path / "cache").exists()  # refused before the inline source was written


@pytest.mark.parametrize("loader, kwargs, message", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_the_keyword_suggested_is_one_that_loader_takes(loader, kwargs, message: str) -> None:
    """Each `did you mean X`, `kernix calls it X`, `pass its flags in X` or `that is an option of L()`
    names a keyword that the loader it points to really takes."""
    named = re.search(r"did you mean '(\w+)'|kernix calls it (\w+)|pass (?:its |nvcc )?flags in (\w+)", message)
    other = re.search(r"that is an option of (\w+)\(\)", message)
    if other:
        key, target = next(iter(kwargs)), other.group(1)
        family = loaders._CUDA_OPTIONS if "_cuda_" in target else loaders._CPP_OPTIONS
        assert key in family or key in inspect.signature(getattr(kernix, target)).parameters, message
    if named:
        keyword = next(g for g in named.groups() if g)
        family = loaders._CUDA_OPTIONS if "_cuda_" in loader.__name__ else loaders._CPP_OPTIONS
        assert keyword in family, message
    assert named or other or "drop it" in message


def test_several_unknown_keywords_are_listed_each_with_its_advice(tmp_path: Path) -> None:
    with pytest.raises(kernix.OptionError) as info:
        kernix.load_cpp_file(CPP_FILE, is_python_module=False, verbos=True, zzz=1)
    lines = str(info.value).splitlines()
    assert lines[0] == "load_cpp_file() got unexpected options:"
    assert lines[1].startswith("  'is_python_module' (torch.utils.cpp_extension's name): ")
    assert lines[2] == "  'verbos': did you mean 'verbose'?"
    assert lines[3].startswith("  'zzz'; it takes auto_register, build_directory, ") and "name" in lines[3]


def test_other_tools_names_are_never_kernix_keywords() -> None:
    taken = set(loaders._CUDA_OPTIONS) | set(loaders._CPP_OPTIONS) | {"name", "functions", "cuda_sources",
                                                                           "cpp_sources"}
    assert not set(loaders._OTHER_TOOLS) & taken
    assert set(loaders._ONE_LANGUAGE) <= taken


def test_the_inline_loaders_keep_their_signatures() -> None:
    for loader in (kernix.load_cuda_inline, kernix.load_cpp_inline):
        params = inspect.signature(loader).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
        assert list(params)[:3] == ["name", loader.__name__.split("_")[1] + "_sources", "functions"]
        assert loader.__doc__ and loader.__name__ in repr(loader)
