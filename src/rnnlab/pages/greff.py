"""Greff et al. 2017's JSB arm, published (``docs/results/greff-jsb.md``), from its judged results
(``greff-jsb.json``), beside the numbers read off the paper's figures."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from rnnlab.experiments.greff import (
    PUBLISHED,
    PUBLISHED_SHARES,
    SAME_MARGIN,
    SETTINGS,
    SPACE,
    TESTS,
    TOP,
    TRIALS,
    VANILLA,
    VARIANTS,
    WHY_MARGIN,
    WHY_SETTINGS,
    GreffResults,
    judge_again,
)
from rnnlab.page import Figure, Heading, Page, Paragraph, Table
from rnnlab.pages.format import fmt_p, share_text, unstable_shares
from rnnlab.pages.published import publish_with_results, write_results_page

TITLE = "LSTM: A Search Space Odyssey, the JSB Chorales arm (Greff et al. 2017)"


def _box(box: dict[str, Any]) -> str:
    if not box.get("n"):
        return "–"
    return (f"{box['mean']:.2f} / {box['median']:.2f} [{box['q25']:.2f}–{box['q75']:.2f}] "
            f"({box['min']:.2f}–{box['max']:.2f}), n = {box['n']}")


def _paper(value: float) -> str:
    return "> 8.85 (off the plot)" if math.isinf(value) else f"{value:.2f}"


def _variant_rows(results: GreffResults) -> list[list[str]]:
    rows = []
    for name in VARIANTS:
        v = results.variants[name]
        top_mean, top_median, all_mean, all_median, best, params, significant = PUBLISHED[name]
        missing = {s: n for s, n in v["not_finished"].items() if n}
        rows.append([
            name, f"{v['finished']} of {v['trained']}" + (f" ({', '.join(f'{n} {s}' for s, n in missing.items())})"
                                                          if missing else ""),
            _box(v["all"]), f"{_paper(all_mean)} / {_paper(all_median)}", _box(v["top"]),
            f"{_paper(top_mean)} / {_paper(top_median)}",
            (f"{v['best']['test']:.2f} (dev {v['best']['dev']:.2f}; N {v['best']['hidden']}, lr "
             f"{v['best']['lr']:.2g})" if v["best"] else "–") + f" · paper's best of 20: {best:.2f}",
            (f"{v['top_params']:,.0f}" if v["top_params"] else "–") + f" · paper ≈{params:,}", significant])
    return rows


def _comparison_rows(results: GreffResults) -> list[list[str]]:
    rows = []
    for c in results.comparisons:
        if "difference" not in c:
            rows.append([c["variant"], c["panel"], f"{c['n']} vs {c['n_vanilla']}", "–", "–", "–", c["word"]])
            continue
        low, high = c["interval"]
        rows.append([c["variant"], "best 10%" if c["panel"] == "top" else "all", f"{c['n']} vs {c['n_vanilla']}",
                     f"{c['difference']:+.3f} [{low:+.3f}, {high:+.3f}]",
                     f"{fmt_p(c['p'])} → {fmt_p(c['p_bonferroni'])}",
                     fmt_p(c["p_same_bonferroni"]), c["word"]])
    return rows


def _matched_sections(results: GreffResults) -> list:
    """Where a word differs from the paper's: the verdict at matched draws, and each pair."""
    if not results.matched:
        return []
    checks = len(results.matched)
    top = {c["variant"]: c for c in results.comparisons if c["panel"] == "top"}
    verdicts, pairs = [], []
    for name, m in results.matched.items():
        c = top[name]
        panel = (f"{c['difference']:+.3f} [{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}]: {c['word']}"
                 if "difference" in c else c["word"])
        at_matched = (f"{m['difference']:+.3f} [{m['interval'][0]:+.3f}, {m['interval'][1]:+.3f}]"
                      if "difference" in m else "–")
        verdicts.append([name, f"{panel} (paper: {PUBLISHED[name][6]})", f"{m['n']} of {m['n'] + m['unfinished']}",
                         at_matched, fmt_p(m["p_bonferroni"]) if "p" in m else "–",
                         fmt_p(m["p_same_bonferroni"]) if "p" in m else "–", m["word"], _whose(c, m)])
        for p in m["pairs"]:
            finished = p["variant"] is not None and p["vanilla"] is not None
            pairs.append([name, f"{p['best_of']}'s best 10%", str(p["hidden"]), f"{p['lr']:.3g}",
                          f"{p['momentum']:.3g}", f"{p['input_noise']:.3g}", _nll(p["vanilla"]), _nll(p["variant"]),
                          f"{p['variant'] - p['vanilla']:+.3f}" if finished else "–"])
    return [
        Heading("Where our words differ from the paper's"),
        Paragraph("Each variant draws its own hyperparameters (as in the paper), so a best-10% panel also measures "
                  "which draws a variant's search happened to get. Where our word differs from the paper's, the "
                  "variant is retrained at V's best-10% draws and V at the variant's, with the trial's seed, and "
                  "the pairs are compared at the same draws: variant − V of the test NLL, the paired t-test and its "
                  + ("interval at 95% (one check made), and " if checks == 1 else
                  f"interval at 1 − 0.05/{checks} (Bonferroni over the {checks} checks made), and ") +
                  f"the two one-sided paired tests against ±{SAME_MARGIN:g} for 'same'. A difference that holds at the "
                  "same draws is the cell's; the part of it the same draws' interval rules out came from the draws."),
        Table(["variant", "best 10%: ours (the paper's word)", "pairs finished", "at the same draws [interval]",
               "p (Bonferroni)", "p (same)", "word", "the difference is"], verdicts, kind="verdicts"),
        Table(["variant", "draw from", "N", "lr", "momentum", "input noise", "V test NLL", "variant test NLL",
               "variant − V"], pairs),
    ]


def _whose(panel: dict[str, Any], matched: dict[str, Any]) -> str:
    """What the matched draws say of the panel's difference."""
    word = matched["word"]
    if panel["word"] in ("worse", "better") and word == panel["word"]:
        return "the cell's: it holds at the same draws"
    if word == "same":
        return f"the draws': at the same draws the two are within ±{SAME_MARGIN:g}"
    if word in ("worse", "better"):
        return f"not the panel's: at the same draws the variant is {word}"
    if "interval" in matched and "difference" in panel:
        low, high = matched["interval"]
        if panel["difference"] > high:
            return (f"mostly the draws': at the same draws it is at most {high:+.2f}, below the panel's "
                    f"{panel['difference']:+.2f}")
        if panel["difference"] < low:
            return (f"mostly the draws': at the same draws it is at least {low:+.2f}, above the panel's "
                    f"{panel['difference']:+.2f}")
    return "not shown at the same draws (undecided): the draws may explain it"


def _nll(value: float | None) -> str:
    return "did not finish" if value is None else f"{value:.2f}"


def _importance_rows(results: GreffResults) -> list[list[str]]:
    names = list(SPACE)
    rows = []
    for variant, found in results.importance.items():
        if not found:
            continue
        rows.append([variant, *[share_text(found["shares"][k], found["intervals"][k]) for k in names],
                     share_text(found["interactions"], found["interactions_interval"]), str(found["configurations"])])
    rows.append(["V, the paper (Fig. 5, JSB)", *[PUBLISHED_SHARES[k] for k in names], PUBLISHED_SHARES["interactions"],
                 "200"])
    return rows


def _interim(results: GreffResults) -> list[Paragraph]:
    """What a budget below the paper's means for the page's words, said before them."""
    if results.quick or results.trials >= TRIALS:
        return []
    return [Paragraph(f"**Interim: {results.trials} of the paper's {TRIALS} trials per variant.** The best-10% "
                      f"panel holds {max(1, round(TOP * results.trials))} trials a variant (the paper's: "
                      f"{round(TOP * TRIALS)}), so its tests have far less power than the paper's: a finding "
                      "'undecided' here may be decided by the full arm, which the same command resumes from the "
                      "stored trials; a word decided here is decided by these trials' evidence, at the level "
                      "stated.", kind="about")]


def greff_page(results: GreffResults) -> Page:
    """The findings first, then per variant the trials beside the paper, the tests against V and the importance."""
    finished = sum(v["finished"] for v in results.variants.values())
    importance = _importance_rows(results)
    page = Page(TITLE)
    page.blocks += [
        Paragraph(f"The vanilla LSTM (V, with peepholes) and its eight variants, each searched at random with "
                  f"{results.trials} trials (the paper: 200), one seed a trial, on JSB Chorales (229 / 76 / 77 "
                  f"chorales). Each trial draws N log-uniform in [20, 200], the learning rate log-uniform in "
                  f"[1e−6, 1e−2], momentum 1 − u with u log-uniform in [0.01, 1] and the input noise σ uniform in "
                  f"[0, 1], as the paper. Settings: {WHY_SETTINGS}. NLL is per time step, summed over the 88 notes. "
                  f"{finished} trials finished; {results.compute_seconds / 3600:.1f} h of one-thread training "
                  f"(the trials' wall times summed) on {results.machine or 'this machine'}"
                  + (f" ({3600 * finished / results.compute_seconds:.1f} trials per such hour, engine "
                     f"{SETTINGS['engine']})" if results.compute_seconds else "")
                  + f". `{results.command}`.", kind="about"),
        *_interim(results),
        Heading("The paper's findings"),
        Paragraph(f"Decided on the best 10% of each variant's trials by validation NLL (the paper's main panel), "
                  f"by Welch's t-test against V with Bonferroni's correction for {TESTS} tests (the paper's test); "
                  f"'same' needs both one-sided Welch tests against ±{SAME_MARGIN:g} to reject, corrected alike "
                  f"({WHY_MARGIN}); not significant is 'undecided', never 'same'. 'Cost nothing' asks 'not worse': "
                  "it holds when each variant is 'same' or 'better' and fails when one is 'worse'; 'hurts' holds when "
                  "both are 'worse'. The learning rate's finding is read "
                  "from V's fANOVA shares: it holds when the learning rate's share stays above every other share and "
                  "the interactions over the refits."),
        Table(["finding", "word", "evidence"],
              [[f["claim"], f["word"], "; ".join(f"{k}: {w}" for k, w in f["words"].items())]
               for f in results.findings], kind="verdicts"),
        Heading("Test NLL per variant, beside the paper"),
        Paragraph(f"Mean / median [quartiles] (range) of the test NLL at each trial's best validation epoch, over "
                  f"all finished trials and over the best {TOP:.0%} by validation NLL; the paper's numbers are read "
                  "off its Fig. 3 (±0.01). The best trial is chosen on validation. Parameters: the mean over the best "
                  "10% (N is searched, so the variants are not matched in size, as in the paper)."),
        Table(["variant", "finished", "all: ours", "all: paper (mean / median)", f"best {TOP:.0%}: ours",
               f"best {TOP:.0%}: paper", "best trial", "parameters (best 10%)", "paper: differs from V?"],
              _variant_rows(results)),
        Heading(f"Each variant against {VANILLA}"),
        Paragraph(f"Variant − V of the mean test NLL (lower is better) with Welch's interval at the Bonferroni level "
                  f"(1 − 0.05/{TESTS}), Welch's p raw → Bonferroni (decides 'better'/'worse'), and the Bonferroni p "
                  f"of the two one-sided tests against ±{SAME_MARGIN:g} (decides 'same')."),
        Table(["variant", "panel", "trials", "difference [interval]", "p → Bonferroni", "p (same)", "word"],
              _comparison_rows(results)),
        *_matched_sections(results),
        Heading("Hyperparameter importance"),
        Figure(MARGINALS, "test NLL against each hyperparameter",
               "Every finished trial a faint point; per variant the median test NLL in eight bins of the "
               "hyperparameter (log bins for the rate, N and 1 − momentum), the marginal Greff et al. plot in their "
               "Fig. 5; NLL above 14 is drawn at 14.", heading=False),
        Paragraph("fANOVA shares of the test NLL's variance over the searched space (a random forest, Optuna's "
                  "evaluator; the rate, N and 1 − momentum on log scales, as Greff's script), per variant with at "
                  "least 8 finished trials; the range is over 20 refits on 80% of the trials (stability, not a "
                  "confidence interval). 'Interactions' is what the main effects leave."
                  + unstable_shares([t for row in importance[:-1] for t in row[1:-1]])),
        Table(["variant", *SPACE, "interactions", "trials"], importance),
    ]
    return page


MARGINALS = "greff-jsb/marginals.png"


def marginals_png(results: GreffResults, path: Path) -> Path:
    """The figure of the page: each variant's test NLL against the four searched hyperparameters."""
    from rnnlab.analysis.plots import plot_marginals

    panels = {name: {variant: ([1.0 - t[name] if name == "momentum" else t[name] for t in v["trials"]],
                               [t["test"] for t in v["trials"]]) for variant, v in results.variants.items()}
              for name in SPACE}
    panels["1 − momentum"] = panels.pop("momentum")
    return plot_marginals({k: panels[k] for k in ("lr", "hidden", "1 − momentum", "input_noise")}, path,
                          "test NLL per step", "Test NLL against each hyperparameter, per variant",
                          log=("lr", "hidden", "1 − momentum"), ylim=(8.0, 14.0))


def write_greff(results: GreffResults, out_dir: str | Path) -> str:
    """``results.json``, ``greff-jsb.md`` and its figure in ``out_dir`` (``publish_greff`` publishes them). Returns
    the page."""
    marginals_png(results, Path(out_dir) / MARGINALS)
    return write_results_page(greff_page(results), results.to_json(), out_dir, "greff-jsb.md")


def check_replaces_no_fewer(target: Path, trials: int, results: GreffResults | None = None) -> None:
    """Refuse a publish at ``target`` that would show fewer trials than the arm published there: before training,
    fewer ``trials`` per variant asked for; after, with ``results``, fewer finished for any variant (a new machine
    that did not ``--restore`` the published trials)."""
    stored = target.with_suffix(".json")
    if not stored.is_file():
        return
    published = GreffResults.load(stored)
    if trials < published.trials:
        raise ValueError(f"--publish {target}: the arm published there has {published.trials} trials per variant; "
                         f"--trials {trials} would replace it with fewer. Give --trials {published.trials} or more, "
                         "or publish to another FILE; nothing was trained or written")
    if results is None:
        return
    fewer = [f"{name} {results.variants.get(name, {}).get('finished', 0)} of its {row['finished']}"
             for name, row in published.variants.items()
             if results.variants.get(name, {}).get("finished", 0) < row["finished"]]
    if fewer:
        raise ValueError(f"--publish {target}: these trials would replace the published arm with fewer finished "
                         f"trials ({'; '.join(fewer)}). What trained is kept in --out, with its page; run again with "
                         f"--restore {stored} to add the published trials, or publish to another FILE; nothing was "
                         "published")


def publish_greff(results: GreffResults, target: str | Path) -> Path:
    target = Path(target)
    with tempfile.TemporaryDirectory() as scratch:
        png = marginals_png(results, Path(scratch) / "marginals.png").read_bytes()
    return publish_with_results(greff_page(results), results.to_json(), target, "greff",
                                {MARGINALS: png})


def republish_greff(target: str | Path = "docs/results/greff-jsb.md") -> Path:
    """The published arm judged again from its stored trials (``greff-jsb.json``) and rendered again."""
    target = Path(target)
    return publish_greff(judge_again(GreffResults.load(target.with_suffix(".json"))), target)
