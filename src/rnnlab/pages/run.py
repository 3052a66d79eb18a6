"""A study run's report: ``report.html`` (one self-contained page, plots embedded as data URIs) and
``report.md`` from the run's typed results (``runs/NAME/results.json``), and its terminal summary."""

from __future__ import annotations

from pathlib import Path

from rnnlab.experiments.results import StudyResults
from rnnlab.files import write_text
from rnnlab.metrics import metric_label
from rnnlab.page import ON_PAGES, Block, Figure, Heading, Items, Page, Paragraph, Table, markdown
from rnnlab.page import html as html_page
from rnnlab.page import text as terminal_text
from rnnlab.pages.format import (
    CLAIMS_CAPTION,
    CLAIMS_FIGURE,
    VERDICT_LEGEND,
    claims_figure,
    metric_cell,
    power_sentence,
    verdict_tables,
)


def results_table(results: StudyResults) -> tuple[list[str], list[list[str]]]:
    metrics = results.metrics
    header = ["configuration", "parameters", "seeds"] + [metric_label(m) for m in metrics]
    rows = [[row["key"], str(row["num_params"]), str(row["seeds"])] + [metric_cell(row, m) for m in metrics]
            for row in results.summary]
    return header, rows


def settings_lines(results: StudyResults) -> list[str]:
    lines = []
    for c in results.configurations:
        extra = ", ".join(f"{k}={v}" for k, v in {**c["settings"], **c["task_options"]}.items())
        lines.append(f"{c['key']}: task {c['task']}" + (f"; {extra}" if extra else ""))
    return lines


def seeds_sentence(results: StudyResults) -> str:
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
    blocks.append(Paragraph(seeds_sentence(results)))
    products = results.products()
    if products:
        blocks.append(Paragraph(f"Matrix products: {'; '.join(products)}."))
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
    blocks += [Heading("Settings"), Items(settings_lines(results), code=True)]
    return Page(results.title, blocks)


def write_markdown(results: StudyResults, exp_dir: Path) -> Path:
    path = exp_dir / "report.md"
    write_text(path, markdown(study_page(results, exp_dir)))
    return path


def write_html(results: StudyResults, exp_dir: Path) -> Path:
    path = exp_dir / "report.html"
    write_text(path, html_page(study_page(results, exp_dir), exp_dir))
    return path


def summary_text(results: StudyResults) -> str:
    """What a terminal shows after a run: title, seeds, the verdicts, the results table, notes."""
    return terminal_text(study_page(results, Path(".")))


def write_report(results: StudyResults, exp_dir: str | Path) -> tuple[Path, Path]:
    exp_dir = Path(exp_dir)
    claims_figure(results.verdicts, exp_dir / CLAIMS_FIGURE)
    return write_html(results, exp_dir), write_markdown(results, exp_dir)
