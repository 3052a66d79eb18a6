"""Scores across tasks (``rnnlab.experiments.aggregate``) against hand-computed cases and the definitions
rliable 1.2 uses (Agarwal et al. 2021)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rnnlab.experiments.aggregate import (
    iqm,
    mean_of_means,
    median_of_means,
    normalise,
    optimality_gap,
    performance_profile,
    probability_of_improvement,
    stratified_bootstrap,
)

scores = st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=12).map(np.array)
suites = st.lists(scores, min_size=1, max_size=6)


def test_the_aggregates_on_a_hand_computed_suite():
    runs = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0, 8.0])]
    assert iqm(runs) == pytest.approx(4.5)                  # 1…8 pooled, 2 cut from each end: mean of 3…6
    assert mean_of_means(runs) == pytest.approx(4.5) and median_of_means(runs) == pytest.approx(4.5)   # (2.5 + 6.5) / 2
    assert optimality_gap([np.array([0.5, 1.5]), np.array([0.0, 2.0])]) == pytest.approx(1 - (0.5 + 1 + 0 + 1) / 4)
    profile = performance_profile([np.array([0.1, 0.5]), np.array([0.5, 0.9])], np.array([0.0, 0.5, 0.9]))
    assert list(profile) == [1.0, 0.25, 0.0]                # strictly above τ


def test_the_iqm_ignores_the_outer_quarters():
    """One failed run among eight, however bad, does not move the IQM; the mean moves with it."""
    good = [np.array([0.8, 0.9, 0.85, 0.95]), np.array([0.7, 0.75, 0.8, 0.78])]
    failed = [good[0], np.array([0.7, 0.75, 0.8, -1e6])]
    assert iqm(failed) == pytest.approx(stats.trim_mean(np.r_[0.8, 0.9, 0.85, 0.95, 0.7, 0.75, 0.8, 0.7], 0.25))
    assert mean_of_means(failed) < -1e5


@settings(max_examples=60, deadline=None)
@given(runs=suites)
def test_the_iqm_is_scipys_trimmed_mean_of_the_pooled_runs(runs):
    assert iqm(runs) == pytest.approx(stats.trim_mean(np.concatenate(runs), 0.25))


_scores = st.floats(-2, 2) | st.sampled_from([0.0, 1.0, np.nan])


@settings(max_examples=200, deadline=None)
@given(draws=st.sampled_from([(), (1,), (3,)]), nx=st.integers(1, 8), ny=st.integers(1, 8), data=st.data())
def test_the_pairs_won_are_mann_whitneys_u_in_the_same_bits(draws, nx, ny, data):
    """What each task adds to P(X > Y) is U / (n_x n_y) as scipy.stats.mannwhitneyu gives it, bit for bit, with
    ties and a NaN (which makes it NaN), one comparison or a batch of bootstrap draws. (Infinities: the test
    below; SciPy 1.9 made them NaN.)"""
    from rnnlab.experiments.aggregate import _wins

    x = np.array(data.draw(st.lists(_scores, min_size=int(np.prod(draws)) * nx, max_size=int(np.prod(draws)) * nx)))
    y = np.array(data.draw(st.lists(_scores, min_size=int(np.prod(draws)) * ny, max_size=int(np.prod(draws)) * ny)))
    x, y = x.reshape(*draws, nx), y.reshape(*draws, ny)
    if x.shape == y.shape and np.array_equal(x, y):
        return      # the same runs: ½ by definition, where U's normal approximation is not asked
    expected = stats.mannwhitneyu(x, y, alternative="greater", axis=-1).statistic / (nx * ny)
    assert np.array_equal(np.asarray(_wins(x, y)), np.asarray(expected), equal_nan=True)
    assert np.shape(_wins(x, y)) == np.shape(expected)


def test_infinite_scores_count_as_the_largest_and_smallest_in_the_pairs_won():
    from rnnlab.experiments.aggregate import _wins

    assert _wins(np.array([np.inf]), np.array([1.0, np.inf])) == 0.75
    assert _wins(np.array([0.0]), np.array([np.inf, -np.inf])) == 0.5


def test_probability_of_improvement_counts_pairs_and_ties():
    assert probability_of_improvement([np.array([2.0, 3.0])], [np.array([0.0, 1.0])]) == 1.0
    assert probability_of_improvement([np.array([1.0, 2.0])], [np.array([1.0, 1.0])]) == pytest.approx(0.75)
    assert probability_of_improvement([np.array([1.0, 1.0])], [np.array([1.0, 1.0])]) == 0.5      # identical
    # averaged over tasks, each task once however many runs it has
    two = probability_of_improvement([np.array([2.0]), np.array([0.0, 0.0, 0.0])],
                                     [np.array([1.0]), np.array([1.0, 1.0, 1.0])])
    assert two == pytest.approx(0.5)
    with pytest.raises(ValueError, match="2 tasks against 1"):
        probability_of_improvement([np.array([1.0])] * 2, [np.array([1.0])])


@settings(max_examples=60, deadline=None)
@given(x=suites, data=st.data())
def test_probability_of_improvement_of_x_and_y_add_to_one(x, data):
    y = [data.draw(scores) for _ in x]
    assert probability_of_improvement(x, y) + probability_of_improvement(y, x) == pytest.approx(1.0)


def test_normalise_puts_the_baseline_at_0_and_the_top_at_1_either_way_round():
    assert normalise(np.array([0.5, 0.75, 1.0]), baseline=0.5, top=1.0).tolist() == [0.0, 0.5, 1.0]   # accuracy
    loss = normalise(np.array([1 / 6, 1 / 12, 0.0, 0.3]), baseline=1 / 6, top=0.0)                    # an MSE
    assert loss.tolist() == pytest.approx([0.0, 0.5, 1.0, 0.0])                                         # clipped
    assert normalise(np.array([0.3]), 1 / 6, 0.0, clip=False)[0] < 0
    with pytest.raises(ValueError, match="equals the baseline"):
        normalise(np.array([1.0]), 0.5, 0.5)


def test_the_stratified_bootstrap_resamples_runs_within_tasks_only():
    """A task's runs never mix with another's: a statistic of the first task alone stays inside its runs; the
    interval holds the point estimate, shrinks with more runs, and reads the same for the same seed."""
    rng = np.random.default_rng(3)
    runs = [rng.normal(0, 1, 10), rng.normal(100, 1, 10)]
    low, high = stratified_bootstrap(lambda r: np.mean(r[0], axis=-1), runs, reps=2000)
    assert runs[0].min() <= low <= high <= runs[0].max()
    low, high = stratified_bootstrap(iqm, runs, reps=4000)
    assert low <= iqm(runs) <= high
    assert (low, high) == stratified_bootstrap(iqm, runs, reps=4000)
    many = [rng.normal(0, 1, 160), rng.normal(100, 1, 160)]
    wide, narrow = np.subtract(*stratified_bootstrap(iqm, runs, reps=4000)[::-1]), \
        np.subtract(*stratified_bootstrap(iqm, many, reps=4000)[::-1])
    assert narrow < wide / 2
    constant = [np.full(5, 0.3), np.full(3, 0.7)]
    assert stratified_bootstrap(iqm, constant, reps=500) == pytest.approx((0.4, 0.4))     # 0.3 0.3 0.3 0.7 kept


def test_pairs_and_profiles_are_bootstrapped_group_by_group():
    above, below = [np.array([2.0, 3.0, 4.0])], [np.array([0.0, 1.0])]
    assert stratified_bootstrap(probability_of_improvement, above, below, reps=500) == pytest.approx((1.0, 1.0))
    taus = np.array([0.0, 0.5])
    low, high = stratified_bootstrap(lambda r: performance_profile(r, taus), [np.array([0.2, 0.8])], reps=2000)
    assert low.shape == (2,) and list(low) == [1.0, 0.0] and list(high) == [1.0, 1.0]
    with pytest.raises(ValueError, match="a task with no runs"):
        stratified_bootstrap(iqm, [np.array([])])
