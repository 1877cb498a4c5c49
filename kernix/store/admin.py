"""``kernix cache info`` and ``kernix cache clear``: reading and emptying the store."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from ..names import check_module_name, is_module_name
from ..paths import cache_root
from .lock import build_lock
from .manifest import Manifest, ManifestError
from .files import source_name_re

__all__ = ["clear_cache", "cache_info"]


def clear_cache(name: str | None = None, *, root: str | os.PathLike[str] | None = None) -> int:
    """Delete cached builds: of module ``name``, or of every module and with
    them everything else the cache holds (inferred specs, the direct index's
    inference set-ups, compiler answers, precompiled preludes), so that
    :func:`cache_info` then counts nothing.

    Waits for a build of the module in progress to finish first, so it never
    pulls files from under a running build.  Libraries already loaded by a
    process stay usable.

    Returns
    -------
    int
        The number of module entries removed.
    """
    base = Path(root) if root is not None else cache_root()
    modules = base / "modules"
    if name is not None:
        check_module_name(name)
        names = [name]
    else:
        names = sorted(p.name for p in modules.iterdir()) if modules.is_dir() else []
        if (base / "build").is_dir():
            names = sorted(set(names) | {p.name for p in (base / "build").iterdir()})
        names = [n for n in names if is_module_name(n)]
    removed = 0
    for n in names:
        with build_lock(base, n):
            mdir = modules / n
            if mdir.is_dir():
                removed += sum(1 for p in mdir.iterdir() if p.is_dir())
            shutil.rmtree(mdir, ignore_errors=True)
            shutil.rmtree(base / "build" / n, ignore_errors=True)
            shutil.rmtree(base / "direct" / n, ignore_errors=True)
            for stale in (base / "build").glob(f".{n}.stale-*"):
                shutil.rmtree(stale, ignore_errors=True)
            mine = source_name_re(n)
            for src in (base / "sources").glob(f"{n}-*"):
                if mine.fullmatch(src.name):
                    with contextlib.suppress(OSError):
                        src.unlink()
    if name is None:
        # What no one module owns: inference set-ups (direct/.parse) and records
        # of modules whose entries are gone, specs, compiler answers and preludes.
        for shared in ("direct", "specs", "toolchain"):
            shutil.rmtree(base / shared, ignore_errors=True)
    return removed


def cache_info(*, root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describe the cache: its root, total size, and one record per module entry."""
    base = Path(root) if root is not None else cache_root()
    entries = []
    total = 0
    for path in sorted((base / "modules").glob("*/*/manifest.json")):
        entry = path.parent
        size = sum(p.stat().st_size for p in entry.iterdir() if p.is_file())
        total += size
        try:
            m = Manifest.read(entry)
        except (OSError, ManifestError):
            entries.append({"name": entry.parent.name, "path": str(entry), "damaged": True, "size_bytes": size})
            continue
        entries.append(
            {
                "name": m.name,
                "key": m.key,
                "platform": m.platform,
                "functions": list(m.handlers),
                "path": str(entry),
                "size_bytes": size,
                "created": m.created,
            }
        )
    for sub in ("build", "sources", "direct", "specs", "toolchain"):
        d = base / sub
        if d.is_dir():
            total += sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    return {"root": str(base), "total_bytes": total, "modules": entries}
