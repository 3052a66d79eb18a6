"""rnnlab's statistics against constructed cases and against independent implementations (statsmodels and
SciPy's own tests, used here as oracles only), and the sequential plan's false-positive rate by simulation."""

from __future__ import annotations

import itertools
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rnnlab.experiments import statistics as S
from rnnlab.experiments.studies.compare import COMPARE

statsmodels = pytest.importorskip("statsmodels", reason="statsmodels (the test extra) is the oracle here")
from statsmodels.stats.multitest import multipletests  # noqa: E402
from statsmodels.stats.power import TTestIndPower  # noqa: E402
from statsmodels.stats.proportion import proportion_confint  # noqa: E402
from statsmodels.stats.weightstats import DescrStatsW  # noqa: E402

samples = st.lists(st.floats(-100, 100, allow_nan=False), min_size=2, max_size=9)


@settings(max_examples=30, deadline=None)
@given(a=st.lists(st.integers(0, 20), min_size=2, max_size=6), b=st.lists(st.integers(0, 20), min_size=2, max_size=6))
def test_the_exact_permutation_p_equals_scipys_permutation_test(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    def difference(x, y, axis=-1):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    ref = stats.permutation_test((a, b), difference, vectorized=True, permutation_type="independent",
                                 n_resamples=np.inf, alternative="two-sided")
    # SciPy doubles the smaller one-sided p; for the difference of means with equal sizes that is the
    # |difference| count; in general both are exact, so they agree where the null distribution is symmetric
    if len(a) == len(b):
        assert S.permutation_p(a, b) == pytest.approx(min(1.0, ref.pvalue), abs=1e-9)
    assert 0 < S.permutation_p(a, b) <= 1


def test_a_completely_separated_pair_of_five_has_permutation_p_2_of_252():
    assert S.permutation_p([5, 6, 7, 8, 9], [0, 1, 2, 3, 4]) == pytest.approx(2 / 252)
    assert S.compare_means([1.0] * 5, [0.0] * 5).p == pytest.approx(2 / 252)     # no spread: no p = 0


def _brute_force_score_p(ka: int, na: int, kb: int, nb: int) -> float:
    """Barnard's pooled-score test written out: every table, every nuisance rate on a fine grid."""
    def z(xa, xb):
        pooled = (xa + xb) / (na + nb)
        var = pooled * (1 - pooled) * (1 / na + 1 / nb)
        return 0.0 if var == 0 else (xa / na - xb / nb) / math.sqrt(var)
    observed = abs(z(ka, kb))
    extreme = [(xa, xb) for xa in range(na + 1) for xb in range(nb + 1) if abs(z(xa, xb)) >= observed - 1e-9]
    pi = np.linspace(0, 1, 1001)
    return float(max(sum(stats.binom.pmf(xa, na, pi) * stats.binom.pmf(xb, nb, pi) for xa, xb in extreme)))


@pytest.mark.parametrize("ka, na, kb, nb", [(5, 5, 0, 5), (10, 10, 4, 10), (1, 5, 0, 5), (4, 6, 1, 7), (2, 3, 0, 4),
                                            (7, 12, 2, 9), (3, 5, 0, 5)])
def test_the_exact_unconditional_score_test_is_barnards(ka, na, kb, nb):
    mine = S.score_test_exact(ka, na, kb, nb)
    assert mine == pytest.approx(_brute_force_score_p(ka, na, kb, nb), abs=2e-4)
    scipy_p = stats.barnard_exact([[ka, kb], [na - ka, nb - kb]], pooled=True).pvalue
    # SciPy drops tables whose statistic ties the observed one only to rounding (e.g. 3 of 5 vs 0 of 5),
    # so it can only be lower; where nothing ties, it is the same test
    assert scipy_p <= mine + 2e-4
    if (ka, na, kb, nb) in ((5, 5, 0, 5), (10, 10, 4, 10), (1, 5, 0, 5)):
        assert mine == pytest.approx(scipy_p, abs=2e-4)


@pytest.mark.parametrize("ka, na, kb, nb", [(3, 5, 0, 5), (5, 5, 2, 5), (10, 10, 4, 10), (5, 5, 0, 5), (2, 5, 2, 5),
                                            (9, 20, 2, 20)])
def test_the_count_interval_excludes_zero_exactly_when_the_test_rejects(ka, na, kb, nb):
    """The disagreement the old pair had (Fisher p = 0.17 with a Newcombe interval excluding 0) cannot happen."""
    p = S.score_test_exact(ka, na, kb, nb)
    low, high = S.count_interval(ka, na, kb, nb)
    assert low <= ka / na - kb / nb <= high
    assert (p < 0.05) == (low > 0 or high < 0)


@pytest.mark.parametrize("k, n", [(0, 5), (1, 5), (3, 10), (10, 10), (7, 20)])
def test_clopper_pearson_equals_statsmodels_and_inverts_the_binomial_test(k, n):
    assert S.clopper_pearson(k, n) == pytest.approx(proportion_confint(k, n, method="beta"), abs=1e-9)
    low, high = S.clopper_pearson(k, n)
    for rate in np.linspace(0.01, 0.99, 99):
        inside = low <= rate <= high
        assert (S.binomial_p(k, n, rate) >= 0.05) == inside or abs(rate - low) < 1e-6 or abs(rate - high) < 1e-6


def test_the_permutation_test_follows_its_exact_bound_and_resamples_when_they_change(monkeypatch):
    """What a permutation test keeps per seed count is kept per bound too: a test (or a caller) that lowers
    EXACT_UP_TO gets random splits, and the exact test again once it is restored."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=10), rng.normal(size=10) + 1
    exact = S.permutation(a, b)
    monkeypatch.setattr(S, "EXACT_UP_TO", 5)
    sampled = S.permutation(a, b)
    assert not sampled.exact and sampled.splits == S.RESAMPLES + 1
    monkeypatch.setattr(S, "RESAMPLES", 999)
    assert S.permutation(a, b).splits == 1000
    monkeypatch.undo()
    again = S.permutation(a, b)
    assert again.exact and again.splits == exact.splits == math.comb(20, 10) and again.p == exact.p


@settings(max_examples=30, deadline=None)
@given(p=st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_equals_statsmodels(p):
    with mock.patch("gc.collect"):     # statsmodels' Holm collects garbage on every call: seconds in a worker's heap
        expected = list(multipletests(p, method="holm")[1])
    assert S.holm(p) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n_a, n_b", [(3, 3), (5, 5), (10, 10), (3, 8), (20, 20)])
def test_the_detectable_difference_equals_statsmodels_power(n_a, n_b):
    expected = TTestIndPower().solve_power(effect_size=None, nobs1=n_a, alpha=0.05, power=0.8, ratio=n_b / n_a)
    assert S.detectable_difference(n_a, n_b) == pytest.approx(expected, rel=1e-4)


def test_seeds_needed_for_welch_count_the_degrees_of_freedom_a_side_without_spread_takes_away():
    """S4's figure-1 claim at 3 seeds: GRU 0.095 ± 0.04, RNN 0.0003 ± 0.0002 is not significant with 3 seeds;
    the pooled rule would say 3 seeds suffice, Welch's (df ≈ n − 1) asks for more."""
    assert S.seeds_needed(0.0948, 0.04 / math.sqrt(2)) == 3      # the pooled spread √((s_a² + s_b²) / 2)
    welch = S.seeds_needed(0.0948, 0.04, std_b=0.00018)
    assert welch > 3
    rng = np.random.default_rng(0)      # and that many seeds find it in about 80% of simulated experiments
    found = np.mean([stats.ttest_ind(rng.normal(0.0948, 0.04, welch), rng.normal(0.0, 0.00018, welch),
                                     equal_var=False).pvalue < 0.05 for _ in range(2000)])
    assert 0.77 < found < 0.9
    assert S.welch_power(1.0, 1.0, 5, 5, std_b=1.0) == pytest.approx(S.welch_power(1.0, 1.0, 5, 5), rel=1e-9)


def test_three_seeds_a_side_detect_only_about_three_standard_deviations():
    assert 3.0 < S.detectable_difference(3, 3) < 3.2
    assert S.seeds_needed(1.0, 1.0) == math.ceil(TTestIndPower().solve_power(1.0, alpha=0.05, power=0.8))


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(0, 1), min_size=3, max_size=10), target=st.floats(0.2, 0.8),
       tolerance=st.floats(0.01, 0.3))
def test_tost_equals_statsmodels(values, target, tolerance):
    values = np.asarray(values)
    if values.std() < 1e-6:
        return
    result = S.equivalence(values, (target, target), tolerance)
    p_ref = DescrStatsW(values).ttost_mean(target - tolerance, target + tolerance)[0]
    assert result.p_tost == pytest.approx(p_ref, rel=1e-6, abs=1e-12)
    assert (result.outcome == S.MATCHES) == (p_ref < 0.05)


def test_equivalence_gives_three_outcomes():
    close = S.equivalence([0.930, 0.931, 0.929, 0.9305], (0.93, 0.93), 0.01)
    far = S.equivalence([0.80, 0.81, 0.79, 0.805], (0.93, 0.93), 0.01)
    noisy = S.equivalence([0.7, 0.99, 0.85, 0.95], (0.93, 0.93), 0.01)
    assert (close.outcome, far.outcome, noisy.outcome) == (S.MATCHES, S.DIFFERS, S.INCONCLUSIVE)
    assert far.p_differs < 0.05 and close.p_differs == 1.0


def test_intervals_of_bounded_metrics_stay_in_their_range():
    accuracy = [1.0, 0.98, 1.0, 0.99]
    low, high = S.clip_to_range(*S.t_interval(accuracy), (0.0, 1.0))
    assert high == 1.0 and S.t_interval(accuracy)[1] > 1.0 and low < 1.0
    result = S.equivalence(accuracy, (0.99, 0.99), 0.01, bounds=(0.0, 1.0))
    assert result.high <= 1.0


def test_the_prediction_interval_is_wider_than_the_mean_interval_by_sqrt_n_plus_one():
    values = [1.0, 2.0, 3.0, 4.0]
    mean_low, _ = S.t_interval(values)
    pred_low, _ = S.prediction_interval(values)
    assert (2.5 - pred_low) / (2.5 - mean_low) == pytest.approx(math.sqrt(len(values) + 1))


def test_p_a_beats_b_counts_pairs_and_half_ties():
    assert S.prob_superiority([3, 4], [1, 2]) == 1.0
    assert S.prob_superiority([1, 2], [1, 2]) == 0.5
    assert S.prob_superiority([2], [1, 2, 3]) == pytest.approx(0.5)


@pytest.mark.parametrize("scores", [[0.5, 0.7, 0.6], [1.0, 3.0, 2.0, 5.0, 4.0], [2.0, 2.0, 1.0, 7.0, 3.0, 3.0]])
def test_expected_max_equals_enumeration(scores):
    """Without replacement (the default), the exact mean and standard deviation of the best of every n of the
    N trials; with replacement, Dodge et al.'s first estimator, the mean of the best of n draws."""
    for n in range(1, len(scores) + 1):
        subsets = [max(c) for c in itertools.combinations(scores, n)]
        mean, std = S.expected_max_band(scores)
        assert mean[n - 1] == pytest.approx(np.mean(subsets)) and std[n - 1] == pytest.approx(np.std(subsets),
                                                                                                 abs=1e-9)
        worst = [min(c) for c in itertools.combinations(scores, n)]
        assert S.expected_max(scores, higher_is_better=False)[n - 1] == pytest.approx(np.mean(worst))
        draws = [max(draw) for draw in itertools.product(scores, repeat=n)]
        assert S.expected_max(scores, replace=True)[n - 1] == pytest.approx(np.mean(draws))
    curve = S.expected_max(scores)
    assert np.all(np.diff(curve) >= 0) and curve[-1] == max(scores)      # all N trials: the search's own best
    assert np.all(S.expected_max(scores, replace=True) <= curve + 1e-12)   # redrawing trials is biased low
    with pytest.raises(ValueError, match="without replacement"):
        S.expected_max(scores, n_max=len(scores) + 1)


def _welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's p (SciPy's): a test valid at each look, as the plan requires of any test."""
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def test_the_sequential_plan_keeps_false_positives_at_or_below_alpha_for_means():
    """Two configurations from the same distribution, looked at after 5, 10 and 20 seeds: a false
    'reproduced' in at most 5% of 2,000 simulated experiments (binomial sampling error ≈ 0.5%)."""
    plan = S.SequentialPlan(looks=(5, 10, 20))
    rate = S.sequential_false_positive_rate(plan, lambda rng, n: rng.normal(0.0, 1.0, n),
                                            _welch_p, trials=2000)
    assert rate <= 0.05
    # without the split α the same looks would find a "difference" far more often
    naive = S.sequential_false_positive_rate(S.SequentialPlan(looks=(5, 10, 20), alpha=0.15),
                                             lambda rng, n: rng.normal(0.0, 1.0, n),
                                             _welch_p, trials=2000)
    assert naive > 0.05


def _count_p(a: np.ndarray, b: np.ndarray) -> float:
    """The p that decides a count claim (``compare_counts``' test, without its interval)."""
    return S.score_test_exact(int(a.sum()), a.size, int(b.sum()), b.size)


@pytest.mark.parametrize("rate", [0.3, 0.5])
def test_the_sequential_plan_keeps_false_positives_at_or_below_alpha_for_counts(rate):
    """Bimodal per-seed outcomes (learned or not, at the same rate on both sides)."""
    plan = S.SequentialPlan(looks=(5, 10, 20))
    found = S.sequential_false_positive_rate(plan, lambda rng, n: (rng.random(n) < rate).astype(float),
                                             _count_p, trials=1500)
    assert found <= 0.05


def test_the_sequential_plan_decides_a_real_bimodal_difference():
    """Power: a GRU that always learns against a vanilla RNN that learns in 40% of seeds is decided by 20 seeds
    in most simulated experiments."""
    plan = S.SequentialPlan(looks=(5, 10, 20))
    rng = np.random.default_rng(1)
    decided = 0
    for _ in range(300):
        gru, rnn = np.ones(20), (rng.random(20) < 0.4).astype(float)
        decided += any(_count_p(gru[:n], rnn[:n]) < plan.level for n in plan.looks)
    assert decided / 300 > 0.9


def sequential_family_error(means: dict[str, float], trials: int, seed: int = 0,
                            plan: S.SequentialPlan = COMPARE.sequential) -> tuple[float, float]:
    """(family-wise rate of a false 'reproduced' among the claims whose two sides share a mean, rate of deciding
    the true ones) for four claims under ``plan`` (by default the compare study's), replayed through the runner's
    own look (``decide_look``: Holm over the open claims at α/K, claims leaving by significance or by absence)."""
    from rnnlab.experiments.results import Run
    from rnnlab.experiments.runner import decide_look
    from rnnlab.experiments.verdicts import REPRODUCED, Claim

    claims = [Claim(f"{a} beats {b}", a, b, "m", higher_is_better=True) for a, b in ("ab", "cd", "ef")]
    claims.append(Claim("g beats h by at least 0.5", "g", "h", "m", higher_is_better=True, smallest_effect=0.5))
    null = [c.text for c in claims if means[c.better] == means[c.worse]]
    rng = np.random.default_rng(seed)
    false, found = 0, 0
    for _ in range(trials):
        runs = [Run(key, s, {"m": float(rng.normal(mu, 1.0))}) for key, mu in means.items()
                for s in range(plan.looks[-1])]
        decided: dict = {}
        for look in range(len(plan.looks)):
            decide_look(claims, decided, runs, plan, look)
            if len(decided) == len(claims):
                break
        false += any(decided[text].verdict == REPRODUCED for text in null)
        found += all(decided[c.text].verdict == REPRODUCED for c in claims if c.text not in null)
    return false / trials, found / trials


@pytest.mark.slow
@pytest.mark.parametrize("means", [
    {"a": 0, "b": 0, "c": 0, "d": 0, "e": 1.5, "f": 0, "g": 0, "h": 0},      # three null claims, one true
    {"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0, "h": 0},        # all four null
])
def test_the_sequential_plan_keeps_the_family_wise_error_of_several_claims_at_or_below_alpha(means, monkeypatch):
    """The plan's union bound argues one claim; with several, Holm runs over the claims still open and claims
    leave by absence. Measured here through the real verdict code: 400 simulated studies per scenario
    (binomial sampling error ≈ 1.1%). The permutation test decides these claims: exact at 5 seeds a side, and
    here from 20,000 random splits at 10, 20 and 40, to keep the simulation in the slow tier's budget."""
    monkeypatch.setattr(S, "EXACT_UP_TO", 5)
    false, found = sequential_family_error(means, trials=400)
    assert false <= 0.05
    if means["e"] != means["f"]:
        assert found > 0.9           # 1.5 standard deviations: decided by 40 seeds in all 1,500 studies
    # the rate the plan note quotes (1,500 studies) agrees with this one within three standard errors of the
    # difference (pooled): looks changed without measuring again could quote another plan's rate. With 400 studies
    # here this catches only a gross mismatch, about 3.5 points at these rates
    quoted = COMPARE.sequential.family_error[0 if means["e"] != means["f"] else 1]
    pooled = (400 * false + 1500 * quoted) / 1900
    assert abs(false - quoted) <= 3 * math.sqrt(pooled * (1 - pooled) * (1 / 400 + 1 / 1500)), (false, quoted)


# What the compare study's runs measured (2026-11-29, Intel Xeon): per configuration, the rate of runs that learn the
# final T/P or solve the grammar, or the mean and sd of an accuracy. The embedded-Reber cells over seeds 0–99
# (docs/results/embedded-reber-map-seeds, OpenBLAS; the vanilla and LSTM runs also under oneMKL); the sign of the
# mean over the 10 seeds the compare plan trained.
COMPARE_MEASURED = {
    "embedded-reber-gru-10": {"learns_final": 99 / 100},
    "embedded-reber-rnn-18": {"learns_final": 77 / 200, "solves": 27 / 200},    # 38 and 39; 13 and 14 of 100
    "embedded-reber-lstm-8": {"solves": 37 / 200},                              # 18 and 19 of 100
    "mean-sign-rnn-64x2": {"accuracy": (0.9511, 0.0060)},
    "mean-sign-gru-36x2": {"accuracy": (0.9687, 0.0052)},
    "mean-sign-lstm-31x2": {"accuracy": (0.9627, 0.0057)},
}
# the word each claim gets at those rates: the LSTM's lead in solving (0.05) is far below H&S's all-or-nothing gap
COMPARE_WORDS = ["reproduced", "not reproduced", "reproduced", "reproduced"]


def _compare_seed(key: str, rng: np.random.Generator) -> dict[str, float]:
    """One simulated seed of a compare configuration: a run that solves every string also learns the final T/P (at
    the measured rate of learning it over all runs)."""
    measured = COMPARE_MEASURED[key]
    if "accuracy" in measured:
        return {"test_accuracy": float(rng.normal(*measured["accuracy"]))}
    solves_rate, learns_rate = measured.get("solves", 0.0), measured.get("learns_final", 1.0)
    solves = rng.random() < solves_rate
    learns = solves or rng.random() < (learns_rate - solves_rate) / (1.0 - solves_rate)
    return {"test_all_solved": float(solves), "test_final_step_accuracy": 0.99 if learns else 0.5}


@pytest.mark.slow
def test_the_compare_plan_gives_each_claim_one_word_on_rerun_at_the_rates_its_runs_measured():
    """A verdict reads the same on every machine only if the plan decides it with room to spare: another processor
    or BLAS changes the last bits, and with them some seeds' outcomes (5 of 100 LSTM seeds and 3 of 100 vanilla
    seeds solved the grammar under one of OpenBLAS and oneMKL and not the other). Replayed through the runner's own
    looks with the compare study's claims and plan, every seed redrawn (a rerun elsewhere varies less) at the rates
    its runs measured, each claim must get its word in at least 95% of 200 simulated reruns (sampling error ≈ 1.5%;
    the H&S claim got it in all 200). With looks at 5, 10 and 20 seeds it got it in 92% (8% not significant, 1%
    reproduced), and on the seeds themselves it was reproduced under OpenBLAS (seeds 0–19: 6 of 20 against 0 of
    20) and not significant under oneMKL (7 of 20 against 1 of 20); at 40 seeds both show its absence."""
    from rnnlab.experiments.results import Run
    from rnnlab.experiments.runner import decide_look

    plan, claims = COMPARE.sequential, COMPARE.claims
    assert {key for c in claims for key in (c.better, c.worse)} == set(COMPARE_MEASURED)
    rng = np.random.default_rng(0)
    words: dict[str, list[str]] = {c.text: [] for c in claims}
    for _ in range(200):
        runs = [Run(key, seed, _compare_seed(key, rng)) for key in COMPARE_MEASURED for seed in range(plan.looks[-1])]
        decided: dict = {}
        for look in range(len(plan.looks)):
            decide_look(claims, decided, runs, plan, look)
            if len(decided) == len(claims):
                break
        for text, row in decided.items():
            words[text].append(row.verdict)
    for claim, word in zip(claims, COMPARE_WORDS):
        said = words[claim.text]
        assert said.count(word) / len(said) >= 0.95, (claim.text, {w: said.count(w) for w in set(said)})


def test_power_for_counts_is_the_exact_tests_own_and_agrees_with_simulation():
    """The seeds a count claim needs come from the exact power of the test that decides it (Barnard's score
    test), checked here by simulating that test; the normal approximation it replaced said fewer."""
    assert np.allclose(S.score_test_all(6, 8), [[S.score_test_exact(x, 6, y, 8) for y in range(9)] for x in range(7)])
    level = 0.05 / 3
    needed = S.seeds_needed_counts(0.2, 0.0, alpha=level)
    rng = np.random.default_rng(0)
    hits = [S.score_test_exact(int(rng.binomial(needed, 0.2)), needed, int(rng.binomial(needed, 0.0)), needed) < level
            for _ in range(3000)]
    assert S.power_counts(0.2, 0.0, needed, level) == pytest.approx(np.mean(hits), abs=0.025)
    assert S.power_counts(0.2, 0.0, needed, level) >= 0.8
    assert all(S.power_counts(0.2, 0.0, n, level) < 0.8 for n in range(2, needed))
    h = 2 * np.arcsin(np.sqrt(0.2))
    normal = int(np.ceil(2 * ((stats.norm.ppf(1 - level / 2) + stats.norm.ppf(0.8)) / h) ** 2))
    assert normal < needed
