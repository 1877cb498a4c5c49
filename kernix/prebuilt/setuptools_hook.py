"""A setuptools ``build_py`` that precompiles a package's kernels into its wheel: each
``[[tool.kernix.modules]]`` entry of its ``pyproject.toml`` is built with :func:`kernix.build_module`
(the entries and the variables that change them: docs/deploying.rst, "Shipping kernels in a wheel").
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from setuptools import Distribution
from setuptools.command.build_py import build_py as _build_py

from ..platforms import language_of
from .build import build_module

__all__ = ["build_py", "BinaryDistribution", "kernix_setup_kwargs", "read_modules"]

_KEYS = {"name", "sources", "output", "arch", "defines", "include_dirs", "optimization_level",
         "use_fast_math", "language"}


def read_modules(project_root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ``[[tool.kernix.modules]]`` entries of ``project_root/pyproject.toml``; a
    :class:`ValueError` for a missing ``name``, ``sources`` or ``output`` or an unknown key.
    """
    path = Path(project_root) / "pyproject.toml"
    with open(path, "rb") as f:
        table = tomllib.load(f).get("tool", {}).get("kernix", {})
    modules = table.get("modules", [])
    for i, mod in enumerate(modules):
        missing = {"name", "sources", "output"} - set(mod)
        unknown = set(mod) - _KEYS
        if missing or unknown:
            raise ValueError(
                f"{path}: [[tool.kernix.modules]] entry {i + 1}: "
                + (f"missing {', '.join(sorted(missing))}" if missing else f"unknown key(s) {', '.join(sorted(unknown))}")
                + f"; accepted keys: {', '.join(sorted(_KEYS))}"
            )
    return modules


class build_py(_build_py):
    """``build_py``, then :func:`kernix.build_module` for every ``[[tool.kernix.modules]]`` entry."""

    def run(self) -> None:
        super().run()
        if os.environ.get("KERNIX_SKIP_PREBUILT") == "1" or getattr(self, "editable_mode", False):
            return
        root = Path.cwd()
        for mod in read_modules(root):
            output = Path(self.build_lib) / mod["output"]
            self.announce(f"kernix: building prebuilt module {mod['name']} into {output}", level=2)
            arch = os.environ.get("KERNIX_CUDA_ARCH_LIST") or mod.get("arch")
            language = mod.get("language")
            is_cuda = (language or language_of(str(mod["sources"][0]))) == "cuda"
            build_module(
                [root / s for s in mod["sources"]], output, name=mod["name"], language=language,
                arch=arch if is_cuda else None,
                include_dirs=[str(root / d) for d in mod.get("include_dirs", [])],
                defines=mod.get("defines", []), optimization_level=mod.get("optimization_level", 3),
                use_fast_math=mod.get("use_fast_math", False),
            )


class BinaryDistribution(Distribution):
    """A distribution whose wheel is platform-specific (it holds compiled libraries)."""

    def has_ext_modules(self) -> bool:
        return True


def kernix_setup_kwargs() -> dict[str, Any]:
    """``setup()`` keywords that install :class:`build_py` and :class:`BinaryDistribution`."""
    return {"cmdclass": {"build_py": build_py}, "distclass": BinaryDistribution}
