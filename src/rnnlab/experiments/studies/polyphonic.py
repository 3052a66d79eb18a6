"""S3: polyphonic music at ~20K parameters, tanh-RNN vs GRU vs LSTM (Chung et al. 2014).

Run it: `rnnlab reproduce polyphonic` (`--quick` for a first try in seconds)."""

from __future__ import annotations

import math

from rnnlab.analysis.steps import (
    LearningCurves,
    LossAveraging,
)
from rnnlab.budget import count_params, hidden_for_budget
from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.studies._common import with_findings
from rnnlab.experiments.verdicts import Claim

DATASETS = ("jsb", "nottingham", "musedata", "piano")
PUBLISHED_NLL = {"nottingham": (3.13, 3.23, 3.20), "jsb": (9.10, 8.54, 8.67), "musedata": (6.23, 5.99, 6.23),
                 "piano": (9.03, 8.82, 9.03)}
# S3's table gives each model's training NLL in brackets beside its test NLL
PUBLISHED_TRAIN_NLL = {"nottingham": (3.22, 2.79, 3.08), "jsb": (8.82, 6.94, 8.15), "musedata": (5.64, 5.06, 5.18),
                       "piano": (5.64, 4.93, 6.49)}
MUSIC_SIZES = {cell: hidden_for_budget(cell, 20000, 88, 88) for cell in ("rnn", "gru", "lstm")}


# S3: each model's learning rate picked by validation from log-uniform samples in [e^-12, e^-6]
S3_SEARCH = f"""
metric = "dev_loss"
mode = "min"
seeds = 2
samples = 8
[search]
lr = {{ loguniform = [{math.exp(-12)!r}, {math.exp(-6)!r}] }}
"""


def _polyphonic_specs(quick: bool) -> list[RunSpec]:
    specs, datasets, train, options = [], DATASETS, {}, {}
    if quick:
        datasets, train, options = ("jsb",), {"epochs": 1}, {"max_sequences": 8, "max_length": 30}
    for dataset in datasets:
        for cell in ("rnn", "gru", "lstm"):
            settings = {"cell": cell, "hidden": MUSIC_SIZES[cell], "activation": "tanh", **train}
            specs.append(RunSpec(f"{cell}-{MUSIC_SIZES[cell]}", f"polyphonic-{dataset}", settings, options,
                                 group=dataset))
    return specs


def _music_claims() -> list[Claim]:
    """S3's ranking on each dataset: its best cell has a lower test NLL than each of the others."""
    names = {"rnn": "tanh-RNN", "gru": "GRU", "lstm": "LSTM"}
    claims = []
    for dataset, values in PUBLISHED_NLL.items():
        nll = dict(zip(("rnn", "gru", "lstm"), values))
        best = min(nll, key=nll.get)
        for other in (c for c in nll if nll[c] > nll[best]):
            claims.append(Claim(f"S3 ({dataset}): the {names[best]} has a lower test NLL than the {names[other]}",
                                f"{dataset}-{best}-{MUSIC_SIZES[best]}", f"{dataset}-{other}-{MUSIC_SIZES[other]}",
                                "test_loss", source="S3"))
    return claims


_MUSIC_COUNTS = ", ".join(f"{c}-{h}: {count_params(c, input_size=88, hidden_size=h, output_size=88)}"
                          for c, h in MUSIC_SIZES.items())

POLYPHONIC = with_findings(Experiment(
    name="polyphonic", title="S3: polyphonic music, tanh-RNN vs GRU vs LSTM at ~20K parameters",
    study="S3 (Chung et al. 2014)",
    about="Next-frame prediction of 88 notes with independent sigmoids; the loss is the NLL per time step summed "
    "over notes, averaged over all test steps. One recurrent layer at ~20K parameters each (sizes from the budget "
    "helper), RMSProp, gradient norm clipped at 1, weight noise σ = 0.075, batches of 8 sequences, up to 100 "
    "epochs with early stopping after 10 without a validation improvement, best-validation parameters. S3 picked "
    "the learning rate from log-uniform samples in [e^-12, e^-6]; here it is fixed at e^-6 ≈ 0.0025 (1e-3 "
    "undertrains: see the findings).",
    specs=_polyphonic_specs, metric_names=["test_loss", "train_loss", "dev_loss", "seconds_per_epoch"],
    search=S3_SEARCH,
    published={(f"{dataset}-{cell}-{MUSIC_SIZES[cell]}", metric): value
               for metric, table in (("test_loss", PUBLISHED_NLL), ("train_loss", PUBLISHED_TRAIN_NLL))
               for dataset, values in table.items() for cell, value in zip(("rnn", "gru", "lstm"), values)},
    claims=_music_claims(),
    analyses=[LearningCurves("dev_loss", "validation NLL per time step", per_group=True),
              LearningCurves("dev_loss", "validation NLL per time step", against="seconds", per_group=True),
              LossAveraging("test")],
    notes=[f"Budget helper at 20,000 parameters: {_MUSIC_COUNTS} (S3 used LSTM 36, GRU 46, tanh-RNN 100 under an "
           "unknown convention)."],
))
