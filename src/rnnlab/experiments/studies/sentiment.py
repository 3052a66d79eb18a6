"""S1: sentiment classification (SST-5, SST-2), vanilla RNN vs GRU vs LSTM.

Run it: `rnnlab reproduce sentiment` (`--quick` for a first try in seconds)."""

from __future__ import annotations

from rnnlab.analysis.steps import (
    LearningCurves,
    MajorityBaseline,
)
from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.studies._common import LR_SEARCH, with_findings
from rnnlab.experiments.verdicts import Claim


def _sentiment_specs(quick: bool) -> list[RunSpec]:
    specs, train, options = [], {}, {}
    if quick:
        train, options = {"epochs": 1}, {"n_train": 300}
    for task in ("sst5", "sst2"):
        for cell in ("rnn", "gru", "lstm"):
            specs.append(RunSpec(cell, task, {**train, "cell": cell, "hidden": 64}, options, group=task))
    return specs


SENTIMENT = with_findings(Experiment(
    name="sentiment", title="S1: sentiment classification, vanilla RNN vs GRU vs LSTM", study="S1 (course report)",
    about="SST-5 and SST-2 at sentence level, word embeddings of 64 learned from scratch, one recurrent layer of 64, "
    "readout of the last state, cross-entropy, Adam 1e-3, 10 epochs, best-dev parameters restored. S1 does not "
    "name its dataset; its numbers are listed next to SST-5.",
    specs=_sentiment_specs, metric_names=["test_accuracy", "test_loss", "dev_accuracy"],
    search=LR_SEARCH,
    published={("sst5-rnn", "test_accuracy"): 0.4102, ("sst5-gru", "test_accuracy"): 0.7425,
               ("sst5-rnn", "test_loss"): 2.1277, ("sst5-gru", "test_loss"): 1.1604,
               ("sst5-lstm", "test_accuracy"): "Tai et al. 2015 LSTM with GloVe: 0.464",
               ("sst2-lstm", "test_accuracy"): "Tai et al. 2015 LSTM with GloVe: 0.849"},
    claims=[Claim(f"S1: the GRU classifies {task.upper()} sentences more accurately than the vanilla RNN",
                  f"{task}-gru", f"{task}-rnn", "test_accuracy", source="S1") for task in ("sst5", "sst2")],
    analyses=[MajorityBaseline(), LearningCurves("dev_accuracy", "dev accuracy (mean over seeds)",
                                                 name="Dev accuracy per epoch",
                                                 caption="SST-5 and SST-2, mean over seeds.")],
))
