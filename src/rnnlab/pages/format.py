"""How a verdict, a metric and a p-value are written on every page: one place for the words and numbers
beside them, shared by the run, study, sweep and benchmark pages."""

from __future__ import annotations

import math
from pathlib import Path

from rnnlab.experiments.results import StudyResults, Verdict
from rnnlab.experiments.statistics import detectable_permutation, p_shown, seeds_to_decide, smallest_permutation_p
from rnnlab.metrics import is_count


def fmt_number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-3 or magnitude >= 1e5):
        return f"{value:.3g}"
    return f"{value:.4f}" if magnitude < 10 else f"{value:.2f}"


def metric_cell(row: dict, metric: str) -> str:
    if f"{metric}_mean" not in row:
        return "–"
    mean, std, n = row[f"{metric}_mean"], row[f"{metric}_std"], row.get(f"{metric}_n", row["seeds"])
    if is_count(metric):   # trials that succeeded: a count, not a mean of 0/1
        return f"{round(mean * n)} of {n}"
    if metric.startswith("seconds"):
        return f"{mean:.2g} ± {std:.1g}" if n > 1 else f"{mean:.2g}"
    return f"{fmt_number(mean)} ± {fmt_number(std)}" if n > 1 else fmt_number(mean)


UNSTABLE_SHARE = ("† marks a share whose fit on all the draws lies outside its refits' range: the share moves with "
                  "which draws the forest saw, too few draws to read it closely")


def share_text(value: float, interval: tuple[float, float] | list[float]) -> str:
    """A fANOVA share with its range over refits, as printed, marked † (``UNSTABLE_SHARE``) where the printed
    point lies outside the printed range."""
    point, low, high = (f"{x:.2f}" for x in (value, *interval))
    return f"{point} [{low}, {high}]" + ("" if float(low) <= float(point) <= float(high) else "†")


def unstable_shares(texts: list[str]) -> str:
    """The sentence on the † marks among ``texts`` (a table's share cells): how many of them, or nothing."""
    marked = sum(t.endswith("†") for t in texts)
    return f" {UNSTABLE_SHARE} ({marked} of {len(texts)} here)." if marked else ""


def fmt_p(p: float | None) -> str:
    return "–" if p is None else p_shown(p)


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None else f" [{fmt_number(low)}, {fmt_number(high)}]"


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
        parts.append(f"detectable with 80% power: {fmt_number(v.detectable)}")
    if v.seeds_needed is not None and not v.verdict.startswith(("reproduced", "not reproduced")):
        parts.append(f"the measured difference needs ~{v.seeds_needed} seeds a side")
    return "; ".join(parts) or "–"


def _prediction(v: Verdict) -> str:
    """Where one more of our runs would fall (95%), beside a published single run."""
    return "–" if v.prediction_low is None else f"[{fmt_number(v.prediction_low)}, {fmt_number(v.prediction_high)}]"


def verdict_tables(results: StudyResults) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for the claims and for the published numbers, verdict first."""
    out = []
    claims = [[v.verdict, v.claim, v.evidence, "–" if v.difference is None else
               fmt_number(v.difference) + _verdict_interval(v), v.test, fmt_p(v.p_value),
               fmt_p(v.p_adjusted),
               "–" if v.prob_superiority is None else f"{v.prob_superiority:.2f}", _power(v), v.reason or "–"]
              for v in results.verdicts if v.kind == "claim"]
    if claims:
        out.append(("Claims, tested over seeds",
                    ["verdict", "claim", "evidence", "difference [interval]", "test", "p", "p (Holm)",
                     "P(A>B)", "power", "why not reproduced"], claims))
    published = [[v.verdict, v.claim, v.evidence, "–" if v.difference is None else
                  fmt_number(v.difference) + _interval(v.low, v.high),
                  "–" if v.tolerance is None else f"±{v.tolerance:.3g} ({v.tolerance_why})",
                  _prediction(v), v.test, fmt_p(v.p_adjusted), v.reason]
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
    if not can_decide(n, deciding):
        return (f"**With {n} seeds a side no claim on a continuous metric can be decided**: the exact permutation "
                f"p of {n} vs {n} seeds is at least {smallest:.3g}, not below {at}. Such a claim reads 'not "
                f"significant' whatever its difference; deciding it takes at least {seeds_to_decide(deciding)} seeds "
                f"a side, and its row gives the seeds its measured spread would need. (A count claim's exact test "
                f"has its own smallest p.)")
    return (f"With {n} seeds a side, a difference must be about {detectable_permutation(n, n, alpha=deciding):.1f} "
            f"standard deviations of the runs to be found with 80% power by the exact permutation test ({at}); "
            f"each claim's row gives that smallest detectable difference in its metric's units, and a 'not "
            f"significant' one the seeds its measured spread would need.")


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

CLAIMS_FIGURE = "claims.png"
CLAIMS_CAPTION = ("Each claim's runs, one dot per seed (the claimed better configuration first), the bar the mean: "
                  "the distributions the verdicts rest on.")


def claims_figure(verdicts: list[Verdict], path: Path) -> Path | None:
    """The strip of per-seed dots of every tested claim (None when no claim has runs)."""
    from rnnlab.analysis.plots import plot_claim_strips

    rows = [v for v in verdicts if v.kind == "claim" and any(v.values.values())]
    return plot_claim_strips(rows, path) if rows else None


def can_decide(seeds: int, level: float) -> bool:
    """Whether the exact permutation test's p can fall below ``level`` with ``seeds`` a side."""
    return seeds >= 1 and smallest_permutation_p(seeds, seeds) < level


def interval_text(low: float | None, high: float | None, coverage: float | None = None, fmt=fmt_number) -> str:
    """A comparison's interval with its coverage, or 'no interval' where its test keeps every difference."""
    if low is None or not (math.isfinite(low) and math.isfinite(high)):
        return "(no interval: with these seeds the exact p cannot fall below the level)"
    return f"[{fmt(low)}, {fmt(high)}]" + ("" if coverage is None else f" ({100 * coverage:.3g}%)")


def verdict_cell(v: Verdict) -> str:
    """One verdict in one table cell: the outcome first, then the numbers behind it."""
    text = f"**{v.verdict}**: {v.evidence}"
    if v.difference is not None:
        text += f"; difference {fmt_number(v.difference)}" + _verdict_interval(v)
    if v.p_value is not None:
        text += f", p = {fmt_p(v.p_value)} ({v.test})"
    if v.p_adjusted is not None and v.kind in ("claim", "published"):
        text += f", Holm-adjusted p = {fmt_p(v.p_adjusted)} (decides)"
    if v.p_exact is not None and v.p_exact != v.p_value:     # a page stored before the permutation test decided
        text += f", exact permutation p = {fmt_p(v.p_exact)}"
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
