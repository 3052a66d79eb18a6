"""Run an experiment: every configuration × seed as a job in parallel worker processes, each
stored as it finishes (``jobs/<label>-s<seed>/result.json`` plus its checkpoint), skipped when it is
already there, then aggregated into mean ± standard deviation over seeds.

A job is one call of the one training loop (``rnnlab.train.fit``) on settings made of the defaults,
the task's study settings and the experiment's overrides; nothing here trains by itself.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.experiments.settings import build, default_settings, jsonable, train_config


@dataclass
class RunSpec:
    """One configuration: ``label`` names it in tables (e.g. ``gru-10``); ``group`` separates the
    parts of an experiment that are compared separately (a dataset, a task)."""

    label: str
    task: str
    settings: dict[str, Any] = field(default_factory=dict)
    task_options: dict[str, Any] = field(default_factory=dict)
    group: str = ""

    @property
    def key(self) -> str:
        return f"{self.group}-{self.label}" if self.group else self.label

    def full_settings(self, seed: int) -> dict[str, Any]:
        settings = default_settings(self.task, **self.settings)
        settings["seed"] = seed
        settings["task_options"] = dict(self.task_options)
        return settings


@dataclass
class Figure:
    title: str
    path: Path
    caption: str = ""


@dataclass
class Context:
    """What an experiment's analyses get: its folder, its runs, and trained models on demand."""

    exp_dir: Path
    specs: list[RunSpec]
    runs: list[dict]
    quick: bool

    def job_dir(self, spec: RunSpec, seed: int = 0) -> Path:
        return self.exp_dir / "jobs" / f"{spec.key}-s{seed}"

    def spec(self, key: str) -> RunSpec:
        return next(s for s in self.specs if s.key == key)

    def load(self, key: str, seed: int = 0, task=None):
        """(task, model) of a finished job with its best-dev (or last) parameters."""
        from rnnlab.train import CHECKPOINT, load_checkpoint, load_params

        spec = self.spec(key)
        path = self.job_dir(spec, seed) / CHECKPOINT
        arrays, _ = load_checkpoint(path)
        task, model = build(spec.full_settings(seed), task)
        load_params(model, arrays, "best" if any(k.startswith("best/") for k in arrays) else "param", str(path))
        return task, model


@dataclass
class Experiment:
    name: str
    title: str
    study: str
    about: str
    specs: Callable[[bool], list[RunSpec]]
    metrics: list[str]
    published: dict[tuple[str, str], Any] = field(default_factory=dict)   # (spec key, metric) → number or text
    analyze: Callable[[Context], tuple[list[Figure], list[str]]] | None = None
    notes: list[str] = field(default_factory=list)


def run_job(settings: dict[str, Any], job_dir: str) -> dict[str, Any]:
    """One training run, executed in a worker; returns its result without the per-epoch history."""
    from rnnlab.train import fit

    task, model = build(settings)
    result = fit(model, task.splits["train"], task.splits.get("dev"), task.splits.get("test"),
                 train_config(settings, progress=False), job_dir,
                 run_info={"settings": settings, "task_info": jsonable(task.info)}, extra_metrics=task.extra_metrics)
    return {k: v for k, v in result.items() if k != "history"}


def _progress(done: int, total: int, name: str, text: str) -> None:
    print(f"[{done}/{total}] {name}: {text}", file=sys.stderr, flush=True)


def run_jobs(jobs: list[tuple[str, dict, Path]], workers: int, progress: bool = True) -> None:
    """jobs: (name, settings, job_dir). Parallel worker processes, one BLAS thread each."""
    if not jobs:
        return
    total = len(jobs)
    if workers <= 1:
        for i, (name, settings, job_dir) in enumerate(jobs, 1):
            result = run_job(settings, str(job_dir))
            if progress:
                _progress(i, total, name, f"trained in {result['seconds_total']:.1f} s")
        return
    saved = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({k: "1" for k in saved})  # spawned workers inherit it before importing numpy
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            started = {pool.submit(run_job, settings, str(job_dir)): name for name, settings, job_dir in jobs}
            for i, future in enumerate(as_completed(started), 1):
                result = future.result()  # a failed job raises here, naming nothing else as done
                if progress:
                    _progress(i, total, started[future], f"trained in {result['seconds_total']:.1f} s")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def summarize(specs: list[RunSpec], runs: list[dict], metrics: list[str]) -> list[dict]:
    """Per configuration: parameter count, seeds, and mean/std of every metric over seeds."""
    rows = []
    for spec in specs:
        mine = [r for r in runs if r["key"] == spec.key]
        row: dict[str, Any] = {"key": spec.key, "group": spec.group, "label": spec.label, "seeds": len(mine),
                               "num_params": mine[0]["num_params"] if mine else None}
        for metric in metrics:
            values = [r[metric] for r in mine if r.get(metric) is not None and math.isfinite(r[metric])]
            if values:
                row[f"{metric}_mean"], row[f"{metric}_std"] = _mean_std(values)
        rows.append(row)
    return rows


def run_experiment(exp: Experiment, out_root: str | Path = "runs", seeds: int = 3, workers: int | None = None,
                   quick: bool = False, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train every configuration × seed (skipping finished jobs unless ``force``), aggregate, run the
    analyses, and write results.json / results.csv. Returns the results dict (the report's input)."""
    exp_dir = Path(out_root) / exp.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    specs = exp.specs(quick)
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"experiment {exp.name}: configuration keys must be unique, got {keys}")
    context = Context(exp_dir, specs, [], quick)
    jobs, skipped = [], 0
    for spec in specs:
        for seed in range(seeds):
            job_dir = context.job_dir(spec, seed)
            if force and job_dir.exists():
                shutil.rmtree(job_dir)
            done = (job_dir / "result.json").is_file()
            stale = done and json.loads((job_dir / "result.json").read_text())["run"]["settings"] != \
                json.loads(json.dumps(spec.full_settings(seed)))
            if stale:  # the spec changed since this job ran (e.g. --quick against a full run)
                shutil.rmtree(job_dir)
            if done and not stale:
                skipped += 1
                continue
            jobs.append((f"{spec.key} seed {seed}", spec.full_settings(seed), job_dir))
    workers = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if progress:
        print(f"{exp.name}: {len(jobs)} runs to train, {skipped} already done, {min(workers, max(len(jobs), 1))} "
              f"workers", file=sys.stderr)
    started = time.perf_counter()
    run_jobs(jobs, min(workers, max(len(jobs), 1)), progress)

    runs = []
    for spec in specs:
        for seed in range(seeds):
            result = json.loads((context.job_dir(spec, seed) / "result.json").read_text())
            metrics = {k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            history = result.get("history", [])
            metrics["seconds_per_epoch"] = float(np.mean([h["seconds"] for h in history])) if history else None
            runs.append({"key": spec.key, "group": spec.group, "label": spec.label, "seed": seed, **metrics,
                         "settings": result["run"]["settings"], "history": history})
    context.runs = runs
    figures, notes = exp.analyze(context) if exp.analyze else ([], [])
    results = {
        "experiment": exp.name, "title": exp.title, "study": exp.study, "about": exp.about, "quick": quick,
        "seeds": seeds, "metrics": exp.metrics, "seconds": time.perf_counter() - started,
        "configurations": [{"key": s.key, "group": s.group, "label": s.label, "task": s.task,
                            "settings": s.settings, "task_options": s.task_options} for s in specs],
        "summary": summarize(specs, runs, exp.metrics),
        "published": [{"key": k, "metric": m, "value": v} for (k, m), v in exp.published.items()],
        "runs": [{k: v for k, v in r.items() if k != "history"} for r in runs],
        "histories": {f"{r['key']}-s{r['seed']}": r["history"] for r in runs},
        "figures": [{"title": f.title, "path": str(Path(f.path).relative_to(exp_dir)), "caption": f.caption}
                    for f in figures],
        "notes": exp.notes + notes,
    }
    (exp_dir / "results.json").write_text(json.dumps(results, indent=2, default=float))
    columns = ["key", "group", "label", "seed", "num_params"] + [m for m in exp.metrics if m != "num_params"]
    with open(exp_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results["runs"])
    return results
