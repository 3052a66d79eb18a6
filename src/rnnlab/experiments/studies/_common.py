"""What the studies share: the findings each is declared with, and the searches of ``--tune`` where a study gives no
protocol of its own (sweep files without task and settings)."""

from __future__ import annotations

import dataclasses

from rnnlab.experiments.findings import load_finding_notes, load_findings
from rnnlab.experiments.runner import Experiment


def with_findings(exp: Experiment) -> Experiment:
    """The study with what ``findings.toml`` declares for it: the measured reasons of its published
    numbers, and its other measured findings."""
    return dataclasses.replace(exp, reasons=load_findings(exp.name, exp.published),
                               findings=load_finding_notes(exp.name))


# where a study gives no protocol: the learning rate, the same number of trials for every cell
LR_SEARCH = """
metric = "dev_loss"
mode = "min"
seeds = 2
samples = 6
[search]
lr = { loguniform = [1e-4, 1e-1] }
"""

# S4's tasks train with plain SGD: its learning rate over two decades around the study's 0.5
SGD_LR_SEARCH = """
metric = "dev_loss"
mode = "min"
seeds = 2
samples = 6
[search]
lr = { loguniform = [0.05, 5.0] }
"""

NLU_NOTE = ("The coursework's wiki-train.txt is not public: dev is the study's own wiki-dev.txt (1,000 sentences, "
            "as in S4's tables), the models train on the last 3,000 sentences of wiki-test.txt and are tested on its "
            "first 1,000; S4 trained on 1,000 (LM grid) to 10,000 (agreement) sentences of wiki-train.txt.")
