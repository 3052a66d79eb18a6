"""Greff et al. 2017's JSB Chorales arm ("LSTM: A Search Space Odyssey"), one command (``rnnlab greff``).

The vanilla LSTM (peepholes) and its eight variants, each searched at random with the same number of trials over
the paper's space, one trial per draw, scored as the paper scores them:

1. **Plan**: one sweep (``greff_sweep``) whose grid is the nine variants and whose samples are the paper's
   draws: hidden size log-uniform in [20, 200], learning rate log-uniform in [1e−6, 1e−2], momentum 1 − u with u
   log-uniform in [0.01, 1], input-noise σ uniform in [0, 1]. Its fixed settings are the paper's (``SETTINGS``).
2. **Execute and keep**: the sweep store (resumable, any executor), trained in rounds of growing samples
   (``ROUNDS``), so that a stopped run leaves every variant with about the same number of trials.
3. **Judge** (``judge``): per variant the test NLL of all trials and of the best 10% by validation, each with
   mean, median, quartiles and range; Welch's t-test of each variant's mean against the vanilla mean with
   Bonferroni's correction for 8 tests (the paper's test), its interval at the corrected level, and two
   one-sided Welch tests against ``SAME_MARGIN`` (a "same" needs them); the best trial chosen on validation; the
   mean parameter count of the best 10%; the fANOVA shares of the four hyperparameters per variant
   (``rnnlab.experiments.importance``, fitted to the test NLL as Greff's script did); and the paper's three
   findings decided from those numbers.
4. **Page**: ``rnnlab.pages.greff``, beside the numbers read off the paper's Fig. 3 and Fig. 5.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from rnnlab.experiments import importance
from rnnlab.experiments.statistics import ALPHA
from rnnlab.experiments.sweeps import Sweep, TrialStore, importance_inputs, parse_sweep, train_sweep
from rnnlab.files import is_number, is_whole, read_json
from rnnlab.machine import cpu_cores
from rnnlab.metrics import impossible as metric_impossible

VARIANTS = {            # Greff's names → the lstm cell's options; each changes one thing of V
    "V": {"peepholes": True},
    "NIG": {"ablate": "nig", "peepholes": True},
    "NFG": {"ablate": "nfg", "peepholes": True},
    "NOG": {"ablate": "nog", "peepholes": True},
    "NIAF": {"ablate": "niaf", "peepholes": True},
    "NOAF": {"ablate": "noaf", "peepholes": True},
    "CIFG": {"ablate": "cifg", "peepholes": True},
    "NP": {"peepholes": False},
    "FGR": {"gate_recurrence": True, "peepholes": True},
}
VANILLA = "V"
TRIALS = 200            # per variant, the paper's budget
SETTINGS = {
    "cell": "lstm", "init": "gaussian", "init_scale": 0.1, "optimizer": "sgd", "nesterov": True,
    "momentum_scales_lr": True, "batch_size": 1, "bucket": False, "epochs": 150, "early_stopping": 15,
    "loss_normalization": "sequence", "engine": "numba",
    "forget_bias": "none", "clip": "none", "weight_noise": 0.0,   # rnnlab's LSTM and JSB defaults, not Greff's
}
WHY_SETTINGS = (
    "every parameter from N(0, 0.1²) (biases and peepholes too: PyLSTM's Gaussian initialiser); SGD with Nesterov "
    "momentum, the rate multiplied by (1 − momentum) as PyLSTM's NesterovStep does; one update per chorale; no "
    "clipping; at most 150 epochs, stopped after 15 without a better validation NLL, and scored at the best "
    "validation epoch (the paper does not say which checkpoint it scores); Gaussian noise of the searched σ on the "
    "training inputs. The loss of a chorale is summed over its steps (the paper does not state it; per-step "
    "errors summed by backpropagation through time are what its online training with rates up to 1e−2 implies)")
SPACE = {
    "hidden": ("logint", [20, 200]),
    "lr": ("loguniform", [1e-6, 1e-2]),
    "momentum": ("one_minus_loguniform", [0.01, 1.0]),
    "input_noise": ("uniform", [0.0, 1.0]),
}
METRIC = "nll_per_step"  # NLL per time step, summed over the 88 notes (EXPERIMENTS.md S3), the paper's scale
TOP = 0.10
TESTS = len(VARIANTS) - 1
SAME_MARGIN = 0.05
WHY_MARGIN = ("0.05 nats per step: the smallest difference the paper calls significant on JSB (NFG's 8.60 against "
              "V's 8.55 in the best-10% panel), so a 'same' rules out every difference the paper reports as one")
ROUNDS = (10, 20, 50, 100, 200)
QUICK = {"trials": 3, "epochs": 2, "max_sequences": 6}

# Fig. 3, JSB panels (±0.01 NLL, read off the plot; SUITE.md §1.4): best-10% mean and median, all-200 mean and
# median, the best of the 20 by test, the best-10%'s mean parameter count, and the paper's significance words
PUBLISHED = {
    "V": (8.55, 8.56, 9.77, 9.47, 8.42, 69_000, "—"),
    "CIFG": (8.56, 8.57, 9.86, 9.56, 8.37, 49_000, "no"),
    "FGR": (8.62, 8.64, 9.86, 9.66, 8.48, 156_000, "worse (best 10% only)"),
    "NP": (8.57, 8.57, 9.89, 9.58, 8.40, 68_000, "no"),
    "NOG": (8.57, 8.58, 9.79, 9.60, 8.45, 53_000, "no"),
    "NIAF": (8.52, 8.52, 9.86, 9.63, 8.39, 97_000, "no"),
    "NIG": (8.52, 8.50, 9.88, 9.66, 8.39, 74_000, "no"),
    "NFG": (8.60, 8.62, 10.02, 9.77, 8.47, 64_000, "worse (both panels)"),
    "NOAF": (math.inf, math.inf, 10.54, 10.13, 8.55, 24_000, "worse (both panels)"),   # off the plot: > 8.85
}
PUBLISHED_SHARES = {"lr": "91%", "hidden": "≈1%", "input_noise": "2%", "momentum": "<1%", "interactions": "5%"}
FINDINGS = (
    # "cost nothing" is "not worse": 'same' (within ±SAME_MARGIN) or 'better' answers it; only 'worse' contradicts it
    ("nothing lost", ("CIFG", "NP"), ("same", "better"),
     "coupling the input and forget gates (CIFG) and removing the peepholes (NP) cost nothing"),
    ("critical parts", ("NFG", "NOAF"), ("worse",),
     "removing the forget gate (NFG) or the output activation (NOAF) hurts"),
)


def greff_sweep(trials: int = TRIALS, quick: bool = False) -> Sweep:
    """The arm as one sweep: the variants a linked grid axis, ``trials`` draws of the space each."""
    variants = ", ".join(_entry(options) for options in VARIANTS.values())
    return _arm_sweep([f"model = [{variants}]", *(f"{name} = {{ {kind} = {bounds} }}"
                                                  for name, (kind, bounds) in SPACE.items())],
                      QUICK["trials"] if quick else trials, quick, "greff-jsb")


def _entry(settings: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in settings.items()) + " }"


def _arm_sweep(search: list[str], samples: int, quick: bool, source: str) -> Sweep:
    """A sweep of the arm's task at its settings (``QUICK``'s sizes with ``quick``) over the ``[search]`` lines."""
    settings = dict(SETTINGS, **({"epochs": QUICK["epochs"]} if quick else {}))
    text = "\n".join([
        'task = "polyphonic-jsb"', f'metric = "dev_{METRIC}"', 'mode = "min"', "seeds = 1", f"samples = {samples}",
        "[settings]", *(f"{k} = {_toml(v)}" for k, v in settings.items()),
        *(["[task_options]", f"max_sequences = {QUICK['max_sequences']}"] if quick else []),
        "[search]", *search])
    return parse_sweep(text + "\n", source)


def _toml(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def variant_of(values: dict[str, Any]) -> str:
    """The variant a trial's values name (its options, the others at their defaults)."""
    for name, options in VARIANTS.items():
        if all(values.get(k) == v for k, v in options.items()) and not any(
                values.get(k) for k in ("ablate", "gate_recurrence") if k not in options):
            return name
    raise ValueError(f"greff: a trial that is no variant of the arm: {values}")


def run_greff(out: str | Path, trials: int = TRIALS, quick: bool = False, *, executor: str = "local",
              address: str | None = None, workers: int | None = None, progress: bool = True,
              command: str = "", check: list[str] | None = None) -> GreffResults:
    """Train what the store lacks, round by round up to ``trials`` per variant, and judge every finished trial;
    then retrain each variant whose word differs from the paper's at V's best draws and V at its (``check`` names
    the variants instead), so that the page can say whether the difference is the cell's or the draws'."""
    rounds = [r for r in ROUNDS if r < trials] + [trials] if not quick else [QUICK["trials"]]
    for samples in rounds:
        records = train_sweep(greff_sweep(samples, quick), out, executor=executor, address=address, workers=workers,
                              progress=progress, command=command)
        if progress and samples < rounds[-1]:
            print(remaining_cost(stored_records(out, rounds[-1], quick), len(VARIANTS) * rounds[-1],
                                 workers or cpu_cores()), file=sys.stderr, flush=True)
    judged = judge(records)
    names = differs_from_paper(judged["comparisons"]) if check is None else list(check)
    matched = {}
    for name in names:
        retrained = train_sweep(matched_sweep(name, judged["variants"], quick), Path(out) / MATCHED / name.lower(),
                                executor=executor, address=address, workers=workers, progress=progress,
                                command=command)
        matched[name] = matched_check(name, judged["variants"], retrained, len(names))
    return GreffResults(trials=QUICK["trials"] if quick else trials, quick=quick, **judged, matched=matched,
                        compute_seconds=sum(r["seconds"] or 0.0 for r in records), command=command)


def stored_records(out: str | Path, trials: int, quick: bool = False) -> list[dict[str, Any]]:
    """The records OUT holds of the arm at ``trials`` per variant: a resumed arm has trials of later rounds stored
    already, which a round's own records leave out."""
    store = TrialStore(out)
    return [r for r in (store.record(t) for t in greff_sweep(trials, quick).trials()) if r is not None]


def remaining_cost(records: list[dict[str, Any]], total: int, workers: int) -> str:
    """What the trials still to train will cost, at the rate of those timed so far (each trial's own training time):
    the arm's ETA, from its first trials."""
    seconds = [r["seconds"] for r in records if r.get("seconds")]
    if not seconds:
        return f"greff: {total} trials to train; no finished trial to time yet"
    per_trial, left = sum(seconds) / len(seconds), max(0, total - len(records))
    return (f"greff: {len(records)} of {total} trials stored, {3600 / per_trial:.0f} per core-hour so far; the "
            f"{left} left ≈ {left * per_trial / 3600:.1f} core-hours, ≈ {left * per_trial / 3600 / workers:.1f} h on "
            f"{workers} worker{'s' * (workers != 1)}")


@dataclass
class GreffResults:
    """The arm's judged results (published as ``greff-jsb.json``): per variant its trials' numbers and summaries,
    the comparisons with V, the importance and the findings."""

    trials: int
    quick: bool
    variants: dict[str, dict[str, Any]]
    comparisons: list[dict[str, Any]]
    importance: dict[str, Any]
    findings: list[dict[str, Any]]
    compute_seconds: float = 0.0
    command: str = ""
    machine: str = ""
    matched: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, default=float)

    @classmethod
    def load(cls, path: str | Path) -> GreffResults:
        """Stored or published results; a file that is not, or whose numbers are not where the arm keeps them,
        is refused naming the file and the first thing wrong."""
        data = read_json(path)
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        if not isinstance(data, dict) or not required <= set(data) <= names:
            raise ValueError(f"{path}: not the results of rnnlab greff (expected the keys {sorted(names)})")
        wrong = _shape_problem(data)
        if wrong:
            raise ValueError(f"{path}: not the results of rnnlab greff ({wrong})")
        return cls(**data)


def _shape_problem(data: dict[str, Any]) -> str | None:
    """What in a results file is not where ``GreffResults`` keeps it: the counts, each variant's trials (the
    numbers ``trial_row`` keeps), the matched checks' pairs; None when nothing is."""
    if not is_whole(data["trials"], 1):
        return "trials is not a positive whole number"
    if not isinstance(data["quick"], bool):
        return "quick is neither true nor false"
    for key, kind in (("variants", dict), ("comparisons", list), ("importance", dict), ("findings", list),
                      ("matched", dict)):
        if not isinstance(data.get(key, kind()), kind):
            return f"{key} is not a {'table' if kind is dict else 'list'}"
    if set(data["variants"]) != set(VARIANTS):
        return f"variants are not the arm's {', '.join(VARIANTS)}"
    for name, variant in data["variants"].items():
        if not (isinstance(variant, dict) and isinstance(variant.get("trials"), list)
                and is_number(variant.get("finished"))):
            return f"variant {name} has no list of trials and count of finished ones"
        for i, row in enumerate(variant["trials"]):
            if not (isinstance(row, dict) and all(is_number(row.get(k)) for k in ("dev", "test", *SPACE))
                    and all(k in row and is_number(row[k], or_none=True) for k in TRIAL_NUMBERS)):
                keys = ', '.join([*TRIAL_NUMBERS, *SPACE])
                return f"variant {name}'s trial {i + 1} is not a trial's numbers ({keys})"
    for name, check in data.get("matched", {}).items():
        pairs = check.get("pairs") if isinstance(check, dict) else None
        if not (isinstance(pairs, list) and all(isinstance(p, dict) and {"variant", "vanilla"} <= set(p)
                                                and is_number(p["variant"], or_none=True)
                                                and is_number(p["vanilla"], or_none=True) for p in pairs)):
            return f"the matched check of {name} has no list of pairs of scores"
    return None


def judge(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The arm's numbers from its trials' records (``trials`` per variant, one seed each)."""
    trials = {name: [] for name in VARIANTS}
    for r in records:
        trials[variant_of(r["values"])].append(r)
    return _judge_variants({name: _variant(rows) for name, rows in trials.items()})


def judge_again(results: GreffResults) -> GreffResults:
    """Published results judged again by today's rules from the per-trial numbers they keep; nothing retrains."""
    variants = {name: {**v, **_summaries(v["trials"])} for name, v in results.variants.items()}
    matched = {name: {**m, **_matched_verdict(m["pairs"], len(results.matched))} for name, m in results.matched.items()}
    return dataclasses.replace(results, **_judge_variants(variants), matched=matched)


def _judge_variants(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    comparisons = [_versus_vanilla(name, variants, panel) for panel in ("all", "top") for name in VARIANTS
                   if name != VANILLA]
    shares = {name: _importance(v["trials"]) for name, v in variants.items()}
    return {"variants": variants, "comparisons": comparisons, "importance": shares,
            "findings": findings(comparisons, shares.get(VANILLA))}


def _variant(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's trials (finished ones ranked by validation NLL) and the summaries of all and of the best 10%."""
    ok = [r for r in rows if r["status"] == "ok" and math.isfinite(r["metrics"].get(f"dev_{METRIC}", math.nan))]
    ok.sort(key=lambda r: r["metrics"][f"dev_{METRIC}"])
    table = [trial_row(r) for r in ok]
    return {"trained": len(rows), "finished": len(ok),
            "not_finished": {s: sum(r["status"] == s for r in rows) for s in ("diverged", "failed", "stopped")},
            "trials": table, **_summaries(table)}


TRIAL_NUMBERS = ("dev", "test", "params", "epochs", "seconds")     # besides its draw (SPACE); the last 3 may be None


def trial_row(record: dict[str, Any]) -> dict[str, Any]:
    """A trial's numbers as the results keep them (``TRIAL_NUMBERS``): its scores, size, epochs, training time and
    draw."""
    metrics = record["metrics"]
    return dict(zip(TRIAL_NUMBERS, (metrics.get(f"dev_{METRIC}"), metrics.get(f"test_{METRIC}"),
                                    metrics.get("num_params"), metrics.get("epochs_run"), record["seconds"])),
                **{k: record["values"][k] for k in SPACE})


def save_trials(out: str | Path, trials: int = TRIALS) -> list[dict[str, Any]]:
    """Every trial OUT stores of the arm at ``trials`` per variant, one line each (``trial_row`` with its id,
    variant and status): what ``restore_trials`` reads back into a store that lost them (a new machine)."""
    return [{"id": r["id"], "variant": variant_of(r["values"]), "status": r["status"], "error": r.get("error", ""),
             **trial_row(r)} for r in stored_records(out, trials)]


def restore_trials(out: str | Path, rows: list[dict[str, Any]], source: str, trials: int = TRIALS) -> int:
    """Store in OUT the arm's trials that ``rows`` hold and OUT lacks (a stored trial is never replaced); returns
    how many. Rows are ``save_trials``' lines or a published results' trials (``published_rows``); a row is
    the trial whose variant and draw it names (and id, where it has one), and a row that is no trial of the arm
    raises ValueError naming ``source`` and the row."""
    planned = greff_sweep(trials).trials()
    arm = {(variant_of(t.values), *(t.values[k] for k in SPACE)): t for t in planned}
    chosen: dict[str, tuple[int, dict[str, Any]]] = {}
    for number, row in enumerate(rows, 1):
        try:
            trial = arm.get((row["variant"], *(row[k] for k in SPACE)))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{source}: row {number} is not a trial of the arm (no {e})") from None
        if trial is None or row.get("id", trial.id) != trial.id:
            raise ValueError(f"{source}: row {number} ({row.get('variant')} at "
                             f"{', '.join(f'{k} = {row.get(k)}' for k in SPACE)}) is no trial of the arm at {trials} "
                             "per variant")
        if trial.id in chosen:
            raise ValueError(f"{source}: rows {chosen[trial.id][0]} and {number} are the same trial ({trial.id})")
        wrong = _restored_row_problem(row)
        if wrong:
            raise ValueError(f"{source}: row {number} ({trial.id}): {wrong}; nothing was restored")
        chosen[trial.id] = (number, row)
    store, restored = TrialStore(out), 0
    for trial in planned:
        if trial.id not in chosen or store.record(trial) is not None:
            continue
        row = chosen[trial.id][1]
        metrics = {f"dev_{METRIC}": row["dev"], f"test_{METRIC}": row["test"], "num_params": row["params"],
                   "epochs_run": row["epochs"]}
        record = {"id": trial.id, "group": trial.group, "config": trial.config, "values": trial.values,
                  "seed": trial.seed, "metrics": {k: v for k, v in metrics.items() if v is not None},
                  "seconds": row["seconds"], "status": row.get("status", "ok"), "error": row.get("error", "")}
        result = {**record, "settings": trial.settings, "restored_from": source}
        store.jobs.keep(trial.id, {"result.json": json.dumps(result, indent=2, default=float).encode()}, record)
        restored += 1
    return restored


RESTORED_STATUSES = ("ok", "failed", "diverged")


def _restored_row_problem(row: dict[str, Any]) -> str | None:
    """What in a row to restore is not a trial's outcome: its losses possible numbers (or none, for a trial that did
    not finish), its parameter and epoch counts whole, its time a number, its status one of a trial's; None when
    nothing is."""
    for key in ("dev", "test", "params", "epochs", "seconds"):
        if key not in row:
            return f"no {key!r}"
    if row.get("status", "ok") not in RESTORED_STATUSES:
        return f"status {row.get('status')!r} is not one of {RESTORED_STATUSES}"
    if not isinstance(row.get("error", ""), str):
        return "its error is not a text"
    for key, metric_name in (("dev", f"dev_{METRIC}"), ("test", f"test_{METRIC}")):
        if row[key] is not None and not (is_number(row[key]) and not metric_impossible(metric_name, row[key])):
            return f"{key} = {row[key]!r} is not a possible {METRIC}"
    if row.get("status", "ok") == "ok" and (row["dev"] is None or row["test"] is None):
        return "a finished trial without its dev and test numbers"
    for key, low in (("params", 1), ("epochs", 0)):
        if row[key] is not None and not is_whole(row[key], low):
            return f"{key} = {row[key]!r} is not a whole number >= {low}"
    if row["seconds"] is not None and not (is_number(row["seconds"]) and 0 <= row["seconds"] < float("inf")):
        return f"seconds = {row['seconds']!r} is not a time"
    return None


def published_rows(results: GreffResults) -> list[dict[str, Any]]:
    """The finished trials a published arm keeps, as ``restore_trials`` rows (its unfinished ones it only counts)."""
    if results.quick:
        raise ValueError("greff: quick results are no trials of the arm; restore from a full run's")
    return [{"variant": name, "status": "ok", **row} for name, v in results.variants.items() for row in v["trials"]]


def _summaries(table: list[dict[str, Any]]) -> dict[str, Any]:
    top = table[:max(1, round(TOP * len(table)))] if table else []
    sizes = [t["params"] for t in top if t["params"]]
    return {"all": _box([t["test"] for t in table]), "top": _box([t["test"] for t in top]),
            "best": table[0] if table else None, "top_params": float(np.mean(sizes)) if sizes else None}


def _box(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    x = np.asarray(values, dtype=np.float64)
    q25, median, q75 = np.percentile(x, [25, 50, 75])
    return {"n": len(x), "mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else 0.0,
            "median": float(median), "q25": float(q25), "q75": float(q75), "min": float(x.min()),
            "max": float(x.max())}


def _panel(variant: dict[str, Any], panel: str) -> np.ndarray:
    tests = [t["test"] for t in variant["trials"]]
    return np.asarray(tests[:variant["top"]["n"]] if panel == "top" else tests, dtype=np.float64)


def _versus_vanilla(name: str, variants: dict[str, dict[str, Any]], panel: str) -> dict[str, Any]:
    """Welch's t of the variant's mean test NLL against V's, Bonferroni for ``TESTS``; "same" by two one-sided
    Welch tests against ±``SAME_MARGIN``, corrected alike."""
    a, b = _panel(variants[name], panel), _panel(variants[VANILLA], panel)
    row = {"variant": name, "panel": panel, "n": len(a), "n_vanilla": len(b)}
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return {**row, "word": "undecided", "why": "fewer than 2 finished trials a side"}
    level = 1 - ALPHA / TESTS
    test = stats.ttest_ind(a, b, equal_var=False)
    low, high = test.confidence_interval(level)
    above = stats.ttest_ind(a, b + SAME_MARGIN, equal_var=False, alternative="less").pvalue
    below = stats.ttest_ind(a, b - SAME_MARGIN, equal_var=False, alternative="greater").pvalue
    p = min(1.0, float(test.pvalue) * TESTS)
    p_same = min(1.0, max(float(above), float(below)) * TESTS)
    difference = float(a.mean() - b.mean())
    return {**row, "difference": difference, "interval": (float(low), float(high)), "level": level,
            "p": float(test.pvalue), "p_bonferroni": p, "p_same_bonferroni": p_same,
            "word": _word(difference, p, p_same)}


def _word(difference: float, p: float, p_same: float) -> str:
    """'worse'/'better' when the difference test rejects, else 'same' when the two one-sided tests do."""
    return ("worse" if difference > 0 else "better") if p < ALPHA else "same" if p_same < ALPHA else "undecided"


MIN_IMPORTANCE = 8
IMPORTANCE_DRAWS = importance.DRAWS


def _importance(table: list[dict[str, Any]]) -> dict[str, Any] | None:
    """fANOVA shares of the four hyperparameters for the test NLL, on the scales Greff drew them (log rate, log
    hidden size, log(1 − momentum), noise)."""
    if len(table) < MIN_IMPORTANCE or not importance.available():
        return None
    params, log = importance_inputs(greff_sweep().sampled, [{k: t[k] for k in SPACE} for t in table])
    found = importance.importance(params, [t["test"] for t in table], draws=IMPORTANCE_DRAWS, log=log)
    return dataclasses.asdict(found)


def findings(comparisons: list[dict[str, Any]], shares: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The paper's three findings, each decided from the best-10% comparisons (the paper's main panel) or V's
    importance: "holds" (every variant's word is one the finding accepts), "does not hold" (a variant decided
    against it) or "undecided"."""
    words = {c["variant"]: c["word"] for c in comparisons if c["panel"] == "top"}
    out = []
    for key, names, expected, claim in FINDINGS:
        got = [words.get(n, "undecided") for n in names]
        decided = all(w in expected for w in got)
        against = any(w not in (*expected, "undecided") for w in got)
        out.append({"finding": key, "claim": claim, "words": dict(zip(names, got)),
                    "word": "holds" if decided else "does not hold" if against else "undecided"})
    out.append(_rate_finding(shares))
    return out


def _rate_finding(shares: dict[str, Any] | None) -> dict[str, Any]:
    """Holds when the learning rate's share stays above every other share and above the interactions across the
    refits (the lower end of its range above their upper ends)."""
    claim = "the learning rate is by far the most important hyperparameter, and interactions are small"
    if not shares:
        return {"finding": "learning rate", "claim": claim, "word": "undecided", "words": {}}
    low = shares["intervals"]["lr"][0]
    others = {k: v[1] for k, v in shares["intervals"].items() if k != "lr"}
    others["interactions"] = shares["interactions_interval"][1]
    if low > max(others.values()):
        word = "holds"
    elif any(shares["intervals"][k][0] > shares["intervals"]["lr"][1] for k in shares["intervals"] if k != "lr"):
        word = "does not hold"
    else:
        word = "undecided"
    return {"finding": "learning rate", "claim": claim, "word": word,
            "words": {**{k: f"{v:.2f}" for k, v in shares["shares"].items()},
                      "interactions": f"{shares['interactions']:.2f}"}}


# -- a word that differs from the paper's: the cell's or the draws'? ------------------------------

MATCHED = "matched"     # the arm's subfolder that keeps the retrained trials, one sweep per variant checked


def differs_from_paper(comparisons: list[dict[str, Any]]) -> list[str]:
    """The variants whose best-10% word contradicts the paper's: a difference from V the paper did not find (or
    the opposite one), or 'same' where it found one; 'undecided' contradicts nothing."""
    out = []
    for c in comparisons:
        paper = PUBLISHED[c["variant"]][6]
        if c["panel"] == "top" and ((c["word"] in ("worse", "better") and not paper.startswith(c["word"]))
                                    or (c["word"] == "same" and paper != "no")):
            out.append(c["variant"])
    return out


def _best_rows(name: str, variants: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(whose, trial row) for V's best 10% by validation, then the variant's."""
    return [(whose, t) for whose in (VANILLA, name) for t in variants[whose]["trials"][:variants[whose]["top"]["n"]]]


def matched_draws(name: str, variants: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(whose best 10% it is, the draw) for V's best-10% draws, then the variant's: the draws each variant's own
    search found best, where the other is retrained."""
    return [(whose, {k: t[k] for k in SPACE}) for whose, t in _best_rows(name, variants)]


def matched_sweep(name: str, variants: dict[str, dict[str, Any]], quick: bool = False) -> Sweep:
    """The variant at V's best-10% draws and V at the variant's, one linked axis of model and draw, the arm's
    settings and seed: each pair meets the same hyperparameters."""
    entries = [_entry({**VARIANTS[VANILLA if whose == name else name], **draw})
               for whose, draw in matched_draws(name, variants)]
    return _arm_sweep([f"model = [{', '.join(entries)}]"], 1, quick, f"greff-jsb-matched-{name.lower()}")


def matched_check(name: str, variants: dict[str, dict[str, Any]], retrained: list[dict[str, Any]],
                  checks: int) -> dict[str, Any]:
    """Per draw of ``matched_draws`` the test NLL of V and of the variant (one of them the arm's own trial, the
    other ``retrained``; None where that run did not finish), and the verdict over the pairs."""
    found = {(variant_of(r["values"]), tuple(r["values"][k] for k in SPACE)): r for r in retrained}
    pairs = []
    for whose, own in _best_rows(name, variants):
        draw = {k: own[k] for k in SPACE}
        other = found.get((name if whose == VANILLA else VANILLA, tuple(draw.values())))
        test = other["metrics"].get(f"test_{METRIC}") if other and other["status"] == "ok" else None
        pairs.append({"best_of": whose, **draw, "vanilla": own["test"] if whose == VANILLA else test,
                      "variant": test if whose == VANILLA else own["test"]})
    return {"pairs": pairs, **_matched_verdict(pairs, checks)}


def _matched_verdict(pairs: list[dict[str, Any]], checks: int) -> dict[str, Any]:
    """Variant − V over the draws where both finished: the paired t-test and its interval at 1 − 0.05/``checks``
    (Bonferroni over the checks made), and 'same' by two one-sided paired tests against ±``SAME_MARGIN``."""
    d = np.asarray([p["variant"] - p["vanilla"] for p in pairs
                    if p["variant"] is not None and p["vanilla"] is not None
                    and math.isfinite(p["variant"]) and math.isfinite(p["vanilla"])], dtype=np.float64)
    row: dict[str, Any] = {"n": len(d), "unfinished": len(pairs) - len(d)}
    if len(d) < 2 or d.std() == 0:
        return {**row, "word": "undecided", "why": "fewer than 2 pairs that differ"}
    level = 1 - ALPHA / checks
    test = stats.ttest_1samp(d, 0.0)
    low, high = test.confidence_interval(level)
    above = stats.ttest_1samp(d, SAME_MARGIN, alternative="less").pvalue
    below = stats.ttest_1samp(d, -SAME_MARGIN, alternative="greater").pvalue
    p, p_same = min(1.0, float(test.pvalue) * checks), min(1.0, max(float(above), float(below)) * checks)
    return {**row, "difference": float(d.mean()), "interval": (float(low), float(high)), "level": level,
            "p": float(test.pvalue), "p_bonferroni": p, "p_same_bonferroni": p_same,
            "word": _word(float(d.mean()), p, p_same)}
