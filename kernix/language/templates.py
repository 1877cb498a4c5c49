"""Function templates exported once per instantiation: the annotation's template list and instance names.

A function template is exported for the template arguments its annotation lists::

    // @BE scale<T: float, double, __half>
    // @BE tile<T: float, double; BLOCK: 128, 256> (n)->(n)

Each ``;``-separated group names a template parameter and lists its arguments
(with one group the name may be left out: ``// @BE scale<float, double>``);
the template is instantiated for every combination, groups varying from the
last.  Each instantiation is an exported function of its own, named
:func:`instance_name`: the template's name, then one suffix per listed
argument -- the dtype name of a type that is one dtype's element type
(``float`` -> ``float32``, ``__half`` -> ``float16``, ``__nv_bfloat16`` ->
``bfloat16``), the value of an integer (``128``; ``-1`` -> ``m1``), else the
argument as written with every other character made ``_``.

Pure Python, no dependencies: a spec read back from the cache is checked here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .names import is_identifier

__all__ = [
    "template_name",
    "TemplateList",
    "check_template_args",
    "instance_name",
    "instance_suffix",
    "is_template_argument",
    "parse_template_list",
]

# What a template argument written into generated code may hold: identifiers, ::, numbers,
# nested template brackets, commas, pointers, references, spaces, a sign (no ';', braces,
# quotes, '#', '/' or parentheses: nothing that ends a statement or opens a comment).
_ARGUMENT = re.compile(r"[A-Za-z0-9_:<>,*& +-]+")


def is_template_argument(text: str) -> bool:
    """Whether ``text`` may be written into generated C++ as a template argument."""
    return bool(_ARGUMENT.fullmatch(text)) and text.count("<") == text.count(">") and text.strip() == text


@dataclass(frozen=True)
class TemplateList:
    """An annotation's template list: ``scale<T: float, double; BLOCK: 128>``.

    Attributes
    ----------
    name
        The template's name (``scale``).
    groups
        ``(parameter name or "", arguments)`` per group, as written.
    rest
        The annotation's tokens after the list (arg_spec, shape signature, ``vjp=``).
    """

    name: str
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    rest: tuple[str, ...]


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside angle brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_template_list(name: str, tokens: Sequence[str]) -> TemplateList | None:
    """The template list of an annotation whose first word is ``name``, or ``None`` if it has none.

    Raises
    ------
    ValueError
        With a message saying what is wrong with the list and how to write it.
    """
    if "<" not in name:
        return None
    text = " ".join((name, *tokens))
    base, _, body = text.partition("<")
    depth, end = 1, -1
    for i, ch in enumerate(body):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0:
            end = i
            break
    example = "`// @BE scale<T: float, double>` or `// @BE tile<T: float, double; BLOCK: 128, 256>`"
    if not is_identifier(base.strip()) or base != base.strip():
        raise ValueError(f"{base!r} is not a function name: write the template's name right before `<`, "
                         f"e.g. {example}")
    if end < 0:
        raise ValueError(f"the template list after {base!r} has no closing `>`: write it as {example}")
    inner, after = body[:end], body[end + 1:]
    if after and not after.startswith(" "):
        raise ValueError(f"put a space after the template list's closing `>` (before {after.split()[0]!r})")
    groups: list[tuple[str, tuple[str, ...]]] = []
    raw_groups = _split_top(inner, ";")
    for group in raw_groups:
        param, colon, values = group.partition(":")
        if colon and (values.startswith(":") or param.endswith(":")) or not colon:  # (a `::` qualified name, no parameter)
            param, values = "", group
        param = param.strip()
        if param and not is_identifier(param):
            raise ValueError(f"{param!r} is not a template parameter's name (in `{group}`): write {example}")
        if not param and len(raw_groups) > 1:
            raise ValueError(f"`{group}`: with several groups, each names its template parameter, as in {example}")
        args = tuple(_split_top(values, ","))
        if not args or any(not a for a in args):
            raise ValueError(f"`{group}` has an empty template argument: list them separated by commas, "
                             f"as in {example}")
        bad = [a for a in args if not is_template_argument(a)]
        if bad:
            raise ValueError(f"template argument {bad[0]!r} cannot be written into generated code: it may hold "
                             "names, `::`, numbers, `<>`, `*`, `&`, a sign and spaces (no parentheses)")
        if len(set(args)) != len(args):
            raise ValueError(f"`{group}` lists an argument twice")
        groups.append((param, args))
    names = [p for p, _ in groups if p]
    if len(set(names)) != len(names):
        raise ValueError("a template parameter is listed in two groups: list each once")
    return TemplateList(base, tuple(groups), tuple(after.split()))


def instance_suffix(key: str) -> str:
    """The name suffix of one template argument, from its key (dtype, integer value or spelling)."""
    if re.fullmatch(r"-\d+", key):
        return "m" + key[1:]
    return re.sub(r"_+", "_", re.sub(r"[^0-9A-Za-z]", "_", key)).strip("_") or "x"


def instance_name(template: str, keys: Sequence[str]) -> str:
    """The exported name of the instantiation of ``template`` whose arguments have ``keys``:
    ``scale`` and ``("float32", "128")`` -> ``scale_float32_128``."""
    return "_".join((template, *(instance_suffix(k) for k in keys)))


def check_template_args(data: Any) -> tuple[tuple[str, str, str], ...]:
    """Validate a spec's ``template_args`` as read from JSON: ``[[parameter, written, key], ...]``.

    Raises
    ------
    ValueError
        Naming the entry that is not acceptable.
    """
    if not isinstance(data, (list, tuple)):
        raise ValueError(f"bad template_args {data!r}")
    out = []
    for entry in data:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and all(isinstance(x, str) for x in entry)):
            raise ValueError(f"bad template argument {entry!r}")
        param, written, key = entry
        if not (is_identifier(param) and is_template_argument(written) and is_template_argument(key)):
            raise ValueError(f"bad template argument {entry!r}")
        out.append((param, written, key))
    return tuple(out)


def template_name(spec: Any) -> str:
    """The unqualified name of the template ``spec`` (an instantiation) is of: ``scale`` for
    ``ops::scale<float>``."""
    return spec.qualified_name.partition("<")[0].rpartition("::")[2]


def annotated_name(spec: Any) -> str:
    """The name a message's suggested annotation gives ``spec``'s function: its own, or for a
    template's instantiation the template's with its list elided (``scale<...>``)."""
    if not getattr(spec, "template_args", ()):
        return spec.name
    return template_name(spec) + "<...>"
