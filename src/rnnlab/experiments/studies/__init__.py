"""The studies of EXPERIMENTS.md as declarative experiments, one file each: configurations, metrics, published
numbers, claims, the search of ``--tune`` and the named analysis steps each one calls (``rnnlab.analysis.steps``).
``EXPERIMENTS[name]`` is what ``rnnlab reproduce NAME`` runs; ``COMPARE`` is the main job, ``rnnlab compare``.

Every ``specs(quick)`` returns the configurations, its one ``if quick:`` block shrinking data and epochs only.
A configuration's settings override the study defaults of its task (``experiments.defaults``). What the stored
runs measured is not written here: the measured reasons are data (``findings.toml``), their numbers computed from
the published runs when a page is published.
"""

from __future__ import annotations

from rnnlab.experiments.runner import Experiment
from rnnlab.experiments.studies.agreement import AGREEMENT
from rnnlab.experiments.studies.bptt_depth import BPTT_DEPTH
from rnnlab.experiments.studies.compare import COMPARE
from rnnlab.experiments.studies.mean_sign import MEAN_SIGN
from rnnlab.experiments.studies.nlu_lm import NLU_LM
from rnnlab.experiments.studies.polyphonic import POLYPHONIC
from rnnlab.experiments.studies.ptb import PTB
from rnnlab.experiments.studies.reber import EMBEDDED_REBER, REBER
from rnnlab.experiments.studies.sentiment import SENTIMENT

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    SENTIMENT, REBER, EMBEDDED_REBER, POLYPHONIC, NLU_LM, AGREEMENT, BPTT_DEPTH, MEAN_SIGN, PTB)}

__all__ = ["COMPARE", "EXPERIMENTS"]
