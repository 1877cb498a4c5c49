"""A keyword a loader does not take is an OptionError (a TypeError) that
names it and lists the keywords the loader takes.  Nothing here compiles:
every refusal comes before a source is read or written."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import kernix
from kernix import loaders

LOADERS = [kernix.load_cuda_inline, kernix.load_cuda_file, kernix.load_cuda_dir,
           kernix.load_cpp_inline, kernix.load_cpp_file, kernix.load_cpp_dir]


def _call(loader, kwargs, tmp_path: Path):
    if loader.__name__.endswith("_inline"):
        return loader("m", "int x;", build_directory=str(tmp_path / "cache"), **kwargs)
    return loader(tmp_path / "missing" / "src.cpp", **kwargs)  # (an option is refused before the path)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kwargs", [{"with_cuda": True}, {"optimisation_level": 2, "zzz": 1}], ids=["one", "two"])
def test_an_unknown_keyword_is_named_with_those_the_loader_takes(loader, kwargs, tmp_path: Path) -> None:
    with pytest.raises(kernix.OptionError) as info:
        _call(loader, kwargs, tmp_path)
    assert isinstance(info.value, TypeError)
    message = str(info.value)
    assert message.startswith(f"{loader.__name__}() got ")
    assert all(repr(k) in message for k in kwargs)
    family = loaders._CUDA_OPTIONS if "_cuda_" in loader.__name__ else loaders._CPP_OPTIONS
    assert all(k in message.partition("it takes")[2] for k in family)
    assert not (tmp_path / "cache").exists()  # refused before the inline source was written


@pytest.mark.parametrize("loader, key", [(kernix.load_cpp_inline, "extra_cuda_cflags"),
                                         (kernix.load_cpp_file, "compute_capability"),
                                         (kernix.load_cuda_inline, "extra_cflags"),
                                         (kernix.load_cpp_inline, "cuda_sources")])
def test_the_other_languages_keyword_is_refused(loader, key: str, tmp_path: Path) -> None:
    with pytest.raises(kernix.OptionError, match=repr(key)):
        _call(loader, {key: ["-O2"]}, tmp_path)


def test_the_inline_loaders_keep_their_signatures() -> None:
    for loader in (kernix.load_cuda_inline, kernix.load_cpp_inline):
        params = inspect.signature(loader).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
        assert list(params)[:3] == ["name", loader.__name__.split("_")[1] + "_sources", "functions"]
        assert loader.__doc__ and loader.__name__ in repr(loader)
