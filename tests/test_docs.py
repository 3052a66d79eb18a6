"""The manual cannot rot: its Python runs, what it shows a command printing is what the command prints, what
it includes exists, and the site builds with warnings as errors (the slow tier)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MANUAL = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]     # the pages people read (results are generated)


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", [p for p in MANUAL if _python_blocks(p)], ids=lambda p: p.name)
def test_every_python_block_of_the_manual_runs(page: Path):
    for block in _python_blocks(page):
        exec(compile(block, str(page), "exec"), {"__name__": "docs"})


def test_the_manual_has_python_to_run():
    """The parametrised test above is not vacuous: the README and the cells' page show code."""
    assert {p.name for p in MANUAL if _python_blocks(p)} >= {"README.md", "using-cells.md"}


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: p.name)
def test_every_local_link_and_include_of_the_manual_exists(page: Path):
    text = page.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    targets += re.findall(r"^```\{(?:literalinclude|include)\} (\S+)", text, flags=re.M)
    missing = [t for t in targets if "://" not in t and not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


def test_the_check_cell_printout_in_the_tutorial_is_what_check_cell_prints():
    """docs/cells.md shows check-cell's printout for examples/cells/mgu.py: its status line and every check it
    names are today's (the errors' digits are the machine's, so only the names and verdicts are compared)."""
    from rnnlab import check_cell, load_cell_file

    text = (DOCS / "cells.md").read_text()
    shown = text[text.index("    check-cell examples/cells/mgu.py:MGU"):].split("\n\n")[0].splitlines()
    printed = str(check_cell(load_cell_file(f"{ROOT}/examples/cells/mgu.py:MGU"))).splitlines()
    assert shown[0].strip() == printed[0].replace(f"{ROOT}/", "")
    names = {line.split(":")[0].strip() for line in printed[1:]}
    for line in shown[1:]:
        if line.strip().startswith(("ok", "FAIL")):
            assert line.split(":")[0].strip() in names, line


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path):
    """Sphinx + MyST over docs/ (the README's docs command), every warning an error: a broken link, a missing
    include, a docstring the API reference cannot read."""
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        pytest.skip("sphinx and myst-parser (the test extra) are not installed")
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                            str(tmp_path / "html")], capture_output=True, text=True, cwd=ROOT)
    assert build.returncode == 0, build.stderr[-4000:]
    assert (tmp_path / "html" / "api.html").is_file() and (tmp_path / "html" / "results" / "index.html").is_file()
    assert "mgu_step_backward" in (tmp_path / "html" / "cells.html").read_text()    # the example file, included
