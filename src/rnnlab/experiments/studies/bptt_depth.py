"""S4: how far back the gradient matters, vanilla RNN vs GRU.

Run it: `rnnlab reproduce bptt-depth` (`--quick` for a first try in seconds)."""

from __future__ import annotations

from rnnlab.analysis.steps import (
    GradientFlow,
    MetricAgainstSetting,
)
from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.studies._common import NLU_NOTE, SGD_LR_SEARCH, with_findings
from rnnlab.experiments.verdicts import Claim

LOOK_BACKS = (1, 2, 3, 5, 10, 20)


def _bptt_specs(quick: bool) -> list[RunSpec]:
    specs, look_backs, epochs, options = [], LOOK_BACKS, 10, {}
    if quick:
        look_backs, epochs, options = (1, LOOK_BACKS[-1]), 1, {"n_train": 60}
    for cell in ("rnn", "gru"):
        for back_steps in look_backs:
            settings = {"cell": cell, "hidden": 50, "lr": 0.5, "batch_size": 100, "back_steps": back_steps,
                        "epochs": epochs, "variant": "cho"}
            specs.append(RunSpec(f"{cell}-k{back_steps}", "nlu-agreement", settings, options))
    return specs


BPTT_DEPTH = with_findings(Experiment(
    name="bptt-depth", title="S4: how far back does the gradient matter? RNN vs GRU", study="S4 (NLU+ coursework)",
    about="Number prediction with hidden 50, SGD lr 0.5, batches of 100, 10 epochs, trained with truncated BPTT of "
    f"{LOOK_BACKS} steps; then the gradient norm of the recurrent weights against look-back 1..20.",
    specs=_bptt_specs, search=SGD_LR_SEARCH,
    metric_names=["test_loss", "test_accuracy", "step10_gradient_share", "seconds_per_epoch"],
    tune=[f"{c}-k{LOOK_BACKS[-1]}" for c in ("rnn", "gru")],   # the claim's pair; the other depths stay as S4 ran
    published={("rnn-k20", "test_loss"): 0.467, ("rnn-k20", "test_accuracy"): 0.78,
               ("gru-k20", "test_loss"): 0.415, ("gru-k20", "test_accuracy"): 0.82},
    claims=[Claim("S4: trained with 20 steps of BPTT, the GRU predicts the verb's number with a lower loss than the "
                  "vanilla RNN", "gru-k20", "rnn-k20", "test_loss", source="S4"),
            Claim("S4 (figure 1): the RNN's recurrent gradient stops growing within 5-10 steps back, the GRU's does "
                  "not (what the 10th step back adds, relative to the full-BPTT gradient, is larger for the GRU)",
                  "gru-k20", "rnn-k20", "step10_gradient_share", source="S4")],
    analyses=[GradientFlow({c: f"{c}-k{LOOK_BACKS[-1]}" for c in ("rnn", "gru")}, examples=100),
              MetricAgainstSetting("back_steps", ("test_loss", "test_accuracy"), "back steps")],
    notes=[NLU_NOTE],
))
