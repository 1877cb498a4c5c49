"""Module names, target prefixes and function names: they become directory and FFI target names, so
they are checked before anything touches the disk or a compiler."""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = [
    "is_identifier", "check_module_name", "check_target_prefix", "check_function_name", "is_module_name",
    "is_word", "is_handler_symbol", "handlers_problem",
]

_CXX_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
    public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq""".split()
)


def is_identifier(name: str) -> bool:
    """Whether ``name`` is a plain ASCII C/C++ identifier (not a keyword)."""
    return bool(name) and name.isascii() and name.isidentifier() and name not in _CXX_KEYWORDS


def is_word(text: str) -> bool:
    """Whether ``text`` is one or more ASCII letters, digits and ``_``."""
    return text.isascii() and text.replace("_", "a").isalnum()


def _is_ascii_identifier(text: str) -> bool:
    return is_word(text) and not text[0].isdigit()


def handlers_problem(names: Sequence[str], handlers: Mapping[str, str]) -> str | None:
    """Why ``handlers`` (function name -> handler symbol) does not fit the
    functions ``names`` (one valid symbol each, in the same order), or ``None``."""
    if list(names) != list(handlers):
        return f"the functions ({', '.join(map(str, names))}) and their handlers ({', '.join(handlers)}) do not match"
    for name, symbol in handlers.items():
        if not is_identifier(name) or not is_handler_symbol(symbol):
            return f"bad function or handler name for {name!r}"
    return None


def is_handler_symbol(symbol: str) -> bool:
    """Whether ``symbol`` has the form of a generated handler: ``kernix_handler_<index>_<name>``."""
    index, _, name = symbol.removeprefix("kernix_handler_").partition("_")
    return symbol.startswith("kernix_handler_") and index.isascii() and index.isdigit() and is_word(name)


_MAX_LEN = 128


def _module_name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"the module name must be a string, not {type(name).__name__}"
    parts = name.replace("-", ".").split(".")
    if len(name) > _MAX_LEN or not _is_ascii_identifier(parts[0]) or not all(map(is_word, parts)):
        return (
            f"invalid module name {name!r}: use letters, digits and '_' (parts may be joined by "
            f"'.' or '-'), start with a letter or '_', at most {_MAX_LEN} characters; no path "
            "separators, '..', spaces or other characters. Example: 'my_kernels'."
        )
    return None


def check_module_name(name: object) -> str:
    """``name`` if it is a valid module name (``my_kernels``, ``pkg.ops``, ``ops-v2``: words joined by
    ``.`` or ``-``, at most 128 characters), else raise :class:`~kernix.errors.InvalidNameError`."""
    problem = _module_name_problem(name)
    if problem is not None:
        from ..errors import InvalidNameError
        raise InvalidNameError(problem)
    return name  # type: ignore[return-value]


def is_module_name(name: object) -> bool:
    """Whether ``name`` is a valid module name (see :func:`check_module_name`)."""
    return _module_name_problem(name) is None


def check_target_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a valid FFI target prefix (dotted identifiers)."""
    if not isinstance(prefix, str):
        from ..errors import InvalidNameError
        raise InvalidNameError(f"target_prefix must be a string, not {type(prefix).__name__}")
    parts = prefix.split(".")
    if len(prefix) > _MAX_LEN or not all(map(_is_ascii_identifier, parts)):
        from ..errors import InvalidNameError
        raise InvalidNameError(
            f"invalid target_prefix {prefix!r}: use identifiers joined by '.' "
            "(e.g. 'my_module.my_kernels')"
        )
    return prefix


def check_function_name(name: object) -> str:
    """Return ``name`` if it is a valid exported function name (a C++ identifier, not a keyword)."""
    if not isinstance(name, str) or not is_identifier(name) or len(name) > _MAX_LEN:
        hint = ""
        if isinstance(name, str) and "<" in name:  # a template's instantiation
            base = name.partition("<")[0].strip()
            hint = (f"; a function template is exported by listing its arguments in its annotation, "
                    f"`// @BE {base}<{name.partition('<')[2].rstrip('> ')}>` right before its `template <...>`, "
                    f"which exports each instantiation under its own name ({base}_float32, ...)")
        from ..errors import InvalidNameError
        raise InvalidNameError(f"invalid function name {name!r}: it must be a C++ identifier{hint}")
    return name
