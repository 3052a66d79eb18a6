"""The analyses a study calls, as named, parameterised steps.

An experiment lists its steps as data (``analyses=[ReberReadout(...), Discrepancy(...)]``). Each
step is a frozen dataclass holding its parameters; called with the experiment's context it
writes its files under ``analysis/`` and returns ``Findings``: figures with captions, and notes.
The context is anything with ``exp_dir``, ``quick``, ``specs``, ``runs`` and ``load(key, seed=0,
task=None) -> (task, model)`` (``rnnlab.experiments.runner.Context``). Models are named by the
spec keys they come from; ``quick`` runs shrink the sizes the full steps use.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.analysis import plots
from rnnlab.analysis.gradients import first_step_log10, gradient_distribution, step_share
from rnnlab.analysis.run import (
    write_csv,
    write_discrepancy,
    write_dynamics,
    write_gradient_distribution,
    write_gradient_flow,
    write_reber_readout,
)
from rnnlab.cells.registry import cell_title
from rnnlab.data.tasks import get_task
from rnnlab.files import folder_in
from rnnlab.metrics import metric as metric_info
from rnnlab.train import evaluate


@dataclass
class Figure:
    title: str
    path: Path
    caption: str = ""


@dataclass
class Findings:
    """What a step found: figures, notes, and metrics it measured on each trained run, keyed by (spec key,
    seed), which join the run's own metrics (so tables and claims can use them)."""

    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run_metrics: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)


def run_steps(steps: list, ctx: Any) -> Findings:
    """Every step in order, their figures, notes and run metrics together."""
    found = Findings()
    for step in steps:
        result = step(ctx)
        found.figures += result.figures
        found.notes += result.notes
        for run, metrics in result.run_metrics.items():
            found.run_metrics.setdefault(run, {}).update(metrics)
    return found


def out_dir(ctx: Any) -> Path:
    """The study's analysis folder, refused where it is a link (a received folder's could point anywhere)."""
    return folder_in(ctx.exp_dir, "analysis")


def load_models(ctx: Any, models: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """(task, {name: trained model}) of the first seed of the named spec keys, which share one task."""
    task, loaded = None, {}
    for name, key in models.items():
        task, loaded[name] = ctx.load(key)
    return task, loaded


def first_batch(data, examples: int):
    """The first ``examples`` sequences of a split as one batch."""
    return data.batch(np.arange(min(examples, len(data))))


# -- the steps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GradientFlow:
    """‖∂L/∂h_t‖ per step of the top layer along test sequences, and ‖∂L/∂W_h‖ against BPTT depth
    (S4's figure 1, S5's vanishing gradient), for trained models named → spec key: the figures for seed 0,
    and for every run the metrics ``step10_gradient_share``, what the 10th step back adds to ‖∂L/∂W_h‖ as
    a fraction of the full-BPTT norm, and ``first_step_gradient_log10``, log10 of the first step's
    ‖∂L/∂h_t‖ (top layer) over the last step's."""

    models: dict[str, str]
    examples: int = 64
    max_steps: int = 20
    context: str = ""           # what the models were trained on, for the captions
    quick_examples: int = 16

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        task, models = load_models(ctx, self.models)
        examples = min(self.examples, self.quick_examples) if ctx.quick else self.examples
        flow = write_gradient_flow(models, first_batch(task.splits["test"], examples), out, self.max_steps)
        ratios = ", ".join(f"{n} {v['first_over_last']:.1e}" for n, v in flow["summary"].items())
        where = f" ({self.context})" if self.context else ""
        notes = [f"Gradient at the first step relative to the last{where}: {ratios}."]
        for name, depth in flow["depths"].items():
            inc = depth["increment"]
            notes.append(f"{name}: the 5th step back adds {inc[min(4, len(inc) - 1)]:.2e} to ‖∂L/∂W_h‖, the 10th "
                         f"{inc[min(9, len(inc) - 1)]:.2e}.")
        run_metrics = {}
        for spec, run, task, model in trained_runs(ctx, tuple(self.models.values())):
            batch = first_batch(task.splits["test"], examples)
            run_metrics[(spec.key, run.seed)] = {
                "step10_gradient_share": step_share(model, batch, 10),
                "first_step_gradient_log10": first_step_log10(model, batch)}
        return Findings([
            Figure(f"Gradient reaching each time step{where}", out / "gradient_flow.png",
                   f"Mean ‖∂L/∂h_t‖ of the trained networks' top layer over {examples} test sequences. What to "
                   f"see: how fast the error fades going back in time (log axis); the first step gets {ratios} "
                   "times the last step's gradient."),
            Figure("Gradient vs BPTT depth", out / "bptt_depth.png",
                   "‖∂L/∂W_h‖ when backpropagating k steps (left), and what the k-th step back adds (right, log "
                   "axis, up to the sequence's length). What to see: a curve that flattens early means distant "
                   "steps no longer change the recurrent weights' gradient."),
        ], notes, run_metrics)


@dataclass(frozen=True)
class Dynamics:
    """Hidden-unit trajectories and their classes, the recurrent Jacobian's spectrum and the largest
    Lyapunov exponent of one trained model on dense test inputs (S5)."""

    key: str
    sequences: int = 16

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        task, model = ctx.load(self.key)
        batch = first_batch(task.splits["test"], self.sequences)
        s = write_dynamics({self.key: model}, np.asarray(batch.x, np.float64), out)["summary"][self.key]
        return Findings([
            Figure("Hidden-unit trajectories", out / f"trajectories_{self.key}.png",
                   f"Top-layer units along {self.sequences} test sequences, classified by the documented rule: "
                   f"{s['unit_classes']}."),
            Figure("Recurrent Jacobian", out / "jacobian_spectrum.png",
                   f"Largest |eigenvalue| of ∂s_t/∂s_(t−1) (first layer); largest Lyapunov exponent "
                   f"{s['lyapunov_exponent']:.3f} per step."),
        ], [f"{self.key}: unit classes {s['unit_classes']}; Lyapunov exponent {s['lyapunov_exponent']:.3f}."])


@dataclass(frozen=True)
class ReberReadout:
    """S2's figures: outputs (and hidden states) along embedded-Reber strings read whole; the T/P
    output after the last symbol is the prediction that needs the second symbol."""

    models: dict[str, str]
    strings: tuple[str, ...] = ("BPBTXSE", "BTBTXSE")
    figures_for: tuple[str, ...] = ("BPBTXSE", "BTBTXSE")
    hidden_figures: bool = True

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        task, models = load_models(ctx, self.models)
        summary = write_reber_readout(models, task, list(self.strings), out)["summary"]
        figures, notes = [], []
        for name in models:
            shown = ", ".join(f"after {s} T/P = {summary[name][s]['T']:.3f}/{summary[name][s]['P']:.3f} (right: "
                              f"{'P' if s[1] == 'P' else 'T'})" for s in self.strings)
            notes.append(f"{name} (seed 0): {shown}.")
            for s in self.figures_for:
                right = "P" if s[1] == "P" else "T"
                figures.append(Figure(f"{name}: outputs along {s}", out / f"outputs_{name}_{s}.png",
                                      f"Output probability of each symbol (rows) after each prefix (columns); the last "
                                      f"column predicts the final symbol: {right} is right."))
                if self.hidden_figures:
                    figures.append(Figure(f"{name}: hidden states along {s}", out / f"hidden_{name}_{s}.png",
                                          "Hidden unit activations after each symbol."))
        return Findings(figures, notes)


@dataclass(frozen=True)
class GradientDistribution:
    """Per-example full-BPTT gradient coefficients of every parameter, pooled (S2's figure 9): the figure
    for seed 0, and each run's median coefficient as its metric ``gradient_median`` (every seed)."""

    models: dict[str, str]
    examples: int = 256
    quick_examples: int = 32

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        task, models = load_models(ctx, self.models)
        examples = self.quick_examples if ctx.quick else self.examples
        s = write_gradient_distribution(models, task.splits["train"], out, examples)["summary"]
        medians = ", ".join(f"{n} {v['q50']:.2e}" for n, v in s.items())
        small = ", ".join(f"{n} {100 * v['fraction_below_1e-6']:.1f}%" for n, v in s.items())
        figure_seed = {key: s[name]["q50"] for name, key in self.models.items()}    # seed 0, measured above
        shown = ctx.first_seed
        run_metrics = {(spec.key, run.seed): {"gradient_median": figure_seed[spec.key] if run.seed == shown else
                                                 gradient_distribution(model, task.splits["train"], examples)
                                                 ["summary"]["q50"]}
                       for spec, run, task, model in trained_runs(ctx, tuple(self.models.values()))}
        return Findings(
            [Figure("Per-example gradient coefficients (S2 figure 9)", out / "gradient_distribution.png",
                    f"Absolute full-BPTT gradients of every parameter, per training string ({examples}), pooled "
                    "(seed 0). What to see: S2's point, that the two distributions look alike, so the size of the "
                    "gradients alone does not explain why the vanilla network fails.")],
            [f"Gradient coefficients (seed 0): median {medians}; below 1e-6: {small}."], run_metrics)


@dataclass(frozen=True)
class Discrepancy:
    """S2's (l,k)-discrepancy D(l,k) of untrained cells (N(0,1) draws, no biases): the distance between
    the states after u = 0^l and v = 1 0^(l−1), mean over draws; reported at the point ``at``=(l, k)."""

    cells: tuple[str, ...] = ("rnn", "gru")
    at: tuple[int, int] = (10, 10)
    max_k: int = 20
    max_l: int = 50
    draws: int = 2000

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        max_k, max_l, draws = (5, 10, 100) if ctx.quick else (self.max_k, self.max_l, self.draws)
        records = write_discrepancy(out, self.cells, ("normal",), max_k, max_l, draws)["records"]
        table = {(r["cell"], r["l"], r["k"]): r for r in records}
        l, k = min(self.at[0], max_l), min(self.at[1], max_k)
        shown = ", ".join(f"{cell_title(c)} " + ("below float64 precision" if table[(c, l, k)]["below_precision"]
                                                        else f"{table[(c, l, k)]['D']:.2e}") for c in self.cells)
        return Findings(
            [Figure("(l,k)-discrepancy of untrained networks (S2)", out / "discrepancy_heatmap_normal.png",
                    "log10 D(l,k): distance between the states after u = 0^l and v = 1 0^(l−1), mean over N(0,1) "
                    "draws, no biases: how much of the first symbol survives l steps. What to see: the vanilla "
                    "network's colour fades to grey (below float64 precision: the first symbol is gone) within a "
                    "few steps, the gated cells stay coloured.")],
            [f"D({l},{k}) with N(0,1) draws: {shown}.", _discrepancy_along_l(table, self.cells, k, max_l, draws)])


def _discrepancy_along_l(table: dict, cells: tuple[str, ...], k: int, max_l: int, draws: int) -> str:
    """S2's finding in numbers: D(l, k) along l per cell, how much of D(1, k) is left after 10 steps, and at
    how many l each gated cell's D is above the vanilla network's by more than 1.96 standard errors."""
    ls = [l for l in (1, 2, 5, 10, 20, 50) if l <= max_l]
    along = "; ".join(f"{cell_title(c)} " + ", ".join(f"{table[(c, l, k)]['D']:.2g}" for l in ls)
                      for c in cells)
    last = min(10, max_l)
    kept = ", ".join(f"{cell_title(c)} {100 * table[(c, last, k)]['D'] / table[(c, 1, k)]['D']:.2g}%"
                     for c in cells)
    vanilla = cells[0]

    def clearly_above(cell: str, l: int) -> bool:
        a, b = table[(cell, l, k)], table[(vanilla, l, k)]
        return a["D"] - b["D"] > 1.96 * math.hypot(a["se"], b["se"])

    above = ", ".join(f"{cell_title(c)} at {sum(clearly_above(c, l) for l in range(1, max_l + 1))} of {max_l}"
                      for c in cells[1:])
    return (f"D(l,{k}) over {draws} N(0,1) draws for l = {', '.join(map(str, ls))}: {along}. Left of D(1,{k}) after "
            f"{last} steps: {kept}. Above the vanilla network's D by more than 1.96 standard errors: {above} "
            "lengths l.")


@dataclass(frozen=True)
class HistoryAt:
    """A metric of every run's history after the given epochs, as the run metrics ``{metric}_epoch{N}`` (a
    published learning curve, compared over seeds); runs shorter than N epochs have none."""

    metric: str
    epochs: tuple[int, ...]

    def __call__(self, ctx: Any) -> Findings:
        return Findings(run_metrics={
            (run.key, run.seed): {f"{self.metric}_epoch{n}": float(run.history[n - 1][self.metric])
                                  for n in self.epochs if len(run.history) >= n}
            for run in ctx.runs})


def seed_band(curves: list[list[float]], bounds: tuple[float, float] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and mean ± std over seeds at each point, the band kept inside the metric's ``bounds`` (an
    accuracy's band does not pass 1); runs that stopped early count until their end."""
    width = max(len(c) for c in curves)
    padded = np.full((len(curves), width), np.nan)
    for i, c in enumerate(curves):
        padded[i, :len(c)] = c
    mean = np.nanmean(padded, axis=0)
    std = np.zeros(width)
    several = np.sum(~np.isnan(padded), axis=0) > 1     # where one seed is left, the band is its curve
    if several.any():
        std[several] = np.nanstd(padded[:, several], axis=0, ddof=1)
    low, high = mean - std, mean + std
    if bounds is not None:
        low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    return mean, low, high


@dataclass(frozen=True)
class LearningCurves:
    """A metric of every configuration against epochs (or cumulative seconds): the mean over seeds
    with a band of ± one standard deviation; one figure in all, or one per group (``per_group``);
    ``groups`` keeps only those groups."""

    metric: str
    ylabel: str
    against: str = "epoch"      # "epoch" or "seconds"
    per_group: bool = False
    name: str = ""              # file name (and title) of the single figure
    caption: str = ""
    groups: tuple[str, ...] = ()

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        specs = [s for s in ctx.specs if not self.groups or s.group in self.groups]
        groups = sorted({s.group for s in specs}) if self.per_group else [None]
        figures = []
        for group in groups:
            curves = {}
            for spec in specs:
                if group is not None and spec.group != group:
                    continue
                runs = [r for r in ctx.runs if r.key == spec.key]
                mean, low, high = seed_band([[h[self.metric] for h in r.history] for r in runs],
                                            metric_info(self.metric).bounds)
                x = (seed_band([list(np.cumsum([h["seconds"] for h in r.history])) for r in runs])[0]
                     if self.against == "seconds" else np.arange(1, len(mean) + 1))
                curves[spec.label if group is not None or self.groups else f"{spec.label} ({spec.group})"] = (
                    x, mean, low, high)
            axis = "wall-clock time" if self.against == "seconds" else "epochs"
            xlabel = "seconds of training" if self.against == "seconds" else "epoch"
            title = group if group is not None else self.name
            stem = f"{group}_{self.metric}" if group is not None else self.name.lower().replace(" ", "_")
            path = out / f"{stem}_{'seconds' if self.against == 'seconds' else 'epochs'}.png"
            plots.plot_learning_curves(curves, path, xlabel, self.ylabel, title)
            figures.append(Figure(f"{title}: {self.ylabel} against {axis}", path, self.caption or
                                  f"{self.ylabel} against {axis}: the mean over seeds, the band ± one standard "
                                  f"deviation across seeds. What to see: which cell gets there first per "
                                  f"{'second of training' if self.against == 'seconds' else 'epoch'}, and how much "
                                  "the seeds disagree."))
        return Findings(figures, [])


@dataclass(frozen=True)
class RobustnessMap:
    """A claim checked across a setting, not at one point: for each cell, ``metric`` (mean, band ±
    std over seeds) and the trials that fully succeed (``count_metric``) against ``setting`` (e.g.
    the learning rate), over every configuration of ``task``."""

    task: str
    metric: str
    count_metric: str
    setting: str = "lr"
    title: str = ""

    def __call__(self, ctx: Any) -> Findings:
        runs = [r for r in ctx.runs if r.settings["task"] == self.task]
        cells = list(dict.fromkeys(r.settings["cell"] for r in runs))
        xs = sorted({r.settings[self.setting] for r in runs})
        curves, counts, notes = {}, {}, []
        for cell in cells:
            by_x = [[r.metrics[self.metric] for r in runs
                     if r.settings["cell"] == cell and r.settings[self.setting] == x] for x in xs]
            mean = np.array([np.mean(v) for v in by_x])
            std = np.array([np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in by_x])
            name = next(r.label for r in runs if r.settings["cell"] == cell).split("-lr")[0]
            bounds = metric_info(self.metric).bounds or (-np.inf, np.inf)
            curves[name] = (xs, mean, np.clip(mean - std, *bounds), np.clip(mean + std, *bounds))
            solved = [[r.metrics[self.count_metric] for r in runs if r.settings["cell"] == cell
                       and r.settings[self.setting] == x] for x in xs]
            counts[name] = (xs, [np.mean(v) for v in solved])
            notes.append(f"{name}: trials solving every test string per {self.setting} " + ", ".join(
                f"{x:g}: {int(sum(v))} of {len(v)}" for x, v in zip(xs, solved)) + ".")
        out = out_dir(ctx)
        path = plots.plot_learning_curves(curves, out / f"robustness_{self.metric}.png", self.setting,
                                          self.metric.replace("_", " "), self.title, logx=True)
        count_path = plots.plot_learning_curves(counts, out / f"robustness_{self.count_metric}.png", self.setting,
                                                "share of trials solving every string", self.title, logx=True)
        return Findings([
            Figure(f"Robustness: {self.metric.replace('_', ' ')} against {self.setting}", path,
                   f"Each cell at {len(xs)} values of {self.setting} (log axis), mean over seeds with ± one standard "
                   "deviation. What to see: where a cell's curve drops, it no longer learns the grammar at that "
                   "setting; a claim that holds at one setting only shows up here."),
            Figure(f"Robustness: trials that solve every test string against {self.setting}", count_path,
                   "H&S's success criterion per trial: the share of seeds that solve all test strings."),
        ], notes)


@dataclass(frozen=True)
class MetricAgainstSetting:
    """Mean test metrics over seeds against one setting (e.g. back steps), one line per cell."""

    setting: str
    metrics: tuple[str, ...]
    xlabel: str

    def __call__(self, ctx: Any) -> Findings:
        out = out_dir(ctx)
        xs = sorted({s.settings[self.setting] for s in ctx.specs})
        cells = list(dict.fromkeys(s.settings["cell"] for s in ctx.specs))
        figures = []
        for metric in self.metrics:
            curves = {cell: (xs, [np.mean([r.metrics[metric] for r in ctx.runs if r.settings["cell"] == cell
                                           and r.settings[self.setting] == x]) for x in xs]) for cell in cells}
            name = metric.replace("_", " ")
            path = plots.plot_learning_curves(curves, out / f"{metric}_vs_{self.setting}.png", self.xlabel, name,
                                              f"{name} vs {self.xlabel}")
            figures.append(Figure(f"{name.capitalize()} vs {self.xlabel}", path, f"Mean over seeds of the {name}."))
        return Findings(figures, [])


def sequence_losses(model: Any, data) -> tuple[np.ndarray, np.ndarray]:
    """The summed loss and the number of scored steps of each sequence of ``data``, one at a time."""
    sums, counts = [], []
    for i in range(len(data)):
        stats, _ = model.evaluate(data.batch(np.array([i])))
        sums.append(stats.loss_sum)
        counts.append(stats.count)
    return np.array(sums), np.array(counts, dtype=float)


def trained_runs(ctx: Any, keys: tuple[str, ...] = ()) -> Iterator[tuple[Any, dict, Any, Any]]:
    """(spec, run, task, model) of every finished run of the specs named by ``keys`` (all when empty)."""
    for spec in ctx.specs:
        if keys and spec.key not in keys:
            continue
        for run in (r for r in ctx.runs if r.key == spec.key):
            task, model = ctx.load(spec.key, run.seed)
            yield spec, run, task, model


def _by_key(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by their spec key, in first-seen order."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["key"], []).append(row)
    return groups


def _mean_std(values: np.ndarray) -> str:
    return f"{values.mean():.3f} ± {np.std(values, ddof=1):.3f}" if len(values) > 1 else f"{values.mean():.3f}"


@dataclass(frozen=True)
class LossAveraging:
    """A per-step loss on ``split`` averaged two ways, for every trained run: over all steps of the
    split (long sequences weigh more) and per sequence first, then over sequences (each counts the
    same). A published number that used the other average can differ by far more than the seeds do."""

    split: str = "test"

    def __call__(self, ctx: Any) -> Findings:
        rows = []
        for spec, run, task, model in trained_runs(ctx):
            sums, counts = sequence_losses(model, task.splits[self.split])
            rows.append({"key": spec.key, "seed": run.seed, "sequences": len(sums),
                         "over_steps": float(sums.sum() / counts.sum()),
                         "over_sequences": float(np.mean(sums / counts))})
        if not rows:
            return Findings()
        write_csv(out_dir(ctx) / f"{self.split}_loss_averaging.csv", rows)
        shown = []
        for key, mine in _by_key(rows).items():
            steps, seqs = (np.array([r[k] for r in mine]) for k in ("over_steps", "over_sequences"))
            shown.append(f"{key} {_mean_std(steps)} → {_mean_std(seqs)}")
        return Findings([], [f"{self.split.capitalize()} loss averaged over all steps → per sequence first "
                             f"({len(rows)} runs, mean ± std over seeds): " + "; ".join(shown) + "."])


@dataclass(frozen=True)
class StreamEvaluation:
    """Perplexity on ``split`` of every run of ``keys`` read two ways with the same parameters: as the
    run's ``batch_size`` parallel streams (how rnnlab evaluates) and as one continuous stream whose state
    is never reset (batch 1: Zaremba et al.'s Lua ``run_test``). Also counts the runs whose best-dev
    parameters, the ones tested, are their last epoch's, which is what the Lua code tests."""

    keys: tuple[str, ...]
    split: str = "test"

    def __call__(self, ctx: Any) -> Findings:
        rows = []
        for spec, run, task, model in trained_runs(ctx, self.keys):
            metric = f"{self.split}_perplexity"       # the run measured it in its parallel streams already
            rows.append({"key": spec.key, "seed": run.seed, "batch_size": run.settings["batch_size"],
                         "streams": run.metrics[metric], "one_stream": evaluate(model, task.splits[self.split], 1)
                         ["eval_perplexity"], "best_is_last": run.metrics["best_epoch"] == run.metrics["epochs_run"]})
        if not rows:
            return Findings()
        write_csv(out_dir(ctx) / f"{self.split}_stream_evaluation.csv", rows)
        shown = []
        for key, mine in _by_key(rows).items():
            streams, one = (np.array([r[k] for r in mine]) for k in ("streams", "one_stream"))
            last = sum(r["best_is_last"] for r in mine)
            shown.append(f"{key}: {_mean_std(streams)} in {mine[0]['batch_size']} streams → {_mean_std(one)} as one "
                         f"stream; the tested parameters are the last epoch's in {last} of {len(mine)} runs")
        return Findings([], [f"{self.split.capitalize()} perplexity with the same parameters, read as parallel "
                             f"streams → as one stream (mean ± std over seeds): " + "; ".join(shown) + "."])


@dataclass(frozen=True)
class MajorityBaseline:
    """The accuracy of always predicting the most frequent test class, per group's task."""

    def __call__(self, ctx: Any) -> Findings:
        notes, seen = [], set()
        for spec in ctx.specs:
            if spec.task not in seen:
                seen.add(spec.task)
                majority = get_task(spec.task, **spec.task_options).info["test_majority_accuracy"]
                notes.append(f"{spec.task}: majority-class test accuracy {100 * majority:.1f}%.")
        return Findings([], notes)


@dataclass(frozen=True)
class DistanceHistogram:
    """Subject–verb distances of the number-agreement sentences, per split."""

    def __call__(self, ctx: Any) -> Findings:
        spec = ctx.specs[0]
        task = get_task(spec.task, **spec.task_options)
        distances = task.info["distances"]
        path = plots.plot_histograms(distances, out_dir(ctx) / "distances.png", np.arange(0.5, 40.5),
                                     "subject–verb distance (tokens)", "sentences", "Subject–verb distances")
        mean = {s: round(float(np.mean(v)), 2) for s, v in distances.items()}
        return Findings([Figure("Subject–verb distances", path, "Histogram of verb index − subject index.")],
                        [f"Mean subject–verb distance: {mean}; plural share {task.info['plural_fraction']}."])
