"""Sweeps: a search over settings declared in a TOML file, run as trials of the one training loop.

    task = "embedded-reber"
    metric = "dev_loss"        # what picks the best; mode = "min" | "max"
    mode = "min"
    seeds = 2                  # each configuration is trained with this many seeds
    samples = 8                # random draws of the distributions below
    [settings]                 # fixed settings, exactly as in `rnnlab train --config`
    epochs = 20
    [search]
    cell = ["rnn", "gru"]                   # a list is a grid axis
    lr = { loguniform = [1e-4, 1e-1] }      # uniform, loguniform, int, logint, one_minus_loguniform, choice

A grid axis of tables links settings that change together (its key is only a name):
``model = [{ cell = "rnn", hidden = 18 }, { cell = "gru", hidden = 10 }]``. A ``[search.task_options]``
table holds grid axes over the task's own options (``length = [20, 100, 200]`` for mean-sign).

Trials = grid points × samples × seeds (a draw that repeats an earlier configuration is trained
once). The draws are made from the file's contents alone: the
sampled distributions and the task fix one random stream per (grid point, sample number), so the
same file gives the same trials on any executor, and growing ``samples`` or ``seeds`` keeps the
trials already drawn. A trial's id is a hash of its full settings and seed.

Each finished trial is stored by the driver under ``DIR/trials/<id>/`` (``result.json`` with the
per-epoch history, then ``trial.json``, whose presence marks the trial done) and ``DIR/trials.csv``
is rewritten from the stored trials, so a rerun trains only what is missing and nothing is stored
twice. The executors (``rnnlab.experiments.executors``) only run trials and hand back outcomes.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import inspect
import io
import itertools
import json
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rnnlab.data.tasks import TASKS
from rnnlab.experiments import importance
from rnnlab.experiments.defaults import FRESH_FIRST_SEED
from rnnlab.experiments.executors import Job, JobStore, log_call, progress_bar, run_job
from rnnlab.experiments.executors import executor as make_executor
from rnnlab.experiments.results import SweepResults
from rnnlab.experiments.runner import STOP, Experiment, RunSpec
from rnnlab.experiments.settings import convert, read_toml, resolve_settings, settings_identity, settings_table
from rnnlab.experiments.statistics import ALPHA, compare, holm, implied_level, mean_std_interval
from rnnlab.experiments.verdicts import not_significant
from rnnlab.files import atomic_write, check_working_folder, hold, is_number, is_whole, read_record_text
from rnnlab.metrics import is_count

DISTRIBUTIONS = ("uniform", "loguniform", "int", "logint", "one_minus_loguniform", "choice")
TOP_LEVEL = ("task", "metric", "mode", "seeds", "samples", "settings", "search", "task_options")
NOT_SEARCHABLE = ("task", "seed")
STATUSES = ("ok", "diverged", "failed", "stopped")   # stopped: by ASHA (--early-stop asha)


@dataclass(frozen=True)
class Distribution:
    """A sampled axis: ``uniform [a, b]``, ``loguniform [a, b]`` (0 < a < b), ``int [a, b]`` (inclusive),
    ``logint [a, b]`` (an integer uniform in log a … log b, as Greff et al. drew the hidden size),
    ``one_minus_loguniform [a, b]`` (1 − u with u log-uniform in [a, b]: a momentum whose distance from 1 is
    log-uniform, as Greff et al. drew it) or ``choice [v, ...]``."""

    kind: str
    args: tuple

    def draw(self, rng: np.random.Generator) -> Any:
        if self.kind == "uniform":
            return _round(rng.uniform(*self.args))
        if self.kind == "loguniform":
            return _round(math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1]))))
        if self.kind == "int":
            return int(rng.integers(self.args[0], self.args[1] + 1))
        if self.kind == "logint":
            return int(round(math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1])))))
        if self.kind == "one_minus_loguniform":
            return _round(1.0 - math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1]))))
        return self.args[int(rng.integers(len(self.args)))]

    @property
    def log(self) -> bool:
        return self.kind in ("loguniform", "logint")

    def on_drawn_scale(self, value: Any) -> Any:
        """The value as the draw made it: a one_minus_loguniform value as its distance from 1 (the number drawn
        log-uniformly), any other as it is."""
        return 1.0 - value if self.kind == "one_minus_loguniform" else value

    @property
    def drawn_log_uniformly(self) -> bool:
        return self.kind in ("loguniform", "logint", "one_minus_loguniform")


def importance_inputs(sampled: dict[str, Distribution],
                      values: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Each configuration's ``values`` on the scales its search drew them (``on_drawn_scale``), and the names read
    on a log scale: those the search drew log-uniformly, as declared, not guessed from the spread of the values."""
    scaled = [{k: sampled[k].on_drawn_scale(v) if k in sampled else v for k, v in row.items()} for row in values]
    return scaled, tuple(k for k, d in sampled.items() if d.drawn_log_uniformly)


def _round(value: float) -> float:
    """Four significant digits: readable settings, and the same number on every machine."""
    return float(f"{value:.4g}")


@dataclass(frozen=True)
class Trial:
    """One training run of the sweep: ``values`` are its searched settings, ``settings`` all of them."""

    id: str
    group: str
    config: str
    values: dict[str, Any]
    seed: int
    settings: dict[str, Any]


@dataclass
class Sweep:
    """A parsed sweep file. ``grid``: the list-valued axes (their product are the groups);
    ``sampled``: the distributions drawn ``samples`` times per group."""

    task: str
    metric: str
    mode: str = "min"
    seeds: int = 1
    samples: int = 1
    settings: dict[str, Any] = field(default_factory=dict)
    task_options: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list] = field(default_factory=dict)
    sampled: dict[str, Distribution] = field(default_factory=dict)
    source: str = "sweep"
    option_grid: dict[str, list] = field(default_factory=dict)   # grid axes over task options

    @property
    def searched(self) -> list[str]:
        names: list[str] = []
        for key, values in self.grid.items():
            linked = [k for v in values if isinstance(v, dict) for k in v]
            names += [k for k in dict.fromkeys(linked) if k not in names] if linked else [key]
        return names + list(self.option_grid) + list(self.sampled)

    def groups(self) -> list[dict[str, Any]]:
        """Each grid point as flat settings (a linked axis contributes all the settings of its entry),
        the task options searched last."""
        points = []
        for combo in itertools.product(*self.grid.values(), *self.option_grid.values()):
            point: dict[str, Any] = {}
            for key, value in zip([*self.grid, *self.option_grid], combo):
                point.update(value if isinstance(value, dict) else {key: value})
            points.append(point)
        return points

    def trials(self) -> list[Trial]:
        base = _digest({"task": self.task, "sampled": {k: [d.kind, list(d.args)] for k, d in self.sampled.items()}})
        draws = self.samples if self.sampled else 1
        out, seen = [], set()
        for point in self.groups():
            group = group_name(point)
            for sample in range(draws):
                rng = np.random.default_rng([int(base[:12], 16), int(_digest(group)[:12], 16), sample])
                values = dict(point, **{name: dist.draw(rng) for name, dist in self.sampled.items()})
                searched = {k: v for k, v in values.items() if k not in self.option_grid}
                common = resolve_settings(("task", {"task": self.task}), (f"{self.source} [settings]", self.settings),
                                          (f"{self.source} [search]", searched))
                common["task_options"] = {**self.task_options,
                                          **{k: v for k, v in values.items() if k in self.option_grid}}
                config = _digest({k: v for k, v in settings_identity(common).items() if k != "seed"})[:10]
                if config in seen:  # a draw that repeats an earlier one (a choice, a narrow int range)
                    continue
                seen.add(config)
                for seed in range(self.seeds):
                    settings = dict(common, seed=seed)
                    out.append(Trial(_digest(settings_identity(settings))[:12], group, config, values, seed,
                                     settings))
        return out


def group_name(point: dict[str, Any]) -> str:
    """``cell=gru,optimizer=sgd``; ``all`` when the sweep has no grid."""
    return ",".join(f"{k}={v}" for k, v in point.items()) or "all"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


# -- the file -------------------------------------------------------------------------------------

def _line_of(text: str, key: str, table: str | None = None) -> int | None:
    """The line (1-based) where ``key`` is set, inside ``[table]`` when given; None if not found."""
    section = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[([^\]]+)\]$", stripped)
        if header:
            section = header.group(1).strip()
            continue
        match = re.match(r'^"?([A-Za-z0-9_\-]+)"?\s*=', stripped)
        if match and match.group(1).replace("-", "_") == key and section == table:
            return number
        if table is not None and section is None and stripped.startswith(f"{table}.{key}"):
            return number
    return None


def parse_sweep(text: str, source: str = "sweep") -> Sweep:
    """A Sweep from TOML text; every error names ``source``, the line and the key, before anything
    trains."""
    data = read_toml(text=text, where=source)

    def where(key: str, table: str | None = None) -> str:
        line = _line_of(text, key, table)
        name = f"{table}.{key}" if table else key
        return f"{source}:{line}: {name}" if line else f"{source}: {name}"

    unknown = [k for k in data if k not in TOP_LEVEL]
    if unknown:
        raise ValueError(f"{where(unknown[0])}: unknown key; expected one of {TOP_LEVEL}")
    for key in ("task", "metric"):
        if key not in data:
            raise ValueError(f"{source}: missing key {key!r}")
    table = {s.name: s for s in settings_table()}
    task = convert(table["task"], data["task"], where("task"))
    mode = data.get("mode", "min")
    if mode not in ("min", "max"):
        raise ValueError(f"{where('mode')}: expected \"min\" or \"max\", got {mode!r}")
    counts = {}
    for key in ("seeds", "samples"):
        value = data.get(key, 1)
        if not is_whole(value, 1):
            raise ValueError(f"{where(key)}: expected a positive integer, got {value!r}")
        counts[key] = value
    for key in ("settings", "search", "task_options"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"{where(key)}: expected a table [{key}]")
    settings = {k.replace("-", "_"): v for k, v in data.get("settings", {}).items()}
    for key, value in settings.items():
        if key not in table or key in NOT_SEARCHABLE:
            raise ValueError(f"{where(key, 'settings')}: unknown setting; expected names from "
                             f"{sorted(set(table) - set(NOT_SEARCHABLE))}")
        convert(table[key], value, where(key, "settings"))
    search = dict(data.get("search", {}))
    option_grid = _option_axes(search.pop("task_options", {}), task, data.get("task_options", {}), where)
    grid, sampled = _search_axes(search, table, settings, where)
    if not grid and not sampled and not option_grid:
        raise ValueError(f"{source}: [search] declares nothing to search")
    return Sweep(task=task, metric=str(data["metric"]), mode=mode, seeds=counts["seeds"], samples=counts["samples"],
                 settings=settings, task_options=dict(data.get("task_options", {})), grid=grid, sampled=sampled,
                 source=source, option_grid=option_grid)


def _search_axes(search: dict[str, Any], table: dict, settings: dict[str, Any],
                 where: Callable[..., str]) -> tuple[dict[str, list], dict[str, Any]]:
    """[search]'s grid axes (lists, or linked entries such as a cell with its size) and sampled ones
    (distributions), each value converted; a setting searched by two axes, or also fixed, is refused."""
    grid, sampled = {}, {}
    for key, value in search.items():
        key = key.replace("-", "_")
        at = where(key, "search")
        linked = isinstance(value, list) and value and all(isinstance(v, dict) for v in value)
        if not linked and (key not in table or key in NOT_SEARCHABLE):
            raise ValueError(f"{at}: unknown setting; expected names from {sorted(set(table) - set(NOT_SEARCHABLE))}")
        if key in settings:
            raise ValueError(f"{at}: set in [settings] too; a setting is either fixed or searched")
        if linked:
            grid[key] = [_linked_entry(entry, table, at, settings) for entry in value]   # e.g. cell with its size
            continue
        if isinstance(value, list):
            if not value:
                raise ValueError(f"{at}: empty list; a grid axis needs at least one value")
            grid[key] = [convert(table[key], v, at) for v in value]
        elif isinstance(value, dict):
            sampled[key] = _distribution(value, table[key], at)
        else:
            raise ValueError(f"{at}: expected a list (grid axis) or a distribution such as "
                             f"{{ loguniform = [1e-4, 1e-1] }}, got {value!r}")
    named = [k for key, values in grid.items()
             for k in (dict.fromkeys(n for v in values for n in v) if isinstance(values[0], dict) else [key])]
    named += list(sampled)
    repeated = sorted({k for k in named if named.count(k) > 1})
    if repeated:
        raise ValueError(f"{where(repeated[0], 'search')}: searched by two axes; each setting has one")
    return grid, sampled


def _option_axes(axes: Any, task: str, fixed: dict, where: Callable[..., str]) -> dict[str, list]:
    """``[search.task_options]``: grid axes over the options the task's builder accepts."""
    table = "search.task_options"
    if not isinstance(axes, dict):
        raise ValueError(f"{where('task_options', 'search')}: expected a table [search.task_options]")
    accepted = [p for p in inspect.signature(TASKS[task]).parameters if p not in ("seed", "rng")]
    out = {}
    for name, values in axes.items():
        if name not in accepted:
            raise ValueError(f"{where(name, table)}: task {task} has no option {name!r}; it accepts {accepted}")
        if name in fixed:
            raise ValueError(f"{where(name, table)}: set in [task_options] too; an option is either fixed or searched")
        if not isinstance(values, list) or not values or any(isinstance(v, (list, dict)) for v in values):
            raise ValueError(f"{where(name, table)}: expected a non-empty list of values (a grid axis), got "
                             f"{values!r}")
        out[name] = list(values)
    return out


def _linked_entry(entry: dict, table: dict, at: str, fixed: dict) -> dict[str, Any]:
    """One value of a linked axis: settings that change together (a cell and its hidden size)."""
    out = {}
    for name, value in entry.items():
        name = name.replace("-", "_")
        if name not in table or name in NOT_SEARCHABLE:
            raise ValueError(f"{at}: {name}: unknown setting in a linked axis entry")
        if name in fixed:
            raise ValueError(f"{at}: {name}: set in [settings] too; a setting is either fixed or searched")
        out[name] = convert(table[name], value, f"{at}: {name}")
    if not out:
        raise ValueError(f"{at}: an empty entry; a linked axis entry sets at least one setting")
    return out


def _distribution(value: dict, setting, at: str) -> Distribution:
    if len(value) != 1 or next(iter(value)) not in DISTRIBUTIONS:
        raise ValueError(f"{at}: unknown distribution {sorted(value)}; expected one of {DISTRIBUTIONS}")
    kind, args = next(iter(value.items()))
    if not isinstance(args, list) or not args:
        raise ValueError(f"{at}: {kind} expects a list of values, got {args!r}")
    if kind == "choice":
        return Distribution(kind, tuple(convert(setting, v, at) for v in args))
    if len(args) != 2 or not all(is_number(a) for a in args):
        raise ValueError(f"{at}: {kind} expects [low, high], got {args!r}")
    low, high = args
    integer = kind in ("int", "logint")
    if integer and not all(isinstance(a, int) for a in args):
        raise ValueError(f"{at}: {kind} expects two integers, got {args!r}")
    if (integer and low > high) or (not integer and not low < high):
        raise ValueError(f"{at}: empty range [{low}, {high}]")
    if kind in ("loguniform", "logint", "one_minus_loguniform") and low <= 0:
        raise ValueError(f"{at}: {kind} needs 0 < low, got {low}")
    for bound in ([1 - high, 1 - low] if kind == "one_minus_loguniform" else args):
        convert(setting, bound, at)
    return Distribution(kind, (low, high))


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {path}: no such file")
    return parse_sweep(read_record_text(path), str(path))


# -- the store ------------------------------------------------------------------------------------

class TrialStore:
    """The trials a sweep folder holds, in the one job store (``executors.JobStore``): ``trials/<id>/``
    keeps a trial's outcome (result.json) and its record (trial.json, the marker: written last)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.jobs = JobStore(self.dir / "trials", marker="trial.json")
        self.jobs.root.mkdir(parents=True, exist_ok=True)

    def path(self, trial: Trial) -> Path:
        return self.jobs.folder(trial.id)

    RECORD_KEYS = {"id": str, "group": str, "config": str, "values": dict, "seed": int, "metrics": dict,
                   "seconds": (int, float, type(None)), "status": str, "error": str}

    def record(self, trial: Trial) -> dict | None:
        """The trial's stored record, or None; a damaged one (a key or type missing, or another trial's id,
        configuration, group or searched names: the CSV's columns are the sweep's, and the best settings are looked
        up by configuration) raises ValueError naming its file."""
        record = self.jobs.done(trial.id)
        keys = self.RECORD_KEYS.items()
        if record is not None and not (all(k in record and isinstance(record[k], t) for k, t in keys)
                                       and (record["id"], record["config"], record["group"]) ==
                                       (trial.id, trial.config, trial.group)
                                       and set(record["values"]) == set(trial.values)):
            raise ValueError(f"{self.path(trial) / self.jobs.marker}: not this trial's record (expected "
                             f"{', '.join(self.RECORD_KEYS)}, id {trial.id}, configuration {trial.config}, group "
                             f"{trial.group} and the values of "
                             f"{', '.join(sorted(trial.values)) or 'no searched setting'}); move the trial's folder "
                             "away, or pass --force to train every trial again")
        return record

    def forget(self, trial: Trial) -> None:
        self.jobs.forget(trial.id)

    def store(self, trial: Trial, outcome: dict[str, Any]) -> dict[str, Any]:
        """Keep the trial's outcome, then its record."""
        result = {"id": trial.id, "group": trial.group, "seed": trial.seed, "settings": trial.settings, **outcome}
        record = {"id": trial.id, "group": trial.group, "config": trial.config, "values": trial.values,
                  "seed": trial.seed, "metrics": outcome.get("metrics", {}), "seconds": outcome.get("seconds"),
                  "status": outcome["status"], "error": outcome.get("error", "")}
        self.jobs.keep(trial.id, {"result.json": json.dumps(result, indent=2, default=float).encode()}, record)
        return record


def write_trials_csv(store: TrialStore, sweep: Sweep, trials: list[Trial]) -> list[dict]:
    """trials.csv, one row per finished trial in the sweep's order; returns the records."""
    records = [r for r in (store.record(t) for t in trials) if r is not None]
    metric_names = sorted({m for r in records for m in r["metrics"]})
    columns = ["id", *sweep.searched, "seed", *metric_names, "seconds", "status", "error"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({"id": r["id"], **r["values"], "seed": r["seed"], **r["metrics"], "seconds": r["seconds"],
                         "status": r["status"], "error": r["error"]})
    atomic_write(store.dir / "trials.csv", lambda f: f.write(buffer.getvalue().encode()))
    return records


# -- what the trials say --------------------------------------------------------------------------

def summarize(sweep: Sweep, records: list[dict]) -> list[dict]:
    """Per group, every configuration's mean ± std over its seeds and a 95% t interval, best first;
    a configuration with a diverged or failed seed ranks after those whose seeds all finished."""
    sign = 1.0 if sweep.mode == "min" else -1.0
    out = []
    for point in sweep.groups():
        group = group_name(point)
        configs: dict[str, list[dict]] = {}
        for r in records:
            if r["group"] == group:
                configs.setdefault(r["config"], []).append(r)
        rows = []
        for config, mine in configs.items():
            values = [r["metrics"].get(sweep.metric) for r in mine if r["status"] == "ok"]
            values = [v for v in values if v is not None and math.isfinite(v)]
            row = {"config": config, "values": mine[0]["values"], "seeds": len(mine), "finished": len(values),
                   "statuses": {s: sum(r["status"] == s for r in mine) for s in STATUSES}}
            if values:
                row.update(mean_std_interval(values, count=is_count(sweep.metric)))
            rows.append(row)
        rows.sort(key=lambda r: (r["finished"] < r["seeds"], sign * r.get("mean", math.inf) if "mean" in r
                                 else math.inf))
        out.append({"group": group, "point": point, "configs": rows})
    return out


def compare_first_axis(sweep: Sweep, records: list[dict]) -> list[dict[str, Any]]:
    """Each pair of values of the first grid axis (the cells of a map), compared at every point of
    the other axes on the sweep's metric over seeds (``statistics.compare``: the exact permutation test of
    the difference in means, or for a count metric the exact unconditional score test), with Holm's
    correction over all the comparisons made; each interval is the deciding test's, inverted at the level
    the Holm-adjusted p implies, so that it excludes 0 exactly when the verdict is significant. Empty unless
    the sweep has no sampled axis and its first grid axis has at least two values."""
    axes = {**sweep.grid, **sweep.option_grid}
    if sweep.sampled or not axes or len(next(iter(axes.values()))) < 2:
        return []
    first, *rest = axes

    def flat(assignment: dict[str, Any]) -> dict[str, Any]:
        point: dict[str, Any] = {}
        for key, value in assignment.items():
            point.update(value if isinstance(value, dict) else {key: value})
        return point

    def label(value: Any) -> str:
        return "-".join(map(str, value.values())) if isinstance(value, dict) else f"{first}={value}"

    count = is_count(sweep.metric)
    rows, pairs = [], []
    for combo in itertools.product(*[axes[k] for k in rest]):
        at = dict(zip(rest, combo))
        samples = {}
        for value in axes[first]:
            group = group_name(flat({first: value, **at}))
            got = [r["metrics"].get(sweep.metric) for r in records if r["group"] == group and r["status"] == "ok"]
            samples[label(value)] = np.asarray([g for g in got if g is not None and math.isfinite(g)])
        for a, b in itertools.combinations(samples, 2):
            n = min(len(samples[a]), len(samples[b]))
            if n < 2:
                continue
            result = compare(samples[a], samples[b], count)
            rows.append({"at": group_name(flat(at)), "a": a, "b": b, "n": n, "a_value": _summary(samples[a], count),
                         "b_value": _summary(samples[b], count), "difference": result.difference,
                         "low": result.low, "high": result.high, "p": result.p, "test": result.test})
            pairs.append((samples[a], samples[b]))
    for row, (a_values, b_values), p_holm in zip(rows, pairs, holm([r["p"] for r in rows])):
        alpha = implied_level(row["p"], p_holm, ALPHA)
        kept = compare(a_values, b_values, count, alpha)
        row["low"], row["high"], row["coverage"] = kept.low, kept.high, 1 - alpha
        better = row["a"] if (row["difference"] > 0) == (sweep.mode == "max") else row["b"]
        row["p_holm"] = p_holm
        row["verdict"] = f"{better} better" if p_holm < ALPHA else not_significant(row["n"])
    return rows


def _summary(values: np.ndarray, count: bool) -> str:
    if count:
        return f"{int(values.sum())} of {len(values)}"
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"


def best_settings(sweep: Sweep, trials: list[Trial], config: str) -> dict[str, Any]:
    """The settings of a configuration in the ``--config`` format (no seed; none written "none")."""
    settings = next(t.settings for t in trials if t.config == config)
    out = {k: ("none" if v is None else v) for k, v in settings.items() if k not in ("seed", "task_options")}
    if settings.get("task_options"):
        out["task_options"] = settings["task_options"]
    return out


def to_toml(settings: dict[str, Any], header: str = "") -> str:
    """A flat TOML file (plus an optional [task_options] table) of settings."""
    lines = [f"# {line}" for line in header.splitlines()]
    tables = {k: v for k, v in settings.items() if isinstance(v, dict)}
    for key, value in settings.items():
        if key not in tables:
            lines.append(f"{key} = {_toml_value(value)}")
    for name, table in tables.items():
        lines.append(f"\n[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if math.isfinite(value) else f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


# -- running ---------------------------------------------------------------------------------------

QUICK_EPOCHS = 2


def quick_version(sweep: Sweep) -> Sweep:
    """A first try in seconds: at most 2 epochs, 2 samples and 1 seed (other trial ids, same folder)."""
    settings = dict(sweep.settings)
    epochs = resolve_settings(("task", {"task": sweep.task}), ("settings", settings))["epochs"]
    settings["epochs"] = min(epochs, QUICK_EPOCHS)
    return dataclasses.replace(sweep, seeds=1, samples=min(sweep.samples, 2), settings=settings)


def produced_metrics(trial: Trial) -> list[str]:
    """The final metrics a trial of this task reports, read off an untrained model (0 epochs); asked once
    per task and task options (a study's searches share them)."""
    task = json.dumps([trial.settings["task"], trial.settings.get("task_options", {})], sort_keys=True, default=str)
    if task not in _PRODUCED:
        outcome = run_job(dict(trial.settings, epochs=0))
        if outcome["status"] != "ok":
            raise ValueError(f"task {trial.settings['task']}: could not be built or evaluated ({outcome['error']})")
        _PRODUCED[task] = sorted(outcome["metrics"])
    return _PRODUCED[task]


_PRODUCED: dict[str, list[str]] = {}


def run_sweep(sweep: Sweep, out_dir: str | Path, *, executor: str = "local", address: str | None = None,
              workers: int | None = None, force: bool = False, progress: bool = True,
              early_stop: str | None = None, replicas: bool = False, command: str = "") -> SweepResults:
    """Train every trial not stored yet (all of them with ``force``), store each as it finishes, and
    return the summary (per group, configurations best first) with the records. ``early_stop="asha"``
    (Ray only) lets Ray Tune's ASHA scheduler stop poor trials early on the per-epoch metric;
    ``replicas`` trains the trials that differ only in seed and learning rate as one JAX program.
    One command at a time holds ``out_dir``."""
    return run_sweeps([(sweep, Path(out_dir))], executor=executor, address=address, workers=workers, force=force,
                      progress=progress, early_stop=early_stop, replicas=replicas, command=command)[0]


def run_sweeps(sweeps: list[tuple[Sweep, Path]], *, executor: str = "local", address: str | None = None,
               workers: int | None = None, force: bool = False, progress: bool = True, early_stop: str | None = None,
               replicas: bool = False, command: str = "") -> list[SweepResults]:
    """``run_sweep`` for several sweeps, each in its own folder, their trials trained as one batch on one
    executor (a study's searches, one per configuration, fill a cluster together)."""
    with contextlib.ExitStack() as held:
        for _, out_dir in sweeps:
            check_working_folder(out_dir, "trials", "a sweep")
            held.enter_context(hold(out_dir, command))
        started = time.perf_counter()
        stores, todos = _train_batch(sweeps, executor, address, workers, force, progress, early_stop, replicas)
        return [_sweep_summary(sweep, store, len(todo), executor, started, command)
                for (sweep, _), store, todo in zip(sweeps, stores, todos)]


def train_sweep(sweep: Sweep, out_dir: str | Path, *, executor: str = "local", address: str | None = None,
                workers: int | None = None, progress: bool = True, command: str = "") -> list[dict]:
    """``run_sweep``'s training and keeping without its judging: the records of the sweep's stored trials, for a
    caller that judges them its own way (``rnnlab greff``: a forest per summary would cost minutes a round)."""
    check_working_folder(out_dir, "trials", "a sweep")
    with hold(out_dir, command):
        (store,), _ = _train_batch([(sweep, Path(out_dir))], executor, address, workers, False, progress, None,
                                   False)
        return write_trials_csv(store, sweep, sweep.trials())


def _train_batch(sweeps: list[tuple[Sweep, Path]], executor: str, address: str | None, workers: int | None,
                 force: bool, progress: bool, early_stop: str | None,
                 replicas: bool) -> tuple[list[TrialStore], list[list[Trial]]]:
    """Every sweep's trials not stored yet trained as one batch on one executor; their stores and what each
    trained."""
    early = sweeps[0][0] if early_stop else None    # ASHA's metric and mode, which one batch shares
    if early and len({(sweep.metric, sweep.mode) for sweep, _ in sweeps}) > 1:
        raise ValueError("--early-stop asha: the sweeps of one batch must share their metric and mode")
    run = make_executor(executor, address, workers, early_stop, early and early.metric, early and early.mode,
                        replicas)
    stores = [TrialStore(out_dir) for _, out_dir in sweeps]
    todos = [_trials_to_train(sweep, store, force) for (sweep, _), store in zip(sweeps, stores)]
    _train_trials(run, list(zip([s for s, _ in sweeps], stores, todos)), executor, progress)
    return stores, todos


def _trials_to_train(sweep: Sweep, store: TrialStore, force: bool) -> list[Trial]:
    """The sweep's trials not stored yet (all of them with ``force``, which forgets the stored ones); a
    metric the task does not produce is refused first, naming the sweep file's line."""
    trials = sweep.trials()
    stored = [] if force else [r for r in (store.record(t) for t in trials) if r is not None and r["status"] == "ok"]
    if not any(sweep.metric in r["metrics"] for r in stored):   # a stored trial that reports it is proof enough
        produced = produced_metrics(trials[0])   # (building and evaluating PTB's untrained model takes a minute)
        if sweep.metric not in produced:     # refused before --force forgets anything
            line = _line_of(Path(sweep.source).read_text(), "metric") if Path(sweep.source).is_file() else None
            at = f"{sweep.source}:{line}: metric" if line else f"{sweep.source}: metric"
            raise ValueError(f"{at}: task {sweep.task} does not produce {sweep.metric!r}; it produces {produced}")
    if force:
        for trial in trials:
            store.forget(trial)
    return [t for t in trials if store.record(t) is None]


def _train_trials(run: Callable, batch: list[tuple[Sweep, TrialStore, list[Trial]]], executor: str,
                  progress: bool) -> None:
    """Every sweep's trials to train, on one executor; each kept in its sweep's store as it finishes."""
    # a job's key names its sweep too: two sweeps of a batch may hold the same trial (same settings and seed)
    owner = {f"{i}/{t.id}": (sweep, store, t) for i, (sweep, store, todo) in enumerate(batch) for t in todo}
    if progress:
        for sweep, _, todo in batch:
            total = len(sweep.trials())
            print(f"sweep {sweep.source}: {total} trials, {total - len(todo)} already stored, {len(todo)} to train "
                  f"({executor})", file=sys.stderr)
    bar = progress_bar(len(owner), progress)
    for key, outcome in run([Job(key, t.settings, None) for key, (_, _, t) in owner.items()]):
        sweep, store, trial = owner[key]
        store.store(trial, outcome)
        write_trials_csv(store, sweep, sweep.trials())
        if bar is not None:
            bar.update(1)
            bar.set_postfix(status=outcome["status"])
    if bar is not None:
        bar.close()


def _sweep_summary(sweep: Sweep, store: TrialStore, trained_now: int, executor: str, started: float,
                   command: str) -> SweepResults:
    """trials.csv, the call's line in calls.jsonl, each group's best settings (``best/GROUP.toml``), and the
    results ``run_sweep`` returns."""
    trials = sweep.trials()
    records = write_trials_csv(store, sweep, trials)
    seconds = time.perf_counter() - started
    calls = log_call(store.dir, {"command": command, "date": time.strftime("%Y-%m-%d"), "seconds": seconds,
                                 "trained_now": trained_now, "executor": executor})
    results = sweep_results(sweep, records, trained_now=trained_now, seconds=seconds, executor=executor, calls=calls)
    best_dir = store.dir / "best"
    best_dir.mkdir(exist_ok=True)
    for group in results.groups:
        if group["configs"] and "mean" in group["configs"][0]:
            top = group["configs"][0]
            header = (f"best of group {group['group']} in sweep {sweep.source}: {sweep.metric} "
                      f"{top['mean']:.6g} ± {top['std']:.2g} over {top['n']} seeds ({sweep.mode})")
            text = to_toml(best_settings(sweep, trials, top["config"]), header)
            safe = re.sub(r"[^A-Za-z0-9_.=,-]", "_", group["group"])
            atomic_write(best_dir / f"{safe}.toml", lambda f, t=text: f.write(t.encode()))
    return results


def sweep_results(sweep: Sweep, records: list[dict], **call: Any) -> SweepResults:
    """What the trials' ``records`` say, judged by today's rules: each group's configurations best first and the
    first axis's comparisons; ``call``: what the call that trained them did (``SweepResults``' last fields)."""
    groups = summarize(sweep, records)
    return SweepResults(
        source=sweep.source, task=sweep.task, metric=sweep.metric, mode=sweep.mode, seeds=sweep.seeds,
        samples=sweep.samples, searched=sweep.searched, log_axes=[k for k, d in sweep.sampled.items() if d.log],
        plot_axes=[k for k, v in sweep.grid.items() if not isinstance(v[0], dict)] + list(sweep.option_grid)
        + list(sweep.sampled), trials=len(sweep.trials()), groups=groups, records=records,
        comparisons=compare_first_axis(sweep, records), importance=search_importance(sweep, groups), **call)


MIN_IMPORTANCE_CONFIGURATIONS = 8


def search_importance(sweep: Sweep, groups: list[dict]) -> dict[str, Any] | None:
    """A random search's hyperparameter importance (``rnnlab.experiments.importance``) over its configurations'
    mean scores, where it samples and searches two or more settings, at least ``MIN_IMPORTANCE_CONFIGURATIONS``
    finished and the importance extra is installed; else None (the page says which)."""
    if not sweep.sampled or len(sweep.searched) < 2:
        return None
    if not importance.available():
        return {"missing": importance.EXTRA}
    configs = [c for g in groups for c in g["configs"] if "mean" in c and c["finished"] == c["seeds"]]
    if len(configs) < MIN_IMPORTANCE_CONFIGURATIONS:
        return None
    params, log = importance_inputs(sweep.sampled, [c["values"] for c in configs])
    found = importance.importance(params, [c["mean"] for c in configs], log=log)
    return dataclasses.asdict(found)


# -- a study's own search (reproduce NAME --tune) --------------------------------------------------

def spec_sweep(search: str, spec: RunSpec, quick: bool, source: str) -> Sweep:
    """The study's search for one of its configurations: the spec's task, data and settings fixed,
    the searched ones drawn; settings the search itself fixes (a shorter budget) apply to its trials."""
    sweep = parse_sweep(f"task = {json.dumps(spec.task)}\n{search}", source)
    sweep.settings = {**{k: v for k, v in spec.settings.items() if k not in sweep.searched}, **sweep.settings}
    sweep.task_options = dict(spec.task_options)
    return quick_version(sweep) if quick else sweep


def _edge_of_search(best: dict[str, Any], configs: list[dict[str, Any]]) -> str:
    """Where the best value of a numeric setting is the highest or lowest one tried, the optimum may lie
    outside the searched range: say so beside the choice."""
    edges = []
    for key, value in best["values"].items():
        tried = {c["values"][key] for c in configs if isinstance(c["values"].get(key), (int, float))}
        if len(tried) < 3 or not isinstance(value, (int, float)):
            continue
        if value == max(tried):
            edges.append(f"the highest {key} tried")
        elif value == min(tried):
            edges.append(f"the lowest {key} tried")
    return "; " + ", ".join(edges) if edges else ""


MIN_SELECTION_SEEDS = 2


def _choose(exp: Experiment, spec: RunSpec, sweep: Sweep, summary: SweepResults,
            folder: Path) -> tuple[dict[str, Any], str]:
    """The configuration with the best mean over the search's seeds, among those whose seeds all
    finished, and the line saying so. Where none finished, a study stops; an experiment that counts
    failed runs keeps the first configuration searched, whose runs then count as failed if they fail."""
    configs = [c for g in summary.groups for c in g["configs"] if "mean" in c and c["finished"] == c["seeds"]]
    tried = sum(len(g["configs"]) for g in summary.groups)
    if not configs and exp.failed_runs == STOP:
        raise ValueError(f"--tune: no trial of {spec.key} finished; see {folder / 'trials.csv'}")
    if not configs:
        first = sweep.trials()[0].values
        return first, f"{spec.key}: no configuration of {tried} finished; the first, {_shown(first)}, kept"
    best = min(configs, key=lambda c: c["mean"] if sweep.mode == "min" else -c["mean"])
    spread = f"± {best['std']:.2g}" if best["seeds"] > 1 else "on one seed"
    return best["values"], (f"{spec.key}: {_shown(best['values'])} ({sweep.metric} {best['mean']:.4g} {spread}, best "
                            f"of {tried} configurations{_edge_of_search(best, configs)})")


def _shown(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


class Tuned(NamedTuple):
    """A study tuned by its search: the study to train (``NAME-tuned``) and each search's summary, by
    configuration key (``run_sweep``'s: its trials, records and what trained now)."""

    experiment: Experiment
    searches: dict[str, SweepResults]


def tune_experiment(exp: Experiment, out_root: str | Path, *, quick: bool = False, force: bool = False,
                    executor: str = "local", address: str | None = None, workers: int | None = None,
                    progress: bool = True) -> Tuned:
    """Run the study's search for each configuration it tunes and return the study with each of
    them set to its best configuration (by the mean over the search's seeds, at least
    ``MIN_SELECTION_SEEDS``), as ``NAME-tuned``, whose runs start at ``FRESH_FIRST_SEED``: seeds the
    search never trained, so the runs that won the selection are not the ones reported. The searches'
    trials train as one batch on one executor."""
    if not exp.search:
        raise ValueError(f"--tune: the study {exp.name} declares no search")
    specs = exp.specs(quick)
    tuned = set(exp.tune or [s.key for s in specs])
    searches = {}
    for spec in specs:
        if spec.key not in tuned:
            continue
        sweep = spec_sweep(exp.search, spec, quick, f"{exp.name} search for {spec.key}")
        if sweep.seeds < MIN_SELECTION_SEEDS and not quick:
            raise ValueError(f"--tune: the search of {exp.name} trains {sweep.seeds} seed per configuration; selection "
                             f"on one seed rewards a lucky seed: give it seeds = {MIN_SELECTION_SEEDS} or more")
        searches[spec.key] = (sweep, Path(out_root) / f"{exp.name}-tuned" / "search" / spec.key)
    summaries = dict(zip(searches, run_sweeps(list(searches.values()), executor=executor, address=address,
                                              workers=workers, force=force, progress=progress)))
    chosen: dict[str, dict[str, Any]] = {}
    lines = []
    for spec in specs:
        if spec.key in searches:
            sweep, folder = searches[spec.key]
            chosen[spec.key], line = _choose(exp, spec, sweep, summaries[spec.key], folder)
            lines.append(line)
    searched = ", ".join(parse_sweep(f'task = "{specs[0].task}"\n{exp.search}').searched)

    def tuned_specs(q: bool) -> list[RunSpec]:   # the configurations the study does not tune are not rerun
        return [dataclasses.replace(s, settings={**s.settings, **chosen[s.key]}) for s in exp.specs(q)
                if s.key in tuned]

    note = (f"Tuned: {searched} of each configuration chosen by the study's search ({exp.name}-tuned/search/"
            f"KEY/report.html beside the results), then trained over seeds {FRESH_FIRST_SEED}, {FRESH_FIRST_SEED + 1}, "
            f"…, none of which the search trained; " + "; ".join(lines) + ".")
    return Tuned(dataclasses.replace(exp, name=f"{exp.name}-tuned", title=f"{exp.title} (tuned)", specs=tuned_specs,
                                     claims=[c for c in exp.claims if c.better in tuned and c.worse in tuned],
                                     published={k: v for k, v in exp.published.items() if k[0] in tuned},
                                     reasons={k: v for k, v in exp.reasons.items() if k[0] in tuned},
                                     notes=[*exp.notes, note], first_seed=FRESH_FIRST_SEED), summaries)
