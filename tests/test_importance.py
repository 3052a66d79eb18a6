"""Hyperparameter importance (``rnnlab.experiments.importance``) on objectives whose variance decomposition is
known: one hyperparameter alone, then two with an interaction."""

from __future__ import annotations

import numpy as np
import pytest

from rnnlab.experiments.importance import EXTRA, available, importance

pytestmark = pytest.mark.skipif(not available(), reason=f"the importance extra is not installed: {EXTRA}")


def test_one_hyperparameter_explains_everything_and_the_others_nothing():
    rng = np.random.default_rng(0)
    params = [{"lr": float(10 ** rng.uniform(-4, 0)), "hidden": int(rng.integers(8, 65)),
               "optimizer": str(rng.choice(["adam", "sgd"]))} for _ in range(150)]
    scores = [(np.log10(p["lr"]) + 2) ** 2 for p in params]
    found = importance(params, scores, draws=3, log=("lr",))
    assert found.shares["lr"] > 0.95 and found.shares["hidden"] < 0.02 and found.shares["optimizer"] < 0.02
    assert found.interactions < 0.05 and found.configurations == 150 and found.draws == 3
    assert all(low <= high for low, high in found.intervals.values())
    assert found.intervals["lr"][0] > 0.9                  # refits agree: lr decides


def test_an_interaction_is_what_the_main_effects_leave():
    """f = a + b + 4ab on [−1, 1]²: each main effect holds (1/3) / (22/9) = 3/22 of the variance, the interaction
    the remaining 16/22."""
    rng = np.random.default_rng(1)
    params = [{"a": float(rng.uniform(-1, 1)), "b": float(rng.uniform(-1, 1))} for _ in range(200)]
    scores = [p["a"] + p["b"] + 4 * p["a"] * p["b"] for p in params]
    found = importance(params, scores, draws=3)
    assert found.shares["a"] == pytest.approx(3 / 22, abs=0.08) and found.shares["b"] == pytest.approx(3 / 22, abs=0.08)
    assert found.interactions == pytest.approx(16 / 22, abs=0.12)


def test_too_few_configurations_or_nothing_varied_is_refused():
    with pytest.raises(ValueError, match="needs ≥ 4 finished configurations"):
        importance([{"lr": 0.1}, {"lr": 0.2}, {"lr": float("nan")}], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="a hyperparameter that varies"):
        importance([{"lr": 0.1}] * 5, [1.0, 2.0, 3.0, 4.0, 5.0])
    with pytest.raises(ValueError, match="lr is read on a log scale but one configuration has lr = 0.0"):
        importance([{"lr": 0.1}, {"lr": 0.0}, {"lr": 0.2}, {"lr": 0.3}], [1.0, 2.0, 3.0, 4.0], log=("lr",))


def test_a_stated_log_scale_and_settings_only_some_configurations_have():
    """``log`` reads a hyperparameter on a log scale even within a decade; a key only some configurations set (a
    linked grid axis: one variant has ``ablate``, another not) is a category with "unset" for the others."""
    rng = np.random.default_rng(2)
    params = [{"hidden": int(rng.integers(20, 201)), **({"ablate": "nfg"} if i % 2 else {})} for i in range(120)]
    scores = [np.log(p["hidden"]) + (3.0 if "ablate" in p else 0.0) for p in params]
    found = importance(params, scores, draws=3, log=("hidden",))
    assert set(found.shares) == {"hidden", "ablate"}
    assert found.shares["ablate"] > 0.8 and 0.02 < found.shares["hidden"] < 0.2


def test_a_log_scaled_hyperparameter_is_weighed_over_its_decades_not_its_linear_range():
    """f = [lr < 1e−4] + noise/2 with the rate log-uniform over [1e−6, 1e−2]: over the decades the step splits the
    range in half (variance 1/4, against the noise's 1/48: a share of about 0.92); over the linear range it covers
    1% of it (variance 0.0099: a share of about 0.32), which is what fANOVA finds when handed the rate as it is."""
    rng = np.random.default_rng(3)
    params = [{"lr": float(10 ** rng.uniform(-6, -2)), "noise": float(rng.uniform(0, 1))} for _ in range(160)]
    scores = [float(p["lr"] < 1e-4) + p["noise"] / 2 for p in params]
    found = importance(params, scores, draws=3, log=("lr",))
    assert found.shares["lr"] > 0.8 and found.shares["noise"] < 0.15
