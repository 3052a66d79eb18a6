"""What each metric is: its kind, which direction is better, its range, and the tolerance within which a
published number is read as the same as ours. One registry, used by the verdicts, their intervals and
the plots' bands, so that no module decides a metric's kind from its name on its own.

A study may declare a published number's own tolerance beside it (``verdicts.Published``); otherwise the
metric's default below applies, and the page says which tolerance it used and why.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

COUNT, RATE, LOSS, PERPLEXITY = "count", "rate", "loss", "perplexity"
LOG10, VALUE, SECONDS = "log10", "value", "seconds"


@dataclass(frozen=True)
class Metric:
    """``kind``: COUNT (1 when a trial succeeded, else 0: reported as "k of n"), RATE (a fraction in
    [0, 1] per run), LOSS, PERPLEXITY, LOG10, VALUE or SECONDS. ``tolerance``: absolute, or relative to
    the published value when ``relative``; ``why``: the reason for that tolerance, shown on the page."""

    kind: str
    higher_is_better: bool | None
    bounds: tuple[float, float] | None
    tolerance: float
    relative: bool
    why: str

    @property
    def is_count(self) -> bool:
        return self.kind == COUNT

    def tolerance_at(self, published: float) -> float:
        return self.tolerance * abs(published) if self.relative else self.tolerance


_RATE_WHY = "one percentage point, the precision papers report accuracies and rates at"
_LOSS_WHY = ("1% of the published value: the papers compared here report losses and perplexities to 3-4 significant "
             "digits from one run, and seed-to-seed spread alone is of that order")
METRICS: dict[str, Metric] = {
    "test_all_solved": Metric(COUNT, True, (0.0, 1.0), 0.1, False, "one trial in ten"),
    "train_all_solved": Metric(COUNT, True, (0.0, 1.0), 0.1, False, "one trial in ten"),
    "first_step_gradient_log10": Metric(LOG10, None, None, 0.5, False, "half an order of magnitude"),
    "gradient_median": Metric(VALUE, None, (0.0, math.inf), 0.1, True, "10% of the published value"),
    "best_epoch": Metric(VALUE, None, (0.0, math.inf), 1.0, False, "one epoch"),
    "num_params": Metric(VALUE, None, (0.0, math.inf), 0.0, False, "parameter counts are exact"),
}


def metric(name: str) -> Metric:
    """The registry's entry, else the kind the metric's name declares by rnnlab's naming convention
    (``*_accuracy``, ``*_solved``, ``*_share``: rates; ``*_perplexity``; ``*_loss``; ``seconds*``)."""
    if name in METRICS:
        return METRICS[name]
    if "perplexity" in name:
        return Metric(PERPLEXITY, False, (1.0, math.inf), 0.01, True, _LOSS_WHY)
    if "loss" in name or name.endswith("_nll"):
        return Metric(LOSS, False, (0.0, math.inf), 0.01, True, _LOSS_WHY)
    if "accuracy" in name or name.endswith("_solved") or "share" in name:
        return Metric(RATE, True, (0.0, 1.0), 0.01, False, _RATE_WHY)
    if name.startswith("seconds"):
        return Metric(SECONDS, False, (0.0, math.inf), 0.1, True, "10% of the published time")
    return Metric(VALUE, None, None, 0.05, True, "5% of the published value (no convention for this metric)")


def is_count(name: str) -> bool:
    return metric(name).is_count


def impossible(name: str, value: float) -> str | None:
    """Why ``value`` cannot be a finished run's ``name`` (a stored record read back: a NaN or an infinity, a rate
    outside [0, 1], a count that is not 0 or 1, a loss below 0), or None. A judged sample never holds one: the
    record it came from is refused, naming its file and field."""
    if not math.isfinite(value):
        return f"{value} is not a measurement"
    info = metric(name)
    if info.is_count and value not in (0.0, 1.0):
        return f"{value:g} is not a count of one trial (0 or 1)"
    if info.bounds is not None and not info.bounds[0] <= value <= info.bounds[1]:
        return f"{value:g} lies outside the range of a {info.kind}, [{info.bounds[0]:g}, {info.bounds[1]:g}]"
    return None


def check_measurements(metrics: dict[str, float], where: str) -> dict[str, float]:
    """``metrics`` if every value is possible (``impossible``), else ValueError naming ``where`` and the field."""
    for name, value in metrics.items():
        why = impossible(name, float(value))
        if why:
            raise ValueError(f"{where}: {name} = {why}; the record is refused, not judged")
    return metrics


# the column headers and axis labels of each metric on the pages
LABELS = {
    "test_accuracy": "test accuracy", "train_accuracy": "train accuracy", "dev_accuracy": "dev accuracy",
    "test_loss": "test loss", "train_loss": "train loss", "dev_loss": "dev loss",
    "test_perplexity": "test perplexity", "dev_perplexity": "dev perplexity",
    "train_solved": "train solved", "test_solved": "test solved", "test_final_step_accuracy": "test final T/P right",
    "test_step_accuracy": "test steps right", "seconds_per_epoch": "s / epoch",
    "test_all_solved": "trials solving all test strings",
    "gradient_median": "median abs. gradient per string",
    "step10_gradient_share": "10th step back / full gradient",
    "first_step_gradient_log10": "log10 gradient, first / last step",
    "best_epoch": "best-dev epoch",
}


def metric_label(metric: str) -> str:
    """A metric's column header: its name, or a history metric's as "NAME, epoch N"."""
    if metric in LABELS:
        return LABELS[metric]
    history = re.fullmatch(r"(\w+)_epoch(\d+)", metric)
    if history:
        return f"{metric_label(history.group(1))}, epoch {history.group(2)}"
    return metric.replace("_", " ")
