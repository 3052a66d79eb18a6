"""What a study run produces, typed: each run (``Run``: its configuration key, seed, every number
measured on it, its settings and its per-epoch history), each verdict (``Verdict``) and the study's
results (``StudyResults``: what ``results.json`` holds), with one JSON (de)serialisation and a schema
version.

A reader of ``results.json`` gets a ``StudyResults`` or an error naming the file and what to do; the
analyses, the verdicts, the report and the published pages read attributes, not string keys.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.cells.blas_provider import Choice
from rnnlab.files import is_number, parse_json, read_record_text, write_text
from rnnlab.metrics import check_measurements

SCHEMA_VERSION = 2      # 1: results.json before this schema (no "schema" key, histories apart from runs)
RUN_COLUMNS = ("key", "group", "label", "seed")     # a run's identity in runs.csv; every other column is a metric
OK = "ok"
HOW_TRAINED = ("replicas",)     # numbers a result.json keeps about how a run trained, not what it measured


def run_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Every number a finished run's ``result.json`` measures: its final metrics (``{split}_{metric}``:
    dev_loss, test_solved, …), its training facts (num_params, best_epoch, seconds_total, …) and
    ``seconds_per_epoch``, the median epoch (the first one also pays the kernels' one-time compilation).
    The one definition behind a study's runs.csv and a sweep's trials.csv."""
    metrics = {k: v for k, v in result.items()
               if is_number(v) and k not in RUN_COLUMNS + HOW_TRAINED}
    history = result.get("history", [])
    if history:
        metrics["seconds_per_epoch"] = float(np.median([h["seconds"] for h in history]))
    return metrics


@dataclass
class Run:
    """One training run of a study: configuration ``key`` (``group`` and ``label`` name it in tables),
    ``seed``, every number measured on it (final metrics, training facts such as ``num_params``, the
    analyses' per-run metrics), its complete settings and its history (one dict per epoch)."""

    key: str
    seed: int
    metrics: dict[str, float]
    group: str = ""
    label: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    status: str = OK             # "diverged" or "failed": no metrics, counted where a study counts failures
    blas: dict[str, Any] = field(default_factory=dict)     # the BLAS record it kept (``Choice.record``); {}: none

    @classmethod
    def from_result(cls, key: str, seed: int, result: dict[str, Any], group: str = "", label: str = "",
                    settings: dict[str, Any] | None = None, where: str = "result.json") -> Run:
        """The run a job folder's ``result.json`` (``where``) records (a failed run's: its status, no metrics); an
        impossible number in it (NaN, a rate above 1) is refused naming ``where`` (``metrics.check_measurements``)."""
        status = result.get("status", OK)
        metrics = check_measurements(run_metrics(result), where) if status == OK else {}
        return cls(key, seed, metrics, group, label, settings or {},
                   result.get("history", []) if status == OK else [], status, result.get("run", {}).get("blas") or {})

    def row(self) -> dict[str, Any]:
        """The run as one row of runs.csv: its identity, then its metrics."""
        return {"key": self.key, "group": self.group, "label": self.label, "seed": self.seed, **self.metrics}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        """A run from a runs.csv row (numbers as text; an empty cell is no measurement)."""
        metrics = {k: float(v) for k, v in row.items() if k not in RUN_COLUMNS and v not in ("", None)}
        check_measurements(metrics, f"the run {row.get('key')} seed {row.get('seed')}")
        return cls(str(row["key"]), int(float(row["seed"])), metrics, str(row.get("group") or ""),
                   str(row.get("label") or row["key"]))


@dataclass
class Verdict:
    """A claim or a published number judged over seeds (``verdicts.judge_claim``/``judge_published``): the
    word, the evidence, the difference with its interval, the test and its p (raw and Holm-adjusted),
    P(A>B), power, tolerance and prediction interval, and the per-seed values behind it."""

    claim: str
    evidence: str            # the two sides, as numbers people read
    difference: float | None
    low: float | None
    high: float | None
    test: str
    p_value: float | None    # raw
    verdict: str
    reason: str = ""
    p_adjusted: float | None = None      # Holm over the family; decides the word
    p_exact: float | None = None         # the exact permutation p beside Welch's, on results stored before it decided
    prob_superiority: float | None = None
    seeds: int = 0                       # seeds on the smaller side
    seeds_needed: int | None = None      # per side, for the measured difference and spread (80% power)
    detectable: float | None = None      # the smallest difference these seeds find with 80% power
    tolerance: float | None = None
    tolerance_why: str = ""
    prediction_low: float | None = None  # where one of our runs falls (95%), for a published number
    prediction_high: float | None = None
    values: dict[str, list[float]] = field(default_factory=dict)   # per seed, for the strip of dots
    metric: str = ""
    threshold: float | None = None       # a count claim's threshold on ``metric``
    kind: str = ""                       # "claim" or "published"
    look: int | None = None              # under a sequential plan: the look that decided the claim
    level: float | None = None           # and the significance level of that look
    coverage: float | None = None        # of the printed interval: the level the deciding p implies (None: 95%)
    if_significant: str = field(default="", compare=False, repr=False)   # the word a significant p gives (not stored)
    interval_at: Any = field(default=None, compare=False, repr=False)    # alpha -> (low, high) (not stored)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("if_significant", "interval_at")}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Verdict:
        return cls(**row)


def _described(record: dict[str, Any]) -> str:
    """A run's BLAS record in words; one that is not a record (edited, or from another version) says so."""
    if not record:
        return "not recorded"
    try:
        return Choice.from_record(record).describe("where they trained")
    except (KeyError, TypeError, AttributeError):
        return f"a BLAS record rnnlab cannot read ({json.dumps(record, default=str)[:80]})"


@dataclass
class StudyResults:
    """A study run's results (``runs/NAME/results.json``): what was asked and when, every run, the
    per-configuration summary, the verdicts (``verdicts.Verdict`` rows), figures and notes."""

    experiment: str
    title: str
    study: str
    about: str
    quick: bool
    seeds: int                              # the fewest seeds of any configuration
    seeds_by_key: dict[str, int]
    metrics: list[str]                      # the metrics the tables show
    seconds: float                          # wall time of this call
    command: str
    date: str
    version: str
    cores: int
    trained_now: int
    compute_seconds: float                  # training time summed over the runs
    configurations: list[dict[str, Any]]
    summary: list[dict[str, Any]]           # per configuration: mean, std and n of every metric
    published: list[dict[str, Any]]
    verdicts: list[Verdict]
    sequential: dict[str, Any] | None
    runs: list[Run]
    figures: list[dict[str, str]]
    notes: list[str]
    schema: int = SCHEMA_VERSION

    def products(self) -> list[str]:
        """How the runs' matrix products were computed: each distinct BLAS record the runs kept, described, with the
        number of runs under it where they differ (another BLAS changes last bits, and with them which seeds of a
        bimodal task learn); none where no run kept one (results from before the records)."""
        described = collections.Counter(_described(r.blas) for r in self.runs)
        if set(described) <= {"not recorded"}:
            return []
        if len(described) == 1:
            return list(described)
        return [f"{text} ({n} run{'s' if n != 1 else ''})" for text, n in described.most_common()]

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["verdicts"] = [v.as_dict() for v in self.verdicts]
        return json.dumps(data, indent=2, default=float)

    @classmethod
    def from_json(cls, text: str, where: str | Path = "results.json") -> StudyResults:
        """Read results.json; one written by another schema is refused, naming the file and the fix."""
        data = parse_json(text, str(where))
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object of study results")
        schema = data.get("schema", 1)
        if schema != SCHEMA_VERSION:
            name = str(data.get("experiment", "NAME"))
            again = f"rnnlab reproduce {name.removesuffix('-tuned')}" + (" --tune" if name.endswith("-tuned") else "")
            raise ValueError(f"{where}: results of schema {schema}, this rnnlab reads schema {SCHEMA_VERSION}; rerun "
                             f"`{again}`: its finished runs are kept and only the results are rewritten")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        try:
            data["runs"] = [Run(**run) for run in data["runs"]]
            data["verdicts"] = [Verdict.from_dict(row) for row in data["verdicts"]]
            return cls(**data)
        except (KeyError, TypeError) as err:
            raise ValueError(f"{where}: not study results of schema {SCHEMA_VERSION} ({type(err).__name__}: {err})") \
                from None

    @classmethod
    def load(cls, path: str | Path) -> StudyResults:
        try:
            text = read_record_text(path)
        except ValueError as err:
            raise ValueError(f"{path}: not readable as JSON ({str(err).removeprefix(f'{path}: ')})") from None
        return cls.from_json(text, path)

    def save(self, path: str | Path) -> None:
        write_text(path, self.to_json())


@dataclass
class SweepResults:
    """A sweep's results (``sweeps.run_sweep``): what it searched and how it chose, every stored trial's record
    (``records``), per group its configurations best first (``groups``), the first axis's comparisons, and
    what this call trained (``trained_now``, ``seconds``, ``executor``) beside every call's line (``calls``)."""

    source: str
    task: str
    metric: str
    mode: str
    seeds: int
    samples: int
    searched: list[str]
    log_axes: list[str]
    plot_axes: list[str]
    trials: int
    groups: list[dict[str, Any]]
    records: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    trained_now: int = 0
    seconds: float = 0.0
    executor: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    importance: dict[str, Any] | None = None     # a random search's fANOVA shares (``importance.importance``)
