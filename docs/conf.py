"""Sphinx configuration of the kernix documentation.

Build with ``python -m sphinx -W -b html docs docs/_build/html`` (warnings are
errors).  Only Sphinx itself is needed (``pip install -e ".[docs]"``): the
theme is the built-in ``alabaster`` and no extension outside Sphinx is used.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import kernix  # noqa: E402

project = "kernix"
author = "the kernix authors"
copyright = "the kernix authors"
release = kernix.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []
html_static_path: list[str] = []
html_theme = "alabaster"
html_theme_options = {"description": "C++ and CUDA functions in JAX, no boilerplate", "fixed_sidebar": True}
highlight_language = "python3"
pygments_style = "sphinx"

# Docstrings are numpydoc style.  ``Attributes`` sections become ``:ivar:``
# fields, so an attribute that is also a documented property is not described
# twice.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True
napoleon_use_rtype = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_default_options = {"show-inheritance": False}

# Every cross-reference to kernix itself must resolve; names from other
# packages (numpy, jax, the standard library) are not linked: there is no
# intersphinx, so the build needs no network.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!kernix\b).*"),
    # Instance attributes described in their class's "Attributes" section.
    (r"py:attr", r"kernix\..*"),
]

# Objects defined in a submodule and documented under the name users import
# (``kernix.language.spec.FunctionSpec`` is documented as ``kernix.FunctionSpec``).
_PUBLIC_ALIASES = {"kernix.errors.", "kernix.language.spec.", "kernix.paths.", "kernix.runtime.module.",
                   "kernix.runtime.function.", "kernix.loaders.", "kernix.store.admin.",
                   "kernix.runtime.registry.", "kernix.language.names.", "kernix.frontend.infer.",
                   "kernix.platforms.", "kernix.checking.api.", "kernix.checking.report."}


def _resolve_alias(app, env, node, contnode):
    """Resolve ``kernix.<submodule>.<Name>`` to ``kernix.<Name>`` when only the
    latter is documented."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    for prefix in _PUBLIC_ALIASES:
        if target.startswith(prefix):
            public = "kernix." + target[len(prefix):]
            domain = env.get_domain("py")
            new = node.deepcopy()
            new["reftarget"] = public
            return domain.resolve_xref(env, node.get("refdoc", ""), app.builder, node.get("reftype"),
                                       public, new, contnode)
    return None


def setup(app):
    app.connect("missing-reference", _resolve_alias)
