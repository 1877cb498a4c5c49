"""``kernix cache info [--json]``, ``kernix cache clear [NAME]`` and ``kernix
cache prune [--max-size SIZE] [--older-than AGE] [--json]``: the cached
modules, deleting them, and bringing the cache within a size."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import KernixError

__all__ = ["add_parser", "run"]


def _size(text: str) -> int:
    """``--max-size``'s type: a size such as 500M or 2G."""
    from ..store import parse_size  # (here, as the store's other names: other commands need none)

    try:
        value = parse_size(text, unlimited=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (to remove every entry, run `kernix cache clear`)") from None
    assert value is not None
    return value


def _age(text: str) -> float:
    """``--older-than``'s type: an age such as 30d or 12h."""
    from ..store import parse_age

    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernix cache`` to ``subparsers``, the ``kernix`` parser's commands."""
    p = subparsers.add_parser("cache", help="show, clear or prune the build cache",
                              description="Show the build cache (info), delete cached builds (clear [NAME]), or "
                                          "remove the least recently used ones (prune).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    info = actions.add_parser("info", help="list the cache's entries and its size")
    info.add_argument("--json", action="store_true", help="print JSON")
    clear = actions.add_parser("clear", help="delete cached builds (of one module, or all)")
    clear.add_argument("name", nargs="?", help="module name (default: every module)")
    prune = actions.add_parser(
        "prune", help="remove the least recently used entries",
        description="Remove the least recently used entries (and work directories) until the cache fits SIZE, and "
                    "those unused for AGE; without options, bring the cache within its limit "
                    "($KERNIX_CACHE_MAX_SIZE, default 5G). What a running build uses is kept.")
    prune.add_argument("--max-size", type=_size, metavar="SIZE", help="the size to keep within (500M, 2G)")
    prune.add_argument("--older-than", type=_age, metavar="AGE", help="remove what is unused for AGE (30d, 12h)")
    prune.add_argument("--json", action="store_true", help="print JSON")


def _print_info(info: dict[str, Any]) -> None:
    from ..store import format_age, format_size

    limit = "no limit" if info["limit_bytes"] is None else f"limit {format_size(info['limit_bytes'])}"
    print(f"cache: {info['root']} ({format_size(info['total_bytes'])}, {limit})")
    entries = info["modules"]
    if not entries:
        print("  no entries")
        return
    width = max(6, *(len(m["name"]) for m in entries))
    print(f"  {'KEY':<12}  {'MODULE':<{width}}  {'PLATFORM':<8}  {'SIZE':>10}  {'LAST USE':<8}  SOURCES: FUNCTIONS")
    for m in entries:
        if m.get("damaged"):
            platform, what = "-", f"DAMAGED: {m['why']}"
        else:
            sources = ", ".join(os.path.basename(s) for s in m["sources"]) or "-"
            more = len(m["functions"]) - 3
            functions = ", ".join(m["functions"][:3]) + (f", +{more} more" if more > 0 else "")
            platform, what = m["platform"], f"{sources}: {functions}"
        print(f"  {m['key'][:12]:<12}  {m['name']:<{width}}  {platform:<8}  {format_size(m['size_bytes']):>10}  "
              f"{format_age(m['age_s']):<8}  {what}")
    in_entries = sum(m["size_bytes"] for m in entries)
    print(f"  {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {format_size(in_entries)} "
          f"(work directories, sources and memos: {format_size(info['total_bytes'] - in_entries)})")
    for table in info.get("tuning", []):
        print(f"tuned: {table['module']} (library {table['digest'][:12]}) on {table['device']}")
        for key, entry in table["entries"].items():
            times = ", ".join(f"{n} {t} us" for n, t in entry.get("us", {}).items())
            print(f"  {key} -> {entry.get('choice')} ({times})")


def _print_prune(result: dict[str, Any]) -> None:
    from ..store import format_age, format_size

    for r in result["removed"]:
        print(f"removed {r['label']} ({format_size(r['size_bytes'])}, last used {format_age(r['age_s'])} ago): "
              f"{r['reason']}")
    for r in result["kept"]:
        print(f"kept {r['label']} ({format_size(r['size_bytes'])}): {r['reason']}")
    n = len(result["removed"])
    print(f"removed {n} item{'' if n == 1 else 's'} ({format_size(result['freed_bytes'])}); the cache holds "
          f"{format_size(result['total_bytes'])}")


def run(args: dict[str, Any]) -> int:
    """Run ``kernix cache`` with the parsed ``args``; returns the exit status."""
    from ..store import cache_info, clear_cache, max_size, prune_cache  # (here: other commands need none)

    try:
        if args["action"] == "clear":
            name = args["name"]
            removed = clear_cache(name)
            what = f"module {name!r}" if name else "every module"
            print(f"removed {removed} cache entr{'y' if removed == 1 else 'ies'} ({what})")
            return 0
        if args["action"] == "prune":
            result = prune_cache(args["max_size"], older_than=args["older_than"])
        else:
            result = cache_info()
            result["limit_bytes"] = max_size()
    except KernixError as exc:
        print(f"kernix: error: {exc}", file=sys.stderr)
        return 1
    if args["json"]:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args["action"] == "prune":
        _print_prune(result)
    else:
        _print_info(result)
    return 0
