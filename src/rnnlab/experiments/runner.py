"""Run an experiment: every configuration × seed as a job in parallel worker processes, each
stored as it finishes (``jobs/<label>-s<seed>/result.json`` plus its checkpoint), skipped when it is
already there, then aggregated into mean ± standard deviation over seeds.

A job is one call of the one training loop (``rnnlab.train.fit``) on settings made of the defaults,
the task's study settings and the experiment's overrides; nothing here trains by itself.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnlab.analysis.steps import Findings, run_steps
from rnnlab.experiments.executors import Job, JobStore, StudyRunFailed, log_call
from rnnlab.experiments.executors import executor as make_executor
from rnnlab.experiments.findings import RESULTS_ROOT, Finding, render_reasons
from rnnlab.experiments.results import Run, StudyResults, Verdict
from rnnlab.experiments.settings import (
    build,
    check_cell_unchanged,
    complete_settings,
    default_settings,
    load_trained,
    resolve_engine,
    run_record,
    train_config,
)
from rnnlab.experiments.statistics import SequentialPlan, mean_std
from rnnlab.experiments.verdicts import NOT_REPRODUCED, REPRODUCED, Claim, check_published, verdict_table
from rnnlab.files import SET_ASIDE, csv_text, hold, refuse_linked_folder, set_aside, write_text
from rnnlab.machine import cpu_cores
from rnnlab.train import RESULT, RunFolder, timed_epoch
from rnnlab.version import __version__

STOP, COUNT = "stop", "count"      # what a diverged or failed run does to a study: stop it, or count as failed


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
class Context:
    """What an experiment's analyses get: its folder, its runs, and trained models on demand."""

    exp_dir: Path
    specs: list[RunSpec]
    runs: list[Run]
    quick: bool
    first_seed: int = 0     # the seed the analyses' figures show (a tuned study starts past the search's)
    # what the analyses loaded, kept for the others: each data set and each trained model is built once
    _tasks: dict[str, Any] = field(default_factory=dict, repr=False)
    _trained: dict[tuple[str, int], tuple[Any, Any]] = field(default_factory=dict, repr=False)

    @property
    def store(self) -> JobStore:
        """The study's finished runs (result.json, written last by the training loop, marks one done)."""
        return JobStore(self.exp_dir / "jobs")

    def job_dir(self, spec: RunSpec, seed: int = 0) -> Path:
        return self.store.folder(f"{spec.key}-s{seed}")

    def spec(self, key: str) -> RunSpec:
        return next(s for s in self.specs if s.key == key)

    def load(self, key: str, seed: int | None = None):
        """(task, model) of a finished job with its best-dev (or last) parameters (default: the first seed),
        built once per study run: the analyses share them (a task by its name, seed and options)."""
        seed = self.first_seed if seed is None else seed
        if (key, seed) not in self._trained:
            job_dir = self.job_dir(self.spec(key), seed)
            settings = _stored_settings(job_dir) or {}
            data = json.dumps([settings.get("task"), settings.get("seed"), settings.get("task_options", {})],
                              sort_keys=True, default=str)
            trained = load_trained(RunFolder(job_dir).checkpoint, task=self._tasks.get(data))
            self._tasks[data] = trained.task
            self._trained[(key, seed)] = (trained.task, trained.model)
        return self._trained[(key, seed)]


@dataclass(kw_only=True)
class Experiment:
    """A study as data: its configurations (``specs(quick)``), the metrics its tables show, the
    published numbers keyed by (spec key, metric) (a number, a (low, high) range or text), the
    claims it makes (``verdicts.Claim``), the reasons where our numbers differ (a text, or a
    ``findings.Finding`` whose numbers are computed from the published runs), the named
    analysis steps it runs after training (``rnnlab.analysis.steps``), fixed notes, measured findings
    about its published runs (``findings``: shown on the published page), and the study's
    search (``search``: a sweep file's text without task and settings, see ``rnnlab.experiments.sweeps``;
    ``reproduce NAME --tune`` runs it for each configuration in ``tune`` (default: all) and trains
    those, with the claims and published numbers that concern only them). ``sequential``: a
    group-sequential plan that chooses the seeds of the claims' configurations as results come in
    (``statistics.SequentialPlan``), used unless a fixed number of seeds is asked for. ``first_seed``:
    seeds are first_seed, first_seed + 1, …; a tuned study starts at ``FRESH_FIRST_SEED``, so that
    its runs are never the search's own (the seeds that won the selection would flatter the winner).
    ``failed_runs``: ``"stop"`` (a run that diverges or fails stops the study, naming it: a study
    reproduces settings that train) or ``"count"`` (it is kept as failed and counts against its
    configuration: a benchmark, where failing is part of what a cell is judged on)."""

    name: str
    title: str
    study: str
    about: str
    specs: Callable[[bool], list[RunSpec]]
    metric_names: list[str]
    published: dict[tuple[str, str], Any] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    reasons: dict[tuple[str, str], Finding | str] = field(default_factory=dict)
    analyses: list[Callable[[Context], Findings]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    search: str = ""
    tune: list[str] | None = None
    sequential: SequentialPlan | None = None
    first_seed: int = 0
    failed_runs: str = STOP

    def __post_init__(self) -> None:
        if self.failed_runs not in (STOP, COUNT):
            raise ValueError(f"experiment {self.name}: failed_runs is {STOP!r} or {COUNT!r}, got {self.failed_runs!r}")
        for (key, metric), value in self.published.items():
            check_published(key, metric, value)


def estimate_run_seconds(settings: dict[str, Any], task: Any = None) -> float:
    """The CPU seconds one run of ``settings`` takes at most: its epochs times one epoch timed on one thread, as the
    executors' workers run (``rnnlab.train.timed_epoch``); early stopping can only end it sooner. ``task``: the
    run's task, built before."""
    task, model = build(settings, task)
    config = dataclasses.replace(train_config(settings, progress=False), threads=1)
    return config.epochs * timed_epoch(model, task.splits["train"], task.splits.get("dev"), config)


def _progress(done: int, total: int, name: str, text: str) -> None:
    print(f"[{done}/{total}] {name}: {text}", file=sys.stderr, flush=True)


def _stored_record(job_dir: Path) -> dict[str, Any] | None:
    """What a job folder says it trained (``settings.run_record``: its settings, the cell file's hash):
    its result's, else the checkpoint's of an interrupted run; None when nothing is stored there. A
    damaged file raises ValueError naming it."""
    stored = RunFolder(job_dir).record()
    if stored is None:
        return None
    where, record = stored
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        raise ValueError(f"{where}: records no run settings")
    return record


def _stored_settings(job_dir: Path) -> dict[str, Any] | None:
    """The settings a job folder was trained with, or None when nothing is stored there."""
    record = _stored_record(job_dir)
    return None if record is None else complete_settings(record["settings"], f"{job_dir}: its stored settings")


def _store_finished(jobs: list[Job], run: Callable, store: JobStore, progress: bool, failed_runs: str) -> None:
    """Run the jobs on an executor (``executors.executor``) and keep each one's folder as it finishes
    (what a worker on another machine shipped back). A run that diverges or fails stops the study, naming
    the run, or, where the experiment counts failed runs, is kept as one (its status and settings)."""
    by_key = {job.key: job for job in jobs}
    for i, (name, outcome) in enumerate(run(jobs), 1):
        job = by_key[name]
        if "files" in outcome:
            store.keep(Path(job.folder).name, outcome["files"])
        if outcome["status"] != "ok" and failed_runs == STOP:
            raise StudyRunFailed(f"{name}: {outcome['status']}: {outcome['error']} (folder {job.folder})")
        if outcome["status"] != "ok":
            store.keep(Path(job.folder).name, {}, {"status": outcome["status"], "error": outcome["error"],
                                                   "run": run_record(job.settings, None)})
        if progress:
            together = f" ({outcome['replicas']} together)" if outcome.get("replicas", 1) > 1 else ""
            done = f"trained in {outcome['seconds']:.1f} s" if outcome["status"] == "ok" else \
                f"{outcome['status']} after {outcome['seconds']:.1f} s (kept, counted as failed)"
            _progress(i, len(jobs), name, done + together)


def aggregate_seeds(specs: list[RunSpec], runs: list[Run], metrics: list[str]) -> list[dict]:
    """Per configuration: parameter count, seeds, and mean/std of every metric over seeds."""
    rows = []
    for spec in specs:
        mine = [r for r in runs if r.key == spec.key]
        row: dict[str, Any] = {"key": spec.key, "group": spec.group, "label": spec.label, "seeds": len(mine),
                               "num_params": mine[0].metrics.get("num_params") if mine else None}
        for metric in metrics:
            values = [v for r in mine if (v := r.metrics.get(metric)) is not None and math.isfinite(v)]
            if values:
                row[f"{metric}_mean"], row[f"{metric}_std"] = mean_std(values)
                row[f"{metric}_n"] = len(values)
        rows.append(row)
    return rows


def run_experiment(exp: Experiment, out_root: str | Path = "runs", seeds: int | None = 3, workers: int | None = None,
                   quick: bool = False, force: bool = False, progress: bool = True,
                   replicas: bool = False, engine: str | None = None, command: str = "", executor: str = "local",
                   address: str | None = None) -> StudyResults:
    """Train every configuration × seed (skipping finished jobs unless ``force``), aggregate, run the
    analyses, and write results.json / results.csv. Returns the results (the report's input).
    ``seeds``: per configuration; None: the experiment's sequential plan chooses them (its first look
    for every configuration, more only for the configurations of claims still undecided), or 3 when it
    has none. ``engine``: train every configuration on this engine (default: the settings' default
    engine); ``command``: the command line that asked for it, kept in the results. ``executor``: where
    the runs train, "local" (a process pool of ``workers``) or "ray" (the cluster at ``address``, or a
    local Ray instance); each finished run is kept as it arrives, so a rerun trains only what is missing."""
    exp_dir = refuse_linked_folder(Path(out_root) / exp.name)    # NAME is rnnlab's, inside the folder named
    with hold(exp_dir, command):     # one command at a time trains a study's folder
        return _run_held(exp, exp_dir, seeds, workers, quick, force, progress, replicas, engine, command, executor,
                         address)


def _run_held(exp: Experiment, exp_dir: Path, seeds: int | None, workers: int | None, quick: bool, force: bool,
              progress: bool, replicas: bool, engine: str | None, command: str, executor: str,
              address: str | None) -> StudyResults:
    specs = exp.specs(quick)
    if engine is not None:
        specs = [dataclasses.replace(s, settings={**s.settings, "engine": resolve_engine(
            default_settings(s.task, **{**s.settings, "engine": engine}))[0]}) for s in specs]
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"experiment {exp.name}: configuration keys must be unique, got {keys}")
    plan = exp.sequential if seeds is None and not quick and exp.claims else None
    first = plan.looks[0] if plan else (seeds or (exp.sequential.looks[0] if exp.sequential else 3))
    counts = {key: first for key in keys}
    context = Context(exp_dir, specs, [], quick, exp.first_seed)
    workers = workers or cpu_cores()
    run = make_executor(executor, address, workers, replicas=replicas)
    started = time.perf_counter()
    if force and (exp_dir / "jobs").exists():
        kept = set_aside(exp_dir / "jobs", "replaced-by-force", exp_dir)
        if progress:
            print(f"{exp.name}: --force: the stored runs are kept in {kept}", file=sys.stderr)
    train = functools.partial(_train, context, counts, workers, progress, run, exp.name, exp.failed_runs)
    trained, decided = _train_looks(exp, context, counts, plan, first, train, progress)
    runs = _load_runs(context, counts)
    context.runs = runs
    found = run_steps(exp.analyses, context)
    for one in runs:
        one.metrics.update(found.run_metrics.get((one.key, one.seed), {}))
    verdicts = _verdicts(exp, runs, plan, decided, found.notes)
    results = StudyResults(**{
        "experiment": exp.name, "title": exp.title, "study": exp.study, "about": exp.about, "quick": quick,
        "seeds": min(counts.values()), "seeds_by_key": counts, "metrics": exp.metric_names,
        "seconds": time.perf_counter() - started,
        "command": command, "date": time.strftime("%Y-%m-%d"), "version": __version__,
        "cores": cpu_cores(), "trained_now": trained,
        "compute_seconds": sum(r.metrics.get("seconds_total") or 0.0 for r in runs),
        "configurations": [{"key": s.key, "group": s.group, "label": s.label, "task": s.task,
                            "settings": s.settings, "task_options": s.task_options} for s in specs],
        "summary": aggregate_seeds(specs, runs, exp.metric_names),
        "published": [{"key": k, "metric": m, "value": getattr(v, "value", v)} for (k, m), v in exp.published.items()],
        "verdicts": verdicts,
        "sequential": None if plan is None else {"looks": list(plan.looks), "alpha": plan.alpha,
                                                 "level": plan.level},
        "runs": runs,
        "figures": [{"title": f.title, "path": str(Path(f.path).relative_to(exp_dir)), "caption": f.caption}
                    for f in found.figures],
        "notes": exp.notes + found.notes,
    })
    _write_results(exp_dir, results)
    return results


def _train_looks(exp: Experiment, context: Context, counts: dict[str, int], plan: SequentialPlan | None, first: int,
                 train: Callable[[], int], progress: bool) -> tuple[int, dict[str, Verdict]]:
    """Train the first look's seeds, then, with a sequential plan, more seeds only for the claims still
    undecided at each look; returns how many runs trained and the claims decided (claim → verdict row)."""
    trained, decided = 0, {}
    for look, n in enumerate(plan.looks if plan else (first,)):
        for key in counts if look == 0 else _undecided_keys(exp.claims, decided):
            counts[key] = max(counts[key], n)
        trained += train()
        if plan is None:
            break
        decide_look(exp.claims, decided, _load_runs(context, counts), plan, look)
        if progress:
            print(f"{exp.name}: look {look + 1} of {len(plan.looks)} at {n} seeds: {len(decided)} of "
                  f"{len(exp.claims)} claims decided", file=sys.stderr)
        if len(decided) == len(exp.claims):
            break
    return trained, decided


def decide_look(claims: list[Claim], decided: dict[str, Verdict], runs: list[Run], plan: SequentialPlan,
                look: int) -> None:
    """One look of a sequential plan: the claims still open judged on their first ``plan.looks[look]`` seeds
    at the plan's per-look level (Holm over the open claims); those reproduced or not reproduced (significant
    the other way, or shown below their smallest effect) join ``decided``, and at the last look all do."""
    n = plan.looks[look]
    open_claims = [c for c in claims if c.text not in decided]
    for row in verdict_table(open_claims, {}, {}, runs, seeds={c.text: n for c in open_claims}, level=plan.level):
        if row.verdict in (REPRODUCED, NOT_REPRODUCED) or n == plan.looks[-1]:
            decided[row.claim] = dataclasses.replace(row, look=look + 1, level=plan.level)


def _verdicts(exp: Experiment, runs: list[Run], plan: SequentialPlan | None, decided: dict[str, Verdict],
              notes: list[str]) -> list[Verdict]:
    """The claims (as their look decided them, under a plan) and the published numbers, with the measured
    reasons as the published results word them (left out where those are not at hand)."""
    reasons = render_reasons(exp.reasons, RESULTS_ROOT, exp.published, strict=False)
    if plan is None:
        return verdict_table(exp.claims, exp.published, reasons, runs)
    claim_rows = [decided[c.text] for c in exp.claims]
    notes.append(_plan_note(plan, claim_rows))
    return claim_rows + verdict_table([], exp.published, reasons, runs)


def _write_results(exp_dir: Path, results: StudyResults) -> None:
    """results.json, results.csv (one row per run) and the call's line in calls.jsonl."""
    results.save(exp_dir / "results.json")
    log_call(exp_dir, {"command": results.command, "date": results.date, "seconds": results.seconds,
                       "trained_now": results.trained_now})
    columns = ["key", "group", "label", "seed", "num_params"] + [m for m in results.metrics if m != "num_params"]
    write_text(exp_dir / "results.csv", csv_text([{c: r.row().get(c) for c in columns} for r in results.runs]))


def _undecided_keys(claims: list[Claim], decided: dict[str, Any]) -> set[str]:
    return {key for c in claims if c.text not in decided for key in (c.better, c.worse)}


def _plan_note(plan: SequentialPlan, rows: list[Verdict]) -> str:
    at = "; ".join(f"{row.seeds} seeds: {row.claim[:60]}{'…' if len(row.claim) > 60 else ''}"
                   for row in rows)
    measured = ""
    if plan.family_error is not None:
        measured = (f", and for families of four claims (three or four of them null, one leaving by absence) replayed "
                    f"through this code, deciding by the exact permutation test, it measured "
                    f"{plan.family_error[0]:.1%} and {plan.family_error[1]:.1%} (1,500 simulated studies each)")
    return (f"Seeds chosen by a group-sequential plan: looks after {', '.join(map(str, plan.looks))} seeds per "
            f"configuration, each claim tested at α = {plan.alpha:g}/{len(plan.looks)} = {plan.level:.4f} per look "
            f"(Holm within a look), more seeds only for the claims still undecided; the union bound over the looks "
            f"keeps the chance of a false 'reproduced' ≤ {plan.alpha:g} for one claim{measured}. Decided at {at}.")


def _seeds(context: Context, count: int) -> range:
    return range(context.first_seed, context.first_seed + count)


def _train(context: Context, counts: dict[str, int], workers: int, progress: bool, run: Callable, name: str,
           failed_runs: str) -> int:
    """Train the jobs of ``counts[key]`` seeds per configuration that are not stored yet; returns how many.
    A stored job whose settings differ from its configuration's now (``--quick`` against a full run, an
    rnnlab upgrade) is set aside, never deleted; one whose cell file changed since it ran is refused."""
    jobs, skipped, resumed, aside = [], 0, 0, []
    for spec in context.specs:
        for seed in _seeds(context, counts[spec.key]):
            job_dir = context.job_dir(spec, seed)
            settings = spec.full_settings(seed)
            try:
                record = _stored_record(job_dir)
                stored = None if record is None else complete_settings(record["settings"],
                                                                        f"{job_dir}: its stored settings")
                if record is not None and stored == json.loads(json.dumps(settings)):
                    check_cell_unchanged(record, str(job_dir))
            except ValueError as err:
                raise ValueError(f"{err}. Pass --force to train the study's runs anew (the stored ones are kept "
                                 f"under {context.exp_dir / SET_ASIDE})") from None
            if record is not None and stored != json.loads(json.dumps(settings)):
                aside.append(set_aside(job_dir, "settings-changed", context.exp_dir))
                record = None
            if record is not None and (job_dir / context.store.marker).is_file():
                skipped += 1
                continue
            if record is not None:
                resumed += 1
            jobs.append(Job(f"{spec.key} seed {seed}", settings, job_dir))
    if progress:
        moved = (f"; {len(aside)} stored with other settings, set aside in {context.exp_dir / SET_ASIDE}"
                 if aside else "")
        print(f"{name}: {len(jobs)} runs to train ({resumed} continue from an interrupted run's last checkpoint"
              f"{moved}), {skipped} already done, {min(workers, max(len(jobs), 1))} workers", file=sys.stderr)
    _store_finished(jobs, run, context.store, progress, failed_runs)
    return len(jobs)


def _load_runs(context: Context, counts: dict[str, int]) -> list[Run]:
    """The finished runs of ``counts[key]`` seeds per configuration, read from their result.json."""
    runs = []
    for spec in context.specs:
        for seed in _seeds(context, counts[spec.key]):
            result = RunFolder(context.job_dir(spec, seed)).result()
            runs.append(Run.from_result(spec.key, seed, result, spec.group, spec.label,
                                        complete_settings(result["run"]["settings"],
                                                          f"{context.job_dir(spec, seed)}: its stored settings"),
                                        where=str(context.job_dir(spec, seed) / RESULT)))
    return runs
