"""A study's published page (``docs/results/NAME.md``): the study's setting and tuned side by side, verdicts
first, republished from the runs and the page as data kept beside it."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.experiments.defaults import FRESH_FIRST_SEED
from rnnlab.experiments.executors import read_calls
from rnnlab.experiments.findings import RESULTS_ROOT, render, render_reasons
from rnnlab.experiments.results import Run, StudyResults, Verdict
from rnnlab.experiments.runner import RunSpec, aggregate_seeds
from rnnlab.experiments.statistics import ALPHA, expected_max_band, seeds_to_decide
from rnnlab.files import copy_regular, csv_text, inside, read_csv, staged_publish, write_text
from rnnlab.metrics import is_count, metric_label
from rnnlab.page import PAGE_JSON, Block, Figure, Heading, Items, Page, Paragraph, Table, replace_section, section
from rnnlab.pages.format import (
    CLAIMS_CAPTION,
    CLAIMS_FIGURE,
    VERDICT_LEGEND,
    can_decide,
    claims_figure,
    fmt_number,
    metric_cell,
    power_sentence,
    verdict_cell,
)
from rnnlab.pages.published import read_page, write_page
from rnnlab.pages.run import results_table, seeds_sentence, settings_lines

SETTING, TUNED = "at the study's setting", "tuned"
RUNS_CSV = {SETTING: "runs.csv", TUNED: "tuned-runs.csv"}     # each run's metrics, beside the page


def _search_compute(search_dir: Path) -> tuple[float, int]:
    """(seconds, trials) of the searches stored under ``NAME-tuned/search/*/trials.csv``."""
    seconds = [s for path in sorted(search_dir.glob("*/trials.csv"))
               for s in read_csv(path, lambda row: float(row["seconds"] or 0.0), "a trial of the search")]
    return sum(seconds), len(seconds)


def _wall_time(calls: list[dict[str, Any]]) -> str:
    training = [c for c in calls if c["trained_now"]]
    runs = sum(c["trained_now"] for c in training)
    return (f"{sum(c['seconds'] for c in training) / 60:.1f} min ({len(training)} call"
            f"{'s' if len(training) != 1 else ''}, {runs} runs)")


@dataclass
class Variant:
    """One column of a published page: the verdicts and runs at the study's setting, or tuned; with
    the stored results and calls they came from when published from a run (republished: from runs.csv)."""

    verdicts: list[Verdict]
    seeds: int
    runs: list[Run]
    results: StudyResults | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    kept: KeptColumn | None = None


@dataclass
class KeptColumn:
    """A variant's column of a published page whose runs are not stored here (e.g. PTB's 28 hours at
    the study's setting, when only ``--tune`` is rerun): its sections as published, and the files
    beside the page they point to (its runs.csv, its figures), kept while the rest is rewritten."""

    compute: dict[str, str]          # the compute table's column, by row
    results: list[Block]             # '## Results LABEL', without the heading
    figures: list[Block]             # its '### … (LABEL)' figures
    settings: list[Block]            # '## Settings LABEL'
    notes: list[str]                 # the page's '## Notes' (shared by both variants when published)
    files: dict[str, bytes]          # name → contents, under the page's folder

    @classmethod
    def read(cls, dest: Path, name: str, label: str) -> KeptColumn:
        blocks = read_page(dest, name).blocks
        top = blocks[:next((i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.level == 2), len(blocks))]
        table = next((b for b in top if isinstance(b, Table) and b.header[:1] == [""]), None)
        if table is None:       # (page_from_dict holds each row to one cell per column: row[0] exists)
            raise ValueError(f"{dest / name / PAGE_JSON}: no compute table (a first column of row names) above its "
                             "first section; not a study's published page")
        column = table.header.index(label) if label in table.header else None
        compute = {row[0]: row[column] if column is not None else "–" for row in table.rows}
        figures, keep = [], False
        for block in section(blocks, "Figures"):
            if isinstance(block, Heading):
                keep = block.text.endswith(f"({label})")
            if keep:
                figures.append(block)
        notes = next((b.items for b in section(blocks, "Notes") if isinstance(b, Items)), [])
        files = [RUNS_CSV[label], *(Path(b.path).name for b in figures if isinstance(b, Figure))]
        if label == TUNED:
            files.append(SEARCH_TRIALS)
        return cls(compute, section(blocks, f"Results {label}"), figures, section(blocks, f"Settings {label}"), notes,
                   {f: (dest / name / f).read_bytes() for f in files if (dest / name / f).is_file()})


def _last_training_call(variant: Variant) -> dict[str, Any]:
    """The last call that trained (a later call may only have re-read the stored runs), else the results'."""
    trained = [c for c in variant.calls if c.get("trained_now")]
    results = variant.results
    return trained[-1] if trained else {"command": results.command, "date": results.date} if results else {}


def _compute_rows(variants: dict[str, Variant], search: tuple[float, int] | None) -> list[list[str]]:
    rows = _fresh_compute_rows({k: v for k, v in variants.items() if v.kept is None}, search)
    kept = [label for v in variants.values() if v.kept for label in v.kept.compute]
    labels = list(dict.fromkeys([row[0] for row in rows] + kept))
    fresh = {row[0]: dict(zip([k for k, v in variants.items() if v.kept is None], row[1:])) for row in rows}
    return [[label, *[variant.kept.compute.get(label, "–") if variant.kept else fresh.get(label, {}).get(k, "–")
                      for k, variant in variants.items()]] for label in labels]


def _fresh_compute_rows(variants: dict[str, Variant], search: tuple[float, int] | None) -> list[list[str]]:
    order = list(variants)
    if not order:
        return []
    calls = {k: _last_training_call(variants[k]) for k in order}
    results = {k: variants[k].results for k in order}
    rows = [["command that trained", *[f"`{calls[k].get('command') or '–'}`" for k in order]],
            ["measured", *[f"{calls[k].get('date', '–')}, rnnlab {results[k].version if results[k] else '?'}, "
                           f"{results[k].cores if results[k] else '?'} cores" for k in order]],
            ["seeds per configuration", *[str(variants[k].seeds) for k in order]],
            ["runs", *[str(len(variants[k].runs)) for k in order]],
            ["training time, summed over runs", *[f"{(results[k].compute_seconds if results[k] else 0.0) / 60:.1f} min"
                                                  for k in order]],
            ["wall time of the calls that trained", *[_wall_time(variants[k].calls) for k in order]]]
    if search is not None:
        rows.append(["search before training, summed over trials",
                     *[f"{search[0] / 60:.1f} min ({search[1]} trials)" if k == TUNED else "–" for k in order]])
    return rows


def _side_by_side(variants: dict[str, Variant], kind: str) -> list[list[str]]:
    """Rows of one kind of verdict (claims or published numbers), one column per variant."""
    texts: list[str] = []
    found: dict[tuple[str, str], Verdict] = {}
    for name, variant in variants.items():
        for v in variant.verdicts:
            if v.kind == kind:
                texts += [v.claim] if v.claim not in texts else []
                found[(v.claim, name)] = v
    rows = []
    for text in texts:
        cells = [verdict_cell(found[(text, n)]) if (text, n) in found else "–" for n in variants]
        row = [text, *cells]
        if kind == "published":
            row.append(next((found[(text, n)].reason for n in variants if (text, n) in found
                             and found[(text, n)].reason), ""))
        rows.append(row)
    return rows


def _in_short(variants: dict[str, Variant]) -> list[str]:
    """One line per claim or published number: its verdict in each variant (text-only numbers left out)."""
    lines: dict[str, list[str]] = {}
    for name, variant in variants.items():
        for v in variant.verdicts:
            if v.verdict != "shown only":
                lines.setdefault(v.claim, []).append(f"{name}: **{v.verdict}** ({v.evidence})")
    return [f"{claim} — {'; '.join(verdicts)}" for claim, verdicts in lines.items()]


def undecidable_lines(variants: dict[str, Variant], name: str) -> list[str]:
    """Per variant whose seeds cannot decide its claims on a continuous metric (the exact permutation test's
    smallest p is not below Holm's first level), what it would take: said at the top of the page."""
    lines = []
    for label, variant in variants.items():
        claims = [v for v in variant.verdicts if v.kind == "claim"]
        continuous = [v for v in claims if v.threshold is None and not is_count(v.metric)]
        deciding = ALPHA / max(len(claims), 1)
        if continuous and not can_decide(variant.seeds, deciding):
            needed = seeds_to_decide(deciding)
            lines.append(f"{label}: with {variant.seeds} seeds a side none of its {len(continuous)} claims on a "
                         f"continuous metric can be decided (the exact permutation p cannot fall below "
                         f"{deciding:.3g}, Holm's first level); that takes at least {needed} seeds a side "
                         f"(`rnnlab reproduce {name} --seeds {needed}{' --tune' if label == TUNED else ''}`)")
    return lines


def _in_short_block(variants: dict[str, Variant], name: str) -> list[Block]:
    in_short = _in_short(variants)
    undecidable = undecidable_lines(variants, name)
    blocks: list[Block] = [Paragraph("**Not decidable with these seeds**"), Items(undecidable)] if undecidable else []
    return blocks + ([Paragraph("**In short**"), Items(in_short)] if in_short else [])


def _verdicts_block(variants: dict[str, Variant], name: str, figures_dir: Path) -> list[Block]:
    """The page's '## Verdicts' section: the legend, what the seeds can detect, the claims and published
    numbers side by side, and each variant's strip of per-seed dots (written into ``figures_dir``)."""
    claims, published = _side_by_side(variants, "claim"), _side_by_side(variants, "published")
    if not claims and not published:
        return []
    parts: list[Block] = [Heading("Verdicts"), Paragraph(VERDICT_LEGEND)]
    first = min((r.seed for r in variants[TUNED].runs), default=FRESH_FIRST_SEED) if TUNED in variants \
        else FRESH_FIRST_SEED
    if first < FRESH_FIRST_SEED:
        parts.append(Paragraph(f"The tuned runs on this page predate the rule that tuned runs train on seeds the "
                               f"search never trained (from {FRESH_FIRST_SEED}): they used seeds from {first:.0f}, as "
                               "the search did, and its searched settings were selected on one seed or two, so "
                               "'tuned' may flatter the configuration that won the search. `rnnlab reproduce NAME "
                               "--tune --publish` replaces them."))
    sentences = {label: power_sentence(variant.seeds, sum(v.kind == "claim" for v in variant.verdicts))
                 for label, variant in variants.items()}
    if len(set(sentences.values())) == 1:
        parts.append(Paragraph(next(iter(sentences.values()))))
    else:
        parts.append(Items([f"{label}: {sentence}" for label, sentence in sentences.items()]))
    if claims:
        parts += [Heading("Claims, tested over seeds", 3), Table(["claim", *variants], claims)]
        for label, variant in variants.items():
            target = figures_dir / (("tuned-" if label == TUNED else "") + CLAIMS_FIGURE)
            if claims_figure(variant.verdicts, target) is not None:
                parts.append(Figure(f"{name}/{target.name}", f"the runs behind each claim, {label}",
                                    f"{CLAIMS_CAPTION} ({label})", heading=False))
    if published:
        parts += [Heading("Published numbers against ours", 3),
                  Table(["published", *variants, "measured reason"], published)]
    return parts


def stored_verdicts(exp: Any, runs: list[Run], root: str | Path = RESULTS_ROOT) -> list[Verdict]:
    """The verdicts of a study from its stored per-run metrics (``NAME/runs.csv``): the claims and
    published numbers whose configurations the runs hold (a tuned run holds only those it tunes),
    with the measured reasons computed from the published results under ``root``."""
    from rnnlab.experiments.verdicts import verdict_table

    keys = {run.key for run in runs}
    claims = [c for c in exp.claims if c.better in keys and c.worse in keys]
    published = {k: v for k, v in exp.published.items() if k[0] in keys}
    reasons = render_reasons({k: v for k, v in exp.reasons.items() if k in published}, Path(root), exp.published)
    return verdict_table(claims, published, reasons, runs)


def read_runs_csv(path: str | Path) -> list[Run]:
    """A published runs.csv: one run per row (an empty cell is no measurement); a damaged row is refused naming
    the file and line."""
    runs = read_csv(path, Run.from_row, "a run")
    if not runs:
        raise ValueError(f"{path}: no runs; not a published runs.csv")
    return runs


def republish_verdicts(name: str, dest: str | Path = "docs/results") -> Path:
    """Recompute the verdicts of the published page ``dest/NAME.md`` from the runs published beside it
    (``NAME/runs.csv``, ``NAME/tuned-runs.csv``) with today's statistics, and rewrite its 'In short' and
    'Verdicts' sections (and the claims' strips of dots), and its 'Tuning budget' from the search trials
    beside it (``NAME/search-trials.csv``); the rest of the page, measured then, stays. Written through
    a staging copy, like every publish (``files.staged_publish``)."""
    with staged_publish(dest, f"study {name}") as stage:
        _republish_verdicts(name, stage)
    return Path(dest) / f"{name}.md"


def stored_variants(exp: Any, dest: Path) -> dict[str, Variant]:
    """A published study's columns judged today from the runs published beside its page (``RUNS_CSV``)."""
    variants: dict[str, Variant] = {}
    for label, file in RUNS_CSV.items():
        if (dest / exp.name / file).is_file():
            runs = read_runs_csv(dest / exp.name / file)
            variants[label] = Variant(stored_verdicts(exp, runs, dest), _seeds_of(runs), runs)
    return variants


def _republish_verdicts(name: str, dest: Path) -> Path:
    from rnnlab.experiments.studies import EXPERIMENTS

    exp = EXPERIMENTS[name]
    variants = stored_variants(exp, dest)
    if not variants:
        raise FileNotFoundError(f"republish {name}: no {' or '.join(RUNS_CSV.values())} under {dest / name}")
    published = read_page(dest, name)
    start = next((i for i, b in enumerate(published.blocks)
                  if isinstance(b, Paragraph) and b.text.startswith("Study: ")), None)
    if start is None:
        raise ValueError(f"{dest / name / PAGE_JSON}: no 'Study: …' paragraph; not a study's published page")
    body = published.blocks[start:]
    for label, variant in variants.items():         # the numbers as the runs beside the page give them
        body = replace_section(body, f"Results {label}", [Heading(f"Results {label}"), *[
            _recomputed_table(b, variant.runs) if isinstance(b, Table) else b
            for b in section(body, f"Results {label}")]]) if section(body, f"Results {label}") else body
    if Heading("Verdicts") in body:
        body = replace_section(body, "Verdicts", _verdicts_block(variants, name, dest / name))
    if section(body, TUNING_BUDGET) and (dest / name / SEARCH_TRIALS).is_file():
        body = replace_section(body, TUNING_BUDGET, expected_best_block(dest / name / SEARCH_TRIALS, exp, dest / name,
                                                                        name))
    findings = [render(finding, dest, exp.published) for finding in exp.findings]
    if findings:
        body = replace_section(body, FINDINGS, [Heading(FINDINGS), Items(findings)], before="Results")
    page = Page(published.title, _in_short_block(variants, name) + body)
    return write_page(page, dest / f"{name}.md", dest / name / PAGE_JSON)


SEARCH_TRIALS = "search-trials.csv"     # every trial of the tuned page's searches, beside the page
FINDINGS = "Findings"                   # the study's measured findings (findings.toml), from the published runs
TUNING_BUDGET = "Tuning budget"


def copy_search_trials(search_dir: Path, target: Path) -> Path | None:
    """The searches' trials (``NAME-tuned/search/KEY/trials.csv``) as one file with a ``configuration``
    column; None when no search is stored."""
    rows = [row for path in sorted(search_dir.glob("*/trials.csv"))
            for row in read_csv(path, lambda row, key=path.parent.name: {"configuration": key, **row},
                                "a trial of the search")]
    if not rows:
        return None
    columns = list(dict.fromkeys(k for row in rows for k in row))
    write_text(target, csv_text([{c: row.get(c) for c in columns} for row in rows]))
    return target


def expected_best(trials_csv: Path, metric: str, higher_is_better: bool) -> dict[str, np.ndarray]:
    """Per tuned configuration, Dodge et al.'s expected best score of its search after n = 1…N trials,
    a trial being one searched setting scored by its mean over seeds (failed seeds left out)."""
    def scored(row: dict[str, str]) -> dict[str, Any]:      # the metric a number, None where not measured
        return {**row, "configuration": row["configuration"], metric: float(row[metric]) if row.get(metric) else None}

    rows = read_csv(trials_csv, scored, "a trial of the searches")
    columns = list(rows[0]) if rows else []
    searched = columns[columns.index("id") + 1:columns.index("seed")] if {"id", "seed"} <= set(columns) else []
    curves = {}
    for key in dict.fromkeys(r["configuration"] for r in rows):
        scores: dict[tuple, list[float]] = {}
        for r in rows:
            if r["configuration"] != key or r.get("status", "ok") != "ok" or r[metric] is None:
                continue
            scores.setdefault(tuple(r[c] for c in searched), []).append(r[metric])
        if scores:
            curves[key] = expected_max_band([float(np.mean(v)) for v in scores.values()],
                                            higher_is_better=higher_is_better)
    return curves


def expected_best_block(trials_csv: Path, exp: Any, figures_dir: Path, name: str) -> list[Block]:
    """The tuned page's 'Tuning budget' section: the expected best dev score of each configuration's
    search against the number of trials, and whether the configurations' order depends on the budget."""
    from rnnlab.analysis.plots import plot_learning_curves
    from rnnlab.experiments.settings import read_toml

    search = read_toml("", text=exp.search, where=f"the search of study {exp.name}")
    metric, higher = search["metric"], search.get("mode", "min") == "max"
    bands = expected_best(trials_csv, metric, higher)
    if not bands:
        return []
    curves = {k: mean for k, (mean, _) in bands.items()}
    path = plot_learning_curves({k: (np.arange(1, len(m) + 1), m, m - sd, m + sd) for k, (m, sd) in bands.items()},
                                figures_dir / "tuned-expected-best.png", "trials of the search (n)",
                                f"expected best {metric}", "Expected best score against the tuning budget (± 1 sd)")
    lines = [f"{key}: {fmt_number(c[0])} after 1 trial → {fmt_number(c[-1])} after {len(c)}"
             for key, c in curves.items()]
    sign = -1 if higher else 1
    # the pairs the study's claims compare (else every pair): does the better one depend on the budget?
    claimed = {frozenset((c.better, c.worse)): (c.better, c.worse) for c in reversed(exp.claims)
               if c.better in curves and c.worse in curves}       # a pair claimed both ways: counted once
    pairs = list(reversed(claimed.values())) or [(a, b) for i, a in enumerate(curves) for b in list(curves)[i + 1:]]
    findings = []
    for a, b in pairs:
        width = min(len(curves[a]), len(curves[b]))
        ahead = [a if sign * (curves[a][n] - curves[b][n]) < 0 else b for n in range(width)]
        changes = [n + 1 for n in range(1, width) if ahead[n] != ahead[n - 1]]
        findings.append(f"{a} vs {b}: {ahead[-1]} ahead at every budget from 1 to {width} trials" if not changes else
                        f"{a} vs {b}: the winner depends on the budget ({ahead[0]} ahead after 1 trial, "
                        f"{ahead[-1]} after {width}; they cross at n = {', '.join(map(str, changes))})")
    still = [k for k, c in curves.items() if len(c) > 1 and abs(c[-1] - c[-2]) > 0.01 * max(abs(c[0] - c[-1]), 1e-12)]
    finding = "; ".join(findings) if findings else "one configuration tuned"
    improving = (f"; still improving at the last trial (more than 1% of its gain): {', '.join(still)}" if still
                 else "; every curve has flattened by its last trial")
    return [Heading(TUNING_BUDGET),
            Paragraph(f"Expected best {metric} of each configuration's search after n of its trials (Dodge et al. "
                      f"2019, the best of n of the search's trials drawn without replacement, so that n = all of "
                      f"them is the search's own best; the band is ± one standard deviation; a trial is one "
                      f"searched setting, scored by its mean over the search's seeds; every trial: "
                      f"[{SEARCH_TRIALS}]({name}/{SEARCH_TRIALS})). {'; '.join(lines)}. Finding: "
                      f"{finding}{improving}."),
            Figure(f"{name}/{path.name}", "expected best against the budget", heading=False)]


def write_published(out_root: str | Path, name: str, dest: str | Path = "docs/results") -> Path:
    """``dest/NAME.md`` and its plots (``dest/NAME/*.png``) from the stored results of ``reproduce
    NAME`` (at the study's setting) and ``reproduce NAME --tune`` (tuned), whichever exist, side by
    side: the verdicts first, then what was measured, with the date, seeds, time and version. A
    variant whose results are not stored here but is on the published page keeps its column as
    published (its sections and files), so that rerunning one variant does not need the other.
    Published through a staging copy (``files.staged_publish``): only files this study published
    before are replaced or removed."""
    for label, folder in _stored_folders(Path(out_root), name).items():
        runs = StudyResults.load(folder / "results.json").runs
        check_replaces_no_fewer_seeds(dest, name, label, dict(Counter(run.key for run in runs)), out=folder)
    with staged_publish(dest, f"study {name}") as stage:
        _write_published(Path(out_root), name, stage)
    return Path(dest) / f"{name}.md"


def published_seeds(dest: str | Path, name: str, label: str) -> dict[str, int]:
    """Seeds per configuration of the column ``label`` published with ``dest/NAME.md`` ({} when none is)."""
    runs_csv = _published_runs_csv(Path(dest), name, label)
    return dict(Counter(run.key for run in read_runs_csv(runs_csv))) if runs_csv else {}


def _published_runs_csv(dest: Path, name: str, label: str) -> Path | None:
    """The runs of the column ``label`` published in ``dest`` (beside its page, as Markdown or as data), if any:
    a page that lost its Markdown keeps its columns' runs."""
    runs_csv = dest / name / RUNS_CSV[label]
    page = (dest / f"{name}.md").is_file() or (dest / name / PAGE_JSON).is_file()
    return runs_csv if runs_csv.is_file() and page else None


def check_replaces_no_fewer_seeds(dest: str | Path, name: str, label: str, seeds: int | dict[str, int],
                                  out: str | Path | None = None) -> None:
    """Refuse a publish into ``dest`` that would replace the column ``label`` of the page published there
    with fewer seeds of any configuration: before training, the ``seeds`` per configuration asked for;
    after, with ``out`` (where the runs are kept), the seeds stored per configuration."""
    published = published_seeds(dest, name, label)
    asked = {key: seeds if isinstance(seeds, int) else seeds.get(key, n) for key, n in published.items()}
    fewer = {key: n for key, n in sorted(published.items()) if asked[key] < n}
    if not fewer:
        return
    most = max(fewer.values())
    listed = "; ".join(f"{key} {asked[key]} of its {n}" for key, n in list(fewer.items())[:4])
    more = f"; and {len(fewer) - 4} more" if len(fewer) > 4 else ""
    where = f"--publish {dest}: the column '{label}' of {name}.md published there"
    if out is None:
        raise ValueError(f"{where} has up to {most} seeds per configuration; --seeds {seeds} would replace it with "
                         f"fewer ({listed}{more}). Give --seeds {most} or more, or publish to another DIR; nothing "
                         "was trained or written")
    raise ValueError(f"{where} would be replaced with fewer seeds ({listed}{more}). What trained is kept in {out}, "
                     f"with its report; run again with --seeds {most} to add seeds, or publish to another DIR; "
                     "nothing was published")


def _stored_folders(out_root: Path, name: str) -> dict[str, Path]:
    """The folders under ``out_root`` that hold stored results of NAME, by the column they fill."""
    folders = {SETTING: out_root / name, TUNED: out_root / f"{name}-tuned"}
    return {label: folder for label, folder in folders.items() if (folder / "results.json").is_file()}


def _published_variants(out_root: Path, name: str, dest: Path) -> tuple[dict[str, Variant], dict[str, Path]]:
    """The page's columns: each variant stored under ``out_root`` (with its folder), else kept as published
    in ``dest``; refused when nothing is stored."""
    variants: dict[str, Variant] = {}
    folders = _stored_folders(out_root, name)
    for label in (SETTING, TUNED):
        if label in folders:
            results = StudyResults.load(folders[label] / "results.json")
            variants[label] = Variant(results.verdicts, results.seeds, results.runs, results,
                                      read_calls(folders[label]))
        elif runs_csv := _published_runs_csv(dest, name, label):
            runs = read_runs_csv(runs_csv)
            variants[label] = Variant([], _seeds_of(runs), runs, kept=KeptColumn.read(dest, name, label))
    if not folders:
        raise FileNotFoundError(f"--publish: no results of {name} under {out_root} (run rnnlab reproduce {name})")
    return variants, folders


def _figure_blocks(variants: dict[str, Variant], folders: dict[str, Path], figures_dir: Path, name: str) -> list[Block]:
    """Each variant's figures, copied beside the page (a tuned plot identical to the setting's once), with
    their headings; a kept column's as published."""
    figures: list[Block] = []
    for label, variant in variants.items():
        if variant.kept:
            figures += variant.kept.figures
            continue
        for f in variant.results.figures:
            source = inside(folders[label], f["path"], f"{folders[label] / 'results.json'}: figure")
            target = figures_dir / (("tuned-" if label == TUNED else "") + Path(f["path"]).name)
            twin = figures_dir / target.name.removeprefix("tuned-")
            if label == TUNED and twin.is_file() and twin.read_bytes() == source.read_bytes():
                continue    # the same plot either way (an analysis of untrained cells)
            copy_regular(source, target, folders[label])
            figures += [Heading(f"{f['title']} ({label})", 3), Figure(f"{name}/{target.name}", f["title"],
                                                                      f["caption"], heading=False)]
    return [Heading("Figures"), *figures] if figures else []


def _write_published(out_root: Path, name: str, dest: Path) -> Path:
    variants, folders = _published_variants(out_root, name, dest)
    stored = {label: variants[label].results for label in folders}
    if any(results.quick for results in stored.values()):
        raise ValueError(f"--publish: the stored results of {name} were made with --quick; publish full runs only")
    first = next(iter(stored.values()))
    figures_dir = dest / name
    if figures_dir.exists():
        shutil.rmtree(figures_dir)
    figures_dir.mkdir(parents=True)
    for variant in variants.values():
        for file, content in (variant.kept.files if variant.kept else {}).items():
            (figures_dir / file).write_bytes(content)
    search = _search_compute(out_root / f"{name}-tuned" / "search") if TUNED in folders else None
    blocks: list[Block] = [Paragraph(f"Study: {first.study}. {first.about}"),
                           Table(["", *variants], _compute_rows(variants, search))]
    per_run = []
    for label in variants:   # what a reader needs to recompute every verdict below
        target = figures_dir / RUNS_CSV[label]
        if label in folders:
            copy_regular(folders[label] / "results.csv", target, folders[label])
        per_run.append(f"[{label}]({name}/{target.name})")
    blocks.append(Paragraph(f"Every run's final metrics, one row per seed (the verdicts are computed from these): "
                            f"{' · '.join(per_run)}."))
    blocks.append(Heading("Verdicts"))        # written by republish_verdicts below, from the runs.csv files
    trials = (copy_search_trials(out_root / f"{name}-tuned" / "search", figures_dir / SEARCH_TRIALS)
              if TUNED in folders else figures_dir / SEARCH_TRIALS if (figures_dir / SEARCH_TRIALS).is_file() else None)
    if trials is not None:
        from rnnlab.experiments.studies import EXPERIMENTS

        blocks += expected_best_block(trials, EXPERIMENTS[name], figures_dir, name)
    notes = {label: v.kept.notes if v.kept else v.results.notes for label, v in variants.items()}
    common = [n for n in notes[next(iter(folders))] if all(n in own for own in notes.values())]
    for label, variant in variants.items():
        own = [n for n in notes[label] if n not in common]   # its analyses' findings, what the search chose
        if variant.kept:
            blocks += [Heading(f"Results {label}"), *variant.kept.results, *([Items(own)] if own else [])]
        else:
            blocks += [Heading(f"Results {label}"),
                       Paragraph(seeds_sentence(variant.results).split(" Time of this call")[0]),
                       Table(*results_table(variant.results)), *([Items(own)] if own else [])]
    if common:
        blocks += [Heading("Notes"), Items(common)]
    blocks += _figure_blocks(variants, folders, figures_dir, name)
    for label, variant in variants.items():
        blocks += [Heading(f"Settings {label}"),
                   *(variant.kept.settings if variant.kept else [Items(settings_lines(variant.results))])]
    write_page(Page(first.title.removesuffix(" (tuned)"), blocks), dest / f"{name}.md", dest / name / PAGE_JSON)
    # the verdicts as every republish computes them: from the runs.csv just written, with the measured
    # reasons quoting the results (this page's notes included) as they now stand
    return _republish_verdicts(name, dest)


def _recomputed_table(table: Table, runs: list[Run]) -> Table:
    """A published results table (configuration, parameters, seeds, then one column per metric) with every number
    computed again from ``runs`` (its runs.csv) as the study's report computes it: a page whose table was edited to
    disagree with its runs — its hash updated in the manifest too — changes on republishing, so ``--check`` reports
    it. A table of another shape, or a column of no metric the runs hold, stays as published."""
    if table.header[:3] != ["configuration", "parameters", "seeds"]:
        return table
    names = {metric_label(m): m for r in runs for m in r.metrics}
    metrics = [names.get(label) for label in table.header[3:]]
    rows = []
    for row in table.rows:
        mine = [r for r in runs if r.key == row[0]]
        if not mine:
            rows.append(row)
            continue
        summary = aggregate_seeds([RunSpec(row[0], "", {})], mine, [m for m in metrics if m])[0]
        params = summary["num_params"]
        params = str(int(params)) if isinstance(params, float) and params.is_integer() else str(params)
        rows.append([row[0], params, str(summary["seeds"]),
                     *[metric_cell(summary, m) if m else cell for m, cell in zip(metrics, row[3:])]])
    return Table(table.header, rows, table.kind, table.title)


def _seeds_of(runs: list[Run]) -> int:
    """The seeds per configuration of a runs.csv: the fewest any configuration has."""
    return min(sum(r.key == key for r in runs) for key in {r.key for r in runs})
