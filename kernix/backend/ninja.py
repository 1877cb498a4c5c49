"""The compiler driver: write the generated sources and a ninja file, run ninja.

Layout of one build directory (stable per module name, so ninja rebuilds only
what changed)::

    shim_0.cu ... shim_N.cu     user file i + its shims   (nvcc, or c++ for CPU)
    handlers_0.cpp ...          the XLA FFI handlers      (host c++; specs only)
    messages.cpp                kernix/detail/messages.cc (host c++): the text of failed checks
    build.ninja
    units.json                  the functions generated for (:func:`previous_units`)
    module.so                   all of the above, linked

A generated file is rewritten only when its text changes (:func:`generate`).
Commands are argument lists joined with :func:`shlex.join` for ninja; nothing
goes through a user-controlled shell string.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import CompilationError, KernixError, ToolchainError
from ..interface import running_command
from ..language.spec import FunctionSpec
from ..platforms import split_flags
from ..store import elf
from ..store.files import atomic_write
from . import codegen, toolchain
from .flags import BuildConfig, compile_flags
from .installation import own_header_dirs
from .jobs import parallel_jobs
from .progress import BuildProgress, progress_style, run_ninja

__all__ = ["BuildResult", "OutputError", "compile_library", "generate", "generated_files", "previous_units",
           "read_depfile"]


class OutputError(KernixError):
    """A build that ran to the end but left an unusable library (cut short,
    not ELF, or missing an exported handler)."""


@dataclass(frozen=True)
class BuildResult:
    """What a build produced."""

    so_path: Path
    dependencies: tuple[str, ...] = ()  # every file the compilers read, but the host compiler's own headers


def ninja_path() -> str:
    """The ninja executable (from the ``ninja`` package, else ``PATH``)."""
    try:
        import ninja  # type: ignore[import-not-found]

        cand = Path(ninja.BIN_DIR) / "ninja"
        if cand.is_file():
            return str(cand)
    except ImportError:
        pass
    found = shutil.which("ninja")
    if not found:
        raise ToolchainError("ninja was not found: `pip install ninja`")
    return found


def _write_if_changed(path: Path, text: str) -> bool:
    """Rewrite a generated file only when its text changes, so ninja's timestamps stay meaningful;
    whether it was rewritten."""
    data = text.encode()
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    atomic_write(path, data, durable=False)
    return True


def _ninja_file(n_units: int, n_handler_units: int, flags: dict[str, list[str]], ext: str) -> str:
    def q(args: list[str]) -> str:
        # Quoted for the shell ninja runs commands with, then escaped for ninja
        # itself ("$" is ninja's escape character): every argument arrives as is.
        for a in args:
            if any(c in a for c in "\n\r\0"):
                raise KernixError(f"a compiler or linker flag contains a line break or NUL: {a!r}")
        return shlex.join(args).replace("$", "$$")

    # -MD: make-style depfiles listing every header read, system directories
    # included (a user's -isystem DIR is one); the host compiler's own headers
    # are dropped when recording (see _tracked), its identity covers them.
    rules = ["ninja_required_version = 1.3", ""]
    for rule, compiler in (("user_cc", "user"), ("handler_cc", "handlers")):
        rules += [
            f"rule {rule}",
            f"  command = {q(flags[compiler])} -MD -MF $out.d -c $in -o $out",
            "  depfile = $out.d",
            "  description = compile $in",
            "",
        ]
    rules += [
        "rule link",
        "  command = " + q(flags["link"]).replace("@IN@", "$in") + " -o $out",
        "  description = link $out",
        "",
    ]
    # The messages unit comes first: ninja starts it beside the first shim unit,
    # so on two cores it is not left to run alone after the others.
    objs = ["messages.o"]
    rules.append("build messages.o: handler_cc messages.cpp")
    for i in range(n_units):
        rules.append(f"build shim_{i}.o: user_cc shim_{i}.{ext}")
        objs.append(f"shim_{i}.o")
    for k in range(n_handler_units):
        rules.append(f"build handlers_{k}.o: handler_cc handlers_{k}.cpp")
        objs.append(f"handlers_{k}.o")
    rules.append(f"build module.so: link {' '.join(objs)}")
    rules.append("default module.so")
    return "\n".join(rules) + "\n"


#: Fast handlers (frame.h) a unit holds at least / at most.  One costs the
#: compiler a few milliseconds, so small modules get one unit and large ones
#: are cut so that no compiler process grows past ~150 MB
#: (``python bench/bench_scale.py``).
FAST_UNIT_MIN = 500
FAST_UNIT_MAX = 2000

#: ffi.h handlers a unit holds at least: each unit parses ffi.h again (~0.9 s).
FFI_UNIT_MIN = 4

#: The most units each kind of handler is spread over.  The split depends on
#: the functions alone, never on the number of parallel jobs: the same sources
#: give the same library (its SHA-256 names the code in exported artifacts)
#: whatever ``KERNIX_JOBS``, ``ninja_workers=`` or the machine's CPUs.
FAST_UNITS = 8
FFI_UNITS = 2


def handler_chunks(functions: Sequence[codegen.ExportedFunction]) -> list[list[codegen.ExportedFunction]]:
    """Split the handlers into units that compile in parallel.

    Fast handlers (:func:`kernix.backend.codegen.has_fast_handler`) and ffi.h
    handlers go to separate units, so a fast unit never includes ffi.h.  Each
    kind spreads over at most :data:`FAST_UNITS` / :data:`FFI_UNITS` units of
    at least :data:`FAST_UNIT_MIN` / :data:`FFI_UNIT_MIN` handlers (a fast
    unit at most :data:`FAST_UNIT_MAX`); the measurements behind them: "The
    build design" in docs/how-it-works.rst, ``python bench/bench_build.py``.
    """
    if not functions:
        return [[]]
    fast = [fn for fn in functions if codegen.has_fast_handler(fn)]
    typed = [fn for fn in functions if not codegen.has_fast_handler(fn)]
    chunks: list[list[codegen.ExportedFunction]] = []
    for group, units, low, high in ((fast, FAST_UNITS, FAST_UNIT_MIN, FAST_UNIT_MAX),
                                    (typed, FFI_UNITS, FFI_UNIT_MIN, None)):
        if not group:
            continue
        per_unit = max(low, -(-len(group) // units))
        if high is not None:
            per_unit = min(per_unit, high)
        chunks += [list(group[i:i + per_unit]) for i in range(0, len(group), per_unit)]
    return chunks


def read_depfile(path: Path) -> list[str]:
    """The prerequisites listed in a make-style depfile, unescaped as GCC escapes them.

    GCC (and nvcc, which runs it) writes a space in a path as ``\\ ``, doubling
    the backslashes right before it (make's rule: ``2N+1`` backslashes and a
    space are ``N`` backslashes and a space), ``#`` as ``\\#`` and ``$`` as
    ``$$``; a backslash before a line break continues the line.  Other
    backslashes are part of the path.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return []
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    colon = re.search(r":(?:\s|$)", text)
    deps = text[colon.end():] if colon else ""
    return [_DEPFILE_ESCAPE.sub(_unescape, token) for token in re.findall(r"(?:\\.|\$\$|[^\s\\])+|\\", deps)]


_DEPFILE_ESCAPE = re.compile(r"(\\+) |\\#|\$\$")


def _unescape(m: re.Match[str]) -> str:
    """One escape of a depfile path (see :func:`read_depfile`) as the characters it stands for."""
    if m.group(1) is not None:
        return "\\" * ((len(m.group(1)) - 1) // 2) + " "
    return "#" if m.group() == "\\#" else "$"


def _user_dirs(config: BuildConfig) -> tuple[str, ...]:
    """The include directories the user named, in any form (``-I``, ``-isystem`` ...)."""
    dirs = [*config.include_dirs, *(value for opt, value in split_flags(config.extra_cflags)
                                     if opt in ("-isystem", "-idirafter", "-iquote", "-I"))]
    return tuple(os.path.join(os.path.normpath(os.path.abspath(d)), "") for d in dirs if d)


def _tracked(paths: set[str], config: BuildConfig) -> list[str]:
    """``paths`` without the host compiler's own headers (:mod:`.installation`),
    unless the user named their directory."""
    own, user_dirs = own_header_dirs(toolchain.find_host_compiler().path), _user_dirs(config)
    return sorted(p for p in paths if p.startswith(user_dirs) or not p.startswith(own))


def _drop_damaged_outputs(build_dir: Path) -> None:
    """Delete objects and libraries of an earlier build that are not whole ELF
    files, so ninja builds them again instead of linking or publishing them."""
    for out in [*build_dir.glob("*.o"), build_dir / "module.so"]:
        if out.exists():
            try:
                elf.check_elf(out)
            except elf.ElfError:
                out.unlink()


# GNU ld: "shim_0.o: in function `f(float)':" then "...: undefined reference to `g()'"; gold, on one line:
# "shim_0.o:a.cpp:function f(float): error: undefined reference to 'g()'".
_UNDEFINED_RE = re.compile(r"undefined reference to [`']([^\n]*)'")
_IN_FUNCTION_RE = re.compile(r"in function [`']([^\n]*)':|:function (.+?): (?:error: )?undefined reference")
# GNU ld: "multiple definition of `f(float)'; shim_0.o:..."; nvlink: "Multiple definition of '_Z1ff' in 'shim_1.o'";
# gold: "shim_1.o: multiple definition of 'f(float)'" then "shim_0.o: previous definition here".
_DEFINED_TWICE_RE = re.compile(r"[Mm]ultiple definition of [`']([^\n]*?)'")
_PREVIOUS_DEFINITION_RE = re.compile(r"previous definition here")
_UNIT_RE = re.compile(r"\bshim_(\d+)\.(?:o|cpp|cu)\b")


def _undefined_symbols(output: str) -> dict[str, set[str]]:
    """``{symbol: {functions that use it}}`` from the linker's output (already demangled)."""
    found: dict[str, set[str]] = {}
    user = ""
    for line in output.splitlines():
        m = _IN_FUNCTION_RE.search(line)
        if m:
            user = m.group(1) or m.group(2)
        m = _UNDEFINED_RE.search(line)
        if m:
            found.setdefault(m.group(1), set()).update({user} if user else set())
    return found


def _defined_twice(output: str) -> dict[str, set[int]]:
    """``{symbol: {indices of the units defining it}}`` from the host or device linker's output."""
    found: dict[str, set[int]] = {}
    symbol = None
    for line in output.splitlines():
        m = _DEFINED_TWICE_RE.search(line)
        if m:
            symbol = m.group(1)
        elif symbol is None or not _PREVIOUS_DEFINITION_RE.search(line):
            symbol = None
            continue
        found.setdefault(symbol, set()).update(int(i) for i in _UNIT_RE.findall(line))
    return found


def _link_error_message(build_dir: Path, output: str, sources: Sequence[str]) -> str | None:
    """A message naming the user's symbols and files (not the generated units) for the
    link errors a module's sources cause, or ``None`` for any other failure."""
    library = build_dir / "module.so"
    twice = _defined_twice(output)
    if twice:
        parts = [f"{sym} (in {', '.join(sources[i] for i in sorted(units) if i < len(sources)) or 'several units'})"
                 for sym, units in sorted(twice.items())]
        return (
            f"linking {library} failed: defined in more than one source file: {'; '.join(parts)}. "
            "A function or variable with external linkage may be defined once per module: make the copies "
            "`static` or `inline` (or put them in an anonymous namespace), or define it in one file and declare "
            "it in the others"
        )
    missing = _undefined_symbols(output)
    if not missing:
        return None
    parts = [f"{sym} (used by {', '.join(sorted(users))})" if users else sym for sym, users in sorted(missing.items())]
    option = "-L DIR -l NAME" if running_command() is not None else "extra_ldflags=['-L<dir>', '-l<name>']"
    return (
        f"linking {library} failed: undefined symbol(s) {'; '.join(parts)}. "
        "Each is declared but defined nowhere in the module: define it in the source, or link the "
        f"library that defines it with {option}"
    )


def _free_space(path: str) -> str:
    """``"<n> KiB free"`` on the file system holding ``path``, or ``"free space unknown"``."""
    try:
        st = os.statvfs(path)
    except OSError:
        return "free space unknown"
    return f"{st.f_bavail * st.f_frsize // 1024} KiB free"


def _no_space_message(build_dir: Path, output: str) -> str | None:
    """A message naming the directories a compile writes to and the fix when
    the compilers ran out of disk space (``ENOSPC``), or ``None``."""
    if "No space left on device" not in output and "Disk quota exceeded" not in output:
        return None
    tmp = tempfile.gettempdir()
    return (
        f"building {build_dir} failed: the disk is full (No space left on device). The compilers write to "
        f"the build directory {build_dir} ({_free_space(str(build_dir))}) and to the temporary directory "
        f"{tmp} ({_free_space(tmp)}; $TMPDIR sets it). Free space there, run `kernix cache clear`, or point "
        "KERNIX_CACHE_DIR (or TMPDIR) at a disk with room"
    )


_NVCC_UNKNOWN_OPTION_RE = re.compile(r"nvcc fatal\s*:\s*Unknown option '([^'\n]+)'")  # nvcc's words


def _unknown_option_message(build_dir: Path, output: str) -> str | None:
    """For an option nvcc rejected: behind ``-Xcompiler`` if the host compiler takes it, else check it."""
    m = _NVCC_UNKNOWN_OPTION_RE.search(output)
    if m is None:
        return None
    option = m.group(1)
    try:
        host = subprocess.run([toolchain.find_host_compiler().path, option, "-fsyntax-only", "-x", "c++", "-"],
                              input="", capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError, ToolchainError):
        host = False
    fix = (f"an option of the host C++ compiler, which nvcc passes on only behind -Xcompiler: write "
           f"'-Xcompiler={option}'" if host else "check its spelling against `nvcc --help`")
    return (f"building {build_dir} failed: nvcc does not know the option {option!r} (given in extra_cuda_cflags, or "
            f"extra_cflags for build_module): {fix}")


#: The functions of the last generation in a build directory: ``[[[index, spec], ...] per unit]``.
UNITS_RECORD = "units.json"


def generated_files(units: Sequence[tuple[str, Sequence[codegen.ExportedFunction]]],
                    config: BuildConfig) -> dict[str, str]:
    """``{file name: text}`` of every generated unit and the ninja file of a build of ``units``
    (as for :func:`compile_library`)."""
    ext = "cu" if config.platform == "cuda" else "cpp"
    chunks = handler_chunks([fn for _, fns in units for fn in fns])
    files = {f"shim_{i}.{ext}": codegen.shim_unit(os.path.abspath(src), fns) for i, (src, fns) in enumerate(units)}
    for k, chunk in enumerate(chunks):
        files[f"handlers_{k}.cpp"] = codegen.handler_unit(chunk, config.platform, config.allow_cuda_graph)
    files["messages.cpp"] = codegen.messages_unit()
    files["build.ninja"] = _ninja_file(len(units), len(chunks), compile_flags(config), ext)
    return files


def generate(build_dir: Path, units: Sequence[tuple[str, Sequence[codegen.ExportedFunction]]],
             config: BuildConfig) -> list[str]:
    """Write :func:`generated_files` in ``build_dir``, and the functions in :data:`UNITS_RECORD`; the names
    of the objects the build compiles.

    A unit whose text changed loses its object: ninja compares modification
    times, and a unit rewritten within the clock tick of its object's last
    write would look older than the object."""
    build_dir.mkdir(parents=True, exist_ok=True)
    files = generated_files(units, config)
    objects = {file: file.rsplit(".", 1)[0] + ".o" for file in files if file != "build.ninja"}
    for file, text in files.items():
        if _write_if_changed(build_dir / file, text) and file in objects:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(build_dir / objects[file])
    record = [[[fn.index, fn.spec.to_json()] for fn in fns] for _, fns in units]
    _write_if_changed(build_dir / UNITS_RECORD, json.dumps(record))
    return list(objects.values())


def previous_units(build_dir: Path, sources: Sequence[str | os.PathLike[str]]
                   ) -> list[tuple[str, list[codegen.ExportedFunction]]] | None:
    """The functions of the last generation in ``build_dir``, each unit's with
    ``sources`` in place of its own source; ``None`` when there is none (or
    it was for another number of sources, or does not read back)."""
    try:
        record = json.loads((build_dir / UNITS_RECORD).read_bytes())
        units = [[codegen.ExportedFunction(int(i), FunctionSpec.from_json(spec)) for i, spec in fns] for fns in record]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return [(str(s), fns) for s, fns in zip(sources, units)] if len(units) == len(sources) else None


def compile_library(
    build_dir: Path,
    units: Sequence[tuple[str, Sequence[codegen.ExportedFunction]]],
    config: BuildConfig,
    *,
    workers: int | None = None,
    verbose: bool = False,
    name: str | None = None,
    stop: threading.Event | None = None,
    started: Callable[[], None] | None = None,
) -> BuildResult:
    """Generate, compile and link one module in ``build_dir``.

    Parameters
    ----------
    build_dir
        Working directory of the build (created if needed).
    units
        ``(user_source_path, functions)`` per translation unit.
    config
        Flags and platform.
    workers
        Parallel compile jobs (``ninja -j``); default:
        :func:`kernix.backend.jobs.parallel_jobs` (``$KERNIX_JOBS``, else the
        CPUs this process may run on).
    verbose
        Print every command and its output as ninja runs them.
    name
        The module's name, for the progress line and the log (default: the
        build directory's name).
    stop, started
        Once ``stop`` is set, ninja is stopped (and the build fails);
        ``started`` is called once ninja runs.

    Every build logs one INFO line on the ``"kernix"`` logger (the module,
    the units compiled of the module's total, the time taken); a long one
    shows its progress on stderr (:mod:`kernix.backend.progress`).

    Raises
    ------
    CompilationError
        With the compiler's output, which names the user's files and lines.
    """
    what = f"module {name or build_dir.name!r} ({config.platform})"
    progress = BuildProgress(what, progress_style(sys.stderr, verbose=verbose), sys.stderr, echo=verbose)
    jobs = parallel_jobs(workers)
    objects = generate(build_dir, units, config)
    _drop_damaged_outputs(build_dir)

    cmd = [ninja_path(), "-C", str(build_dir), f"-j{jobs}"]
    if verbose:
        cmd.append("-v")
        print("kernix:", shlex.join(cmd), file=sys.stderr, flush=True)
    try:
        returncode, stdout = run_ninja(cmd, progress, stop, started)
        if returncode != 0:
            output = _trim_ninja_output(stdout)
            raise CompilationError(
                _no_space_message(build_dir, output)
                or _unknown_option_message(build_dir, output)
                or _link_error_message(build_dir, output, [str(source) for source, _ in units])
                or f"building {build_dir} failed (ninja exit code {returncode})",
                output=output,
                command=cmd,
            )
        so_path = build_dir / "module.so"
        try:
            elf.check_library(so_path, [codegen.handler_symbol(fn) for _, fns in units for fn in fns])
        except elf.ElfError as exc:
            raise OutputError(f"the build left an unusable library: {exc}") from None
    except BaseException:
        progress.finish(None)
        raise
    summary = f"built {what}: {progress.compiled} of {len(objects)} units compiled in {progress.elapsed():.2f} s"
    progress.finish(summary)  # (first: a log handler writing to stderr then starts on a line of its own)
    logging.getLogger("kernix").info(summary)
    deps: set[str] = {os.path.abspath(s) for s, _ in units}
    for obj in objects:
        deps.update(read_depfile(build_dir / f"{obj}.d"))
    generated = {str(build_dir / name) for name in os.listdir(build_dir)}
    resolved = {os.path.abspath(os.path.join(build_dir, d)) for d in deps} - generated
    return BuildResult(so_path, tuple(_tracked(resolved, config)))


def _trim_ninja_output(text: str) -> str:
    """Drop ninja's own progress lines, keep the compiler's diagnostics."""
    keep = [ln for ln in text.splitlines() if not ln.startswith(("[", "ninja: build stopped"))]
    return "\n".join(keep).strip()
