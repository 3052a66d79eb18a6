"""S4: number prediction, vanilla RNN vs GRU.

Run it: `rnnlab reproduce agreement` (`--quick` for a first try in seconds)."""

from __future__ import annotations

from rnnlab.analysis.steps import (
    DistanceHistogram,
)
from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.studies._common import NLU_NOTE, SGD_LR_SEARCH, with_findings
from rnnlab.experiments.verdicts import Claim


def _agreement_specs(quick: bool) -> list[RunSpec]:
    specs, hiddens, epochs, options = [], (10, 25, 50), 10, {}
    if quick:
        hiddens, epochs, options = (10,), 1, {"n_train": 60}
    for hidden in hiddens:
        for cell in ("rnn", "gru"):
            settings = {"cell": cell, "hidden": hidden, "epochs": epochs, "variant": "cho"}
            specs.append(RunSpec(f"{cell}-{hidden}", "nlu-agreement", settings, options))
    return specs


AGREEMENT = with_findings(Experiment(
    name="agreement", title="S4: number prediction, vanilla RNN vs GRU", study="S4 (NLU+ coursework)",
    about="Tokens before the verb → VBZ or VBP; one-hot inputs over 2,000 words, no biases, randn·√0.1 weights, SGD "
    "lr 0.5 with batches of 100, 10 epochs; loss and accuracy on the last step; Cho-form GRU. " + NLU_NOTE,
    specs=_agreement_specs, search=SGD_LR_SEARCH,
    metric_names=["test_loss", "test_accuracy", "dev_loss", "dev_accuracy", "seconds_per_epoch"],
    published={**{(f"rnn-{h}", "test_loss"): v for h, v in ((10, 0.6161), (25, 0.6097), (50, 0.5975))},
               **{(f"gru-{h}", "test_loss"): v for h, v in ((10, 0.5917), (25, 0.5467), (50, 0.5233))},
               **{(f"rnn-{h}", "test_accuracy"): v for h, v in ((10, 0.659), (25, 0.688), (50, 0.687))},
               **{(f"gru-{h}", "test_accuracy"): v for h, v in ((10, 0.672), (25, 0.734), (50, 0.751))},
               **{(f"rnn-{h}", "seconds_per_epoch"): v for h, v in ((10, 0.75), (25, 1.70), (50, 1.57))},
               **{(f"gru-{h}", "seconds_per_epoch"): v for h, v in ((10, 1.60), (25, 3.63), (50, 4.00))}},
    claims=[Claim(f"S4: at hidden {h} the GRU predicts the verb's number more accurately than the vanilla RNN",
                  f"gru-{h}", f"rnn-{h}", "test_accuracy", source="S4") for h in (10, 25, 50)],
    analyses=[DistanceHistogram()],
    notes=[NLU_NOTE],
))
