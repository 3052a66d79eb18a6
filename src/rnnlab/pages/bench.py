"""The cell benchmark's published page (``docs/results/cells.md``), from its results (``cells.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rnnlab.experiments.bench_cells import (
    BASELINES,
    EQUIVALENCE_TEST,
    FLOOR_RULE,
    FLOOR_WORD,
    SHARED,
    BenchResults,
    deciding_test,
    rejudge,
    runs_per_hour,
    tested,
)
from rnnlab.page import Heading, Page, Paragraph, Table
from rnnlab.pages.format import fmt_p, interval_text, share_text, unstable_shares
from rnnlab.pages.published import publish_with_results, write_results_page


def _bench_value(row: dict[str, Any]) -> str:
    failed = f"; {row['failed']} failed" if row["failed"] else ""
    if "mean" not in row:
        return f"{row['runs']} run(s) finished{failed}"
    return f"{row['mean']:.3g} ± {row['std']:.2g} [{row['ci_low']:.3g}, {row['ci_high']:.3g}]{failed}"


def _lstm_names(cells: list[str]) -> str:
    if "lstm-vanilla" not in cells:
        return ""
    return ("Greff et al. 2017's names: lstm-vanilla is their vanilla LSTM (with peepholes), lstm-X their variant X "
            "of it (NIG, NFG, NOG: no input, forget or output gate; NIAF, NOAF: no input or output activation; "
            "CIFG: f = 1 − i; FGR: every gate also reads the previous step's gates), and lstm is their NP (no "
            "peepholes: PyTorch's LSTM). ")


def _across_tasks_blocks(across: dict[str, Any]) -> list:
    """The suite summarised per cell (Agarwal et al. 2021), best IQM first; nothing for results judged before."""
    if not across.get("scores"):
        return []
    names = list(next(iter(across["scores"].values())))
    bases = [b for b in BASELINES if any(f["b"] == b for f in across["improvement"])]
    better = {(f["a"], f["b"]): f for f in across["improvement"]}

    def interval(point: float, low: float, high: float) -> str:
        return f"{point:.2f} [{low:.2f}, {high:.2f}]"

    order = sorted(across["scores"], key=lambda c: -across["scores"][c]["IQM"][0])
    rows = [[cell, *[interval(*across["scores"][cell][n]) for n in names],
             *[interval(better[cell, b]["p"], *better[cell, b]["interval"]) if (cell, b) in better else "–"
               for b in bases],
             " / ".join(f"{v:.2f}" for v in across["profiles"][cell])] for cell in order]
    return [
        Heading("Across tasks"),
        Paragraph(f"Each cell's final runs on {', '.join(across['tasks'])}, each task scaled from 0 (its memoryless "
                  "baseline, stated with the task below) to 1 (a perfect score), a failed run counted as 0, then "
                  "summarised as Agarwal et al. 2021 (rliable) do: the interquartile mean of all runs × tasks (the "
                  "outer quarters cut, so neither a few failed seeds nor one easy task decide it), the mean and median "
                  "of the per-task means, the optimality gap (how far the runs fall short of 1), and P(cell > b), the "
                  "chance that a run of the cell beats a run of b on a task, averaged over tasks; 95% intervals from "
                  f"the stratified bootstrap (runs resampled within each task, {across['reps']:,} draws, "
                  f"{across['pair_reps']:,} for P, seed {across['seed']}). The profile is the fraction of runs above "
                  f"each τ in {' / '.join(f'{t:g}' for t in across['taus'])}. With {len(across['tasks'])} tasks "
                  "these describe this suite, not a cell's merit in general."),
        Table(["cell", *names, *[f"P(cell > {b})" for b in bases], "profile"], rows),
    ]


def _about(results: BenchResults) -> str:
    n_final = len(results.final_seeds)
    sizes = ("with the hidden size drawn by the search (log-uniform integers in "
             f"[{results.search_space['hidden'][1][0]}, {results.search_space['hidden'][1][1]}], the same draws for "
             "every cell, as Greff et al. drew it: parameter counts differ)" if "hidden" in results.search_space
             else "at matched parameter budgets")
    return (f"{len(results.cells)} cells × {len(results.tasks)} tasks {sizes}; each cell tuned on "
            f"the same search ({_search_text(results)} × {len(results.search_seeds)} seeds, lowest mean dev loss), "
            f"then retrained on {n_final} seeds disjoint from the search's "
            f"({results.final_seeds[0]}–{results.final_seeds[-1]}). Compute: "
            f"{results.compute_seconds / 3600:.2f} h of one-thread training summed over the {results.runs} runs "
            f"(each run's wall time, measured on {results.machine}); " + _invocations(results) + _throughput(results)
            + ("Merged by " if results.parts else "") + f"`{results.command}`.")


def _invocations(results: BenchResults) -> str:
    """What trained the runs: this page's one invocation, or each part a merged page was assembled from."""
    if not results.parts:
        return (f"this page's invocation trained {results.trained_now} of them in {results.seconds / 60:.1f} min and "
                "read the rest from the job store. ")
    return (f"assembled from {len(results.parts)} parts, each trained by its own invocation and judged here as one "
            "benchmark: " + "; ".join(
                f"{', '.join(p['tasks'])} × {len(p['cells'])} cells ({p['runs']} runs, {p['trained_now']} trained in "
                f"{p['seconds'] / 60:.1f} min on {p['machine']}: `{p['command']}`)" for p in results.parts)
            + ". ")


def _throughput(results: BenchResults) -> str:
    """The final runs per hour of one-thread training, per engine, from each run's wall time: a core-hour where the
    runs did not outnumber the cores (pages judged before rows kept their times say nothing)."""
    rates = runs_per_hour(results.rows)
    if not rates:
        return ""
    return "Final runs per hour of one-thread training (wall time): " + "; ".join(
        f"{engine} {r['per_hour']:,.0f} ({r['runs']} runs, {r['hours']:.2f} h)" for engine, r in rates.items()) + ". "


def _search_text(results: BenchResults) -> str:
    if results.trials:
        return (f"{results.trials} random draws per cell of " + ", ".join(
            f"{name} {kind.replace('uniform', '-uniform')} in [{low:g}, {high:g}]"
            for name, (kind, (low, high)) in results.search_space.items()) + " with Adam, the same draws for "
            "every cell and task (common random numbers: a difference between cells is not a difference of luck "
            "in the draws)")
    return f"{len(results.learning_rates)} Adam learning rates"


def _expected_best_blocks(results: BenchResults) -> list:
    """Per task and cell, the expected best dev loss of n draws (Dodge et al. 2019): how much the search budget
    bought, and whether the cells' order would change with fewer draws; only for a random search."""
    if not results.trials or not any(r.get("expected_best") for r in results.rows):
        return []
    longest = max(len(r.get("expected_best", [])) for r in results.rows)
    ns = sorted({n for n in (1, 2, 4, 8, 16, 32, longest) if n <= longest})
    return [
        Heading("What the search budget bought"),
        Paragraph("The expected best mean dev loss of n draws of each cell's search, n = 1 … the draws made (Dodge "
                  "et al. 2019, without replacement: the best of n of the draws this search trained); a draw whose "
                  "seeds did not all finish counts as the worst draw. Flat from small n: the cell is easy to tune; "
                  "still falling at the last n: more draws would have helped it. The chosen settings follow."),
        Table(["task", "cell", *[f"n = {n}" for n in ns], "chosen"],
              [[r["task"], r["cell"], *[f"{r['expected_best'][n - 1]:.4g}" if len(r.get("expected_best", [])) >= n
                                        else "–" for n in ns],
                ", ".join(f"{k} {v:.3g}" for k, v in r.get("chosen", {}).items())] for r in results.rows]),
    ]


def _importance_blocks(results: BenchResults) -> list:
    """Per task and cell, the share of the search's dev-loss variance each hyperparameter explains (Greff et al.'s
    fANOVA), with the range over refits; only where the search drew enough to fit it."""
    rows = [r for r in results.rows if r.get("importance", {}).get("shares")]
    if not rows:
        return []
    names = list(results.search_space)
    shares = [[share_text(r["importance"]["shares"].get(n, 0.0), r["importance"]["intervals"].get(n, [0.0, 0.0]))
               for n in names] + [share_text(r["importance"]["interactions"], r["importance"]["interactions_interval"])]
              for r in rows]
    return [
        Heading("What each hyperparameter explains"),
        Paragraph("fANOVA shares of each search's mean dev loss over its draws (Hutter et al. 2014, through Optuna's "
                  "evaluator; rates and weight decay on log scales), with the range over 20 refits on 80% of the draws "
                  "(the shares' stability, not a confidence interval); 'interactions' is what the main effects leave."
                  + unstable_shares([t for row in shares for t in row])),
        Table(["task", "cell", *names, "interactions", "draws"],
              [[r["task"], r["cell"], *texts, str(r["importance"]["configurations"])]
               for r, texts in zip(rows, shares)]),
    ]


def _left_out(claim: dict[str, Any]) -> str:
    """What the count "k of N" leaves out (tasks where both cells sit at the floor) and what it counts as not
    holding without a test (a side finished fewer than 2 runs)."""
    floor, untested = claim.get("floor", []), claim.get("untested", [])
    notes = ([f"{len(floor)} more at the floor, not counted: {', '.join(floor)}"] if floor else []) + \
        ([f"{len(untested)} of the {len(claim['tasks'])} not tested, a side finishing under 2 runs: "
          f"{', '.join(untested)}"] if untested else [])
    return f" ({'; '.join(notes)})" if notes else ""


def _above_floor_row(results: BenchResults) -> list[list[str]]:
    """The table's last row: per task, how many cells are shown above its floor (none: no cell learnt it at this
    budget); nothing for results judged before the floor was kept."""
    if not results.floor:
        return []
    cells = len(results.cells)
    return [["**above the floor**"] + [f"{cells - len(results.floor[t['name']])} of {cells}" for t in results.tasks]]


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
               f"{len(c['holds'])} of {len(c['tasks'])}" + _left_out(c),
               "; ".join(f"{task}: {word}" for task, word in c["words"].items())] for c in results.claims]
    page.blocks += [
        Paragraph(_about(results), kind="about"),
        Heading("Claims, task by task"),
        Paragraph(f"A claim 'better'/'worse' holds on a task when {deciding_test(n_final)} finds the difference in "
                  f"that direction: a test that assumes no normal shape, so that a cell with a few failed seeds among "
                  f"good ones (a bimodal metric) is seen. 'Same' is an equivalence claim: it holds when "
                  f"{EQUIVALENCE_TEST} show the difference within the task's margin (stated with each task below); "
                  f"a difference not found is never read as 'same', and the page says the margin the {n_final} "
                  f"seeds a side do establish. A 'same' claim is not counted on a task where both cells sit at "
                  f"its floor ('{FLOOR_WORD}'): {FLOOR_RULE}. Two cells that learnt nothing are the same for want "
                  "of anything to compare, which says nothing about the cells; the count of cells above each "
                  "task's floor closes the table of test metrics below. A task where a side finished fewer "
                  "than 2 runs has no test: it is counted as not holding, and named."),
        Table(["claim", "who claims it", "holds on", "per task"], claims, kind="verdicts"),
        Heading("Test metric per cell and task"),
        Paragraph("Mean ± std over the final seeds [95% t interval]; hidden units and parameters "
                  + ("the search chose" if "hidden" in results.search_space else "at the task's budget")
                  + "; the learning rate the search chose. " + _lstm_names(cells) + " ".join(
                      f"**{t['name']}** ({t['metric']}, {'higher' if t['higher_is_better'] else 'lower'} is better; "
                      f"budget {t['budget']:,} parameters; 'same' within ±{t['same_margin']:g}, "
                      f"{t['margin_why']}): {t['why']}." for t in tasks)),
        Table(["cell"] + [t["name"] for t in tasks],
              [[c] + [f"{_bench_value(rows[t['name'], c])} (h {rows[t['name'], c]['hidden']}, "
                      f"{rows[t['name'], c]['params']:,} p, lr {rows[t['name'], c]['lr']:g})" for t in tasks]
               for c in cells] + _above_floor_row(results)),
        *_across_tasks_blocks(results.across_tasks),
        *_expected_best_blocks(results),
        *_importance_blocks(results),
        Heading("Every cell against the vanilla RNN, the GRU and the LSTM, and each claim's pair"),
        Paragraph("a − b of the test metric with the interval that inverts the exact permutation test at the level "
                  "its Holm-adjusted p implies (so it excludes 0 exactly when the verdict is 'better' or 'worse'); "
                  "the exact permutation p and its Holm adjustment within the task, which decides the verdict; P(a "
                  "better than b) over seed pairs; and the same test's 90% interval, which shows the two the same when "
                  "it lies within the task's margin (two one-sided tests)."),
        Table(["task", "a", "b", "a − b [interval, its coverage]", "p (exact permutation)", "p (Holm: decides)",
               "P(a better)", "verdict", "90% interval: same?"],
              [[f["task"], f["a"], f["b"], *_comparison_cells(f, margins[f["task"]])] for f in results.comparisons]),
    ]
    return page


def _comparison_cells(f: dict, margin: float) -> list[str]:
    """A comparison's row after its pair; a pair without 2 finished runs a side has no test, so no numbers."""
    if not tested(f):
        return ["—", "—", "—", "—", f["word"], "—"]
    return [f"{f['difference']:+.3g} " + interval_text(f["low"], f["high"], f.get("coverage", 0.95), _signed),
            fmt_p(f["p_exact"]), fmt_p(f["p_holm"]), f"{f['p_a_better']:.2f}", f["word"],
            interval_text(f["low90"], f["high90"], fmt=_signed) + ": " + ("within" if f["equivalent"] else "not within")
            + f" ±{margin:g}"]


def write_bench(results: BenchResults, out_dir: str | Path, target: Path | None = None) -> str:
    """The benchmark's ``results.json`` and ``cells.md`` in ``out_dir``; with ``target``, the page published there
    (``publish_bench``). Returns the page's Markdown."""
    text = write_results_page(bench_cells_page(results), results.to_json(), out_dir, "cells.md")
    if target is not None:
        publish_bench(results, target)
    return text


def check_replaces_no_more(target: Path, pairs: set[tuple[str, str]], search: dict[str, Any]) -> None:
    """Refuse, before anything trains, a publish at ``target`` whose benchmark (``pairs``: (task, cell); ``search``:
    the fields of ``SHARED``) would drop (task, cell) pairs of the one published there or judge with another search
    or other seeds: a quick run with the default tasks must not quietly replace the suite's hours of runs."""
    stored = target.with_suffix(".json")
    if not stored.is_file():
        return
    published = BenchResults.load(stored)
    dropped = sorted({(row["task"], row["cell"]) for row in published.rows} - pairs)
    if dropped:
        shown = ", ".join(f"{cell} on {task}" for task, cell in dropped[:5]) + (" …" if len(dropped) > 5 else "")
        raise ValueError(f"--publish {target}: the benchmark published there holds {len(dropped)} (task, cell) "
                         f"pairs this one does not ({shown}); publishing would drop them. Publish to another FILE, "
                         f"or train what is new with --out elsewhere and publish `--merge` of its results.json with "
                         f"{stored}; nothing was trained or written")
    as_stored = json.loads(json.dumps(search))
    differs = [name for name in SHARED if as_stored[name] != getattr(published, name)]
    if differs:
        shown = "; ".join(f"{name} {getattr(published, name)} there, {as_stored[name]} here" for name in differs)
        raise ValueError(f"--publish {target}: the benchmark published there was searched or seeded otherwise "
                         f"({shown}); publishing would replace its runs with runs of another search. Publish to "
                         "another FILE; nothing was trained or written")


def publish_bench(results: BenchResults, target: str | Path) -> Path:
    """The page at ``target``, its data (``cells/page.json``) and its results (``cells.json``) beside it."""
    return publish_with_results(bench_cells_page(results), results.to_json(), target, "bench-cells")


def republish_bench(target: str | Path = "docs/results/cells.md") -> Path:
    """The published benchmark judged again by today's rules from its stored per-seed values (``cells.json``,
    ``bench_cells.rejudge``) and rendered again; nothing retrains and no Markdown is read."""
    target = Path(target)
    return publish_bench(rejudge(BenchResults.load(target.with_suffix(".json"))), target)
