"""A sweep's pages: its report in the sweep folder, and the published map beside the repository's
results, republished from its page as data and its trials."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from rnnlab.experiments.results import SweepResults
from rnnlab.files import copy_regular, folder_in, read_csv, staged_publish, write_text
from rnnlab.machine import cpu_cores
from rnnlab.metrics import is_count
from rnnlab.page import PAGE_JSON, Block, Figure, Heading, Page, Paragraph, Table, markdown, replace_section, section
from rnnlab.page import html as html_page
from rnnlab.page import text as terminal_text
from rnnlab.pages.format import fmt_number, fmt_p, interval_text
from rnnlab.pages.published import page_data, read_page, write_page
from rnnlab.version import __version__


def _sweep_best_rows(summary: SweepResults) -> tuple[list[str], list[list[str]]]:
    sampled = [k for k in summary.searched if all(k not in g["point"] for g in summary.groups)]
    shown = f"{summary.metric} (trials)" if is_count(summary.metric) else f"{summary.metric} mean ± std"
    header = ["group", *sampled, shown, "95% interval", "seeds finished", "configurations"]
    rows = []
    for group in summary.groups:
        if not group["configs"]:
            rows.append([group["group"], *["–"] * len(sampled), "not run", "–", "0", "0"])
            continue
        top = group["configs"][0]
        if "count" in top:   # trials that succeeded: a count, not a mean of 0/1
            value = f"{top['count']} of {top['n']}"
        else:
            value = f"{fmt_number(top['mean'])} ± {fmt_number(top['std'])}" if "mean" in top else "no seed finished"
        interval = f"[{fmt_number(top['ci_low'])}, {fmt_number(top['ci_high'])}]" if "mean" in top else "–"
        rows.append([group["group"], *[str(top["values"].get(k)) for k in sampled], value, interval,
                     f"{top['finished']} of {top['seeds']}", str(len(group["configs"]))])
    return header, rows


def _sweep_trial_rows(summary: SweepResults) -> tuple[list[str], list[list[str]]]:
    header = ["id", "group", *summary.searched, "seed", summary.metric, "seconds", "status"]
    rows = [[r["id"], r["group"], *[str(r["values"].get(k)) for k in summary.searched], str(r["seed"]),
             fmt_number(r["metrics"].get(summary.metric)), f"{r['seconds']:.1f}", r["status"] +
             (f": {r['error'][:80]}" if r["error"] else "")] for r in summary.records]
    sign = 1 if summary.mode == "min" else -1
    order = sorted(range(len(rows)), key=lambda i: sign * summary.records[i]["metrics"].get(summary.metric,
                                                                                               sign * math.inf))
    return header, [rows[i] for i in order]


def _sweep_comparison_rows(summary: SweepResults) -> tuple[list[str], list[list[str]]]:
    header = ["at", "compared", "verdict", "values over seeds", "difference [interval at the level Holm implies]",
              "test", "p", "p (Holm)"]
    rows = [[c["at"], f"{c['a']} vs {c['b']}", c["verdict"], f"{c['a_value']} vs {c['b_value']}",
             f"{fmt_number(c['difference'])} {interval_text(c['low'], c['high'], c.get('coverage', 0.95))}", c["test"],
             fmt_p(c["p"]), fmt_p(c["p_holm"])]
            for c in summary.comparisons]
    return header, rows


COMPARISON_NOTE = ("Each pair of the first axis's values compared at every point of the other axes, over seeds "
                   "(the exact permutation test of the difference in means with the interval that inverts it, or for "
                   "counts of successful trials the exact unconditional score test with the interval that inverts "
                   "it); the verdict uses Holm's correction over all the comparisons in this table (p < 0.05), and "
                   "each interval is printed at the level the adjusted p implies.")


def _spans_decades(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and bool(positive) and max(positive) / min(positive) >= 100


def sweep_figures(summary: SweepResults, out_dir: Path) -> list[dict[str, str]]:
    """The metric against each numeric searched setting (not the settings of a linked axis, which
    only name a group), one colour per group, seeds as points."""
    from rnnlab.analysis.plots import plot_metric_against_setting
    from rnnlab.experiments.sweeps import group_name

    figures = []
    ok = [r for r in summary.records if r["status"] == "ok" and summary.metric in r["metrics"]]
    for name in summary.plot_axes:
        if not ok or not all(isinstance(r["values"].get(name), (int, float)) and
                             not isinstance(r["values"].get(name), bool) for r in ok):
            continue
        points: dict[str, tuple[list, list]] = {}
        grid = {g["group"]: g["point"] for g in summary.groups}
        for r in ok:   # one series per point of the other grid axes
            series = group_name({k: v for k, v in grid.get(r["group"], {}).items() if k != name})
            xs, ys = points.setdefault(series, ([], []))
            xs.append(r["values"][name])
            ys.append(r["metrics"][summary.metric])
        log_axis = name in summary.log_axes or _spans_decades([r["values"][name] for r in ok])
        figure = folder_in(out_dir, "figures") / f"{summary.metric}-vs-{name}.png"
        path = plot_metric_against_setting(points, figure, name,
                                           summary.metric, f"{summary.metric} against {name}",
                                           logx=log_axis)
        log_note = f"Log axis: {name} spans decades. " if log_axis else ""
        what = ("Each point is one trial (1: it solved every test string); the line joins the fraction of trials "
                "that did at each value. " if is_count(summary.metric) else
                "Each point is one trial (one seed); the line joins the means over seeds. ")
        figures.append({"title": f"{summary.metric} against {name}", "path": str(path.relative_to(out_dir)),
                        "caption": f"{what}{log_note}Diverged and failed trials are not drawn."})
    return figures


def _sweep_intro(summary: SweepResults) -> list[str]:
    counts = {s: sum(r["status"] == s for r in summary.records) for s in ("ok", "diverged", "failed", "stopped")}
    stopped = f", {counts['stopped']} stopped early by ASHA" if counts["stopped"] else ""
    count_metric = is_count(summary.metric)
    chosen = ("by the number of its trials that succeed" if count_metric else
              f"({summary.mode}imised) as the mean over each configuration's seeds")
    intervals = ("Intervals are Clopper–Pearson 95% intervals of the success rate" if count_metric else
                 "Intervals are 95% t intervals over seeds")
    trained = (f"; {summary.trained_now} trained by this call in {summary.seconds:.0f} s on the "
               f"{summary.executor} executor" if summary.trained_now else "")
    return [f"Task {summary.task}; best by {summary.metric} {chosen} ({summary.seeds} seeds per "
            f"configuration, {summary.samples} samples per group).",
            f"{len(summary.records)} of {summary.trials} trials stored: {counts['ok']} ok, {counts['diverged']} "
            f"diverged, {counts['failed']} failed{stopped}{trained}. {intervals}. Each group's best settings: "
            "best/GROUP.toml (rnnlab train --config best/GROUP.toml)."]


BEST_PER_GROUP, COMPARED = "Best configuration per group", "Compared at each point"


def _importance_blocks(found: dict[str, Any] | None) -> list[Block]:
    """What each searched setting explains of the score (fANOVA), for a random search over two or more."""
    if not found:
        return []
    if "missing" in found:
        return [Heading("Hyperparameter importance"), Paragraph(f"Not computed: {found['missing']}.")]
    order = sorted(found["shares"], key=lambda k: -found["shares"][k])
    rows = [[k, f"{found['shares'][k]:.3f}", "[{:.3f}, {:.3f}]".format(*found["intervals"][k])] for k in order]
    rows.append(["interactions (what the shares leave)", f"{found['interactions']:.3f}",
                 "[{:.3f}, {:.3f}]".format(*found["interactions_interval"])])
    return [Heading("Hyperparameter importance"),
            Paragraph(f"The share of the variance of the configurations' mean score (over {found['configurations']} "
                      "configurations) that each setting explains on its own: functional ANOVA over a random-forest "
                      "surrogate (Optuna's fANOVA, as Greff et al. 2017 attributed their results). The range holds "
                      f"95% of {found['draws']} refits, each on a random 80% of the configurations with a forest of "
                      "its own seed: how stable the shares are, not a confidence interval."),
            Table(["setting", "share of variance", "range over refits"], rows)]


def sweep_page(summary: SweepResults, figures: list[dict[str, str]]) -> Page:
    """A sweep's report as one page: counts, the best configuration per group, the comparisons at each
    point, the figures, every trial."""
    blocks: list[Block] = [Paragraph(line) for line in _sweep_intro(summary)]
    blocks += [Heading(BEST_PER_GROUP), Table(*_sweep_best_rows(summary), title="Best per group")]
    compared = _sweep_comparison_rows(summary)
    if compared[1]:
        blocks += [Heading(COMPARED), Paragraph(COMPARISON_NOTE), Table(*compared, "verdicts")]
    blocks += _importance_blocks(summary.importance)
    blocks += [Figure(f["path"], f["title"], f["caption"]) for f in figures]
    blocks += [Heading("All trials (best first)"), Paragraph("Click a column to sort.", show=("html",)),
               Table(*_sweep_trial_rows(summary), "sortable")]
    return Page(f"Sweep {Path(summary.source).name}", blocks)


def write_sweep_report(summary: SweepResults, out_dir: str | Path) -> tuple[Path, Path]:
    """report.html (plots embedded, the trial table sortable) and report.md of a sweep folder."""
    out_dir = Path(out_dir)
    page = sweep_page(summary, sweep_figures(summary, out_dir))
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    write_text(md_path, markdown(page))
    write_text(html_path, html_page(page, out_dir))
    return html_path, md_path


def sweep_summary_text(summary: SweepResults) -> str:
    """What a terminal shows after a sweep: the counts and the best configuration per group."""
    page = sweep_page(summary, [])
    return terminal_text(Page(f"Sweep {summary.source}", [b for b in page.blocks if not isinstance(b, Table)
                                                            or b.title]))


def republish_sweep_comparisons(folder: str | Path, stands_in: str | Path | None = None) -> Path:
    """Recompute a published sweep's best-per-group table and its comparisons from the trials published
    beside it (``trials.csv``, matched to the sweep file's trials by id) with today's statistics, and
    replace those two sections of the page kept as data (``page.json``); its figures and trial table, measured
    then, stay. Written through a staging copy, like every publish (``files.staged_publish``). The sweep file is
    looked for from the folders above ``folder``, or above ``stands_in`` where ``folder`` is a copy of it."""
    folder = Path(folder)
    source = page_data(folder).get("source")
    if not isinstance(source, str):
        raise ValueError(f"{folder / PAGE_JSON}: no 'source' (the sweep file the page was made from)")
    sweep_file = _sweep_file(Path(stands_in or folder), source)
    with staged_publish(folder, f"sweep {Path(source).name}") as stage:
        _republish_sweep_comparisons(stage, source, sweep_file, folder / "trials.csv")
    return folder / "report.md"


def _sweep_file(folder: Path, source: str) -> Path:
    """The sweep file a published map was made from: ``source`` as its page records it (relative to where the
    sweep was run, as a rule the repository's root), looked for from the working folder, then from each folder
    above the published one, so that a folder republishes from wherever it is named."""
    path = Path(source)
    for root in (Path.cwd(), *folder.resolve().parents):
        if (root / path).is_file():
            return root / path
    raise ValueError(f"{folder / PAGE_JSON}: its sweep file {source} is not found from the working folder or from "
                     f"a folder above {folder}")


def _republish_sweep_comparisons(folder: Path, source: str, sweep_file: Path, published: Path) -> None:
    from rnnlab.experiments.sweeps import load_sweep, sweep_results

    sweep = load_sweep(sweep_file)
    records = _published_trials(folder / "trials.csv", published, sweep, sweep_file)
    summary = sweep_results(sweep, records)
    page = read_page(folder)
    blocks = _replace_keeping_figures(page.blocks, BEST_PER_GROUP,
                                      [Table(*_sweep_best_rows(summary), title="Best per group")])
    compared = _sweep_comparison_rows(summary)
    if section(blocks, COMPARED) and compared[1]:
        blocks = _replace_keeping_figures(blocks, COMPARED, [Paragraph(COMPARISON_NOTE), Table(*compared, "verdicts")])
    write_page(Page(page.title, blocks), folder / "report.md", folder / PAGE_JSON, source)


def _published_trials(path: Path, named: Path, sweep: Any, source: Path) -> list[dict[str, Any]]:
    """The trials published beside a sweep's page (``path``, a copy of ``named``), as the sweep's records: each
    row matched to the sweep file's trial by id; a damaged row is refused naming the file and line."""
    from rnnlab.experiments.sweeps import STATUSES

    by_id = {t.id: t for t in sweep.trials()}
    fixed = {"id", "seed", "seconds", "status", "error", *sweep.searched}

    def record(row: dict[str, str]) -> dict[str, Any]:
        if row["id"] not in by_id:
            raise ValueError(f"trial {row['id']!r} is not one of {source}'s")
        if row["status"] not in STATUSES:
            raise ValueError(f"status {row['status']!r} is not one of {', '.join(STATUSES)}")
        trial = by_id[row["id"]]
        return {"id": row["id"], "group": trial.group, "config": trial.config, "values": trial.values,
                "seed": int(row["seed"]), "status": row["status"], "error": row["error"],
                "seconds": float(row["seconds"] or 0.0),
                "metrics": {k: float(v) for k, v in row.items() if k not in fixed and v != ""}}

    if not path.is_file():
        raise ValueError(f"{named}: no such file (the trials the page was made from)")
    return read_csv(path, record, "a trial of the sweep", shown_as=named)


def _replace_keeping_figures(blocks: list[Block], heading: str, new: list[Block]) -> list[Block]:
    """The section ``heading`` with ``new`` in place of its text and tables; its figures (and their headings),
    plotted then, stay."""
    figures = [b for b in section(blocks, heading) if isinstance(b, Figure) or isinstance(b, Heading) and b.level > 2]
    return replace_section(blocks, heading, [Heading(heading), *new, *figures])


def write_published_sweep(summary: SweepResults, out_dir: str | Path, dest: str | Path) -> Path:
    """``dest/report.md`` with its plots and trials.csv, kept with the repository: the sweep's report
    under a line saying how it was made (command, date, version, cores, wall and training time).
    Published through a staging copy (``files.staged_publish``): only files this sweep published
    before are replaced or removed."""
    dest = Path(dest)
    with staged_publish(dest, f"sweep {Path(summary.source).name}") as stage:
        _write_published_sweep(summary, Path(out_dir), stage, dest)
    return dest / "report.md"


def _write_published_sweep(summary: SweepResults, out_dir: Path, stage: Path, dest: Path) -> None:
    if (stage / "figures").exists():
        shutil.rmtree(stage / "figures")     # the staging copy's: what the sweep plots now replaces them
    (stage / "figures").mkdir(parents=True)
    for figure in (out_dir / "figures").glob("*.png"):      # regular files only: never what a link points to
        copy_regular(figure, stage / "figures" / figure.name, out_dir)
    copy_regular(out_dir / "trials.csv", stage / "trials.csv", out_dir)
    calls = [c for c in summary.calls if c["trained_now"]]
    source = Path(summary.source)
    link = os.path.relpath(source.resolve(), dest.resolve()) if source.is_file() else str(source)
    command = next((c["command"] for c in reversed(calls or summary.calls) if c.get("command")), "")
    head = (f"`{command or 'rnnlab sweep ' + str(source)}` (the file: [{source}]({link}); every trial: "
            f"[trials.csv](trials.csv)). Measured {' to '.join(sorted({c['date'] for c in calls})) or '–'} with rnnlab "
            f"{__version__} on a {cpu_cores()}-core machine: wall time "
            f"{sum(c['seconds'] for c in calls) / 60:.1f} min over {len(calls)} call{'s' if len(calls) != 1 else ''} "
            f"that trained ({', '.join(sorted({c['executor'] for c in calls})) or 'no'} executor); training time "
            f"summed over trials {sum(r['seconds'] or 0.0 for r in summary.records) / 60:.1f} min.")
    page = sweep_page(summary, sweep_figures(summary, out_dir))
    page.blocks.insert(0, Paragraph(head))
    write_page(page, stage / "report.md", stage / PAGE_JSON, str(source))
