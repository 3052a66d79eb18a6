"""Every page a results folder publishes, judged again by today's code from the data kept beside it.

A published folder (``docs/results``, or one a co-author sends) keeps, beside each page, what the page was made
from: a study's runs (``NAME/runs.csv``), a sweep's trials (``MAP/trials.csv``), a benchmark's or the Greff arm's
results (``NAME.json``). Its manifests say which command wrote which file, so the pages are found by what wrote
them, never by their names, and nothing is imported or trained: only the statistics and the page text are
today's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from rnnlab.experiments import importance
from rnnlab.experiments.greff import GreffResults
from rnnlab.experiments.studies import EXPERIMENTS
from rnnlab.files import MANIFEST, copy_tree_regular, files_under, read_manifest
from rnnlab.page import PAGE_JSON
from rnnlab.pages.bench import republish_bench
from rnnlab.pages.greff import republish_greff
from rnnlab.pages.study import republish_verdicts
from rnnlab.pages.sweep import republish_sweep_comparisons

KINDS = ("study", "map", "bench", "greff")       # in the order they are republished: the slow fANOVA last


@dataclass(frozen=True)
class PublishedPage:
    """One page of a published folder: its ``kind`` (``KINDS``) and its ``name`` (a study's name, a map's
    folder, a benchmark's or the Greff arm's file stem)."""

    kind: str
    name: str


def published_pages(dest: str | Path) -> list[PublishedPage]:
    """The pages published into ``dest``, read from its manifests (who wrote each file): a study's page data
    (``NAME/page.json``, written by "study NAME"), a sweep's report in a folder of its own ("sweep FILE"), and the
    results of a cell benchmark ("bench-cells") or of the Greff arm ("greff") beside their page."""
    dest = Path(dest)
    pages = []
    for rel, (owner, _) in (read_manifest(dest) or {}).items():
        writer, _, name = owner.partition(" ")
        if writer == "study" and rel == f"{name}/{PAGE_JSON}":
            pages.append(PublishedPage("study", name))
        elif owner in ("bench-cells", "greff") and "/" not in rel and rel.endswith(".json"):
            pages.append(PublishedPage("bench" if owner == "bench-cells" else "greff", rel[:-len(".json")]))
    for manifest in dest.glob(f"*/{MANIFEST}"):
        owners = read_manifest(manifest.parent) or {}
        if owners.get("report.md", ("",))[0].startswith("sweep ") and "trials.csv" in owners:
            pages.append(PublishedPage("map", manifest.parent.name))
    return sorted(pages, key=lambda p: (KINDS.index(p.kind), p.name))


def republish(page: PublishedPage, dest: str | Path, stands_in: str | Path | None = None) -> list[str]:
    """``page`` of ``dest`` judged again from its stored data and written through its manifest (``files``: only
    what rnnlab wrote is replaced); returns the files (relative to ``dest``) whose bytes changed. A map's sweep
    file is looked for from the folders above ``dest``, or above ``stands_in`` where ``dest`` is a copy of it."""
    dest = Path(dest)
    if page.kind == "study" and page.name not in EXPERIMENTS:
        raise ValueError(f"{dest / page.name / PAGE_JSON}: study {page.name!r} is not one this version of rnnlab "
                         "defines; its verdicts cannot be judged again")
    if page.kind == "greff" and not importance.available() and any(
            GreffResults.load(dest / f"{page.name}.json").importance.values()):
        raise ValueError(f"{dest / page.name}.json: judging the Greff arm again needs its fANOVA, which is not "
                         "installed: pip install 'rnnlab[importance]' (without it the page would lose its importance)")
    before = _files(dest)
    if page.kind == "study":
        republish_verdicts(page.name, dest)
    elif page.kind == "map":
        republish_sweep_comparisons(dest / page.name, Path(stands_in or dest) / page.name)
    elif page.kind == "bench":
        republish_bench(dest / f"{page.name}.md")
    else:
        republish_greff(dest / f"{page.name}.md")
    after = _files(dest)
    return sorted(rel for rel in after.keys() | before.keys() if before.get(rel) != after.get(rel))


def unlisted_pages(dest: str | Path, pages: list[PublishedPage]) -> list[str]:
    """The pages of ``dest`` that no manifest accounts for (a Markdown page at its top, or a folder's
    ``report.md``, that is neither one of ``pages`` nor the results index): nothing rnnlab keeps says what they
    were made from, so their numbers cannot be checked, and a check says so instead of passing them by."""
    dest = Path(dest)
    known = {INDEX}
    for page in pages:
        known.add(f"{page.name}/report.md" if page.kind == "map" else f"{page.name}.md")
    found = [rel for rel in files_under(dest) if rel.endswith(".md") and (rel.count("/") == 0 or (
        rel.count("/") == 1 and rel.endswith("/report.md")))]
    return sorted(rel for rel in found if rel not in known)


INDEX = "index.md"      # the manual's results index (``pages.overview``), computed from the pages themselves


def index_would_change(dest: str | Path) -> bool:
    """Whether ``dest``'s results index differs from the one its pages give today (``pages.overview``)."""
    from rnnlab.pages.overview import results_index

    index = Path(dest) / INDEX
    return index.is_file() and index.read_text() != results_index(dest)


def is_figure(rel: str) -> bool:
    """Whether a published file is a figure: drawn again on republishing, its bytes are the plotting library's
    version's as much as the data's, so a figure alone does not make a page changed."""
    return rel.endswith(".png")


def would_change(page: PublishedPage, dest: str | Path) -> list[str]:
    """What ``republish`` would change, found in a copy of ``dest``: ``dest`` is not touched. An error names the
    file of ``dest`` that its copy's file stands for."""
    with tempfile.TemporaryDirectory(prefix="rnnlab-republish-") as scratch:
        copy = Path(scratch) / "results"
        copy_tree_regular(dest, copy)
        try:
            return republish(page, copy, stands_in=dest)
        except ValueError as err:
            raise ValueError(str(err).replace(str(copy), str(dest))) from None


def _files(folder: Path) -> dict[str, bytes]:
    return {rel: path.read_bytes() for rel, path in files_under(folder).items()}
