"""Scores across tasks, by the methods of Agarwal et al. 2021 ("Deep RL at the edge of the statistical
precipice"), as their library rliable 1.2 defines them (re-implemented here: rliable pins ``arch`` below 8).

A cell's results on a suite are a list of per-task arrays of runs (seeds), each on a normalised scale
(``normalise``: 0 = the task's memoryless baseline, 1 = a perfect score, or the best cell's mean). Then:

- ``iqm``: the interquartile mean of all runs × tasks pooled (``scipy.stats.trim_mean(·, 0.25)``: the
  lowest and highest quarter cut), robust to a few failed runs and to one easy task;
- ``mean_of_means``, ``median_of_means``: over tasks, of each task's mean over runs;
- ``optimality_gap``: γ − mean(min(score, γ)), how far below γ (= 1) the runs fall;
- ``probability_of_improvement``: P(X > Y), per task the fraction of run pairs X wins (ties ½; the
  Mann–Whitney U over n_x·n_y), averaged over tasks;
- ``performance_profile``: the fraction of all run × task scores strictly above each τ;
- ``stratified_bootstrap``: a percentile interval by resampling runs with replacement within each task
  (tasks are never resampled), 50,000 draws by default (2,000 for the pairwise and profile intervals, as
  rliable's README uses), from a seeded generator, so the interval reads the same on every machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

Runs = Sequence[np.ndarray]        # one array of runs (seeds) per task
REPS, PAIR_REPS = 50_000, 2_000
LEVEL = 0.95


def normalise(values: np.ndarray, baseline: float, top: float, clip: bool = True) -> np.ndarray:
    """(value − baseline) / (top − baseline): 0 at the task's memoryless baseline, 1 at ``top`` (a perfect score,
    or the best cell's mean), whichever direction the metric runs; clipped to [0, 1] unless ``clip`` is False."""
    if top == baseline:
        raise ValueError(f"normalise: the top score equals the baseline ({baseline}); nothing to scale by")
    scaled = (np.asarray(values, dtype=np.float64) - baseline) / (top - baseline)
    return np.clip(scaled, 0.0, 1.0) if clip else scaled


def _pooled(runs: Runs) -> np.ndarray:
    """All runs × tasks on the last axis (leading axes: bootstrap draws)."""
    return np.concatenate([np.asarray(r, dtype=np.float64) for r in runs], axis=-1)


def iqm(runs: Runs) -> float | np.ndarray:
    return stats.trim_mean(_pooled(runs), 0.25, axis=-1)


def mean_of_means(runs: Runs) -> float | np.ndarray:
    return np.mean([np.mean(r, axis=-1) for r in runs], axis=0)


def median_of_means(runs: Runs) -> float | np.ndarray:
    return np.median([np.mean(r, axis=-1) for r in runs], axis=0)


def optimality_gap(runs: Runs, gamma: float = 1.0) -> float | np.ndarray:
    return gamma - np.mean(np.minimum(_pooled(runs), gamma), axis=-1)


AGGREGATES: dict[str, Callable[[Runs], float | np.ndarray]] = {
    "IQM": iqm, "mean": mean_of_means, "median": median_of_means, "optimality gap": optimality_gap}


def _wins(x: np.ndarray, y: np.ndarray) -> float | np.ndarray:
    """The fraction of (x, y) run pairs where x is higher, ties counting ½ (U / (n_x n_y)), on the last axis."""
    if x.shape == y.shape and np.array_equal(x, y):
        return np.full(x.shape[:-1], 0.5) if x.ndim > 1 else 0.5
    # the pairs counted directly: U itself, in the same bits as scipy.stats.mannwhitneyu, whose ranks took 30 times
    # as long over bootstrap draws in SciPy 1.9 (the floor pyproject.toml allows)
    ahead, level = x[..., :, None] > y[..., None, :], x[..., :, None] == y[..., None, :]
    wins = np.count_nonzero(ahead, axis=(-2, -1)) + 0.5 * np.count_nonzero(level, axis=(-2, -1))
    share = wins / (x.shape[-1] * y.shape[-1])
    unknown = np.isnan(x).any(axis=-1) | np.isnan(y).any(axis=-1)
    return np.where(unknown, np.nan, share) if x.ndim > 1 else (float("nan") if unknown else float(share))


def probability_of_improvement(x: Runs, y: Runs) -> float | np.ndarray:
    """P(X > Y): per task the chance that a run of X beats a run of Y, averaged over the tasks."""
    if len(x) != len(y):
        raise ValueError(f"probability_of_improvement: {len(x)} tasks against {len(y)}")
    return np.mean([_wins(np.asarray(a, np.float64), np.asarray(b, np.float64)) for a, b in zip(x, y)], axis=0)


def performance_profile(runs: Runs, taus: np.ndarray) -> np.ndarray:
    """F(τ): the fraction of all run × task scores strictly above each τ (on the last axis)."""
    pooled = _pooled(runs)
    return (pooled[..., None, :] > np.asarray(taus, dtype=np.float64)[:, None]).mean(axis=-1)


CHUNK = 5_000     # bootstrap draws held in memory at once


def stratified_bootstrap(statistic: Callable[..., float | np.ndarray], *groups: Runs, reps: int = REPS,
                         level: float = LEVEL, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval (low, high) of ``statistic(*groups)`` under the stratified bootstrap: each group's
    runs resampled with replacement within each task, independently for each group (two cells compared); the
    statistic receives every draw at once, each task's runs as a (draws, runs) array."""
    if reps < 1 or not 0 < level < 1:
        raise ValueError(f"stratified_bootstrap: reps ≥ 1 and 0 < level < 1, got {reps} and {level}")
    if any(len(np.ravel(r)) == 0 for group in groups for r in group):
        raise ValueError("stratified_bootstrap: a task with no runs")
    rng = np.random.default_rng(seed)
    draws = []
    for start in range(0, reps, CHUNK):
        n = min(CHUNK, reps - start)
        resampled = [[np.asarray(r, np.float64).ravel()[rng.integers(0, np.size(r), (n, np.size(r)))] for r in group]
                     for group in groups]
        draws.append(np.asarray(statistic(*resampled)))
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.concatenate(draws), [tail, 100 - tail], axis=0)
    return low, high
