"""kernix's own finder (``kernix._OwnModules``): while a public name's module
is imported, kernix's submodules are found without the standard finders, and
found exactly as the path finder finds them."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES, PathFinder
from pathlib import Path

import pytest

import kernix


def _kernix_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(kernix.__path__, "kernix."):
        if info.name != "kernix.__main__":
            names.append(info.name)
    return names


def _fields(spec) -> dict:
    return {
        "name": spec.name, "origin": spec.origin, "locations": spec.submodule_search_locations,
        "cached": spec.cached, "has_location": spec.has_location, "parent": spec.parent,
        "loader": (type(spec.loader), spec.loader.name, spec.loader.path),
    }


def test_every_kernix_module_is_found_as_the_path_finder_finds_it() -> None:
    names = _kernix_modules()
    assert {"kernix.pipeline", "kernix.store.files", "kernix.runtime", "kernix.frontend.infer"} <= set(names)
    finder = kernix._OwnModules()
    for name in names:
        parent = importlib.import_module(name.rpartition(".")[0])
        ours = finder.find_spec(name, parent.__path__)
        assert ours is not None, name
        assert _fields(ours) == _fields(PathFinder.find_spec(name, parent.__path__)), name


def _make(root: Path, files: list[str]) -> None:
    for f in files:
        path = root / f
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def test_what_is_not_a_plain_source_module_is_left_to_the_other_finders(tmp_path: Path) -> None:
    ext = EXTENSION_SUFFIXES[0]
    _make(tmp_path, ["plain.py", "both.py", f"both{ext}", f"native{ext}", "pkg/__init__.py", "nspkg/mod.py",
                     f"nativepkg/__init__{ext}", "nativepkg/__init__.py", "plain.py.d/x"])
    finder = kernix._OwnModules()
    where = [str(tmp_path)]
    try:
        for tail in ("plain", "pkg"):  # the plain cases: the path finder's own spec
            name = f"kernix.{tail}"
            assert _fields(finder.find_spec(name, where)) == _fields(PathFinder.find_spec(name, where)), tail
        # an extension module wins over a .py file for the path finder: not ours to answer
        for tail in ("both", "native", "nativepkg", "nspkg", "missing"):
            assert finder.find_spec(f"kernix.{tail}", where) is None, tail
        assert PathFinder.find_spec("kernix.both", where).origin.endswith(ext)
    finally:
        sys.path_importer_cache.pop(str(tmp_path), None)
    assert finder.find_spec("other.plain", where) is None  # not kernix
    assert finder.find_spec("kernix.plain", None) is None  # a top-level search
    assert finder.find_spec("kernix.plain", [str(tmp_path), str(tmp_path / "pkg")]) is None  # several places
    assert finder.find_spec("kernix.plain", [str(tmp_path / "no such dir")]) is None


def test_a_failed_import_leaves_the_meta_path_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kernix._LAZY, "no_such_thing", "kernix.no_such_module")
    before = list(sys.meta_path)
    with pytest.raises(ModuleNotFoundError, match="kernix.no_such_module"):
        kernix.no_such_thing
    assert sys.meta_path == before


def test_a_load_function_imports_the_warm_path_through_the_finder() -> None:
    """In a fresh process: every module the load function brings in is found by
    kernix's finder, and the meta path is left as it was."""
    code = (
        "import json, sys, kernix\n"
        "found = []\n"
        "find = kernix._OwnModules.find_spec\n"
        "def spy(self, name, path=None, target=None):\n"
        "    spec = find(self, name, path, target)\n"
        "    found.append(name) if spec is not None else None\n"
        "    return spec\n"
        "kernix._OwnModules.find_spec = spy\n"
        "before = list(sys.meta_path)\n"
        "kernix.load_cpp_inline\n"
        "new = sorted(n for n in sys.modules if n.startswith('kernix.'))\n"
        "print(json.dumps([sorted(found), new, sys.meta_path == before]))\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    found, new, restored = json.loads(out.splitlines()[-1])
    assert {"kernix.loaders", "kernix.pipeline", "kernix.store.entries", "kernix.runtime.registry"} <= set(new)
    assert found == new
    assert restored
