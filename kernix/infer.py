"""Exact signature inference: C++/CUDA source -> :class:`~kernix.spec.FunctionSpec`.

:func:`infer_file` parses a file with libclang (see :mod:`kernix.clangparse`
for how), finds the ``// @BE`` annotations (:mod:`kernix.annotations`), binds
each to the declaration that follows it, and turns every parameter's
*canonical* type into an arg_spec token:

* const ``BE::Tensor`` (by value or ``const&``) -> ``arg``; non-const
  ``BE::Tensor`` (by value or ``&``) -> ``ret``;
* ``cudaStream_t`` (any name), or a 64-bit signed integer named ``stream``
  -> ``stream``;
* XLA FFI ``AnyBuffer`` / ``Buffer<T, R>`` -> ``arg``, ``Result<...>`` -> ``ret``;
* a named scalar (integers, ``bool``, ``float``, ``double``, enums,
  ``__half``, ``__nv_bfloat16``) -> ``attr.<name>:<dtype>``.

Everything else is an error that names the file, line, function and
parameter and says how to fix it; all errors of a file are collected.
Results are cached on disk (:mod:`kernix.speccache`), so re-inspecting an
unchanged file neither parses it nor imports libclang.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import speccache
from .annotations import Annotation, find_annotations
from .clangparse import (
    ParseOptions,
    clang_fingerprint,
    dependencies,
    error_diagnostics,
    parse,
    parse_flags,
    prelude_text,
    skipped_ranges,
)
from .errors import ArgSpecError, InferenceError, KernixError, SourceError
from .spec import (
    BUFFER_DTYPES,
    FunctionSpec,
    Param,
    check_spec_matches,
    is_identifier,
    normalize_functions,
    parse_arg_spec,
)

__all__ = ["InferResult", "infer_file", "language_of", "LANGUAGES_BY_EXTENSION"]

#: File extension -> language.
LANGUAGES_BY_EXTENSION: dict[str, str] = {
    ".cu": "cuda",
    ".cuh": "cuda",
    ".c": "cpp",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".h": "cpp",
    ".hpp": "cpp",
}

_FIX_TENSOR = "take a `const BE::Tensor&` for an input buffer or `BE::Tensor&` for an output"


@dataclass(frozen=True)
class InferResult:
    """What inference found in one file.

    Attributes
    ----------
    path
        The file parsed (absolute).
    language
        ``"cuda"`` or ``"cpp"``.
    functions
        The inferred functions, in source order.
    errors
        Every problem found, each with file/line/column/function/parameter set
        where known.
    dependencies
        Absolute paths of every other file the parse read (headers).
    """

    path: str
    language: str
    functions: tuple[FunctionSpec, ...]
    errors: tuple[SourceError, ...]
    dependencies: tuple[str, ...]

    def raise_for_errors(self) -> None:
        """Raise :class:`~kernix.errors.InferenceError` holding every error, if any."""
        if self.errors:
            raise InferenceError(list(self.errors))

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form (round-trips through :meth:`from_json`)."""
        return {
            "path": self.path,
            "language": self.language,
            "functions": [f.to_json() for f in self.functions],
            "errors": [_error_to_json(e) for e in self.errors],
            "dependencies": list(self.dependencies),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "InferResult":
        """Rebuild a result from :meth:`to_json` output."""
        return cls(
            path=data["path"],
            language=data["language"],
            functions=tuple(FunctionSpec.from_json(f) for f in data["functions"]),
            errors=tuple(SourceError(e["message"], **{k: e[k] for k in e if k != "message"}) for e in data["errors"]),
            dependencies=tuple(data["dependencies"]),
        )


def _error_to_json(e: SourceError) -> dict[str, Any]:
    return {
        "message": e.message,
        "file": e.file,
        "line": e.line,
        "column": e.column,
        "function": e.function,
        "parameter": e.parameter,
    }


def language_of(path: str) -> str:
    """The language of ``path`` from its extension.

    Raises
    ------
    KernixError
        For an extension that is neither CUDA nor C++.
    """
    ext = os.path.splitext(path)[1].lower()
    try:
        return LANGUAGES_BY_EXTENSION[ext]
    except KeyError:
        raise KernixError(
            f"cannot tell the language of {path!r} from its extension {ext!r}: expected one of "
            f"{', '.join(LANGUAGES_BY_EXTENSION)}; pass language='cuda' or language='cpp'"
        ) from None


def infer_file(
    path: str | os.PathLike[str],
    *,
    language: str | None = None,
    include_dirs: Sequence[str] = (),
    defines: Sequence[str] = (),
    functions: None | Sequence[str] | Mapping[str, Sequence[str]] = None,
    use_cache: bool = True,
) -> InferResult:
    """Infer the specs of the functions a C++/CUDA file exports.

    Parameters
    ----------
    path
        The source file.
    language
        ``"cuda"`` or ``"cpp"``; ``None`` picks it from the extension.
    include_dirs
        Extra include directories (searched before kernix's ``include/``).
    defines
        Macro definitions, ``"NAME"`` or ``"NAME=VALUE"``.
    functions
        ``None``: every ``// @BE``-annotated function.  A list of names: just
        those (no annotation needed).  A dict name -> arg_spec: those, each
        explicit spec checked against the real signature.
    use_cache
        Look up and store the result in the on-disk spec cache.

    Returns
    -------
    InferResult
        The functions inferred and every error found (call
        :meth:`InferResult.raise_for_errors` to turn errors into an exception).

    Raises
    ------
    KernixError
        When the file cannot be read or the arguments are malformed (problems
        *in* the file are reported in the result instead).
    """
    path = os.path.abspath(os.fspath(path))
    if language is None:
        language = language_of(path)
    elif language not in ("cuda", "cpp"):
        raise KernixError(f"language must be 'cuda' or 'cpp', not {language!r}")
    wanted = normalize_functions(functions, parse=False)  # bad specs are reported per function
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise KernixError(f"cannot read {path}: {exc.strerror or exc}") from None
    options = ParseOptions(
        language=language,
        include_dirs=tuple(os.path.abspath(d) for d in include_dirs),
        defines=tuple(str(d) for d in defines),
    )
    key = None
    if use_cache:
        from . import __version__

        key = speccache.make_key(
            [__version__, clang_fingerprint(), path, language, parse_flags(options),
             prelude_text(options),
             None if wanted is None else [[k, None if v is None else list(v)] for k, v in sorted(wanted.items())]],
            source,
        )
        hit = speccache.load(key)
        if hit is not None:
            return InferResult.from_json(hit)
    result, clean = _infer(path, source, options, wanted)
    if key is not None and clean:
        speccache.store(key, result.to_json(), result.dependencies)
    return result


# --------------------------------------------------------------------------- parsing


def _function_cursors(tu: Any, path: str) -> list[Any]:
    """FUNCTION_DECL / FUNCTION_TEMPLATE cursors located in the main file."""
    import clang.cindex as ci

    from .clangparse import in_file

    K = ci.CursorKind
    containers = {K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL}
    wanted = {K.FUNCTION_DECL, K.FUNCTION_TEMPLATE}
    out: list[Any] = []

    def visit(parent: Any) -> None:
        for c in parent.get_children():
            kind = c.kind
            if kind in wanted or kind in containers:
                if not in_file(c, path):
                    continue
                if kind in wanted:
                    out.append(c)
                else:
                    visit(c)

    visit(tu.cursor)
    return out


def _qualified_name(cursor: Any) -> str:
    import clang.cindex as ci

    parts = [cursor.spelling]
    parent = cursor.semantic_parent
    while parent is not None and parent.kind != ci.CursorKind.TRANSLATION_UNIT:
        if parent.kind == ci.CursorKind.NAMESPACE:
            if parent.spelling and "anonymous" not in parent.spelling:
                parts.append(parent.spelling)
        elif parent.kind != ci.CursorKind.LINKAGE_SPEC:
            parts.append(parent.spelling)
        parent = parent.semantic_parent
    return "::".join(reversed(parts))


_BETWEEN_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _bind_annotations(raw: bytes, annotations: list[Annotation], cursors: list[Any]) -> dict[int, Any]:
    """Bind each annotation to the function declaration that follows it.

    An annotation binds to the first function whose declaration (its extent:
    ``template``, specifiers, or the macro call that generates it) starts
    after the annotation, when only comments, whitespace and specifiers lie in
    between -- no ``;``, braces or preprocessor lines, the rule clang itself
    uses to attach comments.  (``cursor.raw_comment`` alone is not enough: a
    comment between the return type and the name takes the annotation's place.)
    Returns annotation line -> cursor.
    """
    import bisect

    line_starts = [0]
    for i, b in enumerate(raw):
        if b == 10:
            line_starts.append(i + 1)

    def offset(line: int, col: int) -> int:
        return line_starts[min(line, len(line_starts)) - 1] + col - 1

    starts = []
    for c in cursors:
        st = c.extent.start
        starts.append((offset(st.line, st.column), c.location.line, c))
    starts.sort(key=lambda t: (t[0], t[1]))
    keys = [t[0] for t in starts]
    bound: dict[int, Any] = {}
    for a in annotations:
        end_line = a.end_line
        after = line_starts[end_line] if end_line < len(line_starts) else len(raw)
        i = bisect.bisect_left(keys, after)
        if i == len(starts):
            continue
        between = _BETWEEN_COMMENTS.sub(b" ", raw[after:starts[i][0]])
        if any(ch in between for ch in b";{}#"):
            continue
        bound[a.line] = starts[i][2]
    return bound


def _infer(
    path: str, raw: bytes, options: ParseOptions, wanted: dict[str, tuple[str, ...] | None] | None
) -> tuple[InferResult, bool]:
    """Parse and infer; returns the result and whether clang reported no error."""
    text = raw.decode("utf-8", errors="replace")
    tu = parse(path, options)
    errors: list[SourceError] = error_diagnostics(tu, options)
    clean = not errors
    # Lines of the user's file with a clang error: a function whose declaration
    # covers one is not inferred (clang may have typed a broken parameter as int).
    bad_lines = [e.line for e in errors if e.file == path and e.line]

    cursors = _function_cursors(tu, path)
    annotations = find_annotations(text)

    bound = _bind_annotations(raw, annotations, cursors) if annotations else {}

    unbound = [a for a in annotations if a.line not in bound]
    if unbound:
        detailed = parse(path, options, detailed=True)
        skipped = skipped_ranges(detailed, path)
        unbound = [a for a in unbound if not any(lo <= a.line <= hi for lo, hi in skipped)]
        active = {a.line for a in unbound} | set(bound)
        annotations = [a for a in annotations if a.line in active]

    targets: list[tuple[str, Any, Annotation | None, tuple[str, ...] | None]] = []
    if wanted is None:
        targets, errs = _annotated_targets(path, annotations, bound, cursors)
        errors += errs
    else:
        targets, errs = _requested_targets(path, wanted, annotations, bound, cursors)
        errors += errs

    specs: list[FunctionSpec] = []
    for name, cursor, ann, explicit in targets:
        start, end = cursor.extent.start.line, cursor.extent.end.line
        if any(start <= ln <= end for ln in bad_lines):
            for e in errors:  # already reported by clang: name the function
                if e.file == path and start <= e.line <= end and e.function is None:
                    e.function = name
            continue
        spec, errs = _function_spec(cursor, path)
        errors += errs
        if spec is None:
            continue
        ok = True
        for tokens, source in ((ann.tokens if ann else (), "annotation"), (explicit or (), "explicit")):
            if not tokens:
                continue
            try:
                check_spec_matches(list(tokens), spec, source=source)
            except SourceError as exc:
                errors.append(exc)
                ok = False
            except ArgSpecError as exc:
                where_line = ann.line if (source == "annotation" and ann) else spec.line
                errors.append(SourceError(str(exc), file=path, line=where_line, function=name))
                ok = False
        if ok:
            specs.append(spec)

    specs.sort(key=lambda s: s.line)
    errors.sort(key=lambda e: (e.file != path, e.line, e.column))
    result = InferResult(
        path=path,
        language=options.language,
        functions=tuple(specs),
        errors=tuple(errors),
        dependencies=tuple(dependencies(tu, path)),
    )
    return result, clean


def _annotated_targets(
    path: str, annotations: list[Annotation], bound: dict[int, Any], cursors: list[Any]
) -> tuple[list[tuple[str, Any, Annotation | None, None]], list[SourceError]]:
    import clang.cindex as ci

    errors: list[SourceError] = []
    targets: list[tuple[str, Any, Annotation | None, None]] = []
    seen: dict[str, tuple[Annotation, Any]] = {}
    by_name: dict[str, list[Any]] = {}
    for c in cursors:
        by_name.setdefault(c.spelling, []).append(c)
    for a in annotations:
        where = dict(file=path, line=a.line, column=a.column)
        if not a.name:
            errors.append(SourceError(
                "`// @BE` names no function: write `// @BE <function_name>` right before the function", **where))
            continue
        if not is_identifier(a.name):
            errors.append(SourceError(
                f"`// @BE {a.name}`: {a.name!r} is not a valid function name", function=a.name, **where))
            continue
        cursor = bound.get(a.line)
        if cursor is None:
            hint = ""
            if a.name in by_name:
                hint = f" (function {a.name!r} is declared at line {by_name[a.name][0].location.line})"
            errors.append(SourceError(
                f"annotation `{a.text}` is bound to nothing: no function declaration follows it{hint}. "
                "Put it on the line right before the function it exports, with only comments in between",
                function=a.name, **where))
            continue
        if cursor.spelling != a.name:
            errors.append(SourceError(
                f"annotation `{a.text}` is bound to function {cursor.spelling!r} (line {cursor.location.line}), "
                f"which has another name. Rename the annotation to `// @BE {cursor.spelling}` or move it "
                f"right before {a.name!r}",
                function=a.name, **where))
            continue
        if cursor.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            errors.append(SourceError(
                f"function {a.name!r} is a template: function templates are not supported yet. "
                "Annotate a plain (non-template) function that calls the instantiation you want",
                file=path, line=cursor.location.line, column=cursor.location.column, function=a.name))
            continue
        if a.name in seen:
            prev_ann, prev_cursor = seen[a.name]
            if prev_cursor.canonical == cursor.canonical:
                continue  # prototype and definition both annotated: one function
            errors.append(SourceError(
                f"one name annotated twice: `// @BE {a.name}` here and at line {prev_ann.line}. "
                "Each exported name must be unique; give one of them another name",
                function=a.name, **where))
            continue
        seen[a.name] = (a, cursor)
        targets.append((a.name, cursor, a, None))
    return targets, errors


def _requested_targets(
    path: str,
    wanted: dict[str, tuple[str, ...] | None],
    annotations: list[Annotation],
    bound: dict[int, Any],
    cursors: list[Any],
) -> tuple[list[tuple[str, Any, Annotation | None, tuple[str, ...] | None]], list[SourceError]]:
    import clang.cindex as ci

    errors: list[SourceError] = []
    targets: list[tuple[str, Any, Annotation | None, tuple[str, ...] | None]] = []
    annotated = {a.name: (a, bound[a.line]) for a in annotations if a.line in bound and bound[a.line].spelling == a.name}
    by_name: dict[str, list[Any]] = {}
    for c in cursors:
        by_name.setdefault(c.spelling, []).append(c)
    for name, explicit in wanted.items():
        if name in annotated:
            a, cursor = annotated[name]
        else:
            a = None
            cands = by_name.get(name, [])
            if not cands:
                available = ", ".join(sorted(by_name)) or "none"
                errors.append(SourceError(
                    f"no function named {name!r} in this file; the functions it declares are: {available}",
                    file=path, function=name))
                continue
            distinct: dict[int, Any] = {}
            for c in cands:
                distinct.setdefault(c.canonical.hash, c)
            if len(distinct) > 1:
                lines = ", ".join(str(c.location.line) for c in distinct.values())
                errors.append(SourceError(
                    f"{name!r} is overloaded (declarations at lines {lines}): mark the one to export "
                    f"with `// @BE {name}` on the line before it",
                    file=path, line=cands[0].location.line, function=name))
                continue
            defs = [c for c in cands if c.is_definition()]
            cursor = defs[0] if defs else cands[-1]  # bodies are skipped: the last is the definition
        if cursor.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            errors.append(SourceError(
                f"function {name!r} is a template: function templates are not supported yet. "
                "Export a plain (non-template) function that calls the instantiation you want",
                file=path, line=cursor.location.line, column=cursor.location.column, function=name))
            continue
        if explicit is not None:
            try:
                parse_arg_spec(list(explicit), function=name)
            except ArgSpecError as exc:
                errors.append(SourceError(str(exc), file=path, line=cursor.location.line, function=name))
                continue
        targets.append((name, cursor, a, explicit))
    return targets, errors


# --------------------------------------------------------------------------- types

_CV = re.compile(r"^(?:(?:const|volatile)\s+)+|\s+(?:const|volatile)$")
_ANON = re.compile(r"\(anonymous namespace\)::")
_BUFFER = re.compile(r"^xla::ffi::Buffer<xla::ffi::DataType::(\w+)(?:,\s*(-?\d+))?>$")
_REV_BUFFER = {v: k for k, v in BUFFER_DTYPES.items()}

# Builtin canonical spelling -> dtype (LP64: long is 64-bit; checked by size below).
_INT_DTYPES = {
    ("signed", 1): "int8", ("signed", 2): "int16", ("signed", 4): "int32", ("signed", 8): "int64",
    ("unsigned", 1): "uint8", ("unsigned", 2): "uint16", ("unsigned", 4): "uint32", ("unsigned", 8): "uint64",
}
_SIGNED_KINDS = {"CHAR_S", "SCHAR", "SHORT", "INT", "LONG", "LONGLONG"}
_UNSIGNED_KINDS = {"CHAR_U", "UCHAR", "USHORT", "UINT", "ULONG", "ULONGLONG"}
_ARRAY_KINDS = {"CONSTANTARRAY", "INCOMPLETEARRAY", "VARIABLEARRAY", "DEPENDENTSIZEDARRAY"}
_UNSUPPORTED_SCALARS = {
    "LONGDOUBLE": "`long double` has no XLA attribute type; use `double`",
    "FLOAT128": "`__float128` has no XLA attribute type; use `double`",
    "INT128": "128-bit integers have no XLA attribute type; use `int64_t`",
    "UINT128": "128-bit integers have no XLA attribute type; use `uint64_t`",
    "HALF": "`_Float16`/`__fp16` attributes are not supported; use `__half` (from cuda_fp16.h) or `float`",
    "FLOAT16": "`_Float16` attributes are not supported; use `__half` (from cuda_fp16.h) or `float`",
    "WCHAR": "wide characters have no XLA attribute type; use an integer type",
    "CHAR16": "`char16_t` has no XLA attribute type; use `uint16_t`",
    "CHAR32": "`char32_t` has no XLA attribute type; use `uint32_t`",
    "CHAR8": "`char8_t` has no XLA attribute type; use `uint8_t`",
}


def _bare(spelling: str) -> str:
    return _ANON.sub("", _CV.sub("", spelling.strip()))


def _integer_dtype(t: Any) -> str | None:
    kind = t.kind.name
    size = t.get_size()
    if kind == "BOOL":
        return "bool"
    if kind in _SIGNED_KINDS:
        return _INT_DTYPES.get(("signed", size))
    if kind in _UNSIGNED_KINDS:
        return _INT_DTYPES.get(("unsigned", size))
    return None


class _Reject(Exception):
    """A parameter kernix cannot pass; the message says why and how to fix it."""


def _classify(p: Any, index: int, fname: str) -> Param:
    """Turn one parameter cursor into a :class:`Param` (or raise :class:`_Reject`)."""
    t = p.type
    written = " ".join(t.spelling.split())
    pname = p.spelling
    label = f"parameter {pname!r}" if pname else f"parameter {index + 1} (unnamed)"
    where = f"{label} of {fname!r} is `{written}`"
    if t.kind.name in _ARRAY_KINDS or "[" in written:
        raise _Reject(f"{where}: arrays cannot cross the FFI boundary; {_FIX_TENSOR}")
    c = t.get_canonical()
    ref = None
    if c.kind.name in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
        ref = "&" if c.kind.name == "LVALUEREFERENCE" else "&&"
        c = c.get_pointee().get_canonical()
    is_const = c.is_const_qualified()
    bare = _bare(c.spelling)
    synth = pname or f"_p{index}"

    if c.kind.name == "POINTER":
        pointee = _bare(c.get_pointee().get_canonical().spelling)
        if pointee in ("CUstream_st", "struct CUstream_st") and ref is None:
            return Param(synth, "stream", written, "CUstream_st *", "stream")
        if pointee == "BE::Tensor":
            raise _Reject(f"{where}: a tensor cannot be passed by pointer; {_FIX_TENSOR}")
        raise _Reject(f"{where}: pointers cannot cross the FFI boundary; {_FIX_TENSOR}")
    if c.kind.name in _ARRAY_KINDS:
        raise _Reject(f"{where}: arrays cannot cross the FFI boundary; {_FIX_TENSOR}")
    if c.is_volatile_qualified():
        raise _Reject(f"{where}: volatile parameters are not supported; drop `volatile`")

    if bare == "BE::Tensor":
        if ref == "&&":
            raise _Reject(f"{where}: rvalue references are not supported; {_FIX_TENSOR}")
        return Param(synth, "arg" if is_const else "ret", written, "BE::Tensor", "tensor")

    if bare.startswith("xla::ffi::"):
        if ref == "&&":
            raise _Reject(f"{where}: rvalue references are not supported; take the FFI type by value")
        return _ffi_param(synth, written, bare, where)

    if ref == "&&":
        raise _Reject(f"{where}: rvalue references are not supported; take the scalar by value")
    if ref == "&" and not is_const:
        raise _Reject(
            f"{where}: a non-const reference would be an output, and outputs must be tensors; "
            "take the scalar by value (or `const&`), or write results to a `BE::Tensor&`"
        )

    kind = c.kind.name
    if kind in ("LONG", "LONGLONG") and c.get_size() == 8 and pname == "stream":
        return Param("stream", "stream", written, bare, "stream")

    dtype: str | None
    if kind == "ENUM":
        decl = c.get_declaration()
        if not decl.spelling or "unnamed" in bare or "anonymous" in bare:
            raise _Reject(f"{where}: an unnamed enum cannot be named in generated code; give the enum a name")
        dtype = _integer_dtype(decl.enum_type.get_canonical())
        if dtype is None or dtype == "bool":
            raise _Reject(f"{where}: the enum's underlying type has no XLA attribute type")
    elif kind in ("FLOAT", "DOUBLE"):
        dtype = "float32" if kind == "FLOAT" else "float64"
    elif kind in _UNSUPPORTED_SCALARS:
        raise _Reject(f"{where}: {_UNSUPPORTED_SCALARS[kind]}")
    elif bare in ("__half", "__nv_bfloat16"):
        dtype = "float16" if bare == "__half" else "bfloat16"
    else:
        dtype = _integer_dtype(c)
        if dtype is None:
            what = "a struct or class" if kind == "RECORD" else f"type `{bare}`"
            raise _Reject(
                f"{where}: {what} cannot cross the FFI boundary. Inputs and outputs are "
                f"`BE::Tensor`s; attributes are scalars (integers, bool, float, double, enums, "
                f"__half, __nv_bfloat16)"
            )
    if not pname:
        raise _Reject(
            f"{where}: a scalar attribute needs a name; give the parameter a name: it becomes attr.<name>"
        )
    return Param(pname, "attr", written, bare, "scalar", dtype)


def _ffi_buffer(bare: str) -> tuple[str, str | None, int | None] | None:
    if bare == "xla::ffi::AnyBuffer":
        return bare, None, None
    m = _BUFFER.match(bare)
    if m is None:
        return None
    code, rank_text = m.groups()
    rank = int(rank_text) if rank_text is not None else None
    if rank is not None and rank < 0:
        rank = None
    norm = f"xla::ffi::Buffer<xla::ffi::DataType::{code}" + (f", {rank}>" if rank is not None else ">")
    return norm, _REV_BUFFER.get(code), rank


def _ffi_param(name: str, written: str, bare: str, where: str) -> Param:
    buf = _ffi_buffer(bare)
    if buf is not None:
        norm, dtype, rank = buf
        return Param(name, "arg", written, norm, "ffi", dtype, rank)
    if bare.startswith("xla::ffi::Result<") and bare.endswith(">"):
        inner = _ffi_buffer(_bare(bare[len("xla::ffi::Result<"):-1]))
        if inner is not None:
            norm, dtype, rank = inner
            return Param(name, "ret", written, f"xla::ffi::Result<{norm}>", "ffi", dtype, rank)
    raise _Reject(
        f"{where}: this XLA FFI type is not supported; use `xla::ffi::AnyBuffer` or "
        "`xla::ffi::Buffer<T, R>` for inputs and `xla::ffi::Result<...>` / `ResultBuffer<T, R>` for outputs"
    )


def _function_spec(cursor: Any, path: str) -> tuple[FunctionSpec | None, list[SourceError]]:
    """The spec of one function cursor, or ``None`` and the errors that prevent it."""
    name = cursor.spelling
    loc = cursor.location
    fline = loc.line
    errors: list[SourceError] = []
    if cursor.type.kind.name == "FUNCTIONPROTO" and cursor.type.is_function_variadic():
        errors.append(SourceError(
            f"function {name!r} is variadic (`...`): a variadic function cannot be called through "
            "the FFI; list every parameter explicitly", file=path, line=fline, column=loc.column, function=name))
    params: list[Param] = []
    for i, p in enumerate(cursor.get_arguments()):
        try:
            params.append(_classify(p, i, name))
        except _Reject as exc:
            ploc = p.location
            line = ploc.line if ploc.file is not None else fline
            col = ploc.column if ploc.file is not None else loc.column
            errors.append(SourceError(str(exc), file=path, line=line, column=col, function=name,
                                      parameter=p.spelling or f"#{i + 1}"))
    if errors:
        return None, errors
    streams = [p for p in params if p.role == "stream"]
    if len(streams) > 1:
        errors.append(SourceError(
            f"function {name!r} takes more than one stream ({', '.join(repr(p.name) for p in streams)}); "
            "take a single `cudaStream_t` (or `int64_t stream`)",
            file=path, line=fline, column=loc.column, function=name, parameter=streams[1].name))
    if not any(p.role == "ret" for p in params):
        errors.append(SourceError(
            f"function {name!r} has no output tensor: every exported function must write at least one "
            "output. Add a non-const `BE::Tensor& out` parameter (inputs are `const BE::Tensor&`)",
            file=path, line=fline, column=loc.column, function=name))
    if errors:
        return None, errors
    spec = FunctionSpec(name=name, qualified_name=_qualified_name(cursor), params=tuple(params), file=path, line=fline)
    return spec, errors
