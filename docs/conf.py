"""Sphinx configuration: the Markdown pages of docs/ (MyST) and an API reference from the docstrings.

Build with warnings as errors, as the slow tier does:  python -m sphinx -W -b html docs docs/_build/html
"""

from rnnlab.version import __version__

project = "rnnlab"
release = version = __version__
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False
