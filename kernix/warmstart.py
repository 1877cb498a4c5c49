"""The modules a warm load imports, served to the import system from one file.

A warm CUDA load imports seventeen small kernix modules besides the package
(:data:`WARM_MODULES`; a C++ load sixteen of them).  Importing a module from
the file system costs the import machinery's search, a few ``stat`` calls
and a read of its ``.pyc`` file: 0.05 ms on a fast machine, 0.1 ms on slower
ones, more than most of these modules' own code.
So kernix keeps their bytecode in one *warm bundle* beside the package, and
the first load of a process puts a finder in front of
:data:`sys.meta_path` that serves them from it.  They are imported as usual
(module locks, ``__spec__``, ``__file__``, parent packages, ``python -X
importtime``); only the search and the per-module reads are gone, and the
code objects are the ones the interpreter would compile from the same
sources.  :func:`install` is called by ``kernix.load_*`` on first use.

The bundle is ``__pycache__/kernix-warm.<cache tag>[.opt-N].bundle`` in the
directory that holds the package (``site-packages``, say): where
:func:`importlib.util.cache_from_source` puts the bytecode of a module
beside ``kernix``, so ``sys.pycache_prefix`` is followed.  It is not inside
``kernix/`` because ``pip uninstall`` removes only the files it installed
and their ``.pyc`` files: a file of ours left there would keep the
``kernix`` directory, and ``import kernix`` would then find an empty
namespace package instead of failing.  (An uninstall leaves the bundle;
deleting it is safe.)  It is :data:`BUNDLE_MAGIC` followed by one
:mod:`marshal`'d dict::

    format    1 (:data:`BUNDLE_FORMAT`)
    magic     importlib.util.MAGIC_NUMBER of the interpreter that wrote it
    modules   [[name, source path, [size, mtime_ns, ctime_ns] of the source, code object], ...]

Rules, as for a ``.pyc`` file and stricter:

* it is used only while every source file it names is this package's own
  and still has the recorded size, mtime and ctime (checked when it is read,
  at a process's first load: a module that process imports later,
  :mod:`kernix.arch` say, is the code the sources held at that first load).
  A copied installation (a virtual environment copied whole, say) carries a
  bundle naming the original's files: it is not used there;
* it is written again (atomically) when it is missing, unreadable, of another
  format, interpreter or module list, of another copy of kernix, or when a
  source changed;
  never when ``sys.dont_write_bytecode`` is set (``PYTHONDONTWRITEBYTECODE``)
  or its directory cannot be written, and then the modules import as usual;
* it is read only when its owner is this user, root or the owner of the
  kernix package directory, and other users cannot write it (the rule of
  :func:`kernix.store.trust.foreign_writer`): it holds code.  Its directory
  is one the interpreter already reads bytecode from.

``KERNIX_WARM_BUNDLE=0`` turns it off: the package does not import this
module, and the modules import from their files.
Every decision is a :func:`kernix.report.note` (``KERNIX_VERBOSE=1``).
"""

from __future__ import annotations

import marshal
import os
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import MAGIC_NUMBER, cache_from_source, spec_from_file_location
from types import CodeType

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from typing import Any

__all__ = ["WARM_MODULES", "BUNDLE_MAGIC", "BUNDLE_FORMAT", "bundle_path", "install"]

#: The kernix modules a warm load imports besides the package itself (a CUDA
#: load also imports :mod:`kernix.arch`; a C++ load leaves it unserved).
WARM_MODULES = (
    "kernix.languages", "kernix.names", "kernix.paths", "kernix.request", "kernix.runtime",
    "kernix.runtime.registry", "kernix.runtime.module", "kernix.loaders", "kernix.store", "kernix.store.trust",
    "kernix.store.files", "kernix.report", "kernix.store.direct", "kernix.store.manifest", "kernix.store.entries",
    "kernix.pipeline", "kernix.arch",
)
BUNDLE_MAGIC = b"kernix warm bundle\n"
BUNDLE_FORMAT = 1

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_installed = False


def bundle_path() -> str | None:
    """Where this interpreter keeps the bundle (``None`` when it keeps no bytecode at all)."""
    try:  # (the bytecode a module kernix.py beside the package would have)
        cached = cache_from_source(os.path.join(os.path.dirname(_PACKAGE), "kernix.py"))
    except NotImplementedError:  # sys.implementation.cache_tag is None
        return None
    directory, name = os.path.split(cached)  # kernix.cpython-312[.opt-1].pyc
    return os.path.join(directory, f"kernix-warm.{name[len('kernix.'):-len('.pyc')]}.bundle")


# (_identity and _trusted are small on purpose: the store's own helpers live in modules this bundle serves)
def _identity(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _sources(name: str) -> tuple[str, str]:
    """The two files that could be the source of the kernix module ``name``: ``<name>.py``, ``<name>/__init__.py``."""
    path = os.path.join(_PACKAGE, *name.split(".")[1:])
    return path + ".py", os.path.join(path, "__init__.py")


def _source(name: str) -> str:
    """The source file of the kernix module ``name``."""
    module, package = _sources(name)
    return package if os.path.isdir(os.path.dirname(package)) else module


def _trusted(st: os.stat_result) -> bool:
    """Whether only this user, root or the package's owner could have written the bundle."""
    if st.st_mode & 0o002:
        return False
    return st.st_uid in (os.getuid(), 0) or st.st_uid == os.stat(_PACKAGE).st_uid


def _read(path: str) -> tuple[dict[str, tuple[str, Any]] | None, str]:
    """``(name -> (source, code), "")`` of a usable bundle, else ``(None, why not)``."""
    try:
        with open(path, "rb") as f:
            if not _trusted(os.fstat(f.fileno())):
                return None, "it could have been written by another user"
            data = f.read()
    except FileNotFoundError:
        return None, "none yet"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not data.startswith(BUNDLE_MAGIC):
        return None, "not a warm bundle"
    try:
        value = marshal.loads(memoryview(data)[len(BUNDLE_MAGIC):])
        if value["format"] != BUNDLE_FORMAT or value["magic"] != MAGIC_NUMBER:
            return None, "written by another kernix or interpreter"
        modules = value["modules"]
        if [m[0] for m in modules] != list(WARM_MODULES):
            return None, "of another module list"
        for name, source, identity, code in modules:
            if type(code) is not CodeType:
                return None, "damaged"
            if source not in _sources(name):  # (a copy of the installation: its own sources decide)
                return None, f"written for another copy of kernix ({source})"
            if _identity(source) != identity:
                return None, f"{name} changed"
        return _records(modules), ""
    except (EOFError, ValueError, TypeError, KeyError, IndexError):
        return None, "damaged"


def _write(path: str) -> tuple[dict[str, tuple[str, Any]] | None, str]:
    """Compile :data:`WARM_MODULES` into a new bundle at ``path``: ``(records, "")``,
    or ``(None, why not)`` (nothing written)."""
    directory = os.path.dirname(path)
    if sys.dont_write_bytecode:
        return None, "not written: sys.dont_write_bytecode is set"
    try:
        os.makedirs(directory, exist_ok=True)  # (as the interpreter makes it for a .pyc file)
    except OSError as exc:
        return None, f"not written: cannot create {directory} ({exc.strerror or exc})"
    if not os.access(directory, os.W_OK):
        return None, f"not written: {directory} is not writable"
    modules = []
    try:
        for name in WARM_MODULES:
            source = _source(name)
            identity = _identity(source)  # (taken first: an edit while compiling leaves the bundle stale, not wrong)
            with open(source, "rb") as f:
                modules.append([name, source, identity, compile(f.read(), source, "exec", dont_inherit=True)])
    except (OSError, SyntaxError, ValueError) as exc:  # (the import reports a broken source)
        return None, f"not written: {exc}"
    from .store.files import atomic_write

    value = {"format": BUNDLE_FORMAT, "magic": MAGIC_NUMBER, "modules": modules}
    try:
        atomic_write(path, BUNDLE_MAGIC + marshal.dumps(value, 4), durable=False)
    except OSError as exc:
        return None, f"not written: {exc.strerror or exc}"
    return _records(modules), ""


def _records(modules: list[list[Any]]) -> dict[str, tuple[str, Any]]:
    """name -> (source, code) of the bundle's ``modules`` entries."""
    return {name: (source, code) for name, source, _, code in modules}


class _BundledLoader(SourceFileLoader):
    """A source file loader whose first :meth:`get_code` is the bundled code."""

    def __init__(self, fullname: str, path: str, code: Any) -> None:
        super().__init__(fullname, path)
        self._bundled = code

    def get_code(self, fullname: str) -> Any:
        code, self._bundled = self._bundled, None
        if code is None or fullname != self.name:  # (a reload reads the source)
            return super().get_code(fullname)
        return code


class _BundleFinder:
    """A :data:`sys.meta_path` finder for the bundle's modules, each served
    once; it leaves ``sys.meta_path`` once it has nothing left to serve (a
    process that loads no CUDA module keeps it, holding :mod:`kernix.arch`)."""

    def __init__(self, records: dict[str, tuple[str, Any]]) -> None:
        self._records = records

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        record = self._records.pop(name, None)
        if record is None:
            return None
        if not self._records:
            self.remove()
        source, code = record
        return spec_from_file_location(name, source, loader=_BundledLoader(name, source, code))

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def install() -> None:
    """Serve :data:`WARM_MODULES` from the bundle for the rest of the process,
    writing the bundle first when it is missing or stale (once per process;
    without a usable bundle the modules import as usual)."""
    global _installed
    if _installed:
        return
    _installed = True
    path = bundle_path()
    if path is None:
        return
    records, why = _read(path)
    if records is None:
        records, failed = _write(path)
        why = f"{why}; {failed or 'written'}"
    pending = {name: record for name, record in (records or {}).items() if name not in sys.modules}
    if pending:  # (what the process imported already, the writing of the bundle say, is not waited for)
        sys.meta_path.insert(0, _BundleFinder(pending))
    from . import report

    report.note(f"warm bundle {path}: {why or 'used'}")
