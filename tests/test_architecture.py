"""The promises of the package layout: one-way imports, small modules, one
error family, and a cache that says why it missed."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kernix
from helpers import FIXTURES, WARM_CUDA_MODULES, WARM_LOAD_MODULES, unique_name

PACKAGE = Path(kernix.__file__).resolve().parent

# The pipeline, bottom up: a module imports only from its own layer or lower ones, and two units
# (a folder, or a loose module at the top of kernix/) on one layer never import each other.
# The frontend asks backend.toolchain which compilers a build uses; prebuilt builds through the loaders'
# defaults; the command line drives everything else.
LAYERS = {
    "kernix.errors": 0,
    "kernix.platforms": 1,
    "kernix.paths": 1,
    "kernix.notes": 1,
    "kernix.interface": 1,
    "kernix.language": 2,
    "kernix.store": 3,
    "kernix.runtime": 3,
    "kernix.backend": 4,
    "kernix.frontend": 5,
    "kernix.request": 6,
    "kernix.compilation": 7,
    "kernix.pipeline": 8,
    "kernix.loaders": 9,
    "kernix.checking": 10,
    "kernix.prebuilt": 10,
    "kernix.cli": 11,
    "kernix": 12,
}

#: The most lines of Python each folder of kernix/ may hold ("loose": the modules at its top), and the package.
LINE_BUDGETS = {
    "language": 1_860,
    "frontend": 3_102,
    "backend": 2_095,
    "store": 2_307,
    "runtime": 2_465,
    "checking": 2_080,
    "prebuilt": 1_102,
    "cli": 766,
    "loose": 1_637,
}
PACKAGE_BUDGET = 17_414
#: The most modules at the top of kernix/ (``__init__`` and ``__main__`` included).
LOOSE_MODULES = 12
#: The most lines of one module: a module is split by concept, never only to fit.
MODULE_LINES = 800


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    """The key of :data:`LAYERS` that ``module`` belongs to."""
    while module not in LAYERS:
        module = module.rpartition(".")[0]
    return module


def _layer(module: str) -> int:
    return LAYERS[_unit(module)]


def _outside_functions(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what it holds, less function bodies and ``if TYPE_CHECKING:`` blocks: what runs on import."""
    yield node
    for child in ast.iter_child_nodes(node):
        skipped = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
            isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING")
        if not skipped:
            yield from _outside_functions(child)


def _imports(path: Path, *, local: bool = False, on_import: bool = False) -> list[tuple[str, list[str]]]:
    """(imported module, names) for every import in the file, relative ones resolved
    (with ``local``, only the imports inside functions; with ``on_import``, only those that run when the
    module is imported)."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree)
    if local:
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        nodes = (n for f in functions for stmt in f.body for n in ast.walk(stmt))
    elif on_import:
        nodes = _outside_functions(tree)
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                if not node.module:  # `from . import report`: submodules (or the root's version)
                    out += [(".".join(base), [a.name]) if a.name == "__version__" else (".".join(base + [a.name]), [])
                            for a in node.names]
                    continue
                mod = ".".join(base + [node.module])
            else:
                mod = node.module or ""
            out.append((mod, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_flow_one_way_and_use_public_names(path: Path) -> None:
    me = _module_name(path)
    for mod, names in _imports(path):
        if not (mod == "kernix" or mod.startswith("kernix.")):
            continue
        # Of the package root a module may import only the version (defined there before anything loads).
        assert mod != "kernix" or me == "kernix" or names == ["__version__"], f"{me} imports the package root"
        if me != "kernix" and mod != "kernix":
            assert _layer(mod) <= _layer(me), f"{me} (layer {_layer(me)}) imports {mod} (layer {_layer(mod)})"
            assert _layer(mod) < _layer(me) or _unit(mod) == _unit(me), (
                f"{me} imports {mod}, of another unit on its layer ({_layer(me)})")
        private = [n for n in names if n.startswith("_") and n != "__version__"]
        assert not private, f"{me} imports private names {private} from {mod}"


def _lines(paths: list[Path]) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MODULE_LINES


@pytest.mark.parametrize("folder", sorted(LINE_BUDGETS))
def test_each_folder_keeps_to_its_line_budget(folder: str) -> None:
    paths = [p for p in SOURCES if (p.parent == PACKAGE if folder == "loose" else PACKAGE / folder in p.parents)]
    assert paths, f"no Python in {folder}"
    assert _lines(paths) <= LINE_BUDGETS[folder], f"{folder}: {_lines(paths)} lines"


def test_the_package_keeps_to_its_line_budget() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    assert folders <= set(LINE_BUDGETS), f"folders with no line budget: {sorted(folders - set(LINE_BUDGETS))}"
    assert _lines(SOURCES) <= PACKAGE_BUDGET


#: The ``kernix`` commands: a command's module under cli/ may share its command's name.
COMMANDS = ("build", "cache", "inspect", "stubs")


def _near(a: str, b: str) -> bool:
    """Whether two names differ only by a letter or two at the end (``request``, ``requested``)."""
    short, long = sorted((a, b), key=len)
    return long.startswith(short) and len(long) - len(short) <= 2


def test_no_two_modules_are_named_a_letter_or_a_folder_apart() -> None:
    units = {p.relative_to(PACKAGE).with_suffix("") for p in SOURCES if p.name != "__init__.py"}
    units |= {p.relative_to(PACKAGE) for p in PACKAGE.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    named = sorted((u.name, u) for u in units if not (u.parts[0] == "cli" and u.name in COMMANDS))
    clashes = [(str(u), str(v)) for i, (a, u) in enumerate(named) for b, v in named[i + 1:] if _near(a, b)]
    assert not clashes


def test_few_modules_sit_at_the_top_of_the_package() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= LOOSE_MODULES, loose
    assert {f"kernix.{p.removesuffix('.py')}" for p in loose} - {"kernix.__init__", "kernix.__main__"} <= set(LAYERS)


def _graph() -> dict[str, set[str]]:
    """kernix module -> the kernix modules it imports, at its top or inside a function."""
    modules = {_module_name(p): p for p in SOURCES}
    graph: dict[str, set[str]] = {}
    for me, path in modules.items():
        targets = set()
        for mod, names in _imports(path):
            targets |= {m for m in [mod, *(f"{mod}.{n}" for n in names)] if m in modules and m != me}
        graph[me] = targets - {"kernix"}  # (the root's version: defined before anything is imported)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_anywhere() -> None:
    """Also through imports inside functions: such an import hides a cycle, it does not remove it."""
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_error_classes_come_from_the_top_except_on_the_warm_path(path: Path) -> None:
    """Error classes are imported at module top, except by the modules a warm load imports: those import
    one where they raise it (never at their top, ``if TYPE_CHECKING:`` aside), so that a warm load, which
    raises nothing, creates none of the 19 classes.  ``TYPE_CHECKING`` is typing's."""
    me = _module_name(path)
    local = any(mod == "kernix.errors" for mod, _ in _imports(path, local=True))
    top = [mod for mod, _ in _imports(path, on_import=True) if mod == "kernix.errors"]
    if me in WARM_LOAD_MODULES | WARM_CUDA_MODULES:
        assert not top, f"{me} is on the warm path but imports kernix.errors at its top"
    else:
        assert not local, f"{me} imports kernix.errors inside a function"
    assert "TYPE_CHECKING = False" not in path.read_text()


def test_every_error_class_is_exported_at_run_time_and_to_type_checkers() -> None:
    """kernix/__init__.py names the error classes twice, lazily (``_LAZY``) and for type checkers (``X as X``
    under ``TYPE_CHECKING``): the two lists agree, and name classes of kernix.errors."""
    import kernix.errors

    classes = {n for n, v in vars(kernix.errors).items() if isinstance(v, type) and v.__name__ == n}
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    typed = {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "errors"
             for a in n.names if a.asname == a.name}
    lazy = {n for n, module in kernix._LAZY.items() if module == "kernix.errors"}
    assert typed == lazy and lazy <= classes and len(lazy) >= 18


def test_every_public_exception_is_a_kernix_error() -> None:
    errors = [getattr(kernix, n) for n in kernix.__all__ if isinstance(getattr(kernix, n), type)
              and issubclass(getattr(kernix, n), BaseException)]
    assert len(errors) >= 10
    assert all(issubclass(e, kernix.KernixError) for e in errors)
    assert issubclass(kernix.SourceNotFoundError, FileNotFoundError)
    assert issubclass(kernix.OptionError, TypeError)
    assert issubclass(kernix.CallError, TypeError)


def test_bad_loader_arguments_are_kernix_errors(tmp_path: Path) -> None:
    with pytest.raises(kernix.SourceNotFoundError):
        kernix.load_cpp_file(tmp_path / "missing.cpp")
    with pytest.raises(kernix.SourceNotFoundError):
        kernix.load_cpp_dir(tmp_path / "missing")
    with pytest.raises(kernix.OptionError, match="unexpected option"):
        kernix.load_cpp_file(FIXTURES / "reliability" / "add_one.cpp", extra_cuda_cflags=["-x"])
    with pytest.raises(kernix.OptionError, match="optimization_level"):
        kernix.load_cpp_inline("opt", "int x;", optimization_level=7)
    with pytest.raises(kernix.OptionError, match="cpp_sources"):
        kernix.load_cpp_inline("srcs", 42)


def test_import_does_not_load_the_pipeline() -> None:
    code = "import sys, kernix; print(sorted(m for m in ('kernix.pipeline', 'kernix.frontend.infer', 'jax', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_verbose_load_says_why_the_cache_missed(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.h").write_text("constexpr float kScale = 2.0f;\n")
    src = tmp_path / "logged.cpp"
    src.write_text(
        '#include "kernix/common.h"\n#include "scale.h"\n'
        "// @BE twice\n"
        "void twice(const BE::Tensor& x, BE::Tensor& y) {\n"
        "  for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = kScale * x.data_ptr<float>()[i];\n"
        "}\n"
    )
    name = unique_name("logged")
    options = dict(name=name, extra_include_paths=[str(inc)], verbose=True, auto_register=False)
    kernix.load_cpp_file(src, **options)
    assert f"{name}: cache no entry" in capfd.readouterr().err
    kernix.load_cpp_file(src, **options)
    assert f"{name}: cache hit" in capfd.readouterr().err
    (inc / "scale.h").write_text("constexpr float kScale = 3.0f;  // edited\n")
    kernix.load_cpp_file(src, **options)
    assert f"{name}: cache {inc / 'scale.h'} changed since it was cached" in capfd.readouterr().err
