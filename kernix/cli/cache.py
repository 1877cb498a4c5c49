"""``kernix cache info [--json]`` and ``kernix cache clear [NAME]``: the
cached modules, and deleting them."""

from __future__ import annotations

import sys

from .args import Arg, Command
from .output import human_size

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMAND", "run"]

COMMAND = Command(
    "cache",
    help="show or clear the build cache",
    description="Show the build cache (info) or delete cached builds (clear [NAME]).",
    actions=(
        Command("info", help="list cached modules and the cache size",
                args=(Arg("--json", kind="flag", help="print JSON"),)),
        Command("clear", help="delete cached builds (of one module, or all)",
                args=(Arg("name", kind="positional", nargs="?", help="module name (default: every module)"),)),
    ),
)


def run(args: dict[str, Any]) -> int:
    """Run ``kernix cache`` with the parsed ``args``; returns the exit status."""
    from ..errors import KernixError
    from ..store.admin import cache_info, clear_cache

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
        import json

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
