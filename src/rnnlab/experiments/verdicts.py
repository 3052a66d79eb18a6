"""Verdicts: each claim a study makes and each number it publishes, tested over seeds.

A study declares, as data beside its specs,

- ``Claim``s: "configuration ``better`` beats ``worse`` on ``metric``" (lower or higher is better). A claim
  about *learning* something, on a metric whose runs either learn it or not (bimodal), declares a
  ``threshold``: each seed then counts as a success when it reaches it, and the claim is tested as a count;
- published numbers, ``(spec key, metric) → value``: a number, a ``(low, high)`` range (open at one end
  when that end is None), text that is only shown, or ``Published(value, tolerance, why)`` with the
  paper's own tolerance. Without one, the metric's default tolerance applies (``rnnlab.metrics``).

``verdict_table`` turns the runs (one value per seed) into rows, with the statistics of
``experiments.statistics``:

- **a claim**: the difference with its interval, the test that decides (the exact permutation test of the
  difference in means, its interval the differences it keeps; for counts the exact unconditional score test
  and its inverted interval),
  P(A > B) over seed pairs, and the p-value adjusted by Holm's method over the study's claims (one
  family per setting). The adjusted p decides the word: **reproduced** (significant in the claimed
  direction), **not reproduced** (significant the other way, or, where the claim declares its smallest
  effect of interest, shown to be smaller than it), or **not significant with N seeds**, with the seeds
  the measured spread would need and the smallest difference these seeds detect with 80% power;
- **a published number**: **matches (within ±δ)** (two one-sided tests: our 90% interval lies inside
  the published value ± its tolerance δ), **differs: ours higher/lower by x (better/worse)** (our 95%
  interval lies beyond the tolerance; better or worse by the metric's direction), or **inconclusive
  with N seeds**; Holm over the study's published numbers. A single published run is also placed
  against the 95% prediction interval of one of our runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnlab.experiments import statistics as st
from rnnlab.experiments.results import Run, Verdict
from rnnlab.files import is_number
from rnnlab.metrics import metric as metric_info

ALPHA = st.ALPHA
REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"
SHOWN_ONLY, NOT_RUN = "shown only", "not run (quick mode)"


def not_significant(n: int) -> str:
    return f"not significant with {n} seed{'s' if n != 1 else ''}"


def inconclusive(n: int) -> str:
    return f"inconclusive with {n} seed{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on ``metric``; ``source`` says who claims it. ``threshold``: test the
    count of seeds that reach it (≥, or ≤ where lower is better) instead of the mean.
    ``smallest_effect``: the smallest difference (in the claimed direction; a difference of rates for
    counts) that would still bear the claim out: a difference shown below it is *not reproduced*.
    ``higher_is_better``: the metric registry's direction (``rnnlab.metrics``); a claim states it only for a
    metric the registry gives none (a gradient's size), and may not contradict it."""

    text: str
    better: str
    worse: str
    metric: str
    higher_is_better: bool | None = None
    source: str = ""
    threshold: float | None = None
    smallest_effect: float | None = None

    def __post_init__(self) -> None:
        known = metric_info(self.metric).higher_is_better
        if self.higher_is_better is None:
            if known is None:
                raise ValueError(f"claim {self.text!r}: rnnlab.metrics gives {self.metric!r} no direction; say "
                                 "higher_is_better=True or False")
            object.__setattr__(self, "higher_is_better", known)
        elif known is not None and self.higher_is_better != known:
            raise ValueError(f"claim {self.text!r}: higher_is_better={self.higher_is_better} contradicts "
                             f"{self.metric!r}, on which {'higher' if known else 'lower'} is better (rnnlab.metrics)")


@dataclass(frozen=True)
class Published:
    """A published number (or ``(low, high)`` range) with the tolerance within which ours is the same
    and why. Where the paper reports a mean over its own runs, ``sd`` and ``runs`` carry its spread and
    count, and our seeds are tested against its runs (Welch's t on the two summaries), not against one run."""

    value: Any
    tolerance: float
    why: str
    sd: float | None = None
    runs: int | None = None




def values_of(runs: list[Run], key: str, metric: str, seeds: int | None = None) -> np.ndarray:
    """One finite value per seed of configuration ``key``: of its first ``seeds`` seeds in seed order, when
    given (a sequential plan's look; a tuned study's seeds start at 1000, not 0)."""
    mine = sorted((r for r in runs if r.key == key), key=lambda r: r.seed)[:seeds]
    out = [v for r in mine if (v := r.metrics.get(metric)) is not None]
    return np.asarray([v for v in out if math.isfinite(v)], dtype=np.float64)


def describe(values: np.ndarray, metric: str) -> str:
    """'2 of 5' for per-trial successes, 'mean ± std (n)' otherwise."""
    if len(values) == 0:
        return "no run"
    if metric_info(metric).is_count:
        return f"{int(values.sum())} of {len(values)}"
    if len(values) == 1:
        return f"{values[0]:.4g} (1 seed)"
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g} ({len(values)} seeds)"


def _successes(values: np.ndarray, claim: Claim) -> np.ndarray:
    reached = values >= claim.threshold if claim.higher_is_better else values <= claim.threshold
    return reached.astype(np.float64)


def _side(key: str, values: np.ndarray, claim: Claim) -> str:
    if claim.threshold is None:
        return f"{key}: {describe(values, claim.metric)}"
    sign = "≥" if claim.higher_is_better else "≤"
    return (f"{key}: {int(_successes(values, claim).sum())} of {len(values)} reach {sign} {claim.threshold:g} "
            f"({describe(values, claim.metric)})")


def judge_claim(claim: Claim, runs: list[Run], seeds: int | None = None, level: float = ALPHA,
                family: int = 1) -> Verdict:
    """One claim over the runs (the first ``seeds`` seeds), its word from the raw p at ``level``; its
    absence (below ``smallest_effect``) is tested at level / ``family`` (Bonferroni over the claims), and
    the seeds it needs and the difference it detects with 80% power are computed at that level too, the
    first step of Holm's method over the family, which is what a claim must pass to be decided."""
    raw_a, raw_b = values_of(runs, claim.better, claim.metric, seeds), values_of(runs, claim.worse, claim.metric, seeds)
    evidence = f"{_side(claim.better, raw_a, claim)}; {_side(claim.worse, raw_b, claim)}"
    n = min(len(raw_a), len(raw_b))
    values = {claim.better: raw_a.tolist(), claim.worse: raw_b.tolist()}
    if n == 0:
        return Verdict(claim.text, evidence, None, None, None, "none", None, NOT_RUN, values=values,
                       metric=claim.metric)
    if n < 2:
        return Verdict(claim.text, evidence, None, None, None, "none (fewer than 2 seeds)", None, not_significant(n),
                       seeds=n, values=values, metric=claim.metric)
    count = claim.threshold is not None or metric_info(claim.metric).is_count
    a, b = (_successes(raw_a, claim), _successes(raw_b, claim)) if claim.threshold is not None else (raw_a, raw_b)
    test = None if count else st.permutation(a, b)      # once: every interval below inverts this one test
    result = st.compare_counts(a, b) if count else st.compare_means(a, b, test=test)
    bounds = metric_info(claim.metric).bounds

    def interval_at(alpha: float) -> tuple[float | None, float | None]:
        """The difference's interval at ``alpha``, the deciding test inverted (None, None: no interval excludes
        anything, as when these seeds' exact permutation p cannot fall below alpha)."""
        if count:
            return st.count_interval(int(a.sum()), a.size, int(b.sum()), b.size, alpha)
        return _shifts_kept(test, alpha, bounds)

    sign = 1.0 if claim.higher_is_better else -1.0
    superiority = st.prob_superiority(raw_a, raw_b) if claim.higher_is_better else st.prob_superiority(raw_b, raw_a)
    deciding = level / family       # power at the level that decides: Holm's first step over the family
    if count:
        needed = st.seeds_needed_counts(float(a.mean()), float(b.mean()), alpha=deciding)
        detectable = None
    else:
        needed = st.seeds_needed_permutation(result.difference, float(a.std(ddof=1)), float(b.std(ddof=1)),
                                             alpha=deciding)
        spread = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
        detectable = st.detectable_permutation(len(a), len(b), spread, alpha=deciding)
    # the interval is the one the deciding p implies: decide_claim sets it
    verdict = Verdict(claim.text, evidence, result.difference, None, None, result.test, result.p,
                      "", prob_superiority=superiority, seeds=n, seeds_needed=needed,
                      detectable=detectable, values=values, metric=claim.metric, threshold=claim.threshold,
                      if_significant=REPRODUCED if sign * result.difference > 0 else NOT_REPRODUCED,
                      interval_at=interval_at)
    verdict.reason = _absence(claim, a, b, test, level / family)
    decide_claim(verdict, result.p, level)
    return verdict


def _shifts_kept(test: st.Permutation, alpha: float,
                 bounds: tuple[float, float] | None) -> tuple[float | None, float | None]:
    """The differences the exact permutation test keeps at ``alpha`` (its inverted interval), within ± the
    metric's range; (None, None) when it keeps every difference."""
    low, high = test.interval(alpha)
    if not (math.isfinite(low) and math.isfinite(high)):
        return None, None
    if bounds is not None:      # a difference of accuracies cannot pass ± their range
        span = bounds[1] - bounds[0]
        return st.clip_to_range(low, high, (-span, span))
    return low, high


def _absence(claim: Claim, a: np.ndarray, b: np.ndarray, test: st.Permutation | None, level: float) -> str:
    """The reason a claim is not borne out when its difference is shown below its smallest effect of
    interest (one-sided at ``level``), else ''. ``test``: the permutation test of a continuous metric (None:
    a count)."""
    if claim.smallest_effect is None:
        return ""
    sign = 1.0 if claim.higher_is_better else -1.0
    if test is None:
        low, high = st.count_interval(int(a.sum()), len(a), int(b.sum()), len(b), 2 * level)
    else:
        low, high = _shifts_kept(test, 2 * level, None)
        if low is None:
            return ""
    upper = high if sign > 0 else -low    # the largest difference in the claimed direction the data allow
    if upper < claim.smallest_effect:
        return (f"the difference in the claimed direction is at most {upper:.3g} ({1 - level:.3g} one-sided bound), "
                f"below the claim's smallest effect of interest {claim.smallest_effect:g}")
    return ""


def decide_claim(verdict: Verdict, p: float, level: float) -> None:
    """The word of a claim from its (adjusted) p at ``level``. A difference shown to lie below the claim's
    smallest effect of interest (``verdict.reason``) does not bear the claim out, significant or not. The
    interval printed is the one the deciding p implies (``implied_level``), so that it excludes 0 exactly
    when the claim is significant."""
    verdict.p_adjusted = p
    if verdict.interval_at is not None and verdict.p_value is not None:
        alpha = st.implied_level(verdict.p_value, p, level)
        verdict.low, verdict.high = verdict.interval_at(alpha)
        verdict.coverage = None if math.isclose(alpha, ALPHA) else 1 - alpha
    if verdict.reason:
        verdict.verdict = NOT_REPRODUCED
    elif p < level:
        verdict.verdict = verdict.if_significant
    else:
        verdict.verdict = not_significant(verdict.seeds)


def check_published(key: str, metric: str, published: Any) -> None:
    """A clear error for a published value ``judge_published`` cannot test: it must be a number, text,
    a (low, high) pair of numbers with low ≤ high, at most one end None, or ``Published`` of one."""
    where = f"published[({key!r}, {metric!r})]"
    if isinstance(published, Published):
        if not isinstance(published.tolerance, (int, float)) or published.tolerance < 0:
            raise ValueError(f"{where}: the tolerance must be a number ≥ 0, got {published.tolerance!r}")
        if not published.why:
            raise ValueError(f"{where}: a declared tolerance needs its reason (why)")
        if (published.sd is None) != (published.runs is None):
            raise ValueError(f"{where}: a paper's spread needs both its sd and its number of runs")
        if published.sd is not None and not (isinstance(published.value, (int, float)) and published.sd >= 0
                                             and isinstance(published.runs, int) and published.runs >= 2):
            raise ValueError(f"{where}: mean ± sd over runs needs a number, an sd ≥ 0 and at least 2 runs, got "
                             f"{published.value!r} ± {published.sd!r} over {published.runs!r}")
        published = published.value
    if not (is_number(published) or isinstance(published, (str, tuple))):
        raise ValueError(f"{where}: expected a number, a (low, high) range or text, got {published!r}")
    if not isinstance(published, tuple):
        return
    if len(published) != 2 or not all(is_number(end, or_none=True) for end in published):
        raise ValueError(f"{where}: a range is (low, high), each a number or None, got {published!r}")
    low, high = published
    if low is None and high is None:
        raise ValueError(f"{where}: a range open at both ends says nothing; give at least one end")
    if low is not None and high is not None and low > high:
        raise ValueError(f"{where}: the range's low end {low} is above its high end {high}")


def tolerance_caps(claims: list[Claim], published: dict) -> dict[tuple[str, str], tuple[float, str]]:
    """Per (configuration, metric): the widest tolerance its published number may have, so that a 'match' cannot
    also match a configuration one of the study's claims tells it apart from: half the published gap between
    the two configurations a claim compares (their tolerance bands then do not overlap), and the claim's own
    smallest effect where it declares one; with the reason, for the page."""
    caps: dict[tuple[str, str], tuple[float, str]] = {}

    def cap(key: str, metric: str, limit: float, why: str) -> None:
        if (key, metric) not in caps or limit < caps[key, metric][0]:
            caps[key, metric] = (limit, why)

    def number(value: Any) -> float | None:
        value = value.value if isinstance(value, Published) else value
        return float(value) if is_number(value) else None

    for claim in claims:
        a, b = (number(published.get((k, claim.metric))) for k in (claim.better, claim.worse))
        if a is not None and b is not None and a != b:
            why = (f"half the published gap {abs(a - b):.3g} between {claim.better} and {claim.worse}, which a claim "
                   f"of this study tells apart")
            for key in (claim.better, claim.worse):
                cap(key, claim.metric, abs(a - b) / 2, why)
        if claim.smallest_effect is not None:
            for key in (claim.better, claim.worse):
                cap(key, claim.metric, claim.smallest_effect,
                    f"the smallest effect of interest of the claim '{claim.text}'")
    return caps


def judge_published(key: str, metric: str, published: Any, runs: list[Run], reason: str = "",
                    level: float = ALPHA, cap: tuple[float, str] | None = None) -> Verdict:
    """Our seeds against one published number (or range) and its tolerance, no wider than ``cap`` (the
    study's claims' smallest effect, ``tolerance_caps``); the word from the raw p."""
    check_published(key, metric, published)
    info = metric_info(metric)
    declared = published if isinstance(published, Published) else None
    value = declared.value if declared else published
    values = values_of(runs, key, metric)
    shown = _shown(value)
    claim = f"{key} {metric.replace('_', ' ')} {'' if shown[0] in '≤≥' else '= '}{shown} (published)"
    evidence = f"ours {describe(values, metric)}" if len(values) else "ours: no run"
    if len(values) == 0:
        return Verdict(claim, evidence, None, None, None, "none", None, NOT_RUN, reason)
    if isinstance(value, str):
        return Verdict(claim, evidence, None, None, None, "none (published as text)", None, SHOWN_ONLY, reason,
                       seeds=len(values))
    low_pub, high_pub = (value, value) if isinstance(value, (int, float)) else value
    # a range open at one end (None: "at most" / "at least") is compared with its finite end
    target = high_pub if low_pub is None else low_pub if high_pub is None else (low_pub + high_pub) / 2
    band = (-math.inf if low_pub is None else low_pub, math.inf if high_pub is None else high_pub)
    tolerance = declared.tolerance if declared else info.tolerance_at(target)
    why = declared.why if declared else info.why
    if cap is not None and cap[0] < tolerance:
        tolerance, why = cap[0], f"{cap[1]} (narrower than {why})"
    if declared is not None and declared.sd is not None:
        return _judge_against_runs(claim, evidence, values, declared, tolerance, why, reason, info, level)
    if not info.is_count and not isinstance(value, tuple):
        return _judge_single_run(claim, evidence, values, value, tolerance, why, reason, info, level)
    result = st.equivalence(values, band, tolerance, count=info.is_count, bounds=info.bounds)
    verdict = Verdict(claim, evidence, result.estimate - target, result.low - target, result.high - target,
                      "", None, "", reason, seeds=len(values), tolerance=tolerance,
                      tolerance_why=why)
    if not info.is_count and len(values) >= 2:
        low, high = st.clip_to_range(*st.prediction_interval(values), info.bounds)
        verdict.prediction_low, verdict.prediction_high = low, high
    if result.p_tost is None:       # fewer than 2 seeds, or no spread: nothing to test
        verdict.verdict = inconclusive(len(values))
        return verdict
    inside = band[0] - tolerance <= result.estimate <= band[1] + tolerance
    distance = result.estimate - (band[0] if result.estimate < band[0] else band[1])
    _published_word(verdict, inside, result.p_tost, result.p_differs, distance, tolerance, info,
                    (_published_test(info.is_count, True), _published_test(info.is_count, False)))
    decide_published(verdict, verdict.p_value, level)
    return verdict


def _judge_against_runs(claim: str, evidence: str, values: np.ndarray, published: Published, tolerance: float,
                        why: str, reason: str, info: Any, level: float) -> Verdict:
    """A published mean ± sd over the paper's runs against our seeds: Welch's t on the two summaries, TOST
    against ± tolerance for a match, the test against the tolerance's nearer edge for a difference."""
    result = st.against_runs(values, published.value, published.sd, published.runs, tolerance)
    if result is None:
        return Verdict(claim, evidence, None, None, None, "", None, inconclusive(len(values)), reason,
                       seeds=len(values), tolerance=tolerance, tolerance_why=why)
    matching = abs(result.difference) <= tolerance
    verdict = Verdict(claim, evidence, result.difference, None, None, "", None, "", reason, seeds=len(values),
                      tolerance=tolerance, tolerance_why=why)

    def interval_at(alpha: float) -> tuple[float, float, float, bool]:
        """The difference's interval at the coverage the deciding test has at ``alpha`` (1 − 2·alpha for TOST)."""
        coverage = 1 - 2 * alpha if matching else 1 - alpha
        low, high = result.interval(1 - coverage)
        return low, high, coverage, False

    verdict.interval_at = interval_at
    against = f"Welch's t against the paper's {published.runs} runs ({published.value:.4g} ± {published.sd:.2g})"
    _published_word(verdict, matching, result.p_matches, result.p_differs, result.difference, tolerance, info,
                    (f"{against}: two one-sided tests against the tolerance (TOST)",
                     f"{against}: against the tolerance's nearer edge"))
    decide_published(verdict, verdict.p_value, level)
    return verdict


def _judge_single_run(claim: str, evidence: str, values: np.ndarray, value: float, tolerance: float, why: str,
                      reason: str, info: Any, level: float) -> Verdict:
    """A published number on a continuous metric is one run of the paper's: it is judged against where one
    run of ours falls (``statistics.single_run``), not against our mean as if it were a constant. The
    difference printed is our mean − published, beside where one run of ours falls (the 95% prediction
    interval), which is what decides."""
    result = st.single_run(values, value, tolerance, info.bounds)
    if result is None:      # fewer than 2 seeds, or no spread: nothing to test
        mean = float(values.mean())
        return Verdict(claim, evidence, mean - value, None, None, "", None, inconclusive(len(values)), reason,
                       seeds=len(values), tolerance=tolerance, tolerance_why=why)
    verdict = Verdict(claim, evidence, result.estimate - value, None, None, "", None, "", reason, seeds=len(values),
                      tolerance=tolerance, tolerance_why=why, prediction_low=result.low,
                      prediction_high=result.high)
    matching = abs(result.estimate - value) <= tolerance

    def interval_at(alpha: float) -> tuple[float, float, float, bool]:
        """Where one run of ours falls, at the coverage the deciding test has at ``alpha``: 1 − 2·alpha for the
        two one-sided prediction tests of a match, 1 − alpha for a difference."""
        coverage = 1 - 2 * alpha if matching else 1 - alpha
        low, high = st.clip_to_range(*st.prediction_interval(values, 1 - coverage), info.bounds)
        return low, high, coverage, True

    verdict.interval_at = interval_at
    _published_word(verdict, matching, result.p_matches, result.p_differs, result.estimate - value, tolerance, info,
                    ("one run of ours against the published run: two one-sided prediction tests (our prediction "
                     "interval within the tolerance)",
                     "one run of ours against the published run: prediction test against the tolerance's nearer "
                     "edge (our prediction interval beyond it)"))
    decide_published(verdict, verdict.p_value, level)
    return verdict


def _published_word(verdict: Verdict, inside: bool, p_matches: float, p_differs: float, distance: float,
                    tolerance: float, info: Any, tests: tuple[str, str]) -> None:
    """The test and p that decide a published number, and the word a significant p gives it: a match within
    ± ``tolerance`` (two one-sided tests) where ours lies ``inside``, else a difference of ``distance`` (ours
    − published), better or worse by the metric's direction. ``tests``: the two tests' names."""
    if inside:
        verdict.test, verdict.p_value = tests[0], p_matches
        verdict.if_significant = f"matches (within ±{tolerance:.3g})"
        return
    side = "higher" if distance > 0 else "lower"
    better = "" if info.higher_is_better is None else \
        " (better)" if (distance > 0) == info.higher_is_better else " (worse)"
    verdict.test, verdict.p_value = tests[1], p_differs
    verdict.if_significant = f"differs: ours {side} by {abs(distance):.3g}{better}"


def _published_test(count: bool, inside: bool = True) -> str:
    """The test whose p decides: equivalence (TOST) where our estimate lies within the tolerance, else the
    test against the tolerance's nearer edge."""
    against = "two one-sided tests against the tolerance (TOST)" if inside else \
        "two-sided test against the tolerance's nearer edge"
    return f"exact binomial: {against}; Clopper–Pearson interval" if count else f"t: {against}; t interval of our mean"


def decide_published(verdict: Verdict, p: float, level: float) -> None:
    """The word of a published number from its (adjusted) p at ``level``; a single run's prediction interval (or,
    against a paper's runs, the difference's interval) is printed at the level that p implies
    (``implied_level``), so that it agrees with the word."""
    verdict.p_adjusted = p
    if verdict.interval_at is not None and verdict.p_value is not None:
        alpha = st.implied_level(verdict.p_value, p, level)
        low, high, coverage, of_one_run = verdict.interval_at(alpha)
        if of_one_run:
            verdict.prediction_low, verdict.prediction_high = low, high
        else:
            verdict.low, verdict.high = low, high
        verdict.coverage = None if math.isclose(coverage, 1 - ALPHA) else coverage
    verdict.verdict = verdict.if_significant if p < level else inconclusive(verdict.seeds)
    if verdict.verdict.startswith("matches"):
        verdict.reason = ""


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and value[0] is None:
        return f"≤ {value[1]:.4g}"
    if isinstance(value, tuple) and value[1] is None:
        return f"≥ {value[0]:.4g}"
    if isinstance(value, tuple):
        return f"{value[0]:.4g}–{value[1]:.4g}"
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def verdict_table(claims: list[Claim], published: dict, reasons: dict, runs: list[Run],
                  seeds: dict[str, int] | None = None, level: float = ALPHA) -> list[Verdict]:
    """Every claim, then every published number, judged, for the report and results.json. The
    claims are one family and the published numbers another: within each, Holm's adjusted p decides
    the word at ``level``. ``seeds``: per claim text, the seeds it was decided with (a sequential plan)."""
    seeds = seeds or {}
    judged = [judge_claim(c, runs, seeds.get(c.text), level, len(claims)) for c in claims]
    _holm(judged, decide_claim, level)
    caps = tolerance_caps(claims, published)
    numbers = [judge_published(key, metric, value, runs, reasons.get((key, metric), ""), level,
                               caps.get((key, metric))) for (key, metric), value in published.items()]
    _holm(numbers, decide_published, level)
    for verdict in judged:
        verdict.kind = "claim"
    for verdict in numbers:
        verdict.kind = "published"
    return judged + numbers


def _holm(verdicts: list[Verdict], decide, level: float) -> None:
    tested = [v for v in verdicts if v.p_value is not None]
    for verdict, adjusted in zip(tested, st.holm([v.p_value for v in tested])):
        decide(verdict, adjusted, level)
