"""The cell benchmark (``rnnlab bench-cells``): every cell at a matched parameter budget on the
synthetic tasks a laptop affords, each tuned on the same budget, compared over seeds.

The benchmark is data: ``TASKS`` (task, its options, training settings, the budget, the metric
reported) and ``CELLS`` (a label, a registered cell or ``path.py:Class``, its options). For every
(task, cell):

1. **Budget**: the hidden size whose parameter count is closest to the task's budget
   (``hidden_for_budget`` from the cell's declared shapes).
2. **Tuning**: the same search for every cell, ``LEARNING_RATES`` × ``SEARCH_SEEDS`` (≥ 2 seeds per
   configuration); the rate with the lowest mean dev loss wins.
3. **Final runs**: the winner retrained on ``FINAL_SEEDS``, disjoint from the search's, and only
   these are reported: mean ± std, the 95% interval, and each comparison's exact permutation p
   (Holm-adjusted within each task's comparisons, which decides), the interval that inverts it at the
   level the adjusted p implies, its 90% interval against the task's margin ("same") and P(A > B) over
   seed pairs (``rnnlab.experiments.statistics``).
4. **Claims**: the published claims the cells' papers make about tasks rnnlab has (``CLAIMS``),
   each judged per task and summarised as "holds on k of N tasks".

Every run is a job in a ``JobStore`` (a rerun trains only what is missing); ``--executor ray``
spreads them over a cluster like the sweeps.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.budget import count_params, hidden_for_budget
from rnnlab.cells.registry import cell_class, is_cell_file
from rnnlab.data.tasks import get_task
from rnnlab.experiments.defaults import fresh_seeds
from rnnlab.experiments.executors import Job, JobStore
from rnnlab.experiments.executors import executor as make_executor
from rnnlab.experiments.settings import check_cell_unchanged, complete_settings, default_settings, final_metrics
from rnnlab.experiments.statistics import (
    ALPHA,
    PERMUTATION_TEST,
    Permutation,
    clip_to_range,
    holm,
    implied_level,
    mean_std_interval,
    permutation,
    prob_superiority,
)
from rnnlab.files import hold, set_aside
from rnnlab.metrics import metric as metric_info


@dataclass(frozen=True)
class BenchTask:
    name: str
    task: str
    task_options: dict[str, Any]
    settings: dict[str, Any]
    budget: int                   # parameters, readout included
    metric: str                   # the reported test metric
    higher_is_better: bool
    why: str
    same_margin: float = 0.0      # two cells are the same when their difference is shown within ±this
    margin_why: str = ""


@dataclass(frozen=True)
class BenchCell:
    label: str
    cell: str
    options: dict[str, Any] = field(default_factory=dict)


TRAINING = {"optimizer": "adam", "batch_size": 32, "init": "uniform", "layers": 1, "clip": 1.0}
TASKS = (
    BenchTask("adding-50", "adding", {"n_train": 1000, "n_dev": 200, "n_test": 500, "length": 50},
              {**TRAINING, "epochs": 20}, 2000, "test_loss", False,
              "the sum of two marked values among 50 (Hochreiter & Schmidhuber 1997; IRNN, IndRNN, uRNN use it); "
              "predicting 1 scores the baseline MSE 1/6 ≈ 0.167", 0.0167,
              "a tenth of the memoryless baseline's MSE: both cells recover the memory the task asks for alike"),
    BenchTask("copy-20", "copy", {"n_train": 1000, "n_dev": 200, "n_test": 500, "delay": 20, "copy_length": 5},
              {**TRAINING, "epochs": 20}, 3000, "test_loss", False,
              "five of 8 symbols recalled after a delay of 20 steps (the copy task of uRNN and its successors); "
              "the loss per step, since 25 of the 30 steps are blanks that a memoryless model gets right; "
              "guessing the recalled symbols scores 5 ln 8 / 30 ≈ 0.347", 0.0347,
              "a tenth of the loss of guessing the recalled symbols"),
    BenchTask("mean-sign-20", "mean-sign", {"n_train": 1000, "n_dev": 200, "n_test": 500, "length": 20},
              {**TRAINING, "epochs": 20}, 2000, "test_accuracy", True,
              "the sign of the mean of 20 × 10 values (S5's task, one layer): integration, not memory", 0.01,
              "one percentage point of accuracy, rnnlab's default tolerance for accuracies"),
)
CELLS = (
    BenchCell("rnn", "rnn"), BenchCell("gru", "gru"), BenchCell("lstm", "lstm"),
    BenchCell("lstm-cifg", "lstm", {"ablate": "cifg"}), BenchCell("lstm-nfg", "lstm", {"ablate": "nfg"}),
    BenchCell("lstm-noaf", "lstm", {"ablate": "noaf"}), BenchCell("gru-h-gates", "gru", {"gate_inputs": "h"}),
    BenchCell("gru-bias-gates", "gru", {"gate_inputs": "bias"}), BenchCell("mingru", "mingru"),
    BenchCell("ugrnn", "ugrnn"), BenchCell("janet", "janet"), BenchCell("irnn", "irnn"),
    BenchCell("indrnn", "indrnn"), BenchCell("antisymmetric", "antisymmetric"),
    BenchCell("gated-antisymmetric", "gated-antisymmetric"),
)
LEARNING_RATES = (3e-3, 1e-2, 3e-2)
SEARCH_SEEDS = (0, 1)
FINAL_SEEDS = fresh_seeds(10)
BASELINES = ("rnn", "gru", "lstm")
# (a, b, the relation claimed, who claims it): judged on every task
CLAIMS = (
    ("gru", "rnn", "better", "gated beats vanilla at equal budgets (S1–S3, Chung et al. 2014)"),
    ("lstm", "rnn", "better", "gated beats vanilla at equal budgets (S1–S3)"),
    ("lstm-cifg", "lstm", "same", "coupling the input and forget gates costs nothing (Greff et al. 2017)"),
    ("lstm-nfg", "lstm", "worse", "the forget gate is critical (Greff et al. 2017)"),
    ("lstm-noaf", "lstm", "worse", "the output activation is critical (Greff et al. 2017)"),
    ("gru-h-gates", "gru", "same", "gates need not read x (Dey & Salem 2017, GRU1)"),
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
    hidden = hidden_for_budget(cell.cell, task.budget, built.input_size, built.output_size, **cell.options)
    return hidden, count_params(cell.cell, input_size=built.input_size, hidden_size=hidden,
                                output_size=built.output_size, **cell.options)


def _engine(cell: BenchCell) -> str:
    """Numba where the cell has fused kernels, else NumPy: at these sizes NumPy's loop beats JAX's
    compiles (JANET-30 on adding, 3 epochs: 0.72 s on NumPy, 2.34 s on JAX, AMD EPYC, 1 thread)."""
    return "numba" if cell_class(cell.cell)(1, 1, **cell.options).has_kernels() else "numpy"


def _settings(task: BenchTask, cell: BenchCell, hidden: int, lr: float, seed: int) -> dict[str, Any]:
    settings = default_settings(task.task, **task.settings, cell=cell.cell, hidden=hidden, lr=lr, seed=seed,
                                engine=_engine(cell), **cell.options)
    settings["task_options"] = dict(task.task_options)
    return settings


def _job_id(task: BenchTask, cell: BenchCell, lr: float, seed: int) -> str:
    return f"{task.name}--{cell.label}--lr{lr:g}--s{seed}"


def _run(jobs: list[Job], store: JobStore, run, progress: bool) -> int:
    """Train the jobs not stored yet; returns how many trained. A stored run of other settings is set
    aside (never deleted); one whose cell file changed since it ran is refused, naming both hashes."""
    for key, settings, folder in jobs:
        record = (store.done(key) or {}).get("run")
        if not isinstance(record, dict):
            continue
        if complete_settings(record.get("settings", {})) != json.loads(json.dumps(settings)):
            set_aside(folder, "settings-changed", store.root.parent)
        else:
            try:
                check_cell_unchanged(record, str(folder))
            except ValueError as err:
                raise ValueError(f"{err}; move {store.root} away to train the benchmark anew") from None
    todo = [job for job in jobs if store.done(job[0]) is None]
    for i, (key, outcome) in enumerate(run(todo), 1):
        if "files" in outcome:
            store.keep(key, outcome["files"])
        if outcome["status"] != "ok":      # kept as a failed run: it counts against the cell, it is not dropped
            store.keep(key, {}, {"status": outcome["status"], "error": outcome["error"]})
        if progress:
            print(f"[{i}/{len(todo)}] {key}: {outcome['status']} in {outcome['seconds']:.1f} s", flush=True)
    return len(todo)


def _metrics(store: JobStore, key: str) -> dict[str, float] | None:
    done = store.done(key)
    if done is None or done.get("status") not in (None, "ok"):
        return None
    return final_metrics(done)


def run_bench(cells: list[BenchCell], tasks: list[BenchTask], out: str | Path, executor: str = "local",
              address: str | None = None, workers: int | None = None, quick: bool = False,
              progress: bool = True) -> dict[str, Any]:
    """Search, then final runs, for every (task, cell); returns the results (also written to
    OUT/results.json and OUT/runs.csv). One command at a time holds OUT."""
    with hold(out):
        return _run_bench_held(cells, tasks, Path(out), executor, address, workers, quick, progress)


def _run_bench_held(cells: list[BenchCell], tasks: list[BenchTask], out: Path, executor: str, address: str | None,
                    workers: int | None, quick: bool, progress: bool) -> dict[str, Any]:
    store = JobStore(out / "jobs")
    run = make_executor(executor, address, workers)
    rates, search_seeds, final_seeds = ((LEARNING_RATES[1],), SEARCH_SEEDS[:1], FINAL_SEEDS[:2]) if quick else \
        (LEARNING_RATES, SEARCH_SEEDS, FINAL_SEEDS)
    started = time.time()
    sizes = {(t.name, c.label): _sizes(t, c) for t in tasks for c in cells}
    search = [Job(_job_id(t, c, lr, s), _settings(t, c, sizes[t.name, c.label][0], lr, s),
                  store.folder(_job_id(t, c, lr, s)))
              for t in tasks for c in cells for lr in rates for s in search_seeds]
    if quick:
        for _, settings, _ in search:
            settings["epochs"] = 2
    trained = _run(search, store, run, progress)
    chosen = {}
    for t in tasks:
        for c in cells:
            def dev(lr, t=t, c=c):
                losses = [(_metrics(store, _job_id(t, c, lr, s)) or {}).get("dev_loss", np.inf) for s in search_seeds]
                return float(np.mean(losses)) if np.all(np.isfinite(losses)) else np.inf
            chosen[t.name, c.label] = min(rates, key=dev)
    final = [Job(_job_id(t, c, chosen[t.name, c.label], s),
                 _settings(t, c, sizes[t.name, c.label][0], chosen[t.name, c.label], s),
                 store.folder(_job_id(t, c, chosen[t.name, c.label], s)))
             for t in tasks for c in cells for s in final_seeds]
    if quick:
        for _, settings, _ in final:
            settings["epochs"] = 2
    trained += _run(final, store, run, progress)
    results = summarise(cells, tasks, store, sizes, chosen, rates, search_seeds, final_seeds)
    results["seconds"] = time.time() - started
    results["runs"], results["trained_now"] = len(search) + len(final), trained
    results["compute_seconds"] = sum(_seconds(store, key) for key, _, _ in search + final)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    return results


def _seconds(store: JobStore, key: str) -> float:
    done = store.done(key) or {}
    return float(done.get("seconds_total", 0.0) or 0.0)


def summarise(cells, tasks, store, sizes, chosen, rates, search_seeds, final_seeds) -> dict[str, Any]:
    """Per (task, cell): hidden, parameters, the rate chosen, the final runs' metric (failed runs
    counted); per task: every cell against each baseline; per claim: the verdict on each task."""
    rows = []
    for t in tasks:
        for c in cells:
            lr = chosen[t.name, c.label]
            got = [_metrics(store, _job_id(t, c, lr, s)) for s in final_seeds]
            vals = np.array([m[t.metric] for m in got if m is not None and t.metric in m], dtype=np.float64)
            summary = mean_std_interval(vals) if vals.size > 1 else {}
            if summary:      # an interval of a loss or an accuracy stays inside the metric's range
                summary["ci_low"], summary["ci_high"] = clip_to_range(summary["ci_low"], summary["ci_high"],
                                                                      metric_info(t.metric).bounds)
            rows.append({"task": t.name, "cell": c.label, "hidden": sizes[t.name, c.label][0],
                         "params": sizes[t.name, c.label][1], "lr": lr, "runs": int(vals.size),
                         "failed": len(final_seeds) - int(vals.size), "values": vals.tolist(), **summary})
    return {"rows": rows, **judge(rows, tasks, [c.label for c in cells]), "learning_rates": list(rates),
            "search_seeds": list(search_seeds), "final_seeds": list(final_seeds),
            "tasks": [vars(t) for t in tasks], "cells": [vars(c) for c in cells]}


def rejudge(results: dict[str, Any]) -> dict[str, Any]:
    """Stored benchmark results (``cells.json``) judged again by today's rules from their per-seed values,
    with today's task definitions (their margins); nothing retrains."""
    known = {t.name: t for t in TASKS}
    tasks = [known[t["name"]] if t["name"] in known else BenchTask(**t) for t in results["tasks"]]
    return {**results, "tasks": [vars(t) for t in tasks],
            **judge(results["rows"], tasks, [c["label"] for c in results["cells"]])}


DECIDING_TEST = ("the exact permutation test of the difference in means (every split of the 2 × 10 seeds), "
                 "Holm-adjusted over the task's comparisons at α = 0.05")
EQUIVALENCE_TEST = ("two one-sided permutation tests against the task's margin: the 90% interval of a − b that "
                    "inverts the exact permutation test lies inside ±margin (each side at α = 0.05)")


def judge(rows: list[dict[str, Any]], tasks: list[BenchTask], labels: list[str]) -> dict[str, Any]:
    """Every cell against each baseline on each task, and each claim task by task, from the final runs'
    per-seed values (``rows``): what ``summarise`` stores, and what republishing recomputes."""
    values = {(r["task"], r["cell"]): np.asarray(r["values"], dtype=np.float64) for r in rows}
    comparisons = []
    for t in tasks:
        family, tests = [], []
        for label in labels:
            # a baseline meets only the baselines before it (gru vs rnn, lstm vs rnn and gru): each pair once
            bases = BASELINES[:BASELINES.index(label)] if label in BASELINES else BASELINES
            for base in bases:
                if (t.name, base) in values and (t.name, label) in values:
                    va, vb = values[t.name, label], values[t.name, base]
                    tests.append(permutation(va, vb) if va.size >= 2 and vb.size >= 2 else None)
                    family.append(_comparison(t, label, base, va, vb, tests[-1]))
        for comparison, test, adjusted in zip(family, tests, holm([f["p_exact"] for f in family])):
            comparison["p_holm"] = adjusted
            comparison["word"] = _word(comparison, t)
            if test is not None:     # the interval the Holm p implies
                alpha = implied_level(comparison["p_exact"], adjusted, ALPHA)
                comparison["coverage"] = 1 - alpha
                comparison["low"], comparison["high"] = _finite(test.interval(alpha))
        comparisons += family
    claims = []
    for a, b, relation, source in CLAIMS:
        if a not in labels or b not in labels:
            continue
        per_task = {f["task"]: f for f in comparisons if f["a"] == a and f["b"] == b}
        holds = [task for task, f in per_task.items() if _holds(f, relation)]
        claims.append({"a": a, "b": b, "relation": relation, "source": source, "holds": holds,
                       "tasks": list(per_task), "words": {task: _claim_word(f, relation) for task, f in
                                                          per_task.items()}})
    return {"comparisons": comparisons, "claims": claims}


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


def _word(f: dict[str, Any], task: BenchTask) -> str:
    """better / worse by the deciding test (the exact permutation p, Holm-adjusted), else not significant."""
    if f["p_holm"] >= ALPHA or not np.isfinite(f["difference"]):
        return f"not significant with {f['n'][0]} vs {f['n'][1]} seeds"
    a_better = (f["difference"] > 0) == task.higher_is_better
    return "better" if a_better else "worse"


def established_margin(f: dict[str, Any]) -> float:
    """The smallest margin these seeds show the two within (the 90% interval's farther end; inf when the
    test keeps every difference)."""
    return math.inf if f["low90"] is None else max(abs(f["low90"]), abs(f["high90"]))


def _claim_word(f: dict[str, Any], relation: str) -> str:
    if relation != "same":
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
