"""The README's overview of the published results and the manual's results index, computed from what
``docs/results`` stores, so that the front page cannot drift from the pages it links."""

from __future__ import annotations

import json
from pathlib import Path

from rnnlab.experiments.findings import RESULTS_ROOT
from rnnlab.experiments.greff import TRIALS as GREFF_TRIALS
from rnnlab.files import atomic_write
from rnnlab.page import PAGE_JSON, md_table
from rnnlab.pages.published import page_data, read_page
from rnnlab.pages.study import stored_variants, undecidable_lines

OVERVIEW_BEGIN = ("<!-- results overview: written by `python -m rnnlab.pages.overview` from docs/results; "
                  "do not edit -->")
OVERVIEW_END = "<!-- end of results overview -->"


def _tally(words: list[str]) -> str:
    """'2 reproduced, 1 not significant with 3 seeds' from the words of one column, in first-seen order."""
    counts: dict[str, int] = {}
    for word in words:
        if word == "shown only":
            continue
        short = word.split(":")[0]        # 'differs: ours lower by 0.1' counts as 'differs'
        counts[short] = counts.get(short, 0) + 1
    return ", ".join(f"{n} {word}" for word, n in counts.items()) or "none"


def _set_aside(claim: dict) -> str:
    """A benchmark claim's tasks beside its "k of N": those at the floor (not in N) and those untested (in N)."""
    notes = ([f"{len(claim['untested'])} of the {len(claim['tasks'])} not tested"] if claim.get("untested") else []) \
        + ([f"+{len(claim['floor'])} at the floor"] if claim.get("floor") else [])
    return f" ({'; '.join(notes)})" if notes else ""


def results_overview(dest: str | Path = RESULTS_ROOT, links: str = "docs/results/") -> str:
    """The README's table of every published study, map and the cell benchmark, computed from what
    ``dest`` stores (each study's runs.csv through today's verdicts, the benchmark's cells.json), so that
    the front page cannot drift from the pages it links. ``links`` is where the pages are, seen from the
    page that shows the table."""
    from rnnlab.experiments.studies import EXPERIMENTS

    dest = Path(dest)
    rows = []
    for name in sorted(n for n in EXPERIMENTS if (dest / n / PAGE_JSON).is_file()):
        exp = EXPERIMENTS[name]
        variants = stored_variants(exp, dest)
        seeds = " / ".join(f"{variant.seeds}" for variant in variants.values())
        claims = "; ".join(f"{label}: {_tally([v.verdict for v in variant.verdicts if v.kind == 'claim'])}"
                           for label, variant in variants.items())
        numbers = "; ".join(f"{label}: {_tally([v.verdict for v in variant.verdicts if v.kind == 'published'])}"
                            for label, variant in variants.items())
        undecidable = " **Not decidable with these seeds** (see the page)." if undecidable_lines(variants, name) else ""
        rows.append([f"[{exp.title}]({links}{name}.md)", seeds, claims + undecidable, numbers])
    lines = [OVERVIEW_BEGIN, "", md_table(["study", "seeds (setting / tuned)", "its claims", "published numbers"],
                                          rows)]
    for cells in sorted(dest.glob("cells*.json")):        # the benchmark, and the suite's other runs of it
        bench = json.loads(cells.read_text())
        relation = {"same": "the same as", "better": "better than", "worse": "worse than"}
        held = "; ".join(f"{c['a']} {relation.get(c['relation'], c['relation'])} {c['b']}: {len(c['holds'])} of "
                         f"{len(c['tasks'])}" + _set_aside(c)
                         for c in bench["claims"])
        title = "The cell benchmark" + ("" if cells.stem == "cells" else
                                        " on " + ", ".join(t["name"] for t in bench["tasks"]))
        lines += ["", f"[{title}]({links}{cells.stem}.md) ({len(bench['cells'])} cells × "
                      f"{len(bench['tasks'])} tasks; each claim: the tasks it holds on, of those it is judged on; "
                      f"a 'same' claim is not judged where both cells learnt nothing, 'at the floor'): {held}."]
    lines += _greff_lines(dest, links)
    maps = sorted(path.parent for path in dest.glob(f"*/{PAGE_JSON}") if "source" in page_data(path.parent))
    if maps:
        lines += ["", "Maps and searches: " + " · ".join(
            f"[{read_page(folder).title}]({links}{folder.name}/report.md)" for folder in maps) + "."]
    return "\n".join(lines + ["", OVERVIEW_END])


def _greff_lines(dest: Path, links: str) -> list[str]:
    """Greff et al.'s JSB arm, when published: its budget (interim below the paper's) and each finding's word."""
    stored = dest / "greff-jsb.json"
    if not stored.is_file():
        return []
    arm = json.loads(stored.read_text())
    interim = f", interim: the paper ran {GREFF_TRIALS}" if arm["trials"] < GREFF_TRIALS else ""
    budget = f"{arm['trials']} trials per variant{interim}"
    words = "; ".join(f"{f['claim']}: {f['word']}" for f in arm["findings"])
    return ["", f"[LSTM: A Search Space Odyssey, the JSB arm]({links}greff-jsb.md) (9 variants, {budget}; each "
                f"finding's word): {words}."]


RESULTS_INDEX_TOC = """```{toctree}
:hidden:
:glob:

*
*/report
```"""


def results_index(dest: str | Path = RESULTS_ROOT) -> str:
    """``docs/results/index.md``, the manual's results page: the README's overview, linked from beside the pages,
    and the site's table of contents of every published page."""
    return f"# Results\n\n{results_overview(dest, links='')}\n\n{RESULTS_INDEX_TOC}\n"


def write_overview(readme: str | Path = "README.md", dest: str | Path = RESULTS_ROOT) -> bool:
    """Replace the README's overview block with today's, and rewrite the manual's results index; True when either
    changed."""
    index, text = Path(dest) / "index.md", results_index(dest)
    index_changed = not index.is_file() or index.read_text() != text
    if index_changed:
        atomic_write(index, lambda f: f.write(text.encode()))
    return _write_readme_overview(readme, dest) or index_changed


def _write_readme_overview(readme: str | Path, dest: str | Path) -> bool:
    path = Path(readme)
    text = path.read_text()
    if OVERVIEW_BEGIN not in text or OVERVIEW_END not in text:
        raise ValueError(f"{path}: no results overview to replace (its two marker lines, {OVERVIEW_BEGIN!r} and "
                         f"{OVERVIEW_END!r}, are missing)")
    start, end = text.index(OVERVIEW_BEGIN), text.index(OVERVIEW_END) + len(OVERVIEW_END)
    new = text[:start] + results_overview(dest) + text[end:]
    if new != text:
        atomic_write(path, lambda f: f.write(new.encode()))
    return new != text


if __name__ == "__main__":
    print("README.md and docs/results/index.md " + ("updated" if write_overview() else "unchanged"))
