"""Sphinx configuration of the Dragon documentation site (``make docs``).

The guides are the Markdown files in ``docs/`` (read with myst-parser); the
API reference comes from the installed packages' NumPy-style docstrings
(autodoc + napoleon); the op reference is generated from the schema registry
of the installed core and plugins at build time (``_ext/dragon_opref.py``).
Build it with the packages installed (``make install``), never from sources.
"""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

import dragon_core  # noqa: E402  (the installed core; the op reference reads its registry)

project = "Dragon"
author = "The Dragon authors"
copyright = "the Dragon authors"  # noqa: A001 - Sphinx's name
release = dragon_core.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "dragon_opref",
    "dragon_apiref",
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
templates_path = []

# Markdown: heading anchors, so the guides' links such as
# [abi.md](abi.md#kernel-selection) resolve to sections.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# Code blocks without a language are shown as plain text.
highlight_language = "none"

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True  # dataclass "Attributes" sections must not re-declare the fields

html_theme = "alabaster"
html_title = f"Dragon {release}"
html_static_path = []


_RST_SPECIAL = re.compile(r"([\\*|])")


def _escape_schema_docs(app, what, name, obj, options, lines):
    """The docstrings of the generated op functions (``dragon_core.ops.<op>``)
    are built from the schemas' plain-text docs, whose formulas (``|x|``,
    ``a * b``) are not reStructuredText: render them literally."""
    if getattr(obj, "__module__", None) != "dragon_core.ops" or not any(
            "defined by ``" in line for line in lines):
        return  # also reached as a Tensor method (dragon_core.Tensor.abs)
    for i, line in enumerate(lines):
        if "``" not in line:
            lines[i] = _RST_SPECIAL.sub(r"\\\1", line)


def _skip_generated_methods(app, what, name, obj, skip, options):
    """Tensor methods generated from op schemas are the ``dragon_core.ops``
    functions themselves: documented once, there and in the op reference."""
    if what == "class" and getattr(obj, "__module__", None) == "dragon_core.ops":
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_generated_methods)
    # Before napoleon (priority 500) turns the NumPy sections into fields.
    app.connect("autodoc-process-docstring", _escape_schema_docs, priority=400)
