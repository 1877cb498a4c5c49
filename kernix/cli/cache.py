"""``kernix cache info [--json]`` and ``kernix cache clear [NAME]``: the
cached modules, and deleting them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import KernixError
from .output import human_size

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernix cache`` to ``subparsers``, the ``kernix`` parser's commands."""
    p = subparsers.add_parser("cache", help="show or clear the build cache",
                              description="Show the build cache (info) or delete cached builds (clear [NAME]).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    info = actions.add_parser("info", help="list cached modules and the cache size")
    info.add_argument("--json", action="store_true", help="print JSON")
    clear = actions.add_parser("clear", help="delete cached builds (of one module, or all)")
    clear.add_argument("name", nargs="?", help="module name (default: every module)")


def run(args: dict[str, Any]) -> int:
    """Run ``kernix cache`` with the parsed ``args``; returns the exit status."""
    from ..store.admin import (  # (here: 8 ms that every other command would pay)
        cache_info,
        clear_cache,
    )

    try:
        if args["action"] == "clear":
            name = args["name"]
            removed = clear_cache(name)
            what = f"module {name!r}" if name else "every module"
            print(f"removed {removed} cache entr{'y' if removed == 1 else 'ies'} ({what})")
            return 0
        info = cache_info()
    except KernixError as exc:
        print(f"kernix: error: {exc}", file=sys.stderr)
        return 1
    if args["json"]:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"cache: {info['root']} ({human_size(info['total_bytes'])})")
    for m in info["modules"]:
        if m.get("damaged"):
            print(f"  {m['name']:<24} DAMAGED  {m['path']}")
            continue
        fns = ", ".join(m["functions"])
        print(f"  {m['name']:<24} {m['platform']:<5} {human_size(m['size_bytes']):>10}  {fns}")
    return 0
