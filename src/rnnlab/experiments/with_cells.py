"""A study with your cells beside its own: ``rnnlab reproduce NAME --cell path.py:Class`` (and
``compare``).

Each cell joins every group of the study (a task, a dataset) as one more configuration, with the
settings of the group's first configuration (the study's optimiser, schedule, epochs, data) and the
hidden size that brings it closest to that configuration's parameter count. For each of the group's
configurations that differ from it only in the cell, the study gains a claim "CELL vs it" on the
study's first metric, decided by the study's own statistics (the exact permutation or count tests, Holm across
the claims). The study's published numbers are kept; its measured reasons and named analyses,
which explain the published runs of its own cells, are left out. It is stored as ``NAME+CELL``,
apart from the study's runs.
"""

from __future__ import annotations

import dataclasses

from rnnlab.budget import closest_size
from rnnlab.cells.registry import cell_class, cell_options, is_cell_file
from rnnlab.data.tasks import get_task
from rnnlab.experiments.runner import Experiment, RunSpec
from rnnlab.experiments.settings import build
from rnnlab.experiments.verdicts import Claim
from rnnlab.metrics import metric as metric_info


def cell_label(spec: str) -> str:
    """How tables name a cell brought by file: its class name in lower case."""
    cell_class(spec)
    return spec.rsplit(":", 1)[1].lower() if is_cell_file(spec) else spec


def matched_hidden(reference: RunSpec, cell: str) -> int:
    """The hidden size at which ``cell``, with the reference's settings, has the parameter count
    closest to the reference's (ties to the smaller); counted on the built model, so embeddings and
    readouts count as the study counts them."""
    settings = reference.full_settings(0)
    task = get_task(reference.task, seed=0, **reference.task_options)
    target = build(settings, task)[1].num_params()
    return closest_size(lambda hidden: build({**settings, "cell": cell, "hidden": hidden, "engine": "numpy"},
                                             task)[1].num_params(), target)


def _same_but_cell(a: RunSpec, b: RunSpec) -> bool:
    """Whether two configurations differ only in their cell (its name, size and options)."""
    cell_settings = {"cell", "hidden", *cell_options()}
    return a.task == b.task and a.task_options == b.task_options and \
        {k: v for k, v in a.settings.items() if k not in cell_settings} == \
        {k: v for k, v in b.settings.items() if k not in cell_settings}


def with_cells(exp: Experiment, cells: list[str]) -> Experiment:
    """``exp`` with each of ``cells`` (registered names or ``path.py:Class``) added to every group."""
    labels = [cell_label(c) for c in cells]
    first_metric = exp.metric_names[0]
    higher = metric_info(first_metric).higher_is_better

    def specs(quick: bool) -> list[RunSpec]:
        own = exp.specs(quick)
        added = []
        for group in dict.fromkeys(s.group for s in own):
            reference = next(s for s in own if s.group == group)
            for cell, label in zip(cells, labels):
                hidden = matched_hidden(reference, cell)
                added.append(dataclasses.replace(reference, label=f"{label}-{hidden}",
                                                 settings={**reference.settings, "cell": cell, "hidden": hidden}))
        return own + added

    full = specs(False)
    own = full[:len(exp.specs(False))]
    claims = list(exp.claims)
    for new in full[len(own):]:
        for other in (s for s in own if s.group == new.group and _same_but_cell(s, new)):
            better, worse = (new.key, other.key) if higher is not False else (other.key, new.key)
            claims.append(Claim(f"{new.label} vs {other.label} ({first_metric})", better, worse, first_metric,
                                higher_is_better=higher is not False, source="rnnlab reproduce --cell"))
    return dataclasses.replace(exp, name=f"{exp.name}+{'+'.join(labels)}", title=f"{exp.title} + {', '.join(labels)}",
                               specs=specs, claims=claims, reasons={}, findings=[], analyses=[], tune=None,
                               notes=[*exp.notes, f"Cells added with --cell: {', '.join(cells)} (each at the "
                                      "parameter count of its group's first configuration)."])
