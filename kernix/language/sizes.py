"""Size expressions: how many bytes of scratch memory a call needs, the ``EXPR`` of an annotation's
``scratch=EXPR`` (docs/reference/arg-spec.rst, "Scratch memory"), per problem: under ``...`` batch dimensions
a call gets that times the batch size.  :func:`size_names` lists the names an expression uses (checked at
inference); :func:`evaluate` computes it for one call."""

from __future__ import annotations

import ast
import operator
from typing import Mapping

from ..errors import CallError

__all__ = ["parse_size", "size_names", "evaluate"]

#: Each operator -> its integer function (both divisions round down).
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_FUNCS = {"max": max, "min": min}
_MAX_LEN = 500


def parse_size(text: str) -> ast.expr:
    """Parse a size expression; a ``ValueError`` (starting with the expression) names what is not allowed."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r}: a size expression is an integer expression such as n*k*4")
    if len(text) > _MAX_LEN:
        raise ValueError(f"{text[:40]!r}...: a size expression is at most {_MAX_LEN} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not an expression: write names, integers, + - * / // % ( ), "
                         "max(...) and min(...), e.g. n*k*4") from None
    _check(tree, text)
    return tree


def _check(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.Constant) and type(node.value) is int or isinstance(node, ast.Name):
        pass
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        if node.keywords or len(node.args) < 2:
            raise ValueError(f"{text!r}: {node.func.id}() takes two or more arguments, no keywords")
        for arg in node.args:
            _check(arg, text)
    else:
        what = ast.unparse(node)
        raise ValueError(
            f"{text!r}: {what!r} is not allowed in a size expression; write names (dimensions of the shape "
            "signature, integer attributes), integers, + - * / // % ( ), max(...) and min(...)"
        )


def size_names(text: str) -> list[str]:
    """The names ``text`` uses, in order of first appearance (``max``/``min`` are not names)."""
    tree = parse_size(text)
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in funcs]
    return list(dict.fromkeys(n.id for n in sorted(names, key=lambda n: n.col_offset)))


def evaluate(text: str, values: Mapping[str, int], *, function: str = "") -> int:
    """The value of ``text`` with ``values`` for its names; a :class:`~kernix.errors.CallError` when a
    name has no value, a division is by zero, or the result is negative."""
    where = f"{function}(): " if function else ""

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant):
            return int(node.value)
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise CallError(f"{where}scratch size {text!r}: {node.id!r} has no value in this call")
            return int(values[node.id])
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            return _FUNCS[node.func.id](ev(a) for a in node.args)
        assert isinstance(node, ast.BinOp)
        a, b = ev(node.left), ev(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
            raise CallError(f"{where}scratch size {text!r} divides by zero with {dict(values)}")
        return _OPS[type(node.op)](a, b)

    result = ev(parse_size(text))
    if result < 0:
        raise CallError(f"{where}scratch size {text!r} is {result} bytes with {dict(values)}: it must not be negative")
    return result
