"""The documentation cannot drift from the code.

Conventions in ``docs/**/*.rst`` (see ``docs/contributing/testing-the-docs.rst``):

* ``.. code-block:: python`` with ``:class: runnable`` is executed.  The
  runnable blocks of one page run in order, in one namespace, in a process of
  the page's own (forked from one runner that has imported numpy, JAX and
  kernix, so that each page does not import them again), whose working
  directory is an empty temporary directory and whose ``KERNIX_CACHE_DIR`` is a
  temporary cache of its own (a page may clear it, and count what it clears).
* A runnable block with a ``:caption:`` (``cpp``, ``cuda``, ``text``, and
  ``python``: a module the page imports) is a file: it is written, at that
  point of the page, to the path the caption names, and not run.
* ``.. code-block:: console`` with ``:class: runnable``: each ``$ command`` is
  run by the shell and its output (stdout and stderr) must be the lines after
  it.
* ``.. code-block:: text`` with ``:class: output`` right after a runnable
  Python block is what that block prints; a runnable block with no output
  block must print nothing.  In expected output, ``...`` matches any text
  within a line (paths, hashes).
* A runnable block with ``:class: runnable gpu`` needs an NVIDIA GPU: it (and
  its output block) is left out of the page's run here, and
  ``test_gpu_page_examples`` (marked ``gpu``) runs the whole page, such blocks
  included, on a machine with a GPU, comparing every output the same way.
* ``:class: cuda-example`` marks CUDA examples: each C++ source in them (a
  ``.. code-block:: cuda``, or a string holding ``// @BE`` in a Python block)
  must infer without errors, exporting every annotated function, on any machine.

All pages run concurrently, so the whole file takes about as long as the
slowest page.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGE_TIMEOUT_S = 300

_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. code-block::\s*(?P<lang>\S*)\s*$")
_OPTION = re.compile(r"^[ \t]+:(?P<name>[\w-]+):\s*(?P<value>.*)$")


@dataclass
class Block:
    """One ``code-block`` of a page."""

    page: str
    line: int  # 1-based line of the directive
    lang: str
    options: dict[str, str]
    code: str

    @property
    def classes(self) -> set[str]:
        return set(self.options.get("class", "").split())

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def parse_blocks(path: Path) -> list[Block]:
    """Every ``.. code-block::`` of an .rst file, with its options and dedented text."""
    lines = path.read_text().splitlines()
    page = path.relative_to(DOCS).as_posix() if path.is_relative_to(DOCS) else path.name
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, len(m.group("indent").expandtabs())
        options: dict[str, str] = {}
        i += 1
        while i < len(lines) and (om := _OPTION.match(lines[i])):
            options[om.group("name")] = om.group("value").strip()
            i += 1
        body: list[str] = []
        while i < len(lines):
            text = lines[i]
            if text.strip() and len(text) - len(text.lstrip()) <= indent:
                break
            body.append(text)
            i += 1
        code = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
        blocks.append(Block(page, start + 1, m.group("lang"), options, code))
    return blocks


def all_pages() -> dict[str, list[Block]]:
    return {p.relative_to(DOCS).as_posix(): parse_blocks(p) for p in sorted(DOCS.rglob("*.rst"))}


@dataclass
class Step:
    """One thing the runner does, and what it must print."""

    block: Block
    kind: str  # "python", "file", "console"
    expected: list[tuple[str, str]] = field(default_factory=list)  # (command or "", expected output)


def needs_gpu(b: Block) -> bool:
    """A runnable block that runs only on a machine with an NVIDIA GPU."""
    return "runnable" in b.classes and "gpu" in b.classes


def page_steps(blocks: list[Block], gpu: bool = False) -> list[Step]:
    """What running a page does: every runnable block, in order, with its expected output;
    without ``gpu``, the blocks that need a GPU (and their output blocks) are left out."""
    steps: list[Step] = []
    previous: Step | None = None
    left_out = False  # the last runnable block needs a GPU and is not run: so is its output block
    for b in blocks:
        if "output" in b.classes:
            if left_out:
                left_out = False
                continue
            assert previous is not None and previous.kind == "python", (
                f"{b.where}: an output block must follow a runnable Python block"
            )
            assert not previous.expected, f"{b.where}: a second output block for {previous.block.where}"
            previous.expected.append(("", b.code))
            previous = None
            continue
        previous = None
        if "runnable" not in b.classes:
            continue
        left_out = needs_gpu(b) and not gpu
        if left_out:
            continue
        if b.lang in ("python", "python3", "py") and "caption" not in b.options:
            previous = Step(b, "python")
            steps.append(previous)
        elif b.lang == "console":
            step = Step(b, "console")
            for chunk in re.split(r"^\$ ", b.code, flags=re.M)[1:]:
                command, _, output = chunk.partition("\n")
                step.expected.append((command, output))
            assert step.expected, f"{b.where}: a runnable console block needs `$ command` lines"
            steps.append(step)
        else:
            assert "caption" in b.options, f"{b.where}: a runnable {b.lang} block needs a :caption: file name"
            steps.append(Step(b, "file"))
    return steps


RUNNER = r'''
import contextlib, io, json, os, subprocess, sys, traceback
from pathlib import Path

import numpy, jax, jax.numpy, kernix  # what every page imports, once: each page's process is forked after it


def run_page():
    steps = json.loads(Path("steps.json").read_text())
    namespace = {"__name__": "__main__"}
    results = []
    for step in steps:
        if step["kind"] == "file":
            path = Path(step["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(step["code"])
            results.append({"output": ""})
        elif step["kind"] == "console":
            outputs = []
            for command in step["commands"]:
                proc = subprocess.run(command, shell=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
                outputs.append(proc.stdout)
            results.append({"outputs": outputs})
        else:
            buffer = io.StringIO()
            try:
                with contextlib.redirect_stdout(buffer):
                    exec(compile(step["code"], step["where"], "exec"), namespace)
            except BaseException:
                results.append({"output": buffer.getvalue(), "error": traceback.format_exc()})
                break
            results.append({"output": buffer.getvalue()})
    Path("results.json").write_text(json.dumps(results))


running = {}
for workdir, cache in json.loads(sys.argv[1]):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the page's process: its own working directory, cache, output
        status = 1
        try:
            os.chdir(workdir)
            os.environ["KERNIX_CACHE_DIR"] = cache
            log = os.open("log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            run_page()
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    running[pid] = workdir
while running:
    pid, status = os.wait()
    workdir = Path(running.pop(pid))  # (written whole, then named: the test reads it once it exists)
    (workdir / "exit.tmp").write_text(str(os.waitstatus_to_exitcode(status)))
    os.replace(workdir / "exit.tmp", workdir / "exit.txt")
'''


def _expected_matches(expected: str, actual: str) -> bool:
    """Line-by-line match; ``...`` in an expected line matches any text."""
    exp = [ln.rstrip() for ln in expected.strip("\n").splitlines()] if expected.strip() else []
    act = [ln.rstrip() for ln in actual.strip("\n").splitlines()] if actual.strip() else []
    if len(exp) != len(act):
        return False
    for e, a in zip(exp, act):
        pattern = ".*".join(re.escape(part) for part in e.split("..."))
        if not re.fullmatch(pattern, a):
            return False
    return True


RUNNABLE_PAGES = {page: steps for page, blocks in all_pages().items() if (steps := page_steps(blocks))}
#: The pages with examples that need a GPU, each with all its steps (those of the CPU too).
GPU_PAGES = {page: page_steps(blocks, gpu=True) for page, blocks in all_pages().items()
             if any(needs_gpu(b) for b in blocks)}


def _page_environment(base: Path) -> dict[str, str]:
    """The environment of a page's process: the ``kernix`` command on ``PATH``, 32-bit JAX."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if shutil.which("kernix", path=env["PATH"]) is None:  # kernix importable but its script not installed
        bin_dir = base / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "kernix").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m kernix \"$@\"\n")
        (bin_dir / "kernix").chmod(0o755)
        env["PATH"] = str(bin_dir) + os.pathsep + env["PATH"]
    env.pop("JAX_ENABLE_X64", None)
    return env


class PageRuns:
    """Pages run by one runner process: it imports JAX and kernix, then forks a process for each
    page (all at once), in a working directory and a cache of the page's own."""

    def __init__(self, pages: dict[str, list[Step]], base: Path, env: dict[str, str]) -> None:
        self.base, self.steps, self.workdirs = base, pages, {}
        for page, steps in pages.items():
            workdir = base / page.replace("/", "_").removesuffix(".rst")
            workdir.mkdir()
            spec = [
                {
                    "kind": s.kind,
                    "where": s.block.where,
                    "code": s.block.code,
                    "path": s.block.options.get("caption", ""),
                    "commands": [c for c, _ in s.expected] if s.kind == "console" else [],
                }
                for s in steps
            ]
            (workdir / "steps.json").write_text(json.dumps(spec))
            self.workdirs[page] = workdir
        pages_arg = json.dumps([[str(w), str(w.with_name(w.name + "-cache"))] for w in self.workdirs.values()])
        with open(base / "runner.log", "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", RUNNER, pages_arg], cwd=base, env=env,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def check(self, page: str) -> None:
        """Wait for ``page``'s process, then compare what each step printed with what the page shows."""
        workdir, steps = self.workdirs[page], self.steps[page]
        exit_file, deadline = workdir / "exit.txt", time.monotonic() + PAGE_TIMEOUT_S
        while not exit_file.exists():
            if self.proc.poll() is not None and not exit_file.exists():
                pytest.fail(f"docs/{page}: the runner failed:\n{(self.base / 'runner.log').read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"docs/{page}: the examples did not finish in {PAGE_TIMEOUT_S} s")
            time.sleep(0.05)
        log = (workdir / "log.txt").read_text() if (workdir / "log.txt").exists() else ""
        results_file = workdir / "results.json"
        assert exit_file.read_text() == "0" and results_file.is_file(), f"docs/{page}: the runner failed:\n{log}"
        _compare(page, steps, json.loads(results_file.read_text()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> PageRuns:
    """Start every runnable page this session runs, all at once."""
    selected = {item.callspec.params["page"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_runnable_examples"}
    base = tmp_path_factory.mktemp("docs-run")
    env = _page_environment(base)
    env["JAX_PLATFORMS"] = "cpu"  # the pages' CPU run is a machine without a GPU, also where one is present
    runs = PageRuns({page: RUNNABLE_PAGES[page] for page in sorted(selected)}, base, env)
    yield runs
    runs.stop()


#: A page whose examples run the ``kernix`` command (the entry point an installation provides).
COMMAND_PAGE = "reference/cli.rst"


@pytest.mark.parametrize("page", [pytest.param(page, marks=pytest.mark.installed) if page == COMMAND_PAGE else page
                                  for page in sorted(RUNNABLE_PAGES)])
def test_runnable_examples(page: str, page_runs: PageRuns) -> None:
    page_runs.check(page)


@pytest.mark.gpu
@pytest.mark.parametrize("page", sorted(GPU_PAGES))
def test_gpu_page_examples(page: str, tmp_path: Path) -> None:
    """A page's examples that need a GPU run, with the rest of the page, on a machine with one."""
    from helpers import gpus

    if not gpus():
        pytest.skip(f"docs/{page}: its examples marked `gpu` need an NVIDIA GPU and a CUDA-enabled jax")
    env = _page_environment(tmp_path)
    env.pop("JAX_PLATFORMS", None)  # the page's process chooses the GPU as a user's does
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # this process holds GPU memory already
    runs = PageRuns({page: GPU_PAGES[page]}, tmp_path, env)
    try:
        runs.check(page)
    finally:
        runs.stop()


def _compare(page: str, steps: list[Step], results: list[dict]) -> None:
    """Compare what each step of ``page`` printed with what the page shows."""
    for step, result in zip(steps, results):
        where = step.block.where
        if "error" in result:
            pytest.fail(f"{where}: the example raised:\n{result['error']}\nprinted:\n{result['output']}")
        if step.kind == "console":
            for (command, expected), actual in zip(step.expected, result["outputs"]):
                assert _expected_matches(expected, actual), (
                    f"{where}: `{command}` printed:\n{actual}\nthe page says:\n{expected}"
                )
        elif step.kind == "python":
            expected = step.expected[0][1] if step.expected else ""
            assert _expected_matches(expected, result["output"]), (
                f"{where}: the example printed:\n{result['output']}\nthe page says:\n{expected}"
            )
    assert len(results) == len(steps), f"docs/{page}: only {len(results)} of {len(steps)} examples ran"


def test_every_python_block_parses() -> None:
    for blocks in all_pages().values():
        for b in blocks:
            if b.lang in ("python", "python3", "py"):
                try:
                    ast.parse(b.code)
                except SyntaxError as exc:
                    pytest.fail(f"{b.where}: not valid Python: {exc}")


def _cuda_sources(b: Block) -> list[str]:
    if b.lang in ("cuda", "cpp", "c++"):
        return [b.code]
    sources = []
    for node in ast.walk(ast.parse(b.code)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "// @BE" in node.value:
            sources.append(node.value)
    return sources


CUDA_EXAMPLES = [b for blocks in all_pages().values() for b in blocks if "cuda-example" in b.classes]


def test_cuda_examples_are_there() -> None:
    pages = {b.page for b in CUDA_EXAMPLES}
    assert {"getting-started.rst", "tutorials/cuda.rst"} <= pages
    assert sum(b.page == "tutorials/cuda.rst" for b in CUDA_EXAMPLES) >= 4


def test_the_cuda_examples_run_on_a_gpu() -> None:
    """The CUDA tutorial and the getting-started page's CUDA example are run on a GPU machine,
    each CUDA source of the tutorial among them."""
    assert {"getting-started.rst", "tutorials/cuda.rst"} <= set(GPU_PAGES)
    cuda_page = [b for b in all_pages()["tutorials/cuda.rst"] if "cuda-example" in b.classes]
    assert all("runnable" in b.classes for b in cuda_page)


def test_gpu_blocks_are_left_out_of_the_cpu_run_with_their_output(tmp_path: Path) -> None:
    page = tmp_path / "page.rst"
    page.write_text(textwrap.dedent("""\
        .. code-block:: python
           :class: runnable

           print(1)

        .. code-block:: text
           :class: output

           1

        .. code-block:: python
           :class: runnable gpu

           print(2)

        .. code-block:: text
           :class: output

           2

        .. code-block:: console
           :class: runnable gpu

           $ nvidia-smi -L
           GPU 0: ...

        .. code-block:: python
           :class: runnable

           print(3)
        """))
    steps = page_steps(parse_blocks(page))
    assert [(s.block.code, s.expected) for s in steps] == [("print(1)\n", [("", "1\n")]), ("print(3)\n", [])]
    on_gpu = page_steps(parse_blocks(page), gpu=True)
    assert [s.kind for s in on_gpu] == ["python", "python", "console", "python"]
    assert on_gpu[1].expected == [("", "2\n")] and on_gpu[2].expected == [("nvidia-smi -L", "GPU 0: ...\n")]


@pytest.mark.parametrize("block", CUDA_EXAMPLES, ids=lambda b: b.where)
def test_cuda_example_sources_infer(block: Block, tmp_path: Path) -> None:
    from kernix.backend import toolchain
    from kernix.frontend.lexer import find_annotations
    from kernix import infer_file

    sources = _cuda_sources(block)
    assert sources, f"{block.where}: a CUDA example without a `// @BE` source"
    if any("<cuda_runtime.h>" in s for s in sources) and not toolchain.cuda_include_dirs():
        pytest.skip("the CUDA headers are not installed")
    for i, text in enumerate(sources):
        path = tmp_path / f"example_{i}.cu"
        path.write_text(text)
        result = infer_file(path, language="cuda", use_cache=False)
        assert result.errors == (), f"{block.where}: " + "\n".join(str(e) for e in result.errors)
        annotated = {a.name for a in find_annotations(text)}
        assert {f.name for f in result.functions} == annotated, block.where


@pytest.mark.installed
@pytest.mark.skipif(importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("sphinx.__main__") is None,
                    reason="Sphinx is not installed (pip install -e '.[docs]')")
def test_sphinx_build(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path / "html")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.installed
def test_every_public_name_is_documented() -> None:
    import kernix

    text = (DOCS / "reference" / "python.rst").read_text()
    documented = set(re.findall(r"^\.\. (?:auto)?(?:function|class|exception|data)::\s*(\S+)", text, re.M))
    missing = sorted(set(kernix.__all__) - documented)
    assert not missing, f"docs/reference/python.rst does not document: {missing}"


@pytest.mark.installed
def test_every_environment_variable_is_documented() -> None:
    import kernix

    code = "\n".join(p.read_text() for p in Path(kernix.__file__).parent.rglob("*.py"))
    names = set(re.findall(r"""environ(?:\.get\(|\[)\s*["']([A-Z_][A-Z0-9_]*)["']""", code))
    names |= set(re.findall(r"""^[A-Z_]+_ENV\s*=\s*["']([A-Z_][A-Z0-9_]*)["']""", code, re.M))
    names |= {"CUDA_HOME", "CUDA_PATH"}  # read in a loop over both names
    text = (DOCS / "reference" / "environment.rst").read_text()
    missing = sorted(n for n in names if f"``{n}``" not in text)
    assert not missing, f"docs/reference/environment.rst does not document: {missing}"



def test_troubleshooting_quotes_the_toolchain_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The two messages docs/troubleshooting.rst shows without running them (a machine that has
    the tools cannot show them) are what kernix raises when the tool is not found."""
    from kernix.backend import toolchain
    from kernix.errors import ToolchainError

    text = (DOCS / "troubleshooting.rst").read_text()
    for var in ("KERNIX_NVCC", "CUDA_HOME", "CUDA_PATH", "CXX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no compiler on PATH
    monkeypatch.setattr(sys, "path", [str(tmp_path)])  # and no nvidia-cuda-nvcc wheel
    toolchain.forget()
    try:
        for find in (toolchain.find_nvcc, toolchain.find_host_compiler):
            with pytest.raises(ToolchainError) as info:
                find()
            assert f"\n   ToolchainError: {info.value}\n" in text, f"docs/troubleshooting.rst lacks: {info.value}"
    finally:
        toolchain.forget()

# One style of exported signature throughout the docs, the README and examples/ (that of
# docs/reference/arg-spec.rst): inputs `const BE::Tensor& x`, outputs `BE::Tensor& out`, and a
# stream only in CUDA functions. A block that shows other forms on purpose (the inference rules)
# carries `:class: signature-forms`.

_ANNOTATION = re.compile(r"^[ \t]*//[ \t]*@BE[ \t]+\S.*$", re.MULTILINE)
_TENSOR = r"(?:BE::)?(?:Tensor|TensorOf<[^<>]*>)"
_BY_VALUE_OUTPUT = re.compile(rf"^{_TENSOR}\s+\w+$")
_BY_VALUE_INPUT = re.compile(rf"^(?:const\s+{_TENSOR}|{_TENSOR}\s+const)\s+\w+$")
_STREAM = re.compile(r"\bcudaStream_t\b|^(?:const\s+)?(?:std::)?int64_t\s+stream$")
_CUDA_SOURCE = re.compile(r"__global__|<<<|#\s*include\s*<cu")
#: Files kept as another project wrote them: the reference's GPU tutorial, run unchanged
#: with kernix (tests/test_gpu.py), in the reference's by-value style.
_VERBATIM = {"examples/seed_gpu_tutorial.py"}


def _parameters(declaration: str) -> list[str]:
    """The parameters of the first function declarator in ``declaration``, split at
    top-level commas, each with its default argument and extra blanks removed."""
    start = declaration.find("(")
    params, depth, current = [], 0, ""
    for ch in declaration[start + 1:]:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            params.append(current)
            current = ""
        else:
            current += ch
    params.append(current)
    return [" ".join(p.split("=")[0].split()) for p in params if p.strip()]


def signature_problems(source: str, cuda: bool) -> list[str]:
    """What in the exported signatures of ``source`` departs from the docs' style."""
    problems = []
    for m in _ANNOTATION.finditer(source):
        declaration = re.split(r"[{;]", source[m.end():], maxsplit=1)[0]
        name = re.search(r"@BE[ \t]+(\w+)", m.group(0)).group(1)
        for p in _parameters(declaration):
            if _BY_VALUE_OUTPUT.match(p):
                kind, _, param = p.rpartition(" ")
                problems.append(f"{name}: output `{p}` by value: declare it `{kind}& {param}`")
            elif _BY_VALUE_INPUT.match(p):
                kind, _, param = p.replace(" const ", " ").removeprefix("const ").rpartition(" ")
                problems.append(f"{name}: input `{p}` by value: declare it `const {kind}& {param}`")
            elif not cuda and _STREAM.search(p):
                problems.append(f"{name}: `{p}` in a C++ (CPU) function: a stream belongs to CUDA functions")
    return problems


def _python_strings(code: str) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(code))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "@BE" in n.value]


def _sources_shown() -> list[tuple[str, str, bool]]:
    """(where, source, is CUDA) for every C++/CUDA source in the docs, README.md and examples/."""
    found = []
    for blocks in all_pages().values():
        for b in blocks:
            if "signature-forms" in b.classes:
                continue
            if b.lang in ("cpp", "c++", "cuda"):
                cuda = b.lang == "cuda" or b.options.get("caption", "").endswith(".cu")
                found.append((b.where, b.code, cuda))
            elif b.lang in ("python", "python3", "py"):
                found += [(b.where, s, bool(_CUDA_SOURCE.search(s))) for s in _python_strings(b.code)]
    readme = (REPO / "README.md").read_text()
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", readme, re.MULTILINE | re.DOTALL):
        where = f"README.md:{readme[:m.start()].count(chr(10)) + 1}"
        if m.group(1) in ("cpp", "c++", "cuda"):
            found.append((where, m.group(2), m.group(1) == "cuda" or bool(_CUDA_SOURCE.search(m.group(2)))))
        elif m.group(1) == "python":
            found += [(where, s, bool(_CUDA_SOURCE.search(s))) for s in _python_strings(m.group(2))]
    for path in sorted((REPO / "examples").rglob("*")):
        rel = path.relative_to(REPO).as_posix()
        if rel in _VERBATIM:
            continue
        if path.suffix == ".py":
            found += [(rel, s, bool(_CUDA_SOURCE.search(s))) for s in _python_strings(path.read_text())]
        elif path.suffix in (".cpp", ".cc", ".cxx", ".cu"):
            found.append((rel, path.read_text(), path.suffix == ".cu"))
    return found


def test_signature_style_check_finds_what_it_should() -> None:
    bad = ("// @BE f\nvoid f(const BE::Tensor x, BE::Tensor out, BE::TensorOf<float> o2,\n"
           "       float a = 1, int64_t stream) {}\n// @BE g\nvoid g(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s);\n")
    assert signature_problems(bad, cuda=False) == [
        "f: input `const BE::Tensor x` by value: declare it `const BE::Tensor& x`",
        "f: output `BE::Tensor out` by value: declare it `BE::Tensor& out`",
        "f: output `BE::TensorOf<float> o2` by value: declare it `BE::TensorOf<float>& o2`",
        "f: `int64_t stream` in a C++ (CPU) function: a stream belongs to CUDA functions",
        "g: `cudaStream_t s` in a C++ (CPU) function: a stream belongs to CUDA functions",
    ]
    assert signature_problems(bad, cuda=True) == signature_problems(bad, cuda=False)[:3]
    good = "// @BE h (n)->(n)\nvoid h(const BE::TensorOf<float>& x, BE::Tensor& y, float a, int64_t steps) {}\n"
    assert signature_problems(good, cuda=False) == []


def test_examples_share_one_signature_style() -> None:
    sources = _sources_shown()
    assert len(sources) >= 30  # the docs, README.md and examples/ are all read
    problems = [f"{where}: {p}" for where, src, cuda in sources for p in signature_problems(src, cuda)]
    assert not problems, "\n".join(problems)
