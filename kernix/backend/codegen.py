"""Generate the C++ that connects XLA to the user's functions: per user
source file a *shim unit* (:func:`shim_unit`, compiled by the user's
compiler) calling each function with its exact C++ types, and *handler
units* (:func:`handler_unit`, compiled by the host compiler from the specs
alone) holding one XLA FFI handler per function; what each does, and why
the code is cut this way: "The build design" in docs/how-it-works.rst.  The
text of every failed check is built once per module, by :func:`messages_unit`.

Every parameter crosses from handler to shim as one ``void*`` in an array: a
``kernix::TensorView*`` (a tensor, in place or not, or scratch), a pointer to
the decoded FFI buffer/result, a pointer to the attribute value, a
``kernix::ArrayView*`` (an array or string attribute), the state object
itself, a ``kernix::ThreadPoolView*``, or a pointer to the stream handle.

Only the shim names ``BE::Tensor``, and it names the one the user's code sees
(``BE`` is kernix's C++ namespace under brainevent's name, ``namespace BE =
kernix;``, or a project's own namespace of that name):
kernix's own (``kernix/common.h``, ``brainevent/common.h``) or a project's own
``brainevent/tensor.h`` found first on its include path.  The shim builds it
from the view through that type's public constructor
(``kernix::detail::tensor_from``), so the two never meet in one translation
unit and cannot collide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from ..language.dtypes import ARRAY_ATTR_DTYPES, ATTR_DTYPES, DTYPES
from ..errors import KernixError
from ..platforms import Platform
from ..paths import include_dir
from ..language.spec import FunctionSpec, Param

__all__ = [
    "ExportedFunction",
    "shim_symbol",
    "handler_symbol",
    "shim_unit",
    "include_line",
    "handler_unit",
    "messages_unit",
    "ffi_handler_unit",
    "has_fast_handler",
]

@dataclass(frozen=True)
class ExportedFunction:
    """A function to export (``spec``) and its ``index`` in the module, which
    makes every generated symbol unique, so ``f`` and ``f_impl`` never collide."""

    index: int
    spec: FunctionSpec


def _symbol(kind: str, fn: ExportedFunction) -> str:
    """The symbol of ``fn``'s ``kind`` (``shim``, ``handler``, ``instantiate``, ``state_new``...): the state's are
    the handler's with ``handler`` replaced, as :mod:`kernix.runtime.registry` looks them up."""
    return f"kernix_{kind}_{fn.index}_{re.sub(r'[^0-9A-Za-z_]', '_', fn.spec.name)}"


def shim_symbol(fn: ExportedFunction) -> str:
    """Name of the (hidden) shim of ``fn``."""
    return _symbol("shim", fn)


def handler_symbol(fn: ExportedFunction) -> str:
    """Name of the exported XLA FFI handler of ``fn``."""
    return _symbol("handler", fn)


def _cxx_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def include_line(path: str) -> str:
    """The ``#include`` directive naming the file ``path`` (absolute) exactly.

    A header name is not a string literal: its characters are taken as they
    are (a backslash is no escape), so ``"`` can only be spelled in the
    ``<...>`` form and ``>`` only in the ``"..."`` form (an absolute path is
    found the same way by both).

    Raises
    ------
    KernixError
        When no ``#include`` can name ``path``: it holds a line break, or both
        ``"`` and ``>``.
    """
    if "\n" not in path and "\r" not in path:
        if '"' not in path:
            return f'#include "{path}"'
        if ">" not in path:
            return f"#include <{path}>"
    raise KernixError(
        f"cannot compile {path!r}: a C++ #include cannot name a path that holds a line break, or both "
        "'\"' and '>'. Rename the file (or a directory above it), or move it to a directory whose path has neither"
    )


def _local(slot: int) -> str:
    return f"kernix_t{slot}"


def _type(param: Param) -> str:
    return "::" + param.canonical_type


def _tensor_type(param: Param) -> str:
    """The tensor type the shim builds for ``param``: ``::BE::TensorOf<T>``
    for a parameter of that type (its constructor checks the dtype), the
    in-place types (``BE::InOut``, ``BE::InOutOf<T>``) for theirs, else
    ``::BE::Tensor``."""
    if param.canonical_type.startswith(("BE::TensorOf<", "BE::InOutOf<")) or param.canonical_type == "BE::InOut":
        return _type(param)
    return "::BE::Tensor"


def _built_in_argument(fn: ExportedFunction, param: Param) -> bool:
    """Whether the shim builds ``param``, a tensor taken by value, in the argument itself rather than in a local
    copied into it: when it calls through the exact function type, so no overload resolution sees the temporary."""
    return param.kind == "tensor" and "&" not in param.type and bool(fn.spec.function_type)


def _tensor_from(param: Param, slot: int) -> str:
    """The tensor ``param``'s shim builds from slot ``slot`` (named, for messages)."""
    return f"::kernix::detail::tensor_from<{_tensor_type(param)}>(p[{slot}], {_cxx_string(param.name)})"


def _shim_argument(fn: ExportedFunction, param: Param, slot: int) -> str:
    """The C++ expression passing slot ``slot`` of the array to ``param``."""
    p = f"p[{slot}]"
    if _built_in_argument(fn, param):
        return _tensor_from(param, slot)
    if param.kind == "tensor":
        # An input declared const is passed as const, so overloads on
        # constness resolve as the signature says; a non-const input (an
        # explicit "arg" for a by-value BE::Tensor) is passed as is.
        if param.role == "arg" and re.search(r"\bconst\b", param.type):
            return f"static_cast<const {_tensor_type(param)}&>({_local(slot)})"
        return _local(slot)
    if param.kind == "ffi":
        return f"*static_cast<{param.canonical_type}*>({p})"
    if param.kind in ("array", "string"):
        return f"::kernix::detail::array_from<{_type(param)}>({p})"
    if param.kind in ("scratch", "state", "threads"):
        return _local(slot)
    target = re.sub(r"^const\s+|\s+const$", "", param.canonical_type.strip())  # the type without its const
    if param.kind == "stream":
        return f"reinterpret_cast<{target}>(*static_cast<void* const*>({p}))"
    assert param.dtype is not None
    ctype = ATTR_DTYPES[param.dtype][0]
    if param.dtype in ("float16", "bfloat16"):
        # The 16 bits as they came: a __half / __nv_bfloat16 parameter gets the
        # value, a uint16_t parameter the raw bits (brainevent's convention).
        return f"::kernix::detail::from_bits<{target}>(*static_cast<const uint16_t*>({p}))"
    return f"static_cast<{target}>(*static_cast<const {ctype}*>({p}))"


def _shim_locals(fn: ExportedFunction) -> list[str]:
    """The user's ``BE::Tensor`` built from each tensor slot's view (named, for
    messages), and the scratch, state and thread pool objects."""
    lines = []
    for i, param in enumerate(fn.spec.params):
        local, p = f"  {_type(param)} {_local(i)}", f"p[{i}]"
        if param.kind == "tensor" and not _built_in_argument(fn, param):
            lines.append(f"  {_tensor_type(param)} {_local(i)} = {_tensor_from(param, i)};")
        elif param.kind == "scratch":
            lines.append(f"{local}(*static_cast<const ::kernix::TensorView*>({p}), {_cxx_string(param.name)});")
        elif param.kind == "state":
            lines.append(f"{local} = ::kernix::detail::state_from<{_type(param)}>({p});")
        elif param.kind == "threads":
            lines.append(f"{local}(*static_cast<const ::kernix::ThreadPoolView*>({p}));")
    return lines


def shim_unit(user_source: str, functions: Sequence[ExportedFunction]) -> str:
    """The shim translation unit for one user source file.

    Parameters
    ----------
    user_source
        Absolute path of the user's file; it is ``#include``\\ d first, so every
        diagnostic in it names that file.
    functions
        The functions defined in (or reachable from) that file.
    """
    lines = [
        "// Generated by kernix: calls the exported functions with their exact types.",
        include_line(user_source),
        # By absolute path: a user's header of the same name cannot shadow it.
        include_line(str(include_dir() / "kernix" / "detail" / "shim.h")),
        "",
    ]
    for fn in functions:
        args = ",\n    ".join(_shim_argument(fn, p, i) for i, p in enumerate(fn.spec.params))
        callee = "::" + fn.spec.qualified_name.lstrip(":")
        if fn.spec.function_type:
            callee = f"::kernix::detail::opaque<{fn.spec.function_type}>(&{callee})"
        call = f"{callee}({args})"
        if fn.spec.returns_error:
            # A failure it returns is thrown for the handler to report (shim.h).
            call = f"::kernix::detail::check_returned({call})"
        if fn.spec.has("state"):
            lines += _state_shims(fn)
        lines += [
            f"KERNIX_SHIM_EXPORT void {shim_symbol(fn)}(void* const* p) {{",
            "  (void)p;",
            *_shim_locals(fn),
            f"  {call};",
            "}",
            "",
        ]
    return "\n".join(lines)


class _HandlerPart(NamedTuple):
    """One parameter's share of an ffi.h handler."""

    decl: list[str]  # the impl's parameters
    bind: list[str]  # the binding chain
    prep: list[str]  # statements filling the slot
    slot: str  # the void* of the shim's array
    alias: tuple[str, ...] = ()  # a type alias keeping template commas out of the handler macro's arguments


def _handler_part(fn: ExportedFunction, param: Param, i: int, platform: Platform) -> _HandlerPart:
    """The handler's part for parameter ``i`` of ``fn``."""
    name = _cxx_string(param.name)
    view = f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view(*b{i});"
    if param.role == "inout":
        check = (f"  if (ffi::Error e = ::kernix::detail::check_aliased(b{i}in, *b{i}, {_cxx_string(fn.spec.name)}, "
                 f"{name}); e.failure()) return e;")
        return _HandlerPart(
            [f"ffi::AnyBuffer b{i}in", f"ffi::Result<ffi::AnyBuffer> b{i}"],
            [".Arg<ffi::AnyBuffer>()", ".Ret<ffi::AnyBuffer>()"], [check, view], f"&t{i}",
        )
    if param.kind == "tensor" and param.role == "arg":
        return _HandlerPart([f"ffi::AnyBuffer b{i}"], [".Arg<ffi::AnyBuffer>()"],
                            [f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view(b{i});"], f"&t{i}")
    if param.kind in ("tensor", "scratch"):  # a result
        return _HandlerPart([f"ffi::Result<ffi::AnyBuffer> b{i}"], [".Ret<ffi::AnyBuffer>()"], [view], f"&t{i}")
    if param.kind == "ffi":
        alias = f"kernix_type_{fn.index}_{i}"
        decl, method = (alias, "Arg") if param.role == "arg" else (f"ffi::Result<{alias}>", "Ret")
        return _HandlerPart([f"{decl} b{i}"], [f".{method}<{alias}>()"], [], f"&b{i}",
                            (f"using {alias} = {_bound_type(param)};",))
    if param.kind == "stream" and platform == "cuda":
        return _HandlerPart([f"cudaStream_t s{i}"], [".Ctx<ffi::PlatformStream<cudaStream_t>>()"],
                            [f"  void* v{i} = static_cast<void*>(s{i});"], f"&v{i}")
    if param.kind == "stream":
        return _HandlerPart([], [], [f"  void* v{i} = nullptr;  // C++ functions run on the host: no stream"], f"&v{i}")
    if param.kind == "array":
        assert param.dtype is not None
        span = f"ffi::Span<const {ARRAY_ATTR_DTYPES[param.dtype]}>"
        return _HandlerPart(
            [f"{span} a{i}"], [f".Attr<{span}>({name})"],
            [f"  ::kernix::ArrayView v{i}{{a{i}.begin(), static_cast<int64_t>(a{i}.size())}};"], f"&v{i}",
        )
    if param.kind == "string":
        return _HandlerPart(
            [f"std::string_view a{i}"], [f".Attr<std::string_view>({name})"],
            [f"  ::kernix::ArrayView v{i}{{a{i}.data(), static_cast<int64_t>(a{i}.size())}};"], f"&v{i}",
        )
    if param.kind == "state":
        return _HandlerPart(
            [f"::kernix::detail::StateBox* st{i}"], [".Ctx<ffi::State<::kernix::detail::StateBox>>()"],
            [f"  void* v{i} = st{i}->object;"], f"v{i}",
        )
    if param.kind == "threads" and platform == "cpu":
        return _HandlerPart(
            [f"ffi::ThreadPool tp{i}"], [".Ctx<ffi::ThreadPool>()"],
            [f"  ::kernix::ThreadPoolView v{i} = ::kernix::detail::pool_view(tp{i});"], f"&v{i}",
        )
    if param.kind == "threads":  # CUDA functions run on the host thread that launches them: a pool of no threads.
        return _HandlerPart([], [], [f"  ::kernix::ThreadPoolView v{i}{{nullptr, 0, nullptr}};"], f"&v{i}")
    assert param.dtype is not None
    scalar = f"::kernix::detail::ScalarAttr<{ATTR_DTYPES[param.dtype][0]}>"
    return _HandlerPart([f"{scalar} a{i}"], [f".Attr<{scalar}>({name})"], [], f"&a{i}.value")


def _state_shims(fn: ExportedFunction) -> list[str]:
    """The shim unit's functions making and deleting the state of ``fn`` (which has one)."""
    new, delete = _symbol("state_new", fn), _symbol("state_delete", fn)
    state = _type(next(p for p in fn.spec.params if p.role == "state"))
    return [
        f"KERNIX_SHIM_EXPORT void* {new}() {{ return ::kernix::detail::new_state<{state}>(); }}",
        f"KERNIX_SHIM_EXPORT void {delete}(void* p) noexcept {{ ::kernix::detail::delete_state<{state}>(p); }}",
        "",
    ]


def _state_handlers(fn: ExportedFunction) -> list[str]:
    """The handler unit's instantiate handler of ``fn`` and its state type's accessor."""
    new, delete = _symbol("state_new", fn), _symbol("state_delete", fn)
    return [
        f'extern "C" void* {new}();',
        f'extern "C" void {delete}(void*) noexcept;',
        f"KERNIX_HANDLER_EXPORT XLA_FFI_Error* {_symbol('instantiate', fn)}(XLA_FFI_CallFrame* f) {{",
        f"  return ::kernix::detail::instantiate(f, &{new}, &{delete}, {_cxx_string(fn.spec.name)});",
        "}",
        f"KERNIX_HANDLER_EXPORT void* {_symbol('statetype', fn)}(int which) {{",
        "  return ::kernix::detail::state_type(which);",
        "}",
        "",
    ]


def _shim_declaration(fn: ExportedFunction) -> str:
    """The shim as a handler unit sees it (it may throw: ``run_shim`` catches)."""
    return f"extern \"C\" void {shim_symbol(fn)}(void* const*);"


def _bound_type(param: Param) -> str:
    """The type a buffer parameter is bound as (``Result<T>`` binds as ``.Ret<T>``)."""
    if param.kind == "tensor":
        return "ffi::AnyBuffer"
    m = re.fullmatch(r"\s*(?:::)?xla::ffi::Result<(.*)>\s*", param.canonical_type)
    return m.group(1) if (m and param.role == "ret") else param.canonical_type


def _handler(fn: ExportedFunction, platform: Platform, allow_cuda_graph: bool) -> list[str]:
    parts = [_handler_part(fn, param, i, platform) for i, param in enumerate(fn.spec.params)]
    impl = f"kernix_impl_{fn.index}"
    array = ", ".join(f"static_cast<void*>({part.slot})" for part in parts) or "nullptr"
    traits = ", {ffi::Traits::kCmdBufferCompatible}" if _graph_ok(fn.spec, platform, allow_cuda_graph) else ""
    chain = "".join(f"\n        {b}" for part in parts for b in part.bind)
    return [
        *(alias for part in parts for alias in part.alias),
        _shim_declaration(fn),
        f"static ffi::Error {impl}({', '.join(d for part in parts for d in part.decl)}) {{",
        *(line for part in parts for line in part.prep),
        f"  void* const params[] = {{{array}}};",
        f"  return ::kernix::detail::call_shim(&{shim_symbol(fn)}, params, {_cxx_string(fn.spec.name)});",
        "}",
        f"KERNIX_HANDLER_EXPORT XLA_FFI_Error* {handler_symbol(fn)}(XLA_FFI_CallFrame*);",
        f"XLA_FFI_DEFINE_HANDLER_SYMBOL({handler_symbol(fn)}, {impl},",
        f"    ffi::Ffi::Bind(){chain}{traits});",
        "",
    ]


def ffi_handler_unit(functions: Sequence[ExportedFunction], platform: Platform, allow_cuda_graph: bool) -> str:
    """A handler unit built on XLA's C++ ``ffi.h`` bindings (handles every function)."""
    head = ["// Generated by kernix: one typed XLA FFI handler per exported function.",
            include_line(str(include_dir() / "kernix" / "detail" / "handler.h")), "", "namespace ffi = ::xla::ffi;"]
    return _unit(head, _handler, functions, platform, allow_cuda_graph)


def _unit(head: list[str], handler: Callable[[ExportedFunction, Platform, bool], list[str]],
          functions: Sequence[ExportedFunction], platform: Platform, allow_cuda_graph: bool) -> str:
    """A handler unit: ``head``, then each function's ``handler`` and, for a stateful one, its state's."""
    lines = [*head, ""]
    for fn in functions:
        lines += handler(fn, platform, allow_cuda_graph)
        if fn.spec.has("state"):
            lines += _state_handlers(fn)
    return "\n".join(lines)


def _graph_ok(spec: FunctionSpec, platform: Platform, allow_cuda_graph: bool) -> bool:
    """Whether to declare the handler CUDA-graph compatible: a function with
    side effects runs where it is called, never replayed from a graph."""
    return platform == "cuda" and allow_cuda_graph and not spec.has_side_effect


def has_fast_handler(fn: ExportedFunction) -> bool:
    """Whether ``fn`` can use the C-API handler of :func:`handler_unit`:
    every parameter but a typed XLA FFI one (which only ffi.h decodes)."""
    return all(p.kind != "ffi" for p in fn.spec.params)


#: C type of an attribute -> the XLA_FFI_DataType its scalar must have
#: (float16/bfloat16 travel as their uint16_t bits, hence U16).
_ATTR_XLA: dict[str, str] = {d.attr_ctype: d.xla for d in DTYPES if d.attr_ctype and d.name not in ("float16", "bfloat16")}

_ROLES = {"arg": "kArg", "ret": "kRet", "inout": "kInOut", "stream": "kStream", "scratch": "kScratch",
          "state": "kState", "threads": "kThreads", "scalar": "kAttr", "string": "kString",
          "array": "kArray"}  # (attributes by kind)


def _attr_order(params: Sequence[Param]) -> dict[str, int]:
    """Each attribute's position in XLA's call frame, which sorts attributes by
    name (byte order, as ``std::string`` compares)."""
    names = sorted((p.name for p in params if p.role == "attr"), key=lambda n: n.encode())
    return {name: k for k, name in enumerate(names)}


def _param_desc(param: Param, attr_index: dict[str, int], platform: Platform) -> str:
    role = _ROLES[param.kind if param.role == "attr" else param.role]
    # CUDA functions run on the host thread that launches them: a pool of no threads.
    role = f"::kernix::detail::Role::{'kNoThreads' if role == 'kThreads' and platform == 'cuda' else role}"
    name = f"{_cxx_string(param.name)}, {len(param.name.encode())}"
    if param.role == "attr":
        # A scalar's type, an array's element type (which ffi.h's Span<const T> decodes), INVALID for a string.
        xla = _ATTR_XLA[ATTR_DTYPES[str(param.dtype)][0]] if param.kind in ("scalar", "array") else "INVALID"
        return f"{{{role}, -1, XLA_FFI_DataType_{xla}, {name}, {attr_index[param.name]}}}"
    # BE::Tensor buffers take any element type and rank: the kernel checks.  In place: named for messages.
    return f"{{{role}, -1, XLA_FFI_DataType_INVALID, {name if param.role == 'inout' else 'nullptr, 0'}, -1}}"


def _fast_handler(fn: ExportedFunction, platform: Platform, allow_cuda_graph: bool) -> list[str]:
    params = fn.spec.params
    order = _attr_order(params)
    table = f"kernix_params_{fn.index}"
    desc = f"kernix_desc_{fn.index}"
    lines = []
    if params:
        lines += [
            f"static const ::kernix::detail::ParamDesc {table}[] = {{",
            *(f"    {_param_desc(p, order, platform)}," for p in params),
            "};",
        ]
    count = lambda *roles: sum(p.role in roles for p in params)  # noqa: E731
    arrays = sum(p.kind in ("string", "array") for p in params)  # a kernix::ArrayView each
    results = count("ret", "inout", "scratch")  # XLA's results (scratch is one it allocates)
    stream = platform == "cuda" and any(p.role == "stream" for p in params)
    cmd_buffer = _graph_ok(fn.spec, platform, allow_cuda_graph)
    b = lambda v: "true" if v else "false"  # noqa: E731
    lines += [
        f"static const ::kernix::detail::FunctionDesc {desc} = {{{_cxx_string(fn.spec.name)}, "
        f"{table if params else 'nullptr'}, {len(params)}, {count('arg', 'inout')}, {results}, "
        f"{count('attr')}, {b(stream)}, {b(cmd_buffer)}}};",
        _shim_declaration(fn),
        f"KERNIX_HANDLER_EXPORT XLA_FFI_Error* {handler_symbol(fn)}(XLA_FFI_CallFrame* f) {{",
        # The decoder's storage, sized for this function (arrays of at least one).
        f"  ::kernix::TensorView views[{max(1, count('arg') + results)}];",
        f"  void* slots[{max(1, len(params))}];",
        *([f"  ::kernix::ArrayView arrays[{arrays}];"] if arrays else []),
        f"  return ::kernix::detail::dispatch(f, {desc}, &{shim_symbol(fn)}, slots, views"
        f"{', arrays' if arrays else ''});",
        "}",
        "",
    ]
    return lines


def messages_unit() -> str:
    """The unit that compiles ``kernix/detail/messages.cc``, once per module."""
    return ("// Generated by kernix: the module's one copy of the text of failed checks.\n"
            + include_line(str(include_dir() / "kernix" / "detail" / "messages.cc")) + "\n")


def handler_unit(functions: Sequence[ExportedFunction], platform: Platform, allow_cuda_graph: bool) -> str:
    """The handler unit for ``functions``: when all of them allow it (:func:`has_fast_handler`), one that never
    includes ``ffi.h``, each function a constant table of its parameters and a one-line handler calling the
    call-frame decoder of ``kernix/detail/frame.h`` (XLA's C API alone); else the ffi.h kind (the build gives
    each kind its own units)."""
    if not all(has_fast_handler(fn) for fn in functions):
        return ffi_handler_unit(functions, platform, allow_cuda_graph)
    head = ["// Generated by kernix: one XLA FFI handler per exported function, each a",
            "// table of its parameters for the C-API decoder of kernix/detail/frame.h.",
            include_line(str(include_dir() / "kernix" / "detail" / "frame.h"))]
    return _unit(head, _fast_handler, functions, platform, allow_cuda_graph)
