"""S5: a 2-layer vanilla RNN on the sign of a sequence's mean.

Run it: `rnnlab reproduce mean-sign` (`--quick` for a first try in seconds)."""

from __future__ import annotations

from rnnlab.analysis.steps import (
    Dynamics,
    GradientFlow,
    HistoryAt,
)
from rnnlab.experiments.defaults import STUDY_DEFAULTS
from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.studies._common import LR_SEARCH, with_findings


def _mean_sign_specs(quick: bool) -> list[RunSpec]:
    # the blog does not give its data sizes: the same model on 250 training sequences too, where its learning curve
    # and its test accuracy point (docs/results/mean-sign-map-data)
    settings, sizes, few = {}, {}, 250
    if quick:
        settings, sizes, few = {"epochs": 3}, {"n_train": 300, "n_dev": 100, "n_test": 100}, 100
    return [RunSpec("rnn-64x2", "mean-sign", settings, sizes),
            RunSpec("rnn-64x2-n250", "mean-sign", settings, {**sizes, "n_train": few})]


# the blog reports its last epoch; ours test the best-dev epoch's parameters, and also report the last's
MEAN_SIGN_EPOCHS = STUDY_DEFAULTS["mean-sign"]["epochs"]

MEAN_SIGN = with_findings(Experiment(
    name="mean-sign", title="S5: a 2-layer vanilla RNN on the sign of a sequence's mean", study="S5 (tutorial blog)",
    about="Sequences of 20 steps × 10 N(0,1) features; the label is the sign of the global mean. 2-layer tanh RNN "
    "with 64 units and PyTorch's two biases (13,314 parameters), Adam 1e-3, 50 epochs, rate halved at epoch 20; "
    "4000/1000/1000 train/dev/test sequences (the blog does not give its sizes); best-dev parameters restored.",
    specs=_mean_sign_specs, search=LR_SEARCH, tune=["rnn-64x2"],
    metric_names=["train_accuracy", "test_accuracy", "train_loss", "test_loss", "train_accuracy_epoch1",
                  "train_accuracy_epoch10", "first_step_gradient_log10", "best_epoch",
                  f"train_loss_epoch{MEAN_SIGN_EPOCHS}", f"train_accuracy_epoch{MEAN_SIGN_EPOCHS}"],
    published={("rnn-64x2", "train_accuracy"): 0.9531, ("rnn-64x2", "test_accuracy"): 0.9320,
               ("rnn-64x2", "train_loss"): 0.1258, ("rnn-64x2", "test_loss"): 0.1746,
               # "early steps orders of magnitude smaller" than the last step's gradient: read as ≥ 100×
               ("rnn-64x2", "first_step_gradient_log10"): (None, -2.0),
               # its learning curve: train accuracy 50.31% → 87.81% over the first 10 epochs
               ("rnn-64x2", "train_accuracy_epoch1"): 0.5031, ("rnn-64x2", "train_accuracy_epoch10"): 0.8781},
    analyses=[GradientFlow({"rnn-64x2": "rnn-64x2"}), Dynamics("rnn-64x2"),
              HistoryAt("train_accuracy", (1, 10, MEAN_SIGN_EPOCHS)), HistoryAt("train_loss", (MEAN_SIGN_EPOCHS,))],
))
