"""How much of a search's score each hyperparameter explains: functional ANOVA over a random-forest surrogate
(Hutter et al. 2014), as Greff et al. 2017 attributed their LSTM variants' results, through Optuna's
``FanovaImportanceEvaluator`` (the ``importance`` extra: ``pip install 'rnnlab[importance]'``).

A share is the fraction of the score's variance over the searched space that one hyperparameter explains on its
own (its main effect); what the shares leave, ``1 − Σ``, is the interactions (and what the forest cannot fit).
One forest's shares change with its seed and with the trials it saw, so each share is given with the range that
holds 95% of ``draws`` refits, each on a random 80% of the configurations (drawn without replacement: a bootstrap
sample's repeated configurations bias a forest, and its percentile interval then misses the full fit) and a forest
of its own seed. That range is the shares' stability under refitting, not a confidence interval for the true
shares. The score of a configuration is its mean over the search's seeds.

A log-scaled hyperparameter reaches the forest as its log10, on the linear range of the logs. Optuna's fANOVA reads
every distribution on a linear scale, ``log=True`` included (its evaluator builds the search space with
``transform_log=False``; Optuna 5.0): handed a learning rate log-uniform in [1e−6, 1e−2] as it is, it integrates over
a range whose top decade is 90% of its length, and on Greff's JSB arm (V, 50 trials) it gave the rate 0.13 of the
variance and the input noise 0.79, while log10 of the rate alone predicts 90% of the test NLL (a forest's
out-of-bag R²) and the noise alone nothing; read as log10, the rate takes 0.95.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnlab.files import is_number

EXTRA = "pip install 'rnnlab[importance]' (Optuna and scikit-learn)"
DRAWS, LEVEL, SUBSAMPLE = 20, 0.95, 0.8


def available() -> bool:
    return importlib.util.find_spec("optuna") is not None and importlib.util.find_spec("sklearn") is not None


@dataclass(frozen=True)
class Importance:
    """Each hyperparameter's share of the score's variance (the refit on all configurations) with its
    interval, and what the shares leave (interactions)."""

    shares: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    interactions: float
    interactions_interval: tuple[float, float]
    configurations: int
    draws: int


def _distribution(values: list[Any]):
    """An Optuna distribution covering the values tried, on a linear scale (log-scaled ones arrive as their log10)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if all(is_number(v) for v in values):
        low, high = min(values), max(values)
        if low == high:
            return None
        if all(isinstance(v, int) for v in values):
            return IntDistribution(int(low), int(high))
        return FloatDistribution(float(low), float(high))
    choices = tuple(dict.fromkeys(map(str, values)))
    return CategoricalDistribution(choices) if len(choices) > 1 else None


def _as_log10(params: list[dict[str, Any]], log: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each hyperparameter named in ``log`` as its log10, the scale fANOVA then integrates over (see the module's
    docstring); a value that has no logarithm is refused by name."""
    for p in params:
        for k in log:
            if k in p and not (is_number(p[k]) and p[k] > 0):
                raise ValueError(f"hyperparameter importance: {k} is read on a log scale but one configuration has "
                                 f"{k} = {p[k]!r}")
    return [{**p, **{k: math.log10(p[k]) for k in log if k in p}} for p in params]


def _shares(params: list[dict[str, Any]], scores: np.ndarray, distributions: dict, seed: int) -> dict[str, float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    categorical = {k for k, d in distributions.items() if isinstance(d, optuna.distributions.CategoricalDistribution)}
    study.add_trials([optuna.trial.create_trial(
        params={k: str(v) if k in categorical else v for k, v in p.items() if k in distributions},
        distributions=distributions, value=float(s)) for p, s in zip(params, scores)])
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    with warnings.catch_warnings():      # normalize=False (the raw shares) is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=False)


def importance(params: list[dict[str, Any]], scores: list[float], *, draws: int = DRAWS, level: float = LEVEL,
               seed: int = 0, log: tuple[str, ...] = ()) -> Importance:
    """The fANOVA shares of the hyperparameters in ``params`` (one dict per configuration) for ``scores`` (one
    per configuration; non-finite ones left out), with their range over ``draws`` refits on subsets. ``log``:
    the hyperparameters read on a log scale, as their search drew them (``sweeps.importance_inputs``)."""
    if not available():
        raise ValueError(f"hyperparameter importance needs Optuna's fANOVA: {EXTRA}")
    keep = [i for i, s in enumerate(scores) if math.isfinite(s)]
    params, values = _as_log10([params[i] for i in keep], log), np.asarray([scores[i] for i in keep], np.float64)
    names = sorted({k for p in params for k in p})
    partial = {k for k in names if any(k not in p for p in params)}   # set by some configurations only
    params = [{**p, **{k: str(p.get(k, "unset")) for k in partial}} for p in params]
    distributions = {k: d for k in names if (d := _distribution([p[k] for p in params if k in p])) is not None}
    if len(params) < 4 or not distributions:
        raise ValueError(f"hyperparameter importance: needs ≥ 4 finished configurations and a hyperparameter that "
                         f"varies, got {len(params)} and {sorted(distributions) or 'none'}")
    point = _shares(params, values, distributions, seed)
    rng = np.random.default_rng(seed)
    refits = []
    for draw in range(draws):
        index = rng.choice(len(params), max(4, round(SUBSAMPLE * len(params))), replace=False)
        refits.append(_shares([params[i] for i in index], values[index], distributions, seed + 1 + draw))
    tail = (1 - level) / 2 * 100
    table = {k: [r.get(k, 0.0) for r in refits] for k in distributions}
    left = [1.0 - sum(r.values()) for r in refits]
    return Importance({k: float(point.get(k, 0.0)) for k in distributions},
                      {k: tuple(map(float, np.percentile(v, [tail, 100 - tail]))) for k, v in table.items()},
                      float(1.0 - sum(point.values())), tuple(map(float, np.percentile(left, [tail, 100 - tail]))),
                      len(params), draws)
