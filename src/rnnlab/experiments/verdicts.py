"""Verdicts: each claim a study makes and each number it publishes, tested over seeds.

A study declares, as data beside its specs,

- ``Claim``s: "configuration ``better`` beats ``worse`` on ``metric``" (lower or higher is better);
- published numbers, ``(spec key, metric) → value`` (a number, a ``(low, high)`` range, open at one
  end when that end is None, or text that is only shown).

``judge_claim`` and ``judge_published`` turn the runs (one value per seed) into a ``Verdict``: the
difference with a 95% confidence interval, the test, its p-value and one word of outcome:

- **reproduced**: the claimed difference is significant in the claimed direction (p < 0.05), or the
  published number (or a point of its range) lies inside our 95% confidence interval;
- **not reproduced**: significant the other way, or the published number lies outside the interval;
- **not significant with N seeds**: the test cannot tell (too few seeds, or p ≥ 0.05).

Tests: Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) with its Welch–Satterthwaite
interval for metrics that vary continuously; for per-trial successes (a metric listed in
``COUNT_METRICS``, 0 or 1 per seed) Fisher's exact test on the 2×2 table with Newcombe's hybrid
Wilson interval for the difference of rates; our mean against a published number: the one-sample t
interval, or the Wilson interval of a success rate.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

ALPHA = 0.05
COUNT_METRICS = ("train_all_solved", "test_all_solved")   # 1 when a trial solved every string, else 0
REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"


def not_significant(n: int) -> str:
    return f"not significant with {n} seed{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on ``metric``; ``source`` says who claims it."""

    text: str
    better: str
    worse: str
    metric: str
    higher_is_better: bool = True
    source: str = ""


@dataclass
class Verdict:
    claim: str
    evidence: str            # the two sides, as numbers people read
    difference: float | None
    low: float | None
    high: float | None
    test: str
    p_value: float | None
    verdict: str
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def values_of(runs: list[dict], key: str, metric: str) -> np.ndarray:
    """One finite value per seed of configuration ``key``."""
    out = [r[metric] for r in runs if r["key"] == key and r.get(metric) is not None]
    return np.asarray([v for v in out if math.isfinite(v)], dtype=np.float64)


def describe(values: np.ndarray, metric: str) -> str:
    """'2 of 5' for per-trial successes, 'mean ± std (n)' otherwise."""
    if len(values) == 0:
        return "no run"
    if metric in COUNT_METRICS:
        return f"{int(values.sum())} of {len(values)}"
    if len(values) == 1:
        return f"{values[0]:.4g} (1 seed)"
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g} ({len(values)} seeds)"


def wilson(successes: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(successes, n).proportion_ci(0.95, method="wilson")
    return float(ci.low), float(ci.high)


def compare_samples(a: np.ndarray, b: np.ndarray, count: bool) -> tuple[float, float, float, float, str]:
    """a − b: (difference, 95% low, high, p-value, test name)."""
    if count:
        ka, kb, na, nb = int(a.sum()), int(b.sum()), len(a), len(b)
        pa, pb = ka / na, kb / nb
        (la, ua), (lb, ub) = wilson(ka, na), wilson(kb, nb)
        d = pa - pb
        low = d - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
        high = d + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
        p = float(stats.fisher_exact([[ka, na - ka], [kb, nb - kb]]).pvalue)
        return d, low, high, p, "Fisher's exact test; Newcombe–Wilson interval"
    d = float(a.mean() - b.mean())
    if a.std() == 0 and b.std() == 0:    # no spread at all: the t statistic is undefined
        return d, d, d, (1.0 if d == 0 else 0.0), "identical in every seed (no spread; no test needed)"
    with warnings.catch_warnings():
        if a.std() == 0 or b.std() == 0:
            # a side identical in every seed has variance exactly 0, which Welch's test handles; SciPy
            # still warns of "catastrophic cancellation" for it
            warnings.filterwarnings("ignore", "Precision loss occurred in moment calculation", RuntimeWarning)
        result = stats.ttest_ind(a, b, equal_var=False)
    ci = result.confidence_interval(1 - ALPHA)
    return d, float(ci.low), float(ci.high), float(result.pvalue), "Welch's t-test"


def judge_claim(claim: Claim, runs: list[dict]) -> Verdict:
    a, b = values_of(runs, claim.better, claim.metric), values_of(runs, claim.worse, claim.metric)
    count = claim.metric in COUNT_METRICS
    evidence = f"{claim.better}: {describe(a, claim.metric)}; {claim.worse}: {describe(b, claim.metric)}"
    n = min(len(a), len(b))
    if n == 0:
        return Verdict(claim.text, evidence, None, None, None, "none", None, "not run (quick mode)")
    if n < 2:
        return Verdict(claim.text, evidence, None, None, None, "none (fewer than 2 seeds)", None, not_significant(n))
    d, low, high, p, test = compare_samples(a, b, count)
    sign = 1.0 if claim.higher_is_better else -1.0
    if p < ALPHA:
        verdict = REPRODUCED if sign * d > 0 else NOT_REPRODUCED
    else:
        verdict = not_significant(n)
    return Verdict(claim.text, evidence, d, low, high, test, p, verdict)


def check_published(key: str, metric: str, published: Any) -> None:
    """A clear error for a published value ``judge_published`` cannot test: it must be a number, text,
    or a (low, high) pair of numbers with low ≤ high, at most one end None."""
    where = f"published[({key!r}, {metric!r})]"
    number = (int, float)
    if isinstance(published, bool) or not isinstance(published, (*number, str, tuple)):
        raise ValueError(f"{where}: expected a number, a (low, high) range or text, got {published!r}")
    if not isinstance(published, tuple):
        return
    if len(published) != 2 or not all(end is None or (isinstance(end, number) and not isinstance(end, bool))
                                       for end in published):
        raise ValueError(f"{where}: a range is (low, high), each a number or None, got {published!r}")
    low, high = published
    if low is None and high is None:
        raise ValueError(f"{where}: a range open at both ends says nothing; give at least one end")
    if low is not None and high is not None and low > high:
        raise ValueError(f"{where}: the range's low end {low} is above its high end {high}")


def judge_published(key: str, metric: str, published: Any, runs: list[dict], reason: str = "") -> Verdict:
    """Our seeds against one published number (or range): is it inside our 95% interval?"""
    check_published(key, metric, published)
    values = values_of(runs, key, metric)
    shown = _shown(published)
    claim = f"{key} {metric.replace('_', ' ')} {'' if shown[0] in '≤≥' else '= '}{shown} (published)"
    evidence = f"ours {describe(values, metric)}" if len(values) else "ours: no run"
    if len(values) == 0:
        return Verdict(claim, evidence, None, None, None, "none", None, "not run (quick mode)", reason)
    if isinstance(published, str):
        return Verdict(claim, evidence, None, None, None, "none (published as text)", None, "shown only", reason)
    low_pub, high_pub = (published, published) if isinstance(published, (int, float)) else published
    # a range open at one end (None: "at most" / "at least") is tested against its finite end
    target = high_pub if low_pub is None else low_pub if high_pub is None else (low_pub + high_pub) / 2
    low_pub = -math.inf if low_pub is None else low_pub
    high_pub = math.inf if high_pub is None else high_pub
    if metric in COUNT_METRICS:
        low, high = wilson(int(values.sum()), len(values))
        mean, test = float(values.mean()), "Wilson interval of our success rate; binomial test"
        p = float(stats.binomtest(int(values.sum()), len(values), min(max(target, 0.0), 1.0)).pvalue)
    elif len(values) < 2:
        return Verdict(claim, evidence, float(values.mean() - target), None, None, "none (1 seed)", None,
                       not_significant(len(values)), reason)
    else:
        mean = float(values.mean())
        if values.std() == 0:
            low = high = mean
            p = 1.0 if mean == target else 0.0
        else:
            result = stats.ttest_1samp(values, target)
            ci = result.confidence_interval(1 - ALPHA)
            low, high, p = float(ci.low), float(ci.high), float(result.pvalue)
        test = "one-sample t-test and interval of our mean"
    inside = high >= low_pub and low <= high_pub
    return Verdict(claim, evidence, mean - target, low - target, high - target, test, p,
                   REPRODUCED if inside else NOT_REPRODUCED, "" if inside else reason)


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and value[0] is None:
        return f"≤ {value[1]:.4g}"
    if isinstance(value, tuple) and value[1] is None:
        return f"≥ {value[0]:.4g}"
    if isinstance(value, tuple):
        return f"{value[0]:.4g}–{value[1]:.4g}"
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def verdict_table(claims: list[Claim], published: dict, reasons: dict, runs: list[dict]) -> list[dict]:
    """Every claim, then every published number, judged; rows for the report and results.json."""
    rows = [dict(judge_claim(c, runs).as_dict(), kind="claim") for c in claims]
    for (key, metric), value in published.items():
        rows.append(dict(judge_published(key, metric, value, runs, reasons.get((key, metric), "")).as_dict(),
                         kind="published"))
    return rows
