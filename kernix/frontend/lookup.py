"""One file's spec-cache look-up, without the parser.

:func:`look_up` reads the source, resolves its options, works out the
spec-cache key (from the remembered parse set-up, see
:mod:`kernix.frontend.setup`) and reads the cached result as JSON.  It
imports neither libclang nor the spec classes, so ``kernix inspect`` shows a
cached file without them; :func:`kernix.frontend.infer.infer_file` builds on
it and parses on a miss.
"""

from __future__ import annotations

import os

from .. import __version__
from ..languages import language_of
from ..filenames import printable, utf8_problem
from ..paths import absolute, cache_root_str
from . import speccache
from .setup import parse_setup

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Sequence

__all__ = ["SpecLookup", "look_up"]


class SpecLookup:
    """The outcome of one look-up.

    Attributes
    ----------
    path
        The source file, absolute.
    language
        ``"cuda"`` or ``"cpp"``.
    source
        Its bytes, as read for the key.
    include_dirs, defines, flags
        The parse options, resolved (include directories absolute).
    root
        The cache root (a string: this path imports no :mod:`pathlib`).
    key
        The spec-cache key (``None`` when the cache is not used).
    payload
        The cached result (:meth:`kernix.InferResult.to_json` form), or ``None``.
    """

    __slots__ = ("path", "language", "source", "include_dirs", "defines", "flags", "root", "key", "payload")

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, fields[name])


def look_up(
    path: str | os.PathLike[str],
    language: str | None = None,
    include_dirs: Sequence[str] = (),
    defines: Sequence[str] = (),
    flags: Sequence[str] = (),
    wanted: list[Any] | None = None,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> SpecLookup:
    """Look ``path`` up in the spec cache (arguments as for
    :func:`kernix.frontend.infer.infer_file`; ``wanted`` is the requested
    functions in key form, ``[[name, arg_spec or None], ...]``, or ``None``).

    Raises
    ------
    KernixError
        When the file cannot be read, its path is not valid UTF-8 or its
        language is unknown.
    """
    path = os.path.abspath(os.fspath(path))
    problem = utf8_problem(path)
    if problem is not None:
        from ..errors import KernixError

        raise KernixError(f"cannot parse {printable(path)}: {problem}")
    if language is None:
        language = language_of(path)
    elif language not in ("cuda", "cpp"):
        from ..errors import KernixError

        raise KernixError(f"language must be 'cuda' or 'cpp', not {language!r}")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        from ..errors import KernixError

        raise KernixError(f"cannot read {path}: {exc.strerror or exc}") from None
    include_dirs = tuple(os.path.abspath(d) for d in include_dirs)
    defines = tuple(str(d) for d in defines)
    flags = tuple(str(f) for f in flags)
    root = absolute(cache_dir) if cache_dir is not None else cache_root_str()
    key = payload = None
    if use_cache:
        setup = parse_setup(language, include_dirs, defines, flags, root)
        key = speccache.make_key([__version__, *setup, path, language, wanted], source)
        payload = speccache.load(root, key)
    return SpecLookup(
        path=path, language=language, source=source, include_dirs=include_dirs, defines=defines, flags=flags,
        root=root, key=key, payload=payload,
    )
