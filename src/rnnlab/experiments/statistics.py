"""The statistics every verdict, map and page uses, in one place (studies and sweeps alike).

What the field asks of a comparison over random seeds, and where it is done here:

- **Two configurations, a continuous metric** — ``permutation`` / ``compare_means``: the exact permutation
  test of the difference in means (every split of the pooled seeds up to ``EXACT_UP_TO`` a side, else
  ``RESAMPLES`` random splits with a fixed seed), which decides: its null is that both configurations' runs
  come from one distribution, and it holds its level at any number of seeds without assuming a normal
  shape, so a configuration with a few failed seeds among good ones is seen where Welch's t-test is not.
  Its interval inverts the same test under the shift model (the shifts it keeps), so it excludes 0 exactly
  when the test rejects; ``smallest_permutation_p`` is the floor these seeds put on its p.
- **Counts of successful trials** (0 or 1 per seed) — ``score_test_exact`` / ``compare_counts``: the
  exact unconditional test of Barnard's kind with the score statistic (Suissa & Shuster 1985; at a
  difference of 0 it is ``scipy.stats.barnard_exact(pooled=True)``), and its interval by inverting the
  same test at every difference (Chan & Zhang 1999), so the interval excludes 0 exactly when the test
  rejects: Fisher's test and a Newcombe interval beside it could disagree. One configuration's count
  against a published rate: the Clopper–Pearson interval, which inverts the exact binomial test.
- **A family of claims** — ``holm`` (Holm 1979): adjusted p-values, monotone and capped at 1.
- **A published number** — ``equivalence``: two one-sided tests (TOST) against a stated tolerance,
  giving *matches*, *differs* (the 95% interval lies beyond the tolerance) or *inconclusive*;
  ``prediction_interval``: where one more of our runs would fall, the reference for a single published
  run (Reimers & Gurevych 2017: a single score is one draw from a distribution).
- **The distribution, not only the mean** — ``prob_superiority``: P(A > B) over all seed pairs
  (Bouthillier et al. 2021), ties counted half.
- **How many seeds** — ``detectable_permutation`` and ``seeds_needed_permutation``: the smallest difference
  the permutation test finds with 80% power and the seeds a measured difference needs, simulated up to
  ``SIMULATED_UP_TO`` seeds a side (where its discreteness costs power) and from Welch's noncentral t
  beyond (``welch_power``, ``detectable_difference``, ``seeds_needed``); for counts the exact power of the
  score test (``power_counts``, ``seeds_needed_counts``).
- **Seeds chosen as the data come in** — ``SequentialPlan``: a group-sequential design with α split
  equally over its planned looks (Bonferroni; valid for any test valid at each look) and a non-binding
  stop for absence (the difference shown smaller than the claim's smallest effect of interest), also
  at α/K per look. Its false-positive rate is measured by simulation in the tests.
- **Tuning budgets** — ``expected_max`` (Dodge et al. 2019): the expected best score of n trials drawn
  without replacement from the N a search ran, n = 1…N, with its standard deviation as a band.
- **Bounded metrics** — ``clip_to_range``: an interval of a mean, intersected with the metric's range
  (the mean cannot leave it, so the intersection keeps the interval's coverage).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

ALPHA = 0.05
POWER = 0.8
EXACT_UP_TO = 10          # seeds per side up to which the permutation p is exact (all splits enumerated)
_NUISANCE_GRID = 201      # points of the nuisance rate at which an exact unconditional p is maximised


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for a single value)."""
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def t_interval(values, alpha: float = ALPHA) -> tuple[float, float]:
    """Student's two-sided (1 − alpha) interval of the mean; (mean, mean) without spread."""
    arr = np.asarray(values, dtype=np.float64)
    mean, std = mean_std(arr)
    if arr.size < 2 or std == 0:
        return mean, mean
    half = stats.t.ppf(1 - alpha / 2, arr.size - 1) * std / math.sqrt(arr.size)
    return mean - half, mean + half


def prediction_interval(values, alpha: float = ALPHA) -> tuple[float, float]:
    """Where one more run would fall with probability 1 − alpha (normal model): mean ± t·s·√(1 + 1/n)."""
    arr = np.asarray(values, dtype=np.float64)
    mean, std = mean_std(arr)
    if arr.size < 2:
        return -math.inf, math.inf
    half = stats.t.ppf(1 - alpha / 2, arr.size - 1) * std * math.sqrt(1 + 1 / arr.size)
    return mean - half, mean + half


def clip_to_range(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """An interval of a mean intersected with the metric's range (None: unbounded)."""
    if bounds is None:
        return low, high
    return max(low, bounds[0]), min(high, bounds[1])


# -- two samples of a continuous metric -----------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """a − b with its two-sided 95% interval, the p-value that decides, and the test that gave it."""

    difference: float
    low: float
    high: float
    p: float
    test: str


RESAMPLES = 20_000        # random splits beyond EXACT_UP_TO seeds a side (a fixed seed: the same p everywhere)
PERMUTATION_TEST = "exact permutation test of the difference in means"


def _splits(na: int, nb: int) -> tuple[np.ndarray, bool]:
    """The pooled positions that form side a, one row per split: every split up to ``EXACT_UP_TO`` seeds a side
    (the observed one first), else the observed one and ``RESAMPLES`` random ones."""
    return _cached_splits(na, nb, EXACT_UP_TO, RESAMPLES)


@functools.lru_cache(maxsize=16)
def _cached_splits(na: int, nb: int, exact_up_to: int, resamples: int) -> tuple[np.ndarray, bool]:
    if max(na, nb) <= exact_up_to:
        index = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(na + nb), na)),
                            dtype=np.int64).reshape(-1, na)
        return index, True
    rng = np.random.default_rng(0)
    random = np.argsort(rng.random((resamples, na + nb)), axis=1)[:, :na]
    return np.vstack([np.arange(na)[None, :], random]), False


def _split_shares(na: int, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """Per split of ``_splits``, what the data do not change: c = k/na − (na − k)/nb (k of its na seeds came from
    a), and whether it is the observed split or, when na = nb, its mirror. Read-only: they are shared."""
    return _cached_split_shares(na, nb, EXACT_UP_TO, RESAMPLES)


@functools.lru_cache(maxsize=16)
def _cached_split_shares(na: int, nb: int, exact_up_to: int, resamples: int) -> tuple[np.ndarray, np.ndarray]:
    index, _ = _cached_splits(na, nb, exact_up_to, resamples)
    k = np.count_nonzero(index < na, axis=1)
    c = k / na - (na - k) / nb
    observed = (k == na) | ((k == 0) & (na == nb))
    for array in (c, observed):
        array.flags.writeable = False
    return c, observed


@dataclass(frozen=True)
class Permutation:
    """The permutation test of mean(a) − mean(b) = shift, at every shift at once.

    Under the shift model (a − shift and b exchangeable) a split S of the pooled seeds, k of whose na seeds
    on side a came from a, has the statistic D_S − shift·c_S with c_S = k/na − (na − k)/nb; the observed split
    has c = 1. Whether S is as extreme as the observed one, ``|D_S − shift·c_S| ≥ |d − shift|``, holds for the
    shifts within ``below[S]`` under d and ``above[S]`` over it (the condition is convex in the distance from
    d and falls to −∞, so it holds on one interval from d). So p(shift) is a count, monotone on each side of d,
    and the interval of the shifts the test keeps at level alpha is read off an order statistic: it excludes
    0 exactly when p(0) < alpha."""

    difference: float
    below: np.ndarray
    above: np.ndarray
    exact: bool

    @property
    def splits(self) -> int:
        return int(self.below.size)

    @property
    def p(self) -> float:
        """Two-sided p of no difference: the share of splits as extreme as the observed one (itself included)."""
        d = self.difference
        if d == 0:
            return 1.0
        reach = self.below if d > 0 else self.above
        return int(np.count_nonzero(_snap(reach, abs(d)) >= abs(d))) / self.splits

    def interval(self, alpha: float = ALPHA) -> tuple[float, float]:
        """The shifts whose p is ≥ alpha: (−inf, inf) when no split count can fall below alpha."""
        needed = max(1, math.ceil(round(alpha * self.splits, 9)))     # p(shift) ≥ alpha ⟺ ≥ needed splits
        d = self.difference
        edge_below = np.sort(_snap(self.below, d) if d > 0 else self.below)[self.splits - needed]
        edge_above = np.sort(_snap(self.above, -d) if d < 0 else self.above)[self.splits - needed]
        return d - float(edge_below), d + float(edge_above)


def _snap(reach: np.ndarray, distance: float) -> np.ndarray:
    """Reaches within rounding of ``distance`` set to it: a split that ties the observed one counts as extreme,
    in the p and in the interval alike."""
    return np.where(np.abs(reach - distance) <= 1e-9 * distance, distance, reach)


def permutation(a, b) -> Permutation:
    """The permutation test of a − b (``Permutation``): exact up to ``EXACT_UP_TO`` seeds a side."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = a.size, b.size
    index, exact = _splits(na, nb)
    c, observed = _split_shares(na, nb)
    pooled = np.concatenate([a, b])
    sums = pooled[index].sum(axis=1)
    d = float(a.mean() - b.mean())
    spread = sums / na - (pooled.sum() - sums) / nb
    e = spread - d * c
    sign = np.sign(e)
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.where(observed, np.inf, np.abs(e) / (1 - sign * c))
        above = np.where(observed, np.inf, np.abs(e) / (1 + sign * c))
    return Permutation(d, below, above, exact)


def permutation_p(a, b) -> float:
    """Two-sided permutation p of the difference of means: exact (every split of the pooled seeds)
    up to ``EXACT_UP_TO`` seeds a side, else ``RESAMPLES`` random splits with a fixed seed (the same
    p on every machine). Splits as extreme as the observed one count, the observed one included."""
    return permutation(a, b).p


def smallest_permutation_p(na: int, nb: int) -> float:
    """The smallest p the exact permutation test can give with these seeds: the observed split (and, with
    equal sides, its mirror) out of all."""
    if max(na, nb) > EXACT_UP_TO:
        return 1 / (RESAMPLES + 1)
    return (2 if na == nb else 1) / math.comb(na + nb, na)


def seeds_to_decide(alpha: float) -> int:
    """The fewest seeds a side with which the exact permutation p can fall below ``alpha``."""
    n = 2
    while smallest_permutation_p(n, n) >= alpha:
        n += 1
    return n


def compare_means(a, b, alpha: float = ALPHA, test: Permutation | None = None) -> Difference:
    """a − b over seeds: the exact permutation test of the difference in means decides (it assumes no
    normal shape, so a side with a few failed seeds among good ones is seen; Welch's t is not robust to
    that), and its interval is the shifts it keeps at ``alpha``, clipped nowhere: (−inf, inf) when no split
    count can fall below alpha. ``test``: ``permutation(a, b)`` where the caller has it already."""
    test = test or permutation(a, b)
    low, high = test.interval(alpha)
    name = PERMUTATION_TEST if test.exact else f"{PERMUTATION_TEST} ({RESAMPLES:,} random splits)"
    return Difference(test.difference, low, high, test.p, name)


def mean_std_interval(values, count: bool = False) -> dict[str, float]:
    """Mean, std and a 95% interval over seeds: Student's t, or for a count metric (1 when a trial
    succeeded) the number of successes and the Clopper–Pearson interval of the success rate."""
    arr = np.asarray(values, dtype=np.float64)
    mean, std = mean_std(arr)
    if count:
        successes = int(round(arr.sum()))
        low, high = clopper_pearson(successes, int(arr.size))
        return {"mean": mean, "std": std, "n": int(arr.size), "ci_low": low, "ci_high": high, "count": successes}
    low, high = t_interval(arr)
    return {"mean": mean, "std": std, "n": int(arr.size), "ci_low": low, "ci_high": high}


def compare(a, b, count: bool, alpha: float = ALPHA) -> Difference:
    """a − b over seeds: ``compare_counts`` for per-trial successes, else ``compare_means``."""
    return compare_counts(a, b, alpha) if count else compare_means(a, b, alpha)


# -- counts of successful trials --------------------------------------------------------------------


def _restricted_rates(xa: np.ndarray, xb: np.ndarray, na: int, nb: int, delta: float):
    """The maximum-likelihood rates (pa, pb) under pa − pb = delta (Farrington & Manning 1990's closed
    form; at delta = 0 the pooled rate)."""
    pa_hat, pb_hat = xa / na, xb / nb
    if delta == 0:
        pooled = (xa + xb) / (na + nb)
        return pooled, pooled
    theta = nb / na
    a = 1 + theta
    b = -(1 + theta + pa_hat + theta * pb_hat + delta * (theta + 2))
    c = delta ** 2 + delta * (2 * pa_hat + theta + 1) + pa_hat + theta * pb_hat
    d = -pa_hat * delta * (1 + delta)
    v = b ** 3 / (27 * a ** 3) - b * c / (6 * a ** 2) + d / (2 * a)
    u = np.sign(v) * np.sqrt(np.maximum(b ** 2 / (9 * a ** 2) - c / (3 * a), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(u == 0, 0.0, v / np.where(u == 0, 1.0, u ** 3))
    w = (math.pi + np.arccos(np.clip(ratio, -1.0, 1.0))) / 3
    pa = np.clip(2 * u * np.cos(w) - b / (3 * a), 0.0, 1.0)
    return pa, np.clip(pa - delta, 0.0, 1.0)


def _score_statistics(na: int, nb: int, delta: float) -> np.ndarray:
    """The score statistic of pa − pb = delta for every table (xa, xb), shape (na + 1, nb + 1)."""
    xa, xb = np.meshgrid(np.arange(na + 1, dtype=np.float64), np.arange(nb + 1, dtype=np.float64), indexing="ij")
    pa, pb = _restricted_rates(xa, xb, na, nb, delta)
    numerator = xa / na - xb / nb - delta
    variance = pa * (1 - pa) / na + pb * (1 - pb) / nb
    with np.errstate(divide="ignore", invalid="ignore"):
        z = numerator / np.sqrt(variance)
    z = np.where(np.abs(numerator) < 1e-12, 0.0, z)
    return np.where(np.isnan(z), 0.0, z)


@functools.lru_cache(maxsize=65_536)
def score_test_exact(ka: int, na: int, kb: int, nb: int, delta: float = 0.0) -> float:
    """Two-sided exact unconditional p of pa − pb = delta given ka of na and kb of nb successes: the
    probability, maximised over the rates that satisfy the hypothesis, of a table whose score statistic
    is at least as far from 0 as the observed one (Barnard's test with the pooled score at delta = 0)."""
    return _score_p(ka, na, kb, nb, delta, _tables_under)


def _score_p(ka: int, na: int, kb: int, nb: int, delta: float, tables) -> float:
    """``score_test_exact`` with the tables from ``tables`` (kept or made for this one call)."""
    if max(0.0, -delta) > min(1.0, 1.0 - delta):
        return 0.0
    z, prob_a, prob_b = tables(na, nb, delta)
    extreme = np.abs(z) >= abs(z[ka, kb]) - 1e-9
    p = np.einsum("ga,gb,ab->g", prob_a, prob_b, extreme.astype(np.float64))
    return float(min(1.0, p.max()))


@functools.lru_cache(maxsize=1024)
def _tables_under(na: int, nb: int, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``score_test_exact`` needs of pa − pb = delta whatever the counts, kept for the next counts with these
    seeds (an interval asks every hundredth): the score statistic of every table, and the binomial probabilities
    of each side's counts at each nuisance rate of the grid, (grid, na + 1) and (grid, nb + 1). Read-only."""
    return _tables(na, nb, delta)


def _tables(na: int, nb: int, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tables of ``_tables_under``, made afresh."""
    z = _score_statistics(na, nb, delta)
    pb = np.linspace(max(0.0, -delta), min(1.0, 1.0 - delta), _NUISANCE_GRID)
    pa = np.clip(pb + delta, 0.0, 1.0)
    prob_a = stats.binom.pmf(np.arange(na + 1)[None, :], na, pa[:, None])
    prob_b = stats.binom.pmf(np.arange(nb + 1)[None, :], nb, pb[:, None])
    for array in (z, prob_a, prob_b):
        array.flags.writeable = False
    return z, prob_a, prob_b


@functools.lru_cache(maxsize=4096)
def count_interval(ka: int, na: int, kb: int, nb: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The differences pa − pb that the exact score test does not reject at ``alpha`` (its inversion): found
    on the grid of hundredths, each end then refined by bisection to the test's own boundary (~60 tests, each
    end's new differences missing the tables' cache: kept for the same counts and level, which a study's verdicts,
    its figures and a simulation of its plan ask again)."""
    grid = np.round(np.arange(-0.99, 1.0, 0.01), 2)
    kept = [d for d in grid if score_test_exact(ka, na, kb, nb, float(d)) >= alpha]
    observed = ka / na - kb / nb
    if not kept:
        return observed, observed

    def edge(inside: float, outside: float) -> float:
        """The boundary between a kept and a rejected difference, by bisection: a printed end that the test
        rejects (a 0 at the edge of an interval beside a significant p) is never shown."""
        if outside <= -1.0 or outside >= 1.0:
            return max(-1.0, min(1.0, outside))
        for _ in range(30):     # differences no other interval asks: their tables are not kept, so the hundredths stay
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if _score_p(ka, na, kb, nb, mid, _tables) >= alpha else (inside, mid)
        return inside

    return edge(min(kept), min(kept) - 0.01), edge(max(kept), max(kept) + 0.01)


def compare_counts(a, b, alpha: float = ALPHA) -> Difference:
    """Rates of success (0/1 per seed) a − b: the exact unconditional score test and its inverted interval."""
    a, b = np.asarray(a), np.asarray(b)
    ka, kb, na, nb = int(a.sum()), int(b.sum()), a.size, b.size
    p = score_test_exact(ka, na, kb, nb, 0.0)
    low, high = count_interval(ka, na, kb, nb, alpha)
    return Difference(ka / na - kb / nb, low, high, p, "exact unconditional score test (Barnard); inverted interval")


def clopper_pearson(successes: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact binomial interval of a rate: the rates the central exact binomial test keeps."""
    low = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, n - successes + 1))
    high = 1.0 if successes == n else float(stats.beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    return low, high


def binomial_p(successes: int, n: int, rate: float) -> float:
    """Central two-sided exact binomial p (twice the smaller tail), the test Clopper–Pearson inverts."""
    lower = stats.binom.cdf(successes, n, rate)
    upper = stats.binom.sf(successes - 1, n, rate)
    return float(min(1.0, 2 * min(lower, upper)))


# -- families, distributions, power ----------------------------------------------------------------


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (monotone, capped at 1), in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def implied_level(p_raw: float, p_adjusted: float, level: float) -> float:
    """The per-comparison level at which the raw p decides as the adjusted p does at ``level`` (Holm's
    adjusted p is the raw p times a factor ≥ 1): an interval at 1 − this excludes 0 exactly when the
    adjusted p is below ``level``."""
    return level if p_adjusted <= 0 or p_raw <= 0 else level * min(1.0, p_raw / p_adjusted)


def p_shown(p: float) -> str:
    """A p to two significant digits, or more where two would put it on the other side of a level it is
    judged at (0.0498 shown as 0.05 beside 'reproduced')."""
    for digits in (2, 3, 4, 6):
        shown = f"{p:.{digits}g}"
        if all((float(shown) < level) == (p < level) for level in (0.05, 0.05 / 3, 0.01)):
            return shown
    return f"{p:.3e}"


def prob_superiority(a, b) -> float:
    """P(A > B) over every pair of seeds (a_i, b_j), ties counted half (the common-language effect size)."""
    a, b = np.asarray(a, dtype=np.float64)[:, None], np.asarray(b, dtype=np.float64)[None, :]
    return float(((a > b).sum() + 0.5 * (a == b).sum()) / (a.size * b.size))


def welch_power(difference: float, std: float, n_a: int, n_b: int, alpha: float = ALPHA,
                std_b: float | None = None) -> float:
    """Power of the two-sided two-sample t-test to find ``difference``: with equal spreads ``std`` the
    pooled test; with ``std_b`` (the other side's spread) Welch's, its degrees of freedom by
    Welch–Satterthwaite (one side without spread leaves the other side's n − 1)."""
    if n_a < 2 or n_b < 2:
        return 0.0
    va, vb = std ** 2 / n_a, (std if std_b is None else std_b) ** 2 / n_b
    if va + vb == 0:
        return 1.0 if difference != 0 else alpha
    if std_b is None:
        df = n_a + n_b - 2
    else:
        df = (va + vb) ** 2 / ((va ** 2 / (n_a - 1) if va else 0.0) + (vb ** 2 / (n_b - 1) if vb else 0.0))
    ncp = abs(difference) / math.sqrt(va + vb)
    # the ufuncs behind stats.t.ppf and stats.nct.cdf, the same bits without their argument handling (the
    # group-sequential simulations call this thousands of times); SciPy exposes the upper tail only as nct.sf
    crit = special.stdtrit(df, 1 - alpha / 2)
    upper, lower = float(stats.nct.sf(crit, df, ncp)), float(special.nctdtr(df, ncp, -crit))
    # SciPy's noncentral t returns NaN far in its tails (few df, a large ncp), where the tail is ~0
    upper = upper if math.isfinite(upper) else float(ncp > crit)
    lower = lower if math.isfinite(lower) else 0.0
    return min(1.0, upper + lower)


def detectable_difference(n_a: int, n_b: int, std: float = 1.0, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest difference the two-sample t-test finds with ``power`` at these seeds (in units of
    ``std``; with std = 1, in standard deviations). Infinite below 2 seeds a side."""
    if n_a < 2 or n_b < 2:
        return math.inf
    low, high = 0.0, 1.0
    while welch_power(high, 1.0, n_a, n_b, alpha) < power:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if welch_power(mid, 1.0, n_a, n_b, alpha) < power else (low, mid)
    return high * std


def seeds_needed(difference: float, std: float, power: float = POWER, alpha: float = ALPHA,
                 most: int = 10_000, std_b: float | None = None) -> int | None:
    """Seeds per side for the t-test to find ``difference`` with ``power`` given the spread ``std`` (and,
    for Welch's test, the other side's ``std_b``); None when no number up to ``most`` would (a zero
    difference)."""
    if difference == 0:
        return None
    if std == 0 and not std_b:
        return 2

    def enough(n: int) -> bool:
        return welch_power(difference, std, n, n, alpha, std_b) >= power

    if not enough(most):
        return None
    low, high = 1, 2        # power grows with n: double until enough, then bisect (low never enough)
    while not enough(high):
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


SIMULATED_UP_TO = 8       # seeds a side up to which the permutation test's power is simulated (beyond: Welch's)
_SIMULATIONS = 400


def permutation_power(difference: float, std_a: float, std_b: float, n_a: int, n_b: int,
                      alpha: float = ALPHA) -> float:
    """Power of the exact permutation test at ``alpha`` to find ``difference`` between normal runs of spreads
    ``std_a`` and ``std_b``: simulated (a fixed seed, the same figure everywhere) up to ``SIMULATED_UP_TO``
    seeds a side, where its discreteness costs power; beyond, Welch's power, which the permutation test's
    approaches as its smallest attainable p falls far below alpha (Lehmann & Romano, 15.2)."""
    if smallest_permutation_p(n_a, n_b) >= alpha:
        return 0.0
    if max(n_a, n_b) > SIMULATED_UP_TO:
        return welch_power(difference, std_a, n_a, n_b, alpha, std_b)
    index, _ = _splits(n_a, n_b)
    member = np.zeros((index.shape[0], n_a + n_b))
    np.put_along_axis(member, index, 1.0, axis=1)
    rng = np.random.default_rng(0)
    runs = np.hstack([difference + std_a * rng.standard_normal((_SIMULATIONS, n_a)),
                      std_b * rng.standard_normal((_SIMULATIONS, n_b))])
    sums = runs @ member.T
    spread = np.abs(sums / n_a - (runs.sum(axis=1, keepdims=True) - sums) / n_b)
    p = np.count_nonzero(spread >= spread[:, :1] * (1 - 1e-9), axis=1) / index.shape[0]
    return float(np.mean(p < alpha))


def seeds_needed_permutation(difference: float, std_a: float, std_b: float, power: float = POWER,
                             alpha: float = ALPHA) -> int | None:
    """Seeds per side for the exact permutation test to find ``difference`` with ``power`` at ``alpha``: never
    fewer than it needs to reach alpha at all (``seeds_to_decide``) or than Welch's test needs; where those
    are few, the first n whose simulated power (``permutation_power``) reaches ``power``."""
    welch_n = seeds_needed(difference, std_a, power, alpha, std_b=std_b)
    if welch_n is None:
        return None
    n = max(welch_n, seeds_to_decide(alpha))
    while n <= SIMULATED_UP_TO and permutation_power(difference, std_a, std_b, n, n, alpha) < power:
        n += 1
    return n


@functools.lru_cache(maxsize=64)
def _detectable_permutation(n_a: int, n_b: int, power: float, alpha: float, exact_up_to: int) -> float:
    """``detectable_permutation`` in standard deviations (cached; ``exact_up_to`` keys the splits it used)."""
    if smallest_permutation_p(n_a, n_b) >= alpha:
        return math.inf
    if max(n_a, n_b) > SIMULATED_UP_TO:
        return detectable_difference(n_a, n_b, 1.0, power, alpha)
    low, high = detectable_difference(n_a, n_b, 1.0, power, alpha), 1.0
    while permutation_power(low, 1.0, 1.0, n_a, n_b, alpha) >= power and low > 1e-3:
        low /= 2
    high = max(high, 2 * low)
    while permutation_power(high, 1.0, 1.0, n_a, n_b, alpha) < power:
        high *= 2
    for _ in range(20):
        mid = (low + high) / 2
        low, high = (mid, high) if permutation_power(mid, 1.0, 1.0, n_a, n_b, alpha) < power else (low, mid)
    return high


def detectable_permutation(n_a: int, n_b: int, std: float = 1.0, power: float = POWER,
                           alpha: float = ALPHA) -> float:
    """The smallest difference the exact permutation test finds with ``power`` at these seeds (in units of
    ``std``), simulated as ``permutation_power``; infinite when its p cannot fall below alpha."""
    return _detectable_permutation(n_a, n_b, power, alpha, EXACT_UP_TO) * std


@functools.lru_cache(maxsize=256)
def score_test_all(na: int, nb: int) -> np.ndarray:
    """``score_test_exact``'s p (delta = 0) of every table (xa, xb), shape (na + 1, nb + 1), at once: the
    tables sorted by how far their score statistic lies from 0, each table's tail is a cumulative sum."""
    z = np.abs(_score_statistics(na, nb, 0.0)).ravel()
    order = np.argsort(-z, kind="stable")
    pb = np.linspace(0.0, 1.0, _NUISANCE_GRID)
    prob = (stats.binom.pmf(np.arange(na + 1)[None, :], na, pb[:, None])[:, :, None]
            * stats.binom.pmf(np.arange(nb + 1)[None, :], nb, pb[:, None])[:, None, :]).reshape(pb.size, -1)
    tails = np.cumsum(prob[:, order], axis=1)
    sorted_z = z[order]
    # ties (and z within 1e-9 of a table's own) count as extreme: each table takes the tail through its last tie
    last = np.searchsorted(-sorted_z, -(sorted_z - 1e-9), side="right") - 1
    p_sorted = np.minimum(1.0, tails[:, last].max(axis=0))
    p = np.empty_like(p_sorted)
    p[order] = p_sorted
    return p.reshape(na + 1, nb + 1)


def power_counts(rate_a: float, rate_b: float, n: int, alpha: float = ALPHA) -> float:
    """Exact power of the test that decides a count claim (the exact unconditional score test) at ``alpha``,
    n seeds a side: the probability of the tables it rejects when the true rates are rate_a and rate_b."""
    reject = score_test_all(n, n) < alpha
    ways = np.outer(stats.binom.pmf(np.arange(n + 1), n, rate_a), stats.binom.pmf(np.arange(n + 1), n, rate_b))
    return float(ways[reject].sum())


def seeds_needed_counts(rate_a: float, rate_b: float, power: float = POWER, alpha: float = ALPHA,
                        most: int = 120) -> int | None:
    """The fewest seeds per side with which the exact unconditional score test tells two success rates apart
    with ``power`` at ``alpha`` (its exact power, ``power_counts``, which is not monotone in n: the first n that
    reaches it), or None up to ``most``."""
    h = abs(2 * math.asin(math.sqrt(rate_a)) - 2 * math.asin(math.sqrt(rate_b)))
    if h == 0 or 2 * ((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / h) ** 2 > 2 * most:
        return None         # Cohen's h puts it far beyond ``most``: not worth the exact scan
    for n in range(2, most + 1):
        if power_counts(rate_a, rate_b, n, alpha) >= power:
            return n
    return None


# -- published numbers -----------------------------------------------------------------------------

MATCHES, DIFFERS, INCONCLUSIVE = "matches", "differs", "inconclusive"


@dataclass(frozen=True)
class Equivalence:
    """Our mean (or rate) against a published band [low, high] widened by ± tolerance: ``outcome`` is
    MATCHES (the 90% interval, i.e. two one-sided 5% tests, lies inside the widened band), DIFFERS
    (the 95% interval lies wholly outside it) or INCONCLUSIVE. ``p_tost``: the larger of the two
    one-sided p (below alpha exactly when MATCHES); ``p_differs``: twice the one-sided p against the
    band's nearer edge (below alpha exactly when DIFFERS; 1 when the estimate lies inside the band)."""

    outcome: str
    estimate: float
    low: float          # the 95% interval
    high: float
    p_tost: float | None
    p_differs: float | None


@dataclass(frozen=True)
class SingleRun:
    """One published run against the distribution of one of our runs (normal model: our mean m, spread s
    over n seeds, a new run ~ m + s·√(1 + 1/n)·t(n − 1)). ``p_differs``: twice the predictive probability
    that one of our runs falls beyond the published value's nearer tolerance edge (below alpha exactly
    when our 1 − alpha prediction interval lies wholly outside published ± tolerance; 1 when our mean is
    within it); ``p_matches``: the larger of the two one-sided predictive probabilities of falling
    outside published ± tolerance (below alpha exactly when our 1 − 2·alpha prediction interval lies
    within it)."""

    estimate: float
    low: float          # our 95% prediction interval
    high: float
    p_differs: float
    p_matches: float


def single_run(values, published: float, tolerance: float, bounds: tuple[float, float] | None = None,
               alpha: float = ALPHA) -> SingleRun | None:
    """A published single run against one run of ours (``SingleRun``); None without two seeds with spread."""
    arr = np.asarray(values, dtype=np.float64)
    mean, std = mean_std(arr)
    if arr.size < 2 or std == 0:
        return None
    scale, df = std * math.sqrt(1 + 1 / arr.size), arr.size - 1
    low, high = clip_to_range(*prediction_interval(arr, alpha), bounds)
    lower, upper = published - tolerance, published + tolerance
    if mean > upper:
        p_differs = min(1.0, 2 * float(stats.t.cdf((upper - mean) / scale, df)))
    elif mean < lower:
        p_differs = min(1.0, 2 * float(stats.t.sf((lower - mean) / scale, df)))
    else:
        p_differs = 1.0
    p_matches = max(float(stats.t.cdf((lower - mean) / scale, df)), float(stats.t.sf((upper - mean) / scale, df)))
    return SingleRun(mean, low, high, p_differs, p_matches)


@dataclass(frozen=True)
class AgainstRuns:
    """Our seeds against a paper's mean ± sd over its n runs: Welch's t on the two summaries (the paper's runs
    are not published, so no permutation of them is possible). ``difference``: ours − theirs; ``p_differs``:
    twice the one-sided p beyond the tolerance's nearer edge (1 when the difference is within it);
    ``p_matches``: the larger of the two one-sided p of lying beyond ± tolerance (TOST)."""

    difference: float
    se: float
    df: float
    p_differs: float
    p_matches: float

    def interval(self, alpha: float = ALPHA) -> tuple[float, float]:
        half = float(stats.t.ppf(1 - alpha / 2, self.df)) * self.se
        return self.difference - half, self.difference + half


def against_runs(values, mean: float, sd: float, n: int, tolerance: float) -> AgainstRuns | None:
    """``AgainstRuns`` of our seeds against a published mean ± sd over n runs; None without spread on either
    side or fewer than 2 runs on either."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2 or n < 2:
        return None
    va, vb = arr.var(ddof=1) / arr.size, sd ** 2 / n
    if va + vb == 0:
        return None
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va ** 2 / (arr.size - 1) if va else 0.0) + (vb ** 2 / (n - 1) if vb else 0.0))
    d = float(arr.mean() - mean)
    if abs(d) > tolerance:
        p_differs = min(1.0, 2 * float(stats.t.sf((abs(d) - tolerance) / se, df)))
    else:
        p_differs = 1.0
    p_matches = max(float(stats.t.sf((d + tolerance) / se, df)), float(stats.t.sf((tolerance - d) / se, df)))
    return AgainstRuns(d, se, df, p_differs, p_matches)


def equivalence(values, band: tuple[float, float], tolerance: float, count: bool = False,
                bounds: tuple[float, float] | None = None, alpha: float = ALPHA) -> Equivalence:
    """Our seeds against a published band (low == high for a number; ±inf for an open end) ± tolerance."""
    arr = np.asarray(values, dtype=np.float64)
    lo_band, hi_band = band[0] - tolerance, band[1] + tolerance
    if count:
        k, n = int(arr.sum()), arr.size
        estimate = k / n
        low95, high95 = clopper_pearson(k, n, alpha)
        low90, high90 = clopper_pearson(k, n, 2 * alpha)
        p_low = 0.0 if lo_band <= 0 else float(stats.binom.sf(k - 1, n, lo_band))      # P(X ≥ k | lo)
        p_high = 0.0 if hi_band >= 1 else float(stats.binom.cdf(k, n, hi_band))        # P(X ≤ k | hi)
        if estimate < lo_band:
            p_differs = min(1.0, 2 * float(stats.binom.cdf(k, n, lo_band)))
        elif estimate > hi_band:
            p_differs = min(1.0, 2 * float(stats.binom.sf(k - 1, n, hi_band)))
        else:
            p_differs = 1.0
    else:
        estimate, std = mean_std(arr)
        if arr.size < 2 or std == 0:
            return Equivalence(INCONCLUSIVE, estimate, estimate, estimate, None, None)
        low95, high95 = clip_to_range(*t_interval(arr, alpha), bounds)
        low90, high90 = clip_to_range(*t_interval(arr, 2 * alpha), bounds)
        se, df = std / math.sqrt(arr.size), arr.size - 1
        p_low = 0.0 if math.isinf(lo_band) else float(stats.t.sf((estimate - lo_band) / se, df))
        p_high = 0.0 if math.isinf(hi_band) else float(stats.t.cdf((estimate - hi_band) / se, df))
        if estimate < lo_band:
            p_differs = min(1.0, 2 * float(stats.t.sf((lo_band - estimate) / se, df)))
        elif estimate > hi_band:
            p_differs = min(1.0, 2 * float(stats.t.sf((estimate - hi_band) / se, df)))
        else:
            p_differs = 1.0
    p_tost = max(p_low, p_high)
    if lo_band <= low90 and high90 <= hi_band:
        outcome = MATCHES
    elif high95 < lo_band or low95 > hi_band:
        outcome = DIFFERS
    else:
        outcome = INCONCLUSIVE
    return Equivalence(outcome, estimate, low95, high95, p_tost, p_differs)


# -- seeds chosen as the results come in ------------------------------------------------------------


@dataclass(frozen=True)
class SequentialPlan:
    """A group-sequential design: look at the claims after ``looks[0]`` seeds a side, then after each
    further count, up to ``looks[-1]``; at every look test each undecided claim at alpha / K (K =
    len(looks), Holm within the look). A claim is decided as soon as its adjusted p falls below that
    level (then it is reproduced, or reversed), or its absence is shown: the one-sided test that the
    difference in the claimed direction reaches the claim's smallest effect of interest rejects at
    alpha / K (non-binding: skipping it never raises the false-positive rate). The union bound over K
    looks keeps the chance of any false "reproduced" at or below alpha whatever the data."""

    looks: tuple[int, ...] = (5, 10, 15)
    alpha: float = ALPHA
    # the family-wise rate of a false "reproduced" measured for these looks, four claims replayed through the
    # runner's looks (tests/test_statistics.py's sequential_family_error, 1,500 simulated studies each, the exact
    # permutation test deciding): (three null claims and one true, four null); None where not measured
    family_error: tuple[float, float] | None = None

    @property
    def level(self) -> float:
        return self.alpha / len(self.looks)


def sequential_false_positive_rate(plan: SequentialPlan, simulate, tester, trials: int = 2000,
                                   seed: int = 0) -> float:
    """The fraction of ``trials`` in which the plan declares a difference between two samples drawn from
    the same distribution: ``simulate(rng, n)`` draws n seeds of one side, ``tester(a, b)`` returns a p."""
    rng = np.random.default_rng(seed)
    false = 0
    for _ in range(trials):
        a, b = simulate(rng, plan.looks[-1]), simulate(rng, plan.looks[-1])
        for n in plan.looks:
            if tester(a[:n], b[:n]) < plan.level:
                false += 1
                break
    return false / trials


def _max_weights(big_n: int, n: int, replace: bool) -> np.ndarray:
    """P(the i-th smallest of N scores is the best of n trials), i = 1…N."""
    i = np.arange(1, big_n + 1)
    if replace:
        return (i / big_n) ** n - ((i - 1) / big_n) ** n
    # without replacement: the best of a random n-subset is v_(i) with probability C(i − 1, n − 1) / C(N, n)
    log_w = np.full(big_n, -np.inf)
    ok = i >= n
    log_w[ok] = (special.gammaln(i[ok]) - special.gammaln(n) - special.gammaln(i[ok] - n + 1)
                 - (special.gammaln(big_n + 1) - special.gammaln(n + 1) - special.gammaln(big_n - n + 1)))
    return np.exp(log_w)


def expected_max(scores, n_max: int | None = None, higher_is_better: bool = True,
                 replace: bool = False) -> np.ndarray:
    """Dodge et al. 2019's expected best score of n trials, n = 1…N (default N = len(scores)), with the
    trials' scores sorted: E[max of n] = Σ_i v_(i) P(v_(i) is the best of n). Without replacement (the
    default: the best of n of the N trials the search ran, which for a grid is what n of its points give
    and for a random search the unbiased estimate of the best of n fresh draws), n ≤ N; with replacement,
    Dodge et al.'s first estimator (biased low at n near N: it redraws the same trials). For a metric
    where lower is better, the expected minimum."""
    return expected_max_band(scores, n_max, higher_is_better, replace)[0]


def expected_max_band(scores, n_max: int | None = None, higher_is_better: bool = True,
                      replace: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(expected best, its standard deviation) of n trials, n = 1…N: the band Dodge et al. draw."""
    v = np.sort(np.asarray(scores, dtype=np.float64))
    if not higher_is_better:
        v = -v[::-1]
    big_n = v.size
    n_max = n_max or big_n
    if not replace and n_max > big_n:
        raise ValueError(f"expected_max: {n_max} trials without replacement from a search of {big_n}")
    weights = [_max_weights(big_n, n, replace) for n in range(1, n_max + 1)]
    mean = np.array([float(np.sum(v * w)) for w in weights])
    std = np.sqrt(np.maximum(np.array([float(np.sum(v ** 2 * w)) for w in weights]) - mean ** 2, 0.0))
    return (mean if higher_is_better else -mean), std
