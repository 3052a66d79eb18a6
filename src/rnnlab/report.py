"""Reports: ``report.html`` (one self-contained page, plots embedded as data URIs) and ``report.md``
from an experiment's results dict (``runs/NAME/results.json``)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.engines.threads import cpu_cores
from rnnlab.experiments.bench_cells import DECIDING_TEST, EQUIVALENCE_TEST
from rnnlab.experiments.executors import read_calls
from rnnlab.experiments.findings import RESULTS_ROOT, render, render_reasons
from rnnlab.experiments.results import Run, StudyResults, Verdict
from rnnlab.experiments.runner import TUNED_FIRST_SEED
from rnnlab.experiments.statistics import (
    ALPHA,
    detectable_permutation,
    expected_max_band,
    p_shown,
    seeds_to_decide,
    smallest_permutation_p,
)
from rnnlab.files import atomic_write, inside, staged_publish
from rnnlab.metrics import is_count
from rnnlab.page import (
    ON_PAGES,
    Block,
    Figure,
    Heading,
    Items,
    Page,
    Paragraph,
    Table,
    markdown,
    md_table,
    page_from_dict,
    page_to_dict,
    replace_section,
    section,
)
from rnnlab.page import html as html_page
from rnnlab.page import text as terminal_text
from rnnlab.version import __version__

METRIC_NAMES = {
    "test_accuracy": "test accuracy", "train_accuracy": "train accuracy", "dev_accuracy": "dev accuracy",
    "test_loss": "test loss", "train_loss": "train loss", "dev_loss": "dev loss",
    "test_perplexity": "test perplexity", "dev_perplexity": "dev perplexity",
    "train_solved": "train solved", "test_solved": "test solved", "test_final_step_accuracy": "test final T/P right",
    "test_step_accuracy": "test steps right", "seconds_per_epoch": "s / epoch",
    "test_all_solved": "trials solving all test strings",
    "gradient_median": "median abs. gradient per string",
    "step10_gradient_share": "10th step back / full gradient",
    "first_step_gradient_log10": "log10 gradient, first / last step",
    "best_epoch": "best-dev epoch",
}


def metric_label(metric: str) -> str:
    """A metric's column header: its name, or a history metric's as "NAME, epoch N"."""
    if metric in METRIC_NAMES:
        return METRIC_NAMES[metric]
    history = re.fullmatch(r"(\w+)_epoch(\d+)", metric)
    if history:
        return f"{metric_label(history.group(1))}, epoch {history.group(2)}"
    return metric.replace("_", " ")


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e5):
        return f"{value:.3g}"
    return f"{value:.4f}" if magnitude < 10 else f"{value:.2f}"


def _cell(row: dict, metric: str) -> str:
    if f"{metric}_mean" not in row:
        return "–"
    mean, std, n = row[f"{metric}_mean"], row[f"{metric}_std"], row.get(f"{metric}_n", row["seeds"])
    if is_count(metric):   # trials that succeeded: a count, not a mean of 0/1
        return f"{round(mean * n)} of {n}"
    if metric.startswith("seconds"):
        return f"{mean:.2g} ± {std:.1g}" if n > 1 else f"{mean:.2g}"
    return f"{_fmt(mean)} ± {_fmt(std)}" if n > 1 else _fmt(mean)


def _p(p: float | None) -> str:
    return "–" if p is None else p_shown(p)


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None else f" [{_fmt(low)}, {_fmt(high)}]"


def _verdict_interval(v: Verdict) -> str:
    """A claim's interval, and its coverage where the deciding (Holm-adjusted) p sets another than 95%."""
    if v.low is None:
        return (" (no interval: with these seeds the exact p cannot fall below this level)"
                if v.kind != "published" and v.p_value is not None and v.difference is not None else "")
    shown = _interval(v.low, v.high)
    if v.coverage is not None:
        shown += f" ({100 * v.coverage:.3g}% interval: the level Holm's adjusted p implies)"
    return shown


def _power(v: Verdict) -> str:
    """What the seeds can tell: seeds needed for the measured difference, the smallest detectable one."""
    parts = []
    if v.detectable is not None and math.isfinite(v.detectable):
        parts.append(f"detectable with 80% power: {_fmt(v.detectable)}")
    if v.seeds_needed is not None and not v.verdict.startswith(("reproduced", "not reproduced")):
        parts.append(f"the measured difference needs ~{v.seeds_needed} seeds a side")
    return "; ".join(parts) or "–"


def _prediction(v: Verdict) -> str:
    """Where one more of our runs would fall (95%), beside a published single run."""
    return "–" if v.prediction_low is None else f"[{_fmt(v.prediction_low)}, {_fmt(v.prediction_high)}]"


def verdict_tables(results: StudyResults) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for the claims and for the published numbers, verdict first."""
    out = []
    claims = [[v.verdict, v.claim, v.evidence, "–" if v.difference is None else
               _fmt(v.difference) + _verdict_interval(v), v.test, _p(v.p_value),
               _p(v.p_adjusted),
               "–" if v.prob_superiority is None else f"{v.prob_superiority:.2f}", _power(v), v.reason or "–"]
              for v in results.verdicts if v.kind == "claim"]
    if claims:
        out.append(("Claims, tested over seeds",
                    ["verdict", "claim", "evidence", "difference [interval]", "test", "p", "p (Holm)",
                     "P(A>B)", "power", "why not reproduced"], claims))
    published = [[v.verdict, v.claim, v.evidence, "–" if v.difference is None else
                  _fmt(v.difference) + _interval(v.low, v.high),
                  "–" if v.tolerance is None else f"±{v.tolerance:.3g} ({v.tolerance_why})",
                  _prediction(v), v.test, _p(v.p_adjusted), v.reason]
                 for v in results.verdicts if v.kind == "published"]
    if published:
        out.append(("Published numbers against ours",
                    ["verdict", "published", "ours", "ours − published [95% CI]", "tolerance",
                     "one run of ours (prediction interval)", "test", "p (Holm)", "measured reason"], published))
    return out


def power_sentence(n: int, claims: int = 1, level: float = 0.05) -> str:
    """What ``n`` seeds a side can decide at the level Holm's method sets for the first of ``claims`` claims
    (``level`` / ``claims``): nothing, when the exact permutation test's smallest p is above it (the study
    says so and how many seeds it needs), else the smallest difference found with 80% power."""
    if n < 2:
        return "One seed per configuration: no difference can be tested."
    deciding = level / max(claims, 1)
    at = f"two-sided α = {level:g}" if claims <= 1 else (f"two-sided α = {level:g}/{claims} = {deciding:.3g}, the "
                                                         f"level Holm's method sets for the first of {claims} claims")
    smallest = smallest_permutation_p(n, n)
    if not _can_decide(n, deciding):
        return (f"**With {n} seeds a side no claim on a continuous metric can be decided**: the exact permutation "
                f"p of {n} vs {n} seeds is at least {smallest:.3g}, not below {at}. Such a claim reads 'not "
                f"significant' whatever its difference; deciding it takes at least {seeds_to_decide(deciding)} seeds "
                f"a side, and its row gives the seeds its measured spread would need. (A count claim's exact test "
                f"has its own smallest p.)")
    return (f"With {n} seeds a side, a difference must be about {detectable_permutation(n, n, alpha=deciding):.1f} "
            f"standard deviations of the runs to be found with 80% power by the exact permutation test ({at}); "
            f"each claim's row gives that smallest detectable difference in its metric's units, and a 'not "
            f"significant' one the seeds its measured spread would need.")


def results_table(results: StudyResults) -> tuple[list[str], list[list[str]]]:
    metrics = results.metrics
    header = ["configuration", "parameters", "seeds"] + [metric_label(m) for m in metrics]
    rows = [[row["key"], str(row["num_params"]), str(row["seeds"])] + [_cell(row, m) for m in metrics]
            for row in results.summary]
    return header, rows


def _settings_lines(results: StudyResults) -> list[str]:
    lines = []
    for c in results.configurations:
        extra = ", ".join(f"{k}={v}" for k, v in {**c["settings"], **c["task_options"]}.items())
        lines.append(f"{c['key']}: task {c['task']}" + (f"; {extra}" if extra else ""))
    return lines


def _seeds_sentence(results: StudyResults) -> str:
    counts = sorted(set(results.seeds_by_key.values()))
    if len(counts) > 1:
        spread = (f"Seeds per configuration were chosen by the sequential plan: {counts[0]} to {counts[-1]} (the "
                  "results table gives each); values are mean ± standard deviation over seeds.")
    elif results.seeds == 1:
        spread = "Each configuration was trained with 1 seed: a single run, so the ± 0 below is no spread."
    else:
        spread = (f"Each configuration was trained with {results.seeds} seeds; values are mean ± standard deviation "
                  "over seeds.")
    return f"{spread} Time of this call {results.seconds:.0f} s (jobs already done are not retrained)."


def study_page(results: StudyResults, exp_dir: Path) -> Page:
    """A study run's report as one page: the verdicts first, then the results, notes, figures, settings."""
    blocks: list[Block] = [Paragraph(f"Study: {results.study}. {results.about}", "about", ON_PAGES)]
    if results.quick:
        blocks.append(Paragraph("**Quick mode**: data and epochs were shrunk so this ran in seconds. These numbers "
                                "check that the pipeline works; they are not the study's results.", "warning"))
    blocks.append(Paragraph(_seeds_sentence(results)))
    verdicts = verdict_tables(results)
    if verdicts:
        blocks += [Heading("Verdicts", anchor="verdicts"), Paragraph(VERDICT_LEGEND, show=ON_PAGES),
                   Paragraph(power_sentence(results.seeds, sum(v.kind == "claim" for v in results.verdicts),
                                            (results.sequential or {}).get("level", 0.05)))]
        for title, header, rows in verdicts:
            blocks += [Heading(title, 3), Table(header, rows, "verdicts", title)]
        if (exp_dir / CLAIMS_FIGURE).is_file():
            blocks.append(Figure(CLAIMS_FIGURE, "the runs behind each claim", CLAIMS_CAPTION, heading=False))
    blocks += [Heading("Results"), Table(*results_table(results))]
    if results.notes:
        blocks += [Heading("Notes"), Items(results.notes)]
    if results.figures:
        blocks.append(Heading("Figures"))
        blocks += [Figure(f["path"], f["title"], f["caption"]) for f in results.figures]
    blocks += [Heading("Settings"), Items(_settings_lines(results), code=True)]
    return Page(results.title, blocks)


def write_markdown(results: StudyResults, exp_dir: Path) -> Path:
    path = exp_dir / "report.md"
    path.write_text(markdown(study_page(results, exp_dir)))
    return path


VERDICT_LEGEND = (
    "Claims: Holm's method over the study's claims (one family per setting) adjusts each p; the adjusted p decides. "
    "reproduced: the claimed difference is significant in the claimed direction (adjusted p < 0.05); not reproduced: "
    "significant the other way, or shown smaller than the claim's smallest effect of interest; not significant with N "
    "seeds: the test cannot tell. Continuous metrics: the exact permutation test of the difference in means (every "
    "split of the pooled seeds up to 10 a side, else 20,000 random splits), which assumes no normal shape, so a side "
    "with a few failed seeds among good ones is seen; its interval is the differences the same test keeps (the shift "
    "model inverted), so it never relies on normal theory either; per-seed successes: the exact unconditional score "
    "test (Barnard) and the interval that inverts it. P(A>B): the chance that a seed of the claimed better "
    "configuration beats one of the other, over all pairs. Every interval printed beside a claim is the one its "
    "deciding p implies (the level Holm's adjusted p sets), so it excludes 0 exactly when the claim is significant. "
    "Published numbers (their own Holm family): a paper's number on a continuous metric is one run of the paper's, "
    "judged against where one run of ours falls: differs when our prediction interval lies beyond the published value "
    "± its tolerance δ, matches (within ±δ) when it lies within (two one-sided prediction tests), inconclusive with N "
    "seeds: neither; a published rate or range is tested against our rate or mean (matches: two one-sided tests put it"
    " inside ±δ; differs: our interval lies beyond). A tolerance is never wider than half the published gap between "
    "two configurations a claim of the study tells apart (nor than a claim's declared smallest effect), so a match "
    "cannot also match the other.")

def write_html(results: StudyResults, exp_dir: Path) -> Path:
    path = exp_dir / "report.html"
    path.write_text(html_page(study_page(results, exp_dir), exp_dir))
    return path


def summary_text(results: StudyResults) -> str:
    """What a terminal shows after a run: title, seeds, the verdicts, the results table, notes."""
    return terminal_text(study_page(results, Path(".")))


CLAIMS_FIGURE = "claims.png"
CLAIMS_CAPTION = ("Each claim's runs, one dot per seed (the claimed better configuration first), the bar the mean: "
                  "the distributions the verdicts rest on.")


def claims_figure(verdicts: list[Verdict], path: Path) -> Path | None:
    """The strip of per-seed dots of every tested claim (None when no claim has runs)."""
    from rnnlab.analysis.plots import plot_claim_strips

    rows = [v for v in verdicts if v.kind == "claim" and any(v.values.values())]
    return plot_claim_strips(rows, path) if rows else None


def write_report(results: StudyResults, exp_dir: str | Path) -> tuple[Path, Path]:
    exp_dir = Path(exp_dir)
    claims_figure(results.verdicts, exp_dir / CLAIMS_FIGURE)
    return write_html(results, exp_dir), write_markdown(results, exp_dir)


# -- sweeps ----------------------------------------------------------------------------------------

def _sweep_best_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    sampled = [k for k in summary["searched"] if all(k not in g["point"] for g in summary["groups"])]
    shown = f"{summary['metric']} (trials)" if is_count(summary["metric"]) else f"{summary['metric']} mean ± std"
    header = ["group", *sampled, shown, "95% interval", "seeds finished", "configurations"]
    rows = []
    for group in summary["groups"]:
        if not group["configs"]:
            rows.append([group["group"], *["–"] * len(sampled), "not run", "–", "0", "0"])
            continue
        top = group["configs"][0]
        if "count" in top:   # trials that succeeded: a count, not a mean of 0/1
            value = f"{top['count']} of {top['n']}"
        else:
            value = f"{_fmt(top['mean'])} ± {_fmt(top['std'])}" if "mean" in top else "no seed finished"
        interval = f"[{_fmt(top['ci_low'])}, {_fmt(top['ci_high'])}]" if "mean" in top else "–"
        rows.append([group["group"], *[str(top["values"].get(k)) for k in sampled], value, interval,
                     f"{top['finished']} of {top['seeds']}", str(len(group["configs"]))])
    return header, rows


def _sweep_trial_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["id", "group", *summary["searched"], "seed", summary["metric"], "seconds", "status"]
    rows = [[r["id"], r["group"], *[str(r["values"].get(k)) for k in summary["searched"]], str(r["seed"]),
             _fmt(r["metrics"].get(summary["metric"])), f"{r['seconds']:.1f}", r["status"] +
             (f": {r['error'][:80]}" if r["error"] else "")] for r in summary["records"]]
    sign = 1 if summary["mode"] == "min" else -1
    order = sorted(range(len(rows)), key=lambda i: sign * summary["records"][i]["metrics"].get(summary["metric"],
                                                                                               sign * math.inf))
    return header, [rows[i] for i in order]


def _can_decide(seeds: int, level: float) -> bool:
    """Whether the exact permutation test's p can fall below ``level`` with ``seeds`` a side."""
    return seeds >= 1 and smallest_permutation_p(seeds, seeds) < level


def _kept_interval(low: float | None, high: float | None, coverage: float | None = None, fmt=_fmt) -> str:
    """A comparison's interval with its coverage, or 'no interval' where its test keeps every difference."""
    if low is None or not (math.isfinite(low) and math.isfinite(high)):
        return "(no interval: with these seeds the exact p cannot fall below the level)"
    return f"[{fmt(low)}, {fmt(high)}]" + ("" if coverage is None else f" ({100 * coverage:.3g}%)")


def _sweep_comparison_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["at", "compared", "verdict", "values over seeds", "difference [interval at the level Holm implies]",
              "test", "p", "p (Holm)"]
    rows = [[c["at"], f"{c['a']} vs {c['b']}", c["verdict"], f"{c['a_value']} vs {c['b_value']}",
             f"{_fmt(c['difference'])} {_kept_interval(c['low'], c['high'], c.get('coverage', 0.95))}", c["test"],
             _p(c["p"]), _p(c["p_holm"])]
            for c in summary.get("comparisons", [])]
    return header, rows


COMPARISON_NOTE = ("Each pair of the first axis's values compared at every point of the other axes, over seeds "
                   "(the exact permutation test of the difference in means with the interval that inverts it, or for "
                   "counts of successful trials the exact unconditional score test with the interval that inverts "
                   "it); the verdict uses Holm's correction over all the comparisons in this table (p < 0.05), and "
                   "each interval is printed at the level the adjusted p implies.")


def _spans_decades(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and bool(positive) and max(positive) / min(positive) >= 100


def sweep_figures(summary: dict[str, Any], out_dir: Path) -> list[dict[str, str]]:
    """The metric against each numeric searched setting (not the settings of a linked axis, which
    only name a group), one colour per group, seeds as points."""
    from rnnlab.analysis.plots import plot_metric_against_setting
    from rnnlab.experiments.sweeps import group_name

    figures = []
    ok = [r for r in summary["records"] if r["status"] == "ok" and summary["metric"] in r["metrics"]]
    for name in summary.get("plot_axes", summary["searched"]):
        if not ok or not all(isinstance(r["values"].get(name), (int, float)) and
                             not isinstance(r["values"].get(name), bool) for r in ok):
            continue
        points: dict[str, tuple[list, list]] = {}
        grid = {g["group"]: g["point"] for g in summary["groups"]}
        for r in ok:   # one series per point of the other grid axes
            series = group_name({k: v for k, v in grid.get(r["group"], {}).items() if k != name})
            xs, ys = points.setdefault(series, ([], []))
            xs.append(r["values"][name])
            ys.append(r["metrics"][summary["metric"]])
        log_axis = name in summary["log_axes"] or _spans_decades([r["values"][name] for r in ok])
        path = plot_metric_against_setting(points, out_dir / "figures" / f"{summary['metric']}-vs-{name}.png", name,
                                           summary["metric"], f"{summary['metric']} against {name}",
                                           logx=log_axis)
        log_note = f"Log axis: {name} spans decades. " if log_axis else ""
        what = ("Each point is one trial (1: it solved every test string); the line joins the fraction of trials "
                "that did at each value. " if is_count(summary["metric"]) else
                "Each point is one trial (one seed); the line joins the means over seeds. ")
        figures.append({"title": f"{summary['metric']} against {name}", "path": str(path.relative_to(out_dir)),
                        "caption": f"{what}{log_note}Diverged and failed trials are not drawn."})
    return figures


def _sweep_intro(summary: dict[str, Any]) -> list[str]:
    counts = {s: sum(r["status"] == s for r in summary["records"]) for s in ("ok", "diverged", "failed", "stopped")}
    stopped = f", {counts['stopped']} stopped early by ASHA" if counts["stopped"] else ""
    count_metric = is_count(summary["metric"])
    chosen = ("by the number of its trials that succeed" if count_metric else
              f"({summary['mode']}imised) as the mean over each configuration's seeds")
    intervals = ("Intervals are Clopper–Pearson 95% intervals of the success rate" if count_metric else
                 "Intervals are 95% t intervals over seeds")
    trained = (f"; {summary['trained_now']} trained by this call in {summary['seconds']:.0f} s on the "
               f"{summary['executor']} executor" if summary["trained_now"] else "")
    return [f"Task {summary['task']}; best by {summary['metric']} {chosen} ({summary['seeds']} seeds per "
            f"configuration, {summary['samples']} samples per group).",
            f"{len(summary['records'])} of {summary['trials']} trials stored: {counts['ok']} ok, {counts['diverged']} "
            f"diverged, {counts['failed']} failed{stopped}{trained}. {intervals}. Each group's best settings: "
            "best/GROUP.toml (rnnlab train --config best/GROUP.toml)."]


BEST_PER_GROUP, COMPARED = "Best configuration per group", "Compared at each point"


def sweep_page(summary: dict[str, Any], figures: list[dict[str, str]]) -> Page:
    """A sweep's report as one page: counts, the best configuration per group, the comparisons at each
    point, the figures, every trial."""
    blocks: list[Block] = [Paragraph(line) for line in _sweep_intro(summary)]
    blocks += [Heading(BEST_PER_GROUP), Table(*_sweep_best_rows(summary), title="Best per group")]
    compared = _sweep_comparison_rows(summary)
    if compared[1]:
        blocks += [Heading(COMPARED), Paragraph(COMPARISON_NOTE), Table(*compared, "verdicts")]
    blocks += [Figure(f["path"], f["title"], f["caption"]) for f in figures]
    blocks += [Heading("All trials (best first)"), Paragraph("Click a column to sort.", show=("html",)),
               Table(*_sweep_trial_rows(summary), "sortable")]
    return Page(f"Sweep {Path(summary['source']).name}", blocks)


def write_sweep_report(summary: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """report.html (plots embedded, the trial table sortable) and report.md of a sweep folder."""
    out_dir = Path(out_dir)
    page = sweep_page(summary, sweep_figures(summary, out_dir))
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    md_path.write_text(markdown(page))
    html_path.write_text(html_page(page, out_dir))
    return html_path, md_path


def sweep_summary_text(summary: dict[str, Any]) -> str:
    """What a terminal shows after a sweep: the counts and the best configuration per group."""
    page = sweep_page(summary, [])
    return terminal_text(Page(f"Sweep {summary['source']}", [b for b in page.blocks if not isinstance(b, Table)
                                                            or b.title]))


def republish_sweep_comparisons(folder: str | Path) -> Path:
    """Recompute a published sweep's best-per-group table and its comparisons from the trials published
    beside it (``trials.csv``, matched to the sweep file's trials by id) with today's statistics, and
    replace those two sections of the page kept as data (``page.json``); its figures and trial table, measured
    then, stay. Written through a staging copy, like every publish (``files.staged_publish``)."""
    folder = Path(folder)
    source = _page_data(folder).get("source")
    if not isinstance(source, str):
        raise ValueError(f"{folder / PAGE_JSON}: no 'source' (the sweep file the page was made from)")
    with staged_publish(folder, f"sweep {Path(source).name}") as stage:
        _republish_sweep_comparisons(stage, source)
    return folder / "report.md"


def _republish_sweep_comparisons(folder: Path, source: str) -> None:
    from rnnlab.experiments.sweeps import compare_first_axis, load_sweep, summarize

    sweep = load_sweep(Path(__file__).resolve().parents[2] / source if not Path(source).is_file() else source)
    by_id = {t.id: t for t in sweep.trials()}
    records = []
    with open(folder / "trials.csv", newline="") as f:
        for row in csv.DictReader(f):
            trial = by_id[row["id"]]
            fixed = {"id", "seed", "seconds", "status", "error", *sweep.searched}
            records.append({"id": row["id"], "group": trial.group, "config": trial.config, "values": trial.values,
                            "seed": int(row["seed"]), "status": row["status"], "error": row["error"],
                            "seconds": float(row["seconds"] or 0.0),
                            "metrics": {k: float(v) for k, v in row.items() if k not in fixed and v != ""}})
    summary = {"metric": sweep.metric, "searched": sweep.searched, "groups": summarize(sweep, records),
               "comparisons": compare_first_axis(sweep, records)}
    page = read_page(folder)
    blocks = _replace_keeping_figures(page.blocks, BEST_PER_GROUP,
                                      [Table(*_sweep_best_rows(summary), title="Best per group")])
    compared = _sweep_comparison_rows(summary)
    if section(blocks, COMPARED) and compared[1]:
        blocks = _replace_keeping_figures(blocks, COMPARED, [Paragraph(COMPARISON_NOTE), Table(*compared, "verdicts")])
    write_page(Page(page.title, blocks), folder / "report.md", folder / PAGE_JSON, source)


def _replace_keeping_figures(blocks: list[Block], heading: str, new: list[Block]) -> list[Block]:
    """The section ``heading`` with ``new`` in place of its text and tables; its figures (and their headings),
    plotted then, stay."""
    figures = [b for b in section(blocks, heading) if isinstance(b, Figure) or isinstance(b, Heading) and b.level > 2]
    return replace_section(blocks, heading, [Heading(heading), *new, *figures])


def write_published_sweep(summary: dict[str, Any], out_dir: str | Path, dest: str | Path) -> Path:
    """``dest/report.md`` with its plots and trials.csv, kept with the repository: the sweep's report
    under a line saying how it was made (command, date, version, cores, wall and training time).
    Published through a staging copy (``files.staged_publish``): only files this sweep published
    before are replaced or removed."""
    dest = Path(dest)
    with staged_publish(dest, f"sweep {Path(summary['source']).name}") as stage:
        _write_published_sweep(summary, Path(out_dir), stage, dest)
    return dest / "report.md"


def _write_published_sweep(summary: dict[str, Any], out_dir: Path, stage: Path, dest: Path) -> None:
    if (stage / "figures").exists():
        shutil.rmtree(stage / "figures")     # the staging copy's: what the sweep plots now replaces them
    (stage / "figures").mkdir(parents=True)
    for figure in (out_dir / "figures").glob("*.png"):
        shutil.copyfile(figure, stage / "figures" / figure.name)
    shutil.copyfile(out_dir / "trials.csv", stage / "trials.csv")
    calls = [c for c in summary.get("calls", []) if c["trained_now"]]
    source = Path(summary["source"])
    link = os.path.relpath(source.resolve(), dest.resolve()) if source.is_file() else str(source)
    command = next((c["command"] for c in reversed(calls or summary.get("calls", [])) if c.get("command")), "")
    head = (f"`{command or 'rnnlab sweep ' + str(source)}` (the file: [{source}]({link}); every trial: "
            f"[trials.csv](trials.csv)). Measured {' to '.join(sorted({c['date'] for c in calls})) or '–'} with rnnlab "
            f"{__version__} on a {cpu_cores()}-core machine: wall time "
            f"{sum(c['seconds'] for c in calls) / 60:.1f} min over {len(calls)} call{'s' if len(calls) != 1 else ''} "
            f"that trained ({', '.join(sorted({c['executor'] for c in calls})) or 'no'} executor); training time "
            f"summed over trials {sum(r['seconds'] or 0.0 for r in summary['records']) / 60:.1f} min.")
    page = sweep_page(summary, sweep_figures(summary, out_dir))
    page.blocks.insert(0, Paragraph(head))
    write_page(page, stage / "report.md", stage / PAGE_JSON, str(source))


# -- published results (docs/results/NAME.md) -----------------------------------------------------

SETTING, TUNED = "at the study's setting", "tuned"
RUNS_CSV = {SETTING: "runs.csv", TUNED: "tuned-runs.csv"}     # each run's metrics, beside the page


def verdict_cell(v: Verdict) -> str:
    """One verdict in one table cell: the outcome first, then the numbers behind it."""
    text = f"**{v.verdict}**: {v.evidence}"
    if v.difference is not None:
        text += f"; difference {_fmt(v.difference)}" + _verdict_interval(v)
    if v.p_value is not None:
        text += f", p = {_p(v.p_value)} ({v.test})"
    if v.p_adjusted is not None and v.kind in ("claim", "published"):
        text += f", Holm-adjusted p = {_p(v.p_adjusted)} (decides)"
    if v.p_exact is not None and v.p_exact != v.p_value:     # a page stored before the permutation test decided
        text += f", exact permutation p = {_p(v.p_exact)}"
    if v.prob_superiority is not None:
        text += f", P(A>B) = {v.prob_superiority:.2f}"
    if v.kind == "claim" and _power(v) != "–":
        text += f"; {_power(v)}"
    if v.kind != "published" and v.reason:
        text += f"; {v.reason}"
    if v.tolerance is not None:
        text += f"; tolerance ±{v.tolerance:.3g} ({v.tolerance_why})"
    if v.prediction_low is not None:
        coverage = 95 if v.coverage is None else 100 * v.coverage
        text += f"; one run of ours, {coverage:.3g}% prediction interval {_prediction(v)}"
    return text


def _search_compute(search_dir: Path) -> tuple[float, int]:
    """(seconds, trials) of the searches stored under ``NAME-tuned/search/*/trials.csv``."""
    seconds, trials = 0.0, 0
    for path in sorted(search_dir.glob("*/trials.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                trials += 1
                seconds += float(row["seconds"] or 0.0)
    return seconds, trials


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
        table = next(b for b in top if isinstance(b, Table) and b.header[0] == "")
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


PAGE_JSON = "page.json"     # a published page as data, beside its files: what republishing reads back


def read_page(folder: Path, name: str | None = None) -> Page:
    """The page published as ``folder/NAME/page.json`` (a study) or ``folder/page.json`` (a map)."""
    return page_from_dict(_page_data(folder, name), str((folder / name if name else folder) / PAGE_JSON))


def _page_data(folder: Path, name: str | None = None) -> dict[str, Any]:
    path = (folder / name if name else folder) / PAGE_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no page as data beside the published page; publish it again")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: damaged JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a page (a JSON object)")
    return data


def write_page(page: Page, markdown_path: Path, json_path: Path, source: str | None = None) -> Path:
    """A published page: its data (``page.json``, with the file it was made from, ``source``) and its Markdown,
    rendered from the same ``Page``."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    data = page_to_dict(page) | ({"source": source} if source else {})
    json_path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    markdown_path.write_text(markdown(page))
    return markdown_path


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


def _undecidable(variants: dict[str, Variant], name: str) -> list[str]:
    """Per variant whose seeds cannot decide its claims on a continuous metric (the exact permutation test's
    smallest p is not below Holm's first level), what it would take: said at the top of the page."""
    lines = []
    for label, variant in variants.items():
        claims = [v for v in variant.verdicts if v.kind == "claim"]
        continuous = [v for v in claims if v.threshold is None and not is_count(v.metric)]
        deciding = ALPHA / max(len(claims), 1)
        if continuous and not _can_decide(variant.seeds, deciding):
            needed = seeds_to_decide(deciding)
            lines.append(f"{label}: with {variant.seeds} seeds a side none of its {len(continuous)} claims on a "
                         f"continuous metric can be decided (the exact permutation p cannot fall below "
                         f"{deciding:.3g}, Holm's first level); that takes at least {needed} seeds a side "
                         f"(`rnnlab reproduce {name} --seeds {needed}{' --tune' if label == TUNED else ''}`)")
    return lines


def _in_short_block(variants: dict[str, Variant], name: str) -> list[Block]:
    in_short = _in_short(variants)
    undecidable = _undecidable(variants, name)
    blocks: list[Block] = [Paragraph("**Not decidable with these seeds**"), Items(undecidable)] if undecidable else []
    return blocks + ([Paragraph("**In short**"), Items(in_short)] if in_short else [])


def _verdicts_block(variants: dict[str, Variant], name: str, figures_dir: Path) -> list[Block]:
    """The page's '## Verdicts' section: the legend, what the seeds can detect, the claims and published
    numbers side by side, and each variant's strip of per-seed dots (written into ``figures_dir``)."""
    claims, published = _side_by_side(variants, "claim"), _side_by_side(variants, "published")
    if not claims and not published:
        return []
    parts: list[Block] = [Heading("Verdicts"), Paragraph(VERDICT_LEGEND)]
    first = min((r.seed for r in variants[TUNED].runs), default=TUNED_FIRST_SEED) if TUNED in variants \
        else TUNED_FIRST_SEED
    if first < TUNED_FIRST_SEED:
        parts.append(Paragraph(f"The tuned runs on this page predate the rule that tuned runs train on seeds the "
                               f"search never trained (from {TUNED_FIRST_SEED}): they used seeds from {first:.0f}, as "
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
    """A published runs.csv: one run per row (an empty cell is no measurement)."""
    with open(path, newline="") as f:
        return [Run.from_row(row) for row in csv.DictReader(f)]


def republish_verdicts(name: str, dest: str | Path = "docs/results") -> Path:
    """Recompute the verdicts of the published page ``dest/NAME.md`` from the runs published beside it
    (``NAME/runs.csv``, ``NAME/tuned-runs.csv``) with today's statistics, and rewrite its 'In short' and
    'Verdicts' sections (and the claims' strips of dots), and its 'Tuning budget' from the search trials
    beside it (``NAME/search-trials.csv``); the rest of the page, measured then, stays. Written through
    a staging copy, like every publish (``files.staged_publish``)."""
    with staged_publish(dest, f"study {name}") as stage:
        _republish_verdicts(name, stage)
    return Path(dest) / f"{name}.md"


def _stored_variants(exp: Any, dest: Path) -> dict[str, Variant]:
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
    variants = _stored_variants(exp, dest)
    if not variants:
        raise FileNotFoundError(f"republish {name}: no {' or '.join(RUNS_CSV.values())} under {dest / name}")
    published = read_page(dest, name)
    body = published.blocks[next(i for i, b in enumerate(published.blocks)
                                 if isinstance(b, Paragraph) and b.text.startswith("Study: ")):]
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
    rows = []
    for path in sorted(search_dir.glob("*/trials.csv")):
        with open(path, newline="") as f:
            rows += [{"configuration": path.parent.name, **row} for row in csv.DictReader(f)]
    if not rows:
        return None
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return target


def expected_best(trials_csv: Path, metric: str, higher_is_better: bool) -> dict[str, np.ndarray]:
    """Per tuned configuration, Dodge et al.'s expected best score of its search after n = 1…N trials,
    a trial being one searched setting scored by its mean over seeds (failed seeds left out)."""
    with open(trials_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    curves = {}
    for key in dict.fromkeys(r["configuration"] for r in rows):
        mine = [r for r in rows if r["configuration"] == key and r.get("status", "ok") == "ok" and r.get(metric)]
        columns = list(mine[0]) if mine else []
        searched = columns[columns.index("id") + 1:columns.index("seed")] if "seed" in columns else []
        scores: dict[tuple, list[float]] = {}
        for r in mine:
            scores.setdefault(tuple(r[c] for c in searched), []).append(float(r[metric]))
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
    lines = [f"{key}: {_fmt(c[0])} after 1 trial → {_fmt(c[-1])} after {len(c)}" for key, c in curves.items()]
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
    with staged_publish(dest, f"study {name}") as stage:
        _write_published(Path(out_root), name, stage)
    return Path(dest) / f"{name}.md"


def _published_variants(out_root: Path, name: str, dest: Path) -> tuple[dict[str, Variant], dict[str, Path]]:
    """The page's columns: each variant stored under ``out_root`` (with its folder), else kept as published
    in ``dest``; refused when nothing is stored."""
    variants: dict[str, Variant] = {}
    folders: dict[str, Path] = {}
    for label, folder in ((SETTING, out_root / name), (TUNED, out_root / f"{name}-tuned")):
        if (folder / "results.json").is_file():
            results = StudyResults.load(folder / "results.json")
            variants[label] = Variant(results.verdicts, results.seeds, results.runs, results, read_calls(folder))
            folders[label] = folder
        elif (dest / name / RUNS_CSV[label]).is_file() and (dest / f"{name}.md").is_file():
            runs = read_runs_csv(dest / name / RUNS_CSV[label])
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
            shutil.copyfile(source, target)
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
            shutil.copyfile(folders[label] / "results.csv", target)
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
                       Paragraph(_seeds_sentence(variant.results).split(" Time of this call")[0]),
                       Table(*results_table(variant.results)), *([Items(own)] if own else [])]
    if common:
        blocks += [Heading("Notes"), Items(common)]
    blocks += _figure_blocks(variants, folders, figures_dir, name)
    for label, variant in variants.items():
        blocks += [Heading(f"Settings {label}"),
                   *(variant.kept.settings if variant.kept else [Items(_settings_lines(variant.results))])]
    write_page(Page(first.title.removesuffix(" (tuned)"), blocks), dest / f"{name}.md", dest / name / PAGE_JSON)
    # the verdicts as every republish computes them: from the runs.csv just written, with the measured
    # reasons quoting the results (this page's notes included) as they now stand
    return _republish_verdicts(name, dest)


def _seeds_of(runs: list[Run]) -> int:
    """The seeds per configuration of a runs.csv: the fewest any configuration has."""
    return min(sum(r.key == key for r in runs) for key in {r.key for r in runs})


# -- the cell benchmark -----------------------------------------------------------------------------

def _bench_value(row: dict[str, Any]) -> str:
    if "mean" not in row:
        return f"{row['runs']} run(s)"
    failed = f"; {row['failed']} failed" if row["failed"] else ""
    return f"{row['mean']:.3g} ± {row['std']:.2g} [{row['ci_low']:.3g}, {row['ci_high']:.3g}]{failed}"


def bench_cells_page(results: dict[str, Any]) -> Page:
    """docs/results/cells.md: the claims first (held on k of N tasks), then cell × task, then every
    comparison with its interval, raw and Holm-adjusted p, the exact p and P(A > B)."""
    tasks = results["tasks"]
    cells = [c["label"] for c in results["cells"]]
    rows = {(r["task"], r["cell"]): r for r in results["rows"]}
    n_final = len(results["final_seeds"])
    margins = {t["name"]: t["same_margin"] for t in tasks}

    def signed(x: float) -> str:
        return f"{x:+.3g}"

    page = Page("Cells side by side: the rnnlab cell benchmark")
    claims = [[f"{c['a']} {c['relation']} {'than' if c['relation'] != 'same' else 'as'} {c['b']}", c["source"],
               f"{len(c['holds'])} of {len(c['tasks'])}",
               "; ".join(f"{task}: {word}" for task, word in c["words"].items())] for c in results["claims"]]
    page.blocks += [
        Paragraph(f"{len(cells)} cells × {len(tasks)} tasks at matched parameter budgets; each cell tuned on the same "
                  f"search ({len(results['learning_rates'])} Adam learning rates × {len(results['search_seeds'])} "
                  f"seeds, lowest mean dev loss), then retrained on {n_final} seeds disjoint from the search's "
                  f"({results['final_seeds'][0]}–{results['final_seeds'][-1]}). Compute: "
                  f"{results['compute_seconds'] / 3600:.2f} h of training summed over the {results['runs']} runs "
                  f"(measured on {results['machine']}); this page's invocation trained {results['trained_now']} of "
                  f"them in {results['seconds'] / 60:.1f} min and read the rest from the job store. "
                  f"`{results['command']}`.",
                  kind="about"),
        Heading("Claims, task by task"),
        Paragraph(f"A claim 'better'/'worse' holds on a task when {DECIDING_TEST} finds the difference in that "
                  f"direction: a test that assumes no normal shape, so that a cell with a few failed seeds among "
                  f"good ones (a bimodal metric) is seen. 'Same' is an equivalence claim: it holds when "
                  f"{EQUIVALENCE_TEST} show the difference within the task's margin (stated with each task below); "
                  f"a difference not found is never read as 'same', and the page says the margin the {n_final} "
                  "seeds a side do establish."),
        Table(["claim", "who claims it", "holds on", "per task"], claims, kind="verdicts"),
        Heading("Test metric per cell and task"),
        Paragraph("Mean ± std over the final seeds [95% t interval]; hidden units and parameters at the task's "
                  "budget; the learning rate the search chose. " + " ".join(
                      f"**{t['name']}** ({t['metric']}, {'higher' if t['higher_is_better'] else 'lower'} is better; "
                      f"budget {t['budget']:,} parameters; 'same' within ±{t['same_margin']:g}, "
                      f"{t['margin_why']}): {t['why']}." for t in tasks)),
        Table(["cell"] + [t["name"] for t in tasks],
              [[c] + [f"{_bench_value(rows[t['name'], c])} (h {rows[t['name'], c]['hidden']}, "
                      f"{rows[t['name'], c]['params']:,} p, lr {rows[t['name'], c]['lr']:g})" for t in tasks]
               for c in cells]),
        Heading("Every cell against the vanilla RNN, the GRU and the LSTM"),
        Paragraph("a − b of the test metric with the interval that inverts the exact permutation test at the level "
                  "its Holm-adjusted p implies (so it excludes 0 exactly when the verdict is 'better' or 'worse'); "
                  "the exact permutation p and its Holm adjustment within the task, which decides the verdict; P(a "
                  "better than b) over seed pairs; and the same test's 90% interval, which shows the two the same when "
                  "it lies within the task's margin (two one-sided tests)."),
        Table(["task", "a", "b", "a − b [interval, its coverage]", "p (exact permutation)", "p (Holm: decides)",
               "P(a better)", "verdict", "90% interval: same?"],
              [[f["task"], f["a"], f["b"], f"{f['difference']:+.3g} " + _kept_interval(
                  f["low"], f["high"], f.get("coverage", 0.95), signed),
                _p(f["p_exact"]), _p(f["p_holm"]), f"{f['p_a_better']:.2f}", f["word"],
                _kept_interval(f["low90"], f["high90"], fmt=signed) + ": " +
                ("within" if f["equivalent"] else "not within") +
                f" ±{margins[f['task']]:g}"]
               for f in results["comparisons"]]),
    ]
    return page


# -- the README's overview of the published results ------------------------------------------------

OVERVIEW_BEGIN = "<!-- results overview: written by `python -m rnnlab.report` from docs/results; do not edit -->"
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
        variants = _stored_variants(exp, dest)
        seeds = " / ".join(f"{variant.seeds}" for variant in variants.values())
        claims = "; ".join(f"{label}: {_tally([v.verdict for v in variant.verdicts if v.kind == 'claim'])}"
                           for label, variant in variants.items())
        numbers = "; ".join(f"{label}: {_tally([v.verdict for v in variant.verdicts if v.kind == 'published'])}"
                            for label, variant in variants.items())
        undecidable = " **Not decidable with these seeds** (see the page)." if _undecidable(variants, name) else ""
        rows.append([f"[{exp.title}]({links}{name}.md)", seeds, claims + undecidable, numbers])
    lines = [OVERVIEW_BEGIN, "", md_table(["study", "seeds (setting / tuned)", "its claims", "published numbers"],
                                          rows)]
    cells = dest / "cells.json"
    if cells.is_file():
        bench = json.loads(cells.read_text())
        relation = {"same": "the same as", "better": "better than", "worse": "worse than"}
        held = "; ".join(f"{c['a']} {relation.get(c['relation'], c['relation'])} {c['b']}: {len(c['holds'])} of "
                         f"{len(c['tasks'])}" for c in bench["claims"])
        lines += ["", f"[The cell benchmark]({links}cells.md) ({len(bench['cells'])} cells × "
                      f"{len(bench['tasks'])} tasks; each claim: the tasks it holds on): {held}."]
    maps = sorted(path.parent for path in dest.glob(f"*/{PAGE_JSON}") if "source" in _page_data(path.parent))
    if maps:
        lines += ["", "Maps and searches: " + " · ".join(
            f"[{read_page(folder).title}]({links}{folder.name}/report.md)" for folder in maps) + "."]
    return "\n".join(lines + ["", OVERVIEW_END])


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
