"""The ``@overload`` stubs of a module's per-dtype families (see :mod:`kernix.runtime.dispatch`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..language.templates import template_name
from ..language.spec import FunctionSpec
from .dispatch import SUFFIX_DTYPES, family

__all__ = ["family_names", "family_overloads"]


def family_names(specs: Iterable[FunctionSpec]) -> list[str]:
    """The names under which a module's specs form a family, in order of first member."""
    specs = list(specs)
    functions = {s.name: s for s in specs}
    names: list[str] = []
    for s in specs:
        if s.template_args:
            candidate = template_name(s)
        else:
            candidate, _, suffix = s.name.rpartition("_")
            if suffix not in SUFFIX_DTYPES:
                continue
        if candidate and candidate not in names and family(functions, candidate):
            names.append(candidate)
    return names


def _literal(key: str) -> str:
    """A template argument's key as a Python literal (``128``, ``True``, ``'Mode::Fast'``)."""
    if key.lstrip("-").isdigit():
        return key
    return {"true": "True", "false": "False"}.get(key, repr(key))


def family_overloads(specs: Sequence[FunctionSpec], params: dict[str, list[str]], returns: dict[str, str]
                     ) -> tuple[list[str], list[str]]:
    """One ``@overload`` per member of each family: module-level lines, and ``Module`` method lines.

    ``params`` and ``returns`` are each member's stub parameters and return annotation; a member's
    non-dtype template arguments become ``Literal`` keywords (``BLOCK: Literal[128]``).
    """
    functions = {s.name: s for s in specs}
    body: list[str] = []
    methods: list[str] = []
    for name in family_names(specs):
        members = family(functions, name)
        deco = ["@overload"] if len(members) > 1 else []  # (one alone is no overload)
        for m in members:
            extra = [f"{p}: Literal[{_literal(v)}]" for p, v in m.static]
            own = params[m.name]
            star = own.index("*")
            full = [*own[:star + 1], *extra, *own[star + 1:]]
            body += [*deco, f"def {name}({', '.join(full)}) -> {returns[m.name]}:",
                     f'    """Runs ``{m.name}`` ({m.shown})."""', "    ...", "", ""]
            methods += [*("    " + d for d in deco), f"    def {name}(self, {', '.join(full)}) -> {returns[m.name]}: ..."]
    return body, methods
