"""Generate the C++ that connects XLA to the user's functions.

Two kinds of translation unit come out of here:

*shim units*, one per user source file, compiled by the same compiler as the
user's code (nvcc for CUDA).  Each ``#include``\\ s the user's file by absolute
path, so compiler diagnostics name the user's own file and line, and then
defines one ``extern "C"`` shim per function that calls it with its exact C++
types (namespaces, enums, overloads and ``__half`` resolve there).  A shim is
the call and little else (each tensor is built by one out-of-line helper per
tensor type, and what the call throws is caught by the handler), so it adds
little to the compile of the user's file, the one unit no core count shortens.
A function returning ``xla::ffi::Error`` (``FunctionSpec.returns_error``)
has its result checked: a failure is thrown, and the handler reports it with
the error's own code and message, prefixed with the function's name.

*handler units*, compiled by the host compiler: one XLA FFI handler per
function, each calling its shim.  They depend only on the specs, so editing a
kernel body leaves them, and their object files, unchanged.  Two kinds:

* a *fast* unit (:func:`fast_handler_unit`) for functions that take no typed
  XLA FFI parameter: per function a constant table describing the parameters and a
  one-line handler calling the generic decoder of ``kernix/detail/frame.h``,
  which reads the call frame through XLA's C API.  It never includes XLA's
  C++ ``ffi.h``, so it compiles in a fraction of the time and memory.  For a
  function with state, its instantiate handler is beside it (``state.h``).
* an *ffi.h* unit (:func:`ffi_handler_unit`) for functions that take typed XLA
  FFI types (``xla::ffi::Buffer<T, R>``, ``AnyBuffer``, ``Result<...>``)
  (the parts of the *special kinds* of the section "The parameters beyond
  tensors, scalars and the stream" serve any other parameter of such a function): one
  ``XLA_FFI_DEFINE_HANDLER_SYMBOL`` binding per function (exact ``Attr<T>``
  types, the platform stream, the command-buffer trait), and for a function
  with state an instantiate handler beside it.

The text of every failed check (a tensor read as the wrong type, BE_CHECK, a
handler's error) is built in ``kernix/detail/messages.cc``, which the build
compiles once per module, as a unit of its own beside the handler units; the
user's translation units include only the declarations and link to it.

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
from typing import NamedTuple, Sequence

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
    "fast_handler_unit",
    "ffi_handler_unit",
    "has_fast_handler",
    "instantiate_symbol",
    "statetype_symbol",
]

@dataclass(frozen=True)
class ExportedFunction:
    """A function to export, with its position in the module.

    Attributes
    ----------
    index
        Position in the module; makes every generated symbol unique, so
        ``f`` and ``f_impl`` never collide.
    spec
        The function's spec.
    """

    index: int
    spec: FunctionSpec


def _slug(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def shim_symbol(fn: ExportedFunction) -> str:
    """Name of the (hidden) shim of ``fn``."""
    return f"kernix_shim_{fn.index}_{_slug(fn.spec.name)}"


def handler_symbol(fn: ExportedFunction) -> str:
    """Name of the exported XLA FFI handler of ``fn``."""
    return f"kernix_handler_{fn.index}_{_slug(fn.spec.name)}"


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


def _strip_const(canonical: str) -> str:
    text = canonical.strip()
    text = re.sub(r"^const\s+", "", text)
    text = re.sub(r"\s+const$", "", text)
    return text


def _local(slot: int) -> str:
    return f"kernix_t{slot}"


def _tensor_type(param: Param) -> str:
    """The tensor type the shim builds for ``param``: ``::BE::TensorOf<T>``
    for a parameter of that type (its constructor checks the dtype), the
    in-place types (``BE::InOut``, ``BE::InOutOf<T>``) for theirs, else
    ``::BE::Tensor``."""
    if param.canonical_type.startswith(("BE::TensorOf<", "BE::InOutOf<")) or param.canonical_type == "BE::InOut":
        return "::" + param.canonical_type
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
    if param.kind in SPECIAL_KINDS:
        return _special_argument(param, slot)
    target = _strip_const(param.canonical_type)
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
        if param.kind == "tensor":
            if not _built_in_argument(fn, param):
                lines.append(f"  {_tensor_type(param)} {_local(i)} = {_tensor_from(param, i)};")
        else:
            local = _special_local(param, i)
            if local is not None:
                lines.append(local)
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
            lines += _state_shims(fn.spec, fn.index, _slug(fn.spec.name))
        lines += [
            f"KERNIX_SHIM_EXPORT void {shim_symbol(fn)}(void* const* p) {{",
            "  (void)p;",
            *_shim_locals(fn),
            f"  {call};",
            "}",
            "",
        ]
    return "\n".join(lines)


# ---- The parameters beyond tensors, scalars and the stream -----------------------
#
# For an in-place tensor (``inout``), an array or string attribute, scratch
# memory, the per-instance state and the thread pool: what the shim passes the
# user's function, built from the slot the handler filled
# (:func:`_special_argument`, :func:`_special_local`); the handler's part
# (:func:`_handler_part`); for a function with state, the instantiate handler
# and the functions around it (:func:`_state_shims`, :func:`_state_handlers`).


def _type(param: Param) -> str:
    return "::" + param.canonical_type


#: The kinds whose code the functions of this section write (an in-place tensor is written here too).
SPECIAL_KINDS = ("array", "string", "scratch", "state", "threads")


def _special_local(param: Param, slot: int) -> str | None:
    """The local the shim builds for ``param`` (scratch, state, thread pool), or ``None``."""
    p = f"p[{slot}]"
    if param.kind == "scratch":
        return (f"  {_type(param)} {_local(slot)}(*static_cast<const ::kernix::TensorView*>({p}), "
                f"{_cxx_string(param.name)});")
    if param.kind == "state":
        return f"  {_type(param)} {_local(slot)} = ::kernix::detail::state_from<{_type(param)}>({p});"
    if param.kind == "threads":
        return f"  {_type(param)} {_local(slot)}(*static_cast<const ::kernix::ThreadPoolView*>({p}));"
    return None


def _special_argument(param: Param, slot: int) -> str:
    """The expression the shim passes for an array or string attribute, scratch, state or pool."""
    if param.kind in ("array", "string"):
        return f"::kernix::detail::array_from<{_type(param)}>(p[{slot}])"
    assert param.kind in ("scratch", "state", "threads"), param
    return _local(slot)


class _HandlerPart(NamedTuple):
    """One parameter's share of an ffi.h handler."""

    decl: list[str]  # the impl's parameters
    bind: list[str]  # the binding chain
    prep: list[str]  # statements filling the slot
    slot: str  # the void* of the shim's array


def _handler_part(param: Param, i: int, spec: FunctionSpec, platform: Platform) -> _HandlerPart:
    """The handler's part for parameter ``i`` of ``spec`` (an in-place tensor or one of :data:`SPECIAL_KINDS`)."""
    if param.role == "inout":
        check = (f"  if (ffi::Error e = ::kernix::detail::check_aliased(b{i}in, *b{i}, {_cxx_string(spec.name)}, "
                 f"{_cxx_string(param.name)}); e.failure()) return e;")
        return _HandlerPart(
            [f"ffi::AnyBuffer b{i}in", f"ffi::Result<ffi::AnyBuffer> b{i}"],
            [".Arg<ffi::AnyBuffer>()", ".Ret<ffi::AnyBuffer>()"],
            [check, f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view(*b{i});"],
            f"&t{i}",
        )
    if param.kind == "array":
        assert param.dtype is not None
        span = f"ffi::Span<const {ARRAY_ATTR_DTYPES[param.dtype]}>"
        return _HandlerPart(
            [f"{span} a{i}"], [f".Attr<{span}>({_cxx_string(param.name)})"],
            [f"  ::kernix::ArrayView v{i}{{a{i}.begin(), static_cast<int64_t>(a{i}.size())}};"], f"&v{i}",
        )
    if param.kind == "string":
        return _HandlerPart(
            [f"std::string_view a{i}"], [f".Attr<std::string_view>({_cxx_string(param.name)})"],
            [f"  ::kernix::ArrayView v{i}{{a{i}.data(), static_cast<int64_t>(a{i}.size())}};"], f"&v{i}",
        )
    if param.kind == "scratch":
        return _HandlerPart(
            [f"ffi::Result<ffi::AnyBuffer> b{i}"], [".Ret<ffi::AnyBuffer>()"],
            [f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view(*b{i});"], f"&t{i}",
        )
    if param.kind == "state":
        return _HandlerPart(
            [f"::kernix::detail::StateBox* st{i}"], [".Ctx<ffi::State<::kernix::detail::StateBox>>()"],
            [f"  void* v{i} = st{i}->object;"], f"v{i}",
        )
    assert param.kind == "threads", param
    if platform == "cpu":
        return _HandlerPart(
            [f"ffi::ThreadPool tp{i}"], [".Ctx<ffi::ThreadPool>()"],
            [f"  ::kernix::ThreadPoolView v{i} = ::kernix::detail::pool_view(tp{i});"], f"&v{i}",
        )
    # CUDA functions run on the host thread that launches them: a pool of no threads.
    return _HandlerPart([], [], [f"  ::kernix::ThreadPoolView v{i}{{nullptr, 0, nullptr}};"], f"&v{i}")


def _names(index: int, slug: str) -> tuple[str, str]:
    return f"kernix_state_new_{index}_{slug}", f"kernix_state_delete_{index}_{slug}"


def instantiate_symbol(handler: str) -> str:
    """The instantiate handler's symbol beside the handler ``kernix_handler_<i>_<name>``."""
    return "kernix_instantiate_" + handler.removeprefix("kernix_handler_")


def statetype_symbol(handler: str) -> str:
    """The symbol of the function returning the library's state type id and information."""
    return "kernix_statetype_" + handler.removeprefix("kernix_handler_")


def _state_param(spec: FunctionSpec) -> Param:
    return next(p for p in spec.params if p.role == "state")


def _state_shims(spec: FunctionSpec, index: int, slug: str) -> list[str]:
    """The shim unit's functions making and deleting the state of ``spec`` (which has one)."""
    new, delete = _names(index, slug)
    state = _type(_state_param(spec))
    return [
        f"KERNIX_SHIM_EXPORT void* {new}() {{ return ::kernix::detail::new_state<{state}>(); }}",
        f"KERNIX_SHIM_EXPORT void {delete}(void* p) noexcept {{ ::kernix::detail::delete_state<{state}>(p); }}",
        "",
    ]


def _state_handlers(spec: FunctionSpec, index: int, slug: str, handler: str) -> list[str]:
    """The handler unit's instantiate handler of ``spec`` and its state type's accessor."""
    new, delete = _names(index, slug)
    return [
        f'extern "C" void* {new}();',
        f'extern "C" void {delete}(void*) noexcept;',
        f"KERNIX_HANDLER_EXPORT XLA_FFI_Error* {instantiate_symbol(handler)}(XLA_FFI_CallFrame* f) {{",
        f"  return ::kernix::detail::instantiate(f, &{new}, &{delete}, {_cxx_string(spec.name)});",
        "}",
        f"KERNIX_HANDLER_EXPORT void* {statetype_symbol(handler)}(int which) {{",
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


def _binding(param: Param, bound_type: str = "") -> str:
    """The ``.Arg<>()`` / ``.Ret<>()`` binding of one buffer parameter."""
    method = "Arg" if param.role == "arg" else "Ret"
    return f".{method}<{bound_type or _bound_type(param)}>()"


def _handler(fn: ExportedFunction, platform: Platform, allow_cuda_graph: bool) -> list[str]:
    spec = fn.spec
    decl: list[str] = []  # the impl's parameters
    bind: list[str] = []  # the binding chain
    prep: list[str] = []  # locals built before the call
    slots: list[str] = []  # what goes in the void* array
    aliases: list[str] = []  # type aliases for typed FFI buffers
    for i, param in enumerate(spec.params):
        if param.role == "inout" or param.kind in SPECIAL_KINDS:
            part = _handler_part(param, i, spec, platform)
            decl += part.decl
            bind += part.bind
            prep += part.prep
            slots.append(part.slot)
        elif param.kind == "tensor":
            ftype = "ffi::AnyBuffer" if param.role == "arg" else "ffi::Result<ffi::AnyBuffer>"
            decl.append(f"{ftype} b{i}")
            src = f"b{i}" if param.role == "arg" else f"*b{i}"
            prep.append(f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view({src});")
            slots.append(f"&t{i}")
            bind.append(_binding(param))
        elif param.kind == "ffi":
            # An alias keeps template commas out of the handler macro's arguments.
            alias = f"kernix_type_{fn.index}_{i}"
            aliases.append(f"using {alias} = {_bound_type(param)};")
            ftype = alias if param.role == "arg" else f"ffi::Result<{alias}>"
            decl.append(f"{ftype} b{i}")
            slots.append(f"&b{i}")
            bind.append(_binding(param, alias))
        elif param.kind == "stream":
            if platform == "cuda":
                decl.append(f"cudaStream_t s{i}")
                bind.append(".Ctx<ffi::PlatformStream<cudaStream_t>>()")
                prep.append(f"  void* v{i} = static_cast<void*>(s{i});")
            else:
                prep.append(f"  void* v{i} = nullptr;  // C++ functions run on the host: no stream")
            slots.append(f"&v{i}")
        else:
            assert param.dtype is not None
            scalar = f"::kernix::detail::ScalarAttr<{ATTR_DTYPES[param.dtype][0]}>"
            decl.append(f"{scalar} a{i}")
            slots.append(f"&a{i}.value")
            bind.append(f".Attr<{scalar}>({_cxx_string(param.name)})")
    impl = f"kernix_impl_{fn.index}"
    array = ", ".join(f"static_cast<void*>({s})" for s in slots) or "nullptr"
    traits = ", {ffi::Traits::kCmdBufferCompatible}" if _graph_ok(spec, platform, allow_cuda_graph) else ""
    chain = "".join(f"\n        {b}" for b in bind)
    return [
        *aliases,
        _shim_declaration(fn),
        f"static ffi::Error {impl}({', '.join(decl)}) {{",
        *prep,
        f"  void* const params[] = {{{array}}};",
        f"  return ::kernix::detail::call_shim(&{shim_symbol(fn)}, params, {_cxx_string(spec.name)});",
        "}",
        f"KERNIX_HANDLER_EXPORT XLA_FFI_Error* {handler_symbol(fn)}(XLA_FFI_CallFrame*);",
        f"XLA_FFI_DEFINE_HANDLER_SYMBOL({handler_symbol(fn)}, {impl},",
        f"    ffi::Ffi::Bind(){chain}{traits});",
        "",
    ]


def ffi_handler_unit(functions: Sequence[ExportedFunction], platform: Platform, allow_cuda_graph: bool) -> str:
    """A handler unit built on XLA's C++ ``ffi.h`` bindings (handles every function)."""
    lines = [
        "// Generated by kernix: one typed XLA FFI handler per exported function.",
        include_line(str(include_dir() / "kernix" / "detail" / "handler.h")),
        "",
        "namespace ffi = ::xla::ffi;",
        "",
    ]
    for fn in functions:
        lines += _handler(fn, platform, allow_cuda_graph)
        if fn.spec.has("state"):
            lines += _state_handlers(fn.spec, fn.index, _slug(fn.spec.name), handler_symbol(fn))
    return "\n".join(lines)


def _graph_ok(spec: FunctionSpec, platform: Platform, allow_cuda_graph: bool) -> bool:
    """Whether to declare the handler CUDA-graph compatible: a function with
    side effects runs where it is called, never replayed from a graph."""
    return platform == "cuda" and allow_cuda_graph and not spec.has_side_effect


def has_fast_handler(fn: ExportedFunction) -> bool:
    """Whether ``fn`` can use the C-API handler of :func:`fast_handler_unit`:
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
        xla = "INVALID"  # a string's
        if param.kind == "array":  # the element type ffi.h's Span<const T> decodes
            xla = _ATTR_XLA[ARRAY_ATTR_DTYPES[str(param.dtype)]]
        elif param.kind == "scalar":
            xla = _ATTR_XLA[ATTR_DTYPES[str(param.dtype)][0]]
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


def fast_handler_unit(functions: Sequence[ExportedFunction], platform: Platform, allow_cuda_graph: bool) -> str:
    """A handler unit decoding call frames through XLA's C API (``frame.h``).

    Every function must satisfy :func:`has_fast_handler`.
    """
    lines = [
        "// Generated by kernix: one XLA FFI handler per exported function, each a",
        "// table of its parameters for the C-API decoder of kernix/detail/frame.h.",
        include_line(str(include_dir() / "kernix" / "detail" / "frame.h")),
        "",
    ]
    for fn in functions:
        assert has_fast_handler(fn), fn.spec.name
        lines += _fast_handler(fn, platform, allow_cuda_graph)
        if fn.spec.has("state"):
            lines += _state_handlers(fn.spec, fn.index, _slug(fn.spec.name), handler_symbol(fn))
    return "\n".join(lines)


def messages_unit() -> str:
    """The unit that compiles ``kernix/detail/messages.cc``, once per module."""
    return ("// Generated by kernix: the module's one copy of the text of failed checks.\n"
            + include_line(str(include_dir() / "kernix" / "detail" / "messages.cc")) + "\n")


def handler_unit(functions: Sequence[ExportedFunction], platform: Platform, allow_cuda_graph: bool) -> str:
    """The handler unit for ``functions``: the fast kind when all of them
    allow it, else the ffi.h kind (the build gives each kind its own units)."""
    if all(has_fast_handler(fn) for fn in functions):
        return fast_handler_unit(functions, platform, allow_cuda_graph)
    return ffi_handler_unit(functions, platform, allow_cuda_graph)
