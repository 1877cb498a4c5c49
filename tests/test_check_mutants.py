"""The mutation corpus of kernix.check (fixtures/mutants, run by bench/check_mutants.py) is well formed:
every bug is a patch that applies to its kernel exactly once, and the corpus covers every bug class.
Pure text: nothing is built here (the runner builds and checks each bug)."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter

from helpers import FIXTURES

MUTANTS = FIXTURES / "mutants"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"mutants_{name}_under_test", MUTANTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNELS = _load("corpus").KERNELS
BUGS_MODULE = _load("bugs")
BUGS, CLASSES = BUGS_MODULE.BUGS, BUGS_MODULE.CLASSES


def test_every_kernel_source_exists_and_exports_its_function():
    assert len(KERNELS) >= 10
    for name, kernel in KERNELS.items():
        source = (MUTANTS / kernel["source"]).read_text()
        exported = re.findall(r"// @BE (\w+)", source)
        assert kernel["function"] in exported, (name, exported)
        assert callable(kernel["reference"]) and isinstance(kernel["inputs"](), tuple), name
        if kernel["fallback"]:
            assert kernel["fallback"] in kernel["members"], name


def test_every_bug_patch_finds_its_text_exactly_once_and_changes_it():
    for bug in BUGS:
        source = (MUTANTS / KERNELS[bug["kernel"]]["source"]).read_text()
        where = f"{bug['kernel']}.{bug['name']}"
        assert source.count(bug["find"]) == 1, f"{where}: find text occurs {source.count(bug['find'])} times"
        assert bug["find"] != bug["replace"], where


def test_bug_names_are_unique_and_every_class_has_bugs():
    names = Counter((b["kernel"], b["name"]) for b in BUGS)
    assert [n for n, c in names.items() if c > 1] == []
    assert len(BUGS) >= 55
    per_class = Counter(b["class"] for b in BUGS)
    assert set(per_class) == set(CLASSES), set(CLASSES) - set(per_class)
