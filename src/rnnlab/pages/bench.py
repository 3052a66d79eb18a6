"""The cell benchmark's published page (``docs/results/cells.md``), from its results (``cells.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnlab.experiments.bench_cells import DECIDING_TEST, EQUIVALENCE_TEST, BenchResults, rejudge
from rnnlab.files import publish_files
from rnnlab.page import PAGE_JSON, Heading, Page, Paragraph, Table, markdown
from rnnlab.pages.format import fmt_p, interval_text
from rnnlab.pages.published import page_json_text


def _bench_value(row: dict[str, Any]) -> str:
    if "mean" not in row:
        return f"{row['runs']} run(s)"
    failed = f"; {row['failed']} failed" if row["failed"] else ""
    return f"{row['mean']:.3g} ± {row['std']:.2g} [{row['ci_low']:.3g}, {row['ci_high']:.3g}]{failed}"


def _signed(x: float) -> str:
    return f"{x:+.3g}"


def bench_cells_page(results: BenchResults) -> Page:
    """docs/results/cells.md: the claims first (held on k of N tasks), then cell × task, then every
    comparison with its interval, raw and Holm-adjusted p, the exact p and P(A > B)."""
    tasks = results.tasks
    cells = [c["label"] for c in results.cells]
    rows = {(r["task"], r["cell"]): r for r in results.rows}
    n_final = len(results.final_seeds)
    margins = {t["name"]: t["same_margin"] for t in tasks}

    page = Page("Cells side by side: the rnnlab cell benchmark")
    claims = [[f"{c['a']} {c['relation']} {'than' if c['relation'] != 'same' else 'as'} {c['b']}", c["source"],
               f"{len(c['holds'])} of {len(c['tasks'])}",
               "; ".join(f"{task}: {word}" for task, word in c["words"].items())] for c in results.claims]
    page.blocks += [
        Paragraph(f"{len(cells)} cells × {len(tasks)} tasks at matched parameter budgets; each cell tuned on the same "
                  f"search ({len(results.learning_rates)} Adam learning rates × {len(results.search_seeds)} "
                  f"seeds, lowest mean dev loss), then retrained on {n_final} seeds disjoint from the search's "
                  f"({results.final_seeds[0]}–{results.final_seeds[-1]}). Compute: "
                  f"{results.compute_seconds / 3600:.2f} h of training summed over the {results.runs} runs "
                  f"(measured on {results.machine}); this page's invocation trained {results.trained_now} of "
                  f"them in {results.seconds / 60:.1f} min and read the rest from the job store. "
                  f"`{results.command}`.",
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
              [[f["task"], f["a"], f["b"], f"{f['difference']:+.3g} " + interval_text(
                  f["low"], f["high"], f.get("coverage", 0.95), _signed),
                fmt_p(f["p_exact"]), fmt_p(f["p_holm"]), f"{f['p_a_better']:.2f}", f["word"],
                interval_text(f["low90"], f["high90"], fmt=_signed) + ": " +
                ("within" if f["equivalent"] else "not within") +
                f" ±{margins[f['task']]:g}"]
               for f in results.comparisons]),
    ]
    return page


def write_bench(results: BenchResults, out_dir: str | Path, target: Path | None = None) -> str:
    """The benchmark's ``results.json`` and ``cells.md`` in ``out_dir``; with ``target``, the page published there
    (``publish_bench``). Returns the page's Markdown."""
    out_dir = Path(out_dir)
    (out_dir / "results.json").write_text(results.to_json())
    page = markdown(bench_cells_page(results))
    (out_dir / "cells.md").write_text(page)
    if target is not None:
        publish_bench(results, target)
    return page


def published_files(target: Path) -> list[str]:
    """What publishing the benchmark at ``target`` (``docs/results/cells.md``) writes, relative to its folder: the
    page, the page as data and the results it was made from (``cells.json``)."""
    return [target.name, f"{target.stem}/{PAGE_JSON}", target.with_suffix(".json").name]


def publish_bench(results: BenchResults, target: str | Path) -> Path:
    """The page at ``target``, its data (``cells/page.json``) and its results (``cells.json``) beside it, through
    the folder's manifest."""
    target = Path(target)
    page = bench_cells_page(results)
    content = (markdown(page), page_json_text(page), results.to_json())
    publish_files(target.parent, {rel: text.encode() for rel, text in zip(published_files(target), content)},
                  "bench-cells")
    return target


def republish_bench(target: str | Path = "docs/results/cells.md") -> Path:
    """The published benchmark judged again by today's rules from its stored per-seed values (``cells.json``,
    ``bench_cells.rejudge``) and rendered again; nothing retrains and no Markdown is read."""
    target = Path(target)
    return publish_bench(rejudge(BenchResults.load(target.with_suffix(".json"))), target)
