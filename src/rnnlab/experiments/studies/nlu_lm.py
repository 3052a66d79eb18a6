"""S4: the RNN language model grid (hidden × learning rate × back steps).

Run it: `rnnlab reproduce nlu-lm` (`--quick` for a first try in seconds)."""

from __future__ import annotations

from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.studies._common import NLU_NOTE, with_findings
from rnnlab.experiments.verdicts import Claim

# S4's grid as in its tables, searched for the tuned setting's training (anneal 2, batches of 5, 30 epochs)
S4_SEARCH = """
metric = "dev_loss"
mode = "min"
seeds = 2
[search]
hidden = [25, 50]
lr = [0.5, 0.1, 0.05]
back_steps = [0, 2, 5]
"""


def _nlu_lm_specs(quick: bool) -> list[RunSpec]:
    specs = []
    grid = [(h, lr, k) for h in (25, 50) for lr in (0.5, 0.1, 0.05) for k in (0, 2, 5)]
    options, epochs, tuned_epochs = {"n_train": 1000}, 10, 30     # S4's grid: 1,000 training sentences
    if quick:
        grid, options, epochs, tuned_epochs = [(25, 0.5, 0), (50, 0.5, 0)], {"n_train": 60}, 1, 1
    for hidden, lr, back_steps in grid:
        settings = {"hidden": hidden, "lr": lr, "back_steps": back_steps, "epochs": epochs}
        specs.append(RunSpec(f"h{hidden}-lr{lr}-k{back_steps}", "nlu-lm", settings, options))
    # S4's tuned setting: hidden 50, lr 0.8, back steps 3, anneal 2, batches of 5, 30 epochs
    tuned = {"hidden": 50, "lr": 0.8, "back_steps": 3, "anneal": 2.0, "batch_size": 5, "epochs": tuned_epochs}
    specs.append(RunSpec("tuned", "nlu-lm", tuned, options))
    return specs


NLU_LM = with_findings(Experiment(
    name="nlu-lm", title="S4: RNN language model grid (hidden × learning rate × back steps)",
    study="S4 (NLU+ coursework)",
    about="Mikolov RNN LM: sigmoid hidden layer, no bias anywhere, one-hot inputs over the top 2,000 words (rest "
    "UNK), softmax outputs, every matrix randn·√0.1 (202,500 parameters at hidden 50), SGD on each sentence's "
    "summed loss averaged over batches of 100 sentences, lr0 · 5/(5 + epoch), 10 epochs on 1,000 sentences, "
    "truncated BPTT with the given back steps (0 = the step itself), best-dev parameters restored; losses are "
    "reported per token (perplexity = exp(loss)). " + NLU_NOTE,
    specs=_nlu_lm_specs, metric_names=["dev_loss", "test_loss", "test_perplexity", "train_loss"],
    search=S4_SEARCH, tune=["tuned"],
    published={("h50-lr0.5-k0", "dev_loss"): 4.973, ("tuned", "dev_loss"): 4.5305, ("tuned", "test_loss"): 4.027},
    claims=[Claim("S4: hidden 50 reaches a lower dev loss than hidden 25 (lr 0.5, back steps 0)", "h50-lr0.5-k0",
                  "h25-lr0.5-k0", "dev_loss", source="S4")],
))
