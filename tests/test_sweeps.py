"""Sweeps: the file format and its errors, deterministic trials, storage and resume (a driver killed
mid-sweep), failures recorded, reports and best settings, and the Ray executor on a real local
cluster (skipped, naming why, without the ray extra)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from helpers import TINY_SWEEP as TINY
from rnnlab.cli import build_parser, main, settings_from_args
from rnnlab.experiments.results import StudyResults
from rnnlab.experiments.sweeps import (
    importance_inputs,
    load_sweep,
    parse_sweep,
    quick_version,
    run_sweep,
    write_trials_csv,
)
from rnnlab.metrics import SECONDS, metric


def _write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# -- the file ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (("epochs = 2", "epoch = 2"), r"sweep.toml:14: settings.epoch: unknown setting"),
    (('cell = ["rnn", "gru"]', 'cells = ["rnn", "gru"]'), r"sweep.toml:20: search.cells: unknown setting"),
    (("{ loguniform = [1e-3, 1e-1] }", "{ lognormal = [1e-3, 1e-1] }"), r"sweep.toml:21: search.lr: unknown "
                                                                          r"distribution \['lognormal'\]"),
    (("{ loguniform = [1e-3, 1e-1] }", "{ uniform = [0.1, 0.1] }"), r"sweep.toml:21: search.lr: empty range"),
    (("{ loguniform = [1e-3, 1e-1] }", "{ loguniform = [0, 0.1] }"), r"search.lr: loguniform needs 0 < low"),
    (('cell = ["rnn", "gru"]', 'cell = ["rnn", "tcn"]'), r"search.cell: invalid value 'tcn' for cell"),
    (('cell = ["rnn", "gru"]', "cell = []"), r"sweep.toml:20: search.cell: empty list"),
    (('mode = "min"', 'mode = "lowest"'), r"sweep.toml:4: mode: expected \"min\" or \"max\""),
    (("seeds = 2", "seeds = 0"), r"sweep.toml:5: seeds: expected a positive integer"),
    (("seeds = 2", "seed = 2"), r"sweep.toml:5: seed: unknown key"),
    (("[search]", "[search]\nepochs = [1, 2]"), r"search.epochs: set in \[settings\] too"),
    (("[search]", "[search]\nseed = [1, 2]"), r"search.seed: unknown setting"),
])
def test_bad_files_name_the_key_and_line(tmp_path, change, message):
    path = _write(tmp_path, TINY.replace(*change))
    with pytest.raises(ValueError, match=message):
        parse_sweep(path.read_text(), str(path).replace(str(tmp_path) + os.sep, ""))


def test_a_metric_the_task_does_not_produce_is_refused_before_training(tmp_path):
    path = _write(tmp_path, TINY.replace('metric = "dev_loss"', 'metric = "dev_perplexity"'))
    with pytest.raises(ValueError, match=r"sweep.toml:3: metric: task mean-sign does not produce 'dev_perplexity'; "
                                         r"it produces \[.*'dev_accuracy', 'dev_loss'"):
        run_sweep(parse_sweep(path.read_text(), str(path)), tmp_path / "out", progress=False)
    assert not list((tmp_path / "out").glob("trials/*"))


def test_force_with_a_metric_the_task_does_not_produce_keeps_the_stored_trials(tmp_path):
    path = _write(tmp_path, TINY.replace("seeds = 2", "seeds = 1"))
    run_sweep(parse_sweep(path.read_text(), str(path)), tmp_path / "out", workers=1, progress=False)
    stored = sorted(p.name for p in (tmp_path / "out" / "trials").iterdir())
    wrong = path.read_text().replace('metric = "dev_loss"', 'metric = "dev_perplexity"')
    with pytest.raises(ValueError, match="does not produce 'dev_perplexity'"):
        run_sweep(parse_sweep(wrong, str(path)), tmp_path / "out", force=True, progress=False)
    assert sorted(p.name for p in (tmp_path / "out" / "trials").iterdir()) == stored
    assert all((tmp_path / "out" / "trials" / name / "trial.json").is_file() for name in stored)


def test_invalid_toml_names_the_file(tmp_path):
    path = _write(tmp_path, "task = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        parse_sweep(path.read_text(), "sweep.toml")


def test_the_same_file_gives_the_same_trials_and_growing_it_keeps_them():
    sweep = parse_sweep(TINY)
    trials = sweep.trials()
    assert [t.id for t in trials] == [t.id for t in parse_sweep(TINY).trials()]
    assert len(trials) == 2 * 2 * 2 and len({t.id for t in trials}) == 8
    more = parse_sweep(TINY.replace("samples = 2", "samples = 3").replace("seeds = 2", "seeds = 3")).trials()
    assert {t.id for t in trials} <= {t.id for t in more}
    assert {t.group for t in trials} == {"cell=rnn", "cell=gru"}
    for t in trials:
        assert 1e-3 <= t.values["lr"] <= 1e-1 and t.settings["lr"] == t.values["lr"]
        assert t.settings["epochs"] == 2 and t.settings["task_options"]["n_train"] == 48


PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.mark.parametrize("report", sorted(PUBLISHED.glob("*/report.md")), ids=lambda p: p.parent.name)
def test_a_published_sweep_keeps_its_trial_ids_as_rnnlab_gains_settings(report):
    """Each published sweep's trials.csv lists the ids its file gives today, so rerunning or growing the
    file finds every stored trial instead of training it again (ids hash the settings)."""
    file = re.search(r"rnnlab sweep (\S+\.toml)", report.read_text())
    assert file, f"{report}: does not name its sweep file"
    sweep = parse_sweep((PUBLISHED.parents[1] / file.group(1)).read_text(), file.group(1))
    with open(report.parent / "trials.csv", newline="") as f:
        stored = {row["id"] for row in csv.DictReader(f)}
    assert stored == {t.id for t in sweep.trials()}


def test_a_setting_added_later_changes_an_id_only_away_from_its_default():
    from rnnlab.experiments.settings import LATER_SETTINGS, settings_identity, settings_table

    defaults = {s.name: s.default for s in settings_table()}
    sweep = parse_sweep(TINY)
    trial = sweep.trials()[0]
    away = {"forget_bias": 2.5, "bucket": "false", "nesterov": "true", "momentum_scales_lr": "true",
            "input_noise": 0.1, "block": '"glu"', "block_norm": '"layer"', "block_expansion": 2}
    # (a value other than the default, as a file writes it)
    assert set(away) == set(LATER_SETTINGS)
    for name in LATER_SETTINGS:
        assert trial.settings[name] == defaults[name] and name not in settings_identity(trial.settings)
        moved = parse_sweep(TINY.replace("[settings]", f"[settings]\n{name} = {away[name]}")).trials()[0]
        assert moved.settings[name] != defaults[name] and moved.id != trial.id
        assert settings_identity(moved.settings)[name] == moved.settings[name]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["rnn", "gru", "lstm"]), min_size=1, max_size=3, unique=True),
       st.integers(1, 4), st.integers(1, 3), st.floats(1e-5, 1e-2), st.floats(2.0, 100.0),
       st.integers(1, 8), st.integers(0, 6))
def test_trials_are_grid_times_samples_times_seeds_within_their_ranges(cells, samples, seeds, low, factor, h_low,
                                                                     h_span):
    text = (f'task = "mean-sign"\nmetric = "dev_loss"\nseeds = {seeds}\nsamples = {samples}\n[search]\n'
            f"cell = {json.dumps(cells)}\nlr = {{ loguniform = [{low!r}, {low * factor!r}] }}\n"
            f"hidden = {{ int = [{h_low}, {h_low + h_span}] }}\n")
    trials = parse_sweep(text).trials()
    configs = {t.config for t in trials}
    assert len(trials) == len(configs) * seeds and len({t.id for t in trials}) == len(trials)
    assert len(configs) <= len(cells) * samples
    distinct_draws = {(t.group, t.values["lr"], t.values["hidden"]) for t in trials}
    assert len(distinct_draws) == len(configs)    # repeated draws are trained once
    for t in trials:
        assert low * (1 - 1e-3) <= t.values["lr"] <= low * factor * (1 + 1e-3)
        assert h_low <= t.values["hidden"] <= h_low + h_span and isinstance(t.values["hidden"], int)
        assert t.settings["cell"] == t.group.split("=")[1]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 50), st.integers(1, 20), st.floats(1e-3, 0.5), st.floats(1.5, 100.0), st.integers(1, 6))
def test_greffs_draws_stay_in_their_ranges(h_low, h_factor, u_low, u_factor, samples):
    """logint: an integer log-uniform in [a, b] (Greff's hidden size); one_minus_loguniform: 1 − u with u
    log-uniform in [a, b] (his momentum)."""
    u_high = min(1.0, u_low * u_factor)
    text = (f'task = "mean-sign"\nmetric = "dev_loss"\nsamples = {samples}\n[search]\n'
            f"hidden = {{ logint = [{h_low}, {h_low * h_factor}] }}\n"
            f"momentum = {{ one_minus_loguniform = [{u_low!r}, {u_high!r}] }}\n")
    sweep = parse_sweep(text)
    assert sweep.sampled["hidden"].log and not sweep.sampled["momentum"].log
    for t in sweep.trials():
        assert isinstance(t.values["hidden"], int) and h_low <= t.values["hidden"] <= h_low * h_factor
        assert 1 - u_high - 1e-3 <= t.values["momentum"] <= 1 - u_low + 1e-3


@pytest.mark.parametrize("axis, message", [
    ("hidden = { logint = [0, 10] }", "logint needs 0 < low"),
    ("hidden = { logint = [2.5, 10] }", "logint expects two integers"),
    ("momentum = { one_minus_loguniform = [0.0, 1.0] }", "one_minus_loguniform needs 0 < low"),
    ("momentum = { one_minus_loguniform = [0.5, 2.0] }", "invalid value -1.0 for momentum"),
])
def test_greffs_distributions_refuse_bad_ranges(axis, message):
    with pytest.raises(ValueError, match=message):
        parse_sweep(f'task = "mean-sign"\nmetric = "dev_loss"\n[search]\n{axis}\n')


# -- running, storing, resuming -------------------------------------------------------------------

def test_a_sweep_stores_every_trial_once_and_a_rerun_trains_nothing(tmp_path, capsys, monkeypatch):
    path = _write(tmp_path, TINY)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "2"]) == 0
    rows = _rows(out / "trials.csv")
    trials = parse_sweep(TINY).trials()
    assert sorted(r["id"] for r in rows) == sorted(t.id for t in trials)
    assert set(rows[0]) >= {"id", "cell", "lr", "seed", "train_loss", "dev_loss", "test_loss", "test_accuracy",
                            "seconds", "status", "error"}
    assert all(r["status"] == "ok" and math.isfinite(float(r["dev_loss"])) for r in rows)
    first = (out / "trials.csv").read_text()

    def build_the_task(trial):   # the stored trials show the metric: no untrained model is built to check it
        raise AssertionError("a rerun built the task to check its metric")
    monkeypatch.setattr("rnnlab.experiments.sweeps.produced_metrics", build_the_task)
    summary = run_sweep(parse_sweep(TINY, str(path)), out, progress=False)
    assert summary.trained_now == 0 and (out / "trials.csv").read_text() == first
    report = (out / "report.html").read_text()
    assert "table class=\"sortable\"" in report and report.count("data:image/png;base64,") == 1
    assert "dev_loss against lr" in (out / "report.md").read_text()
    assert sorted(p.name for p in (out / "best").iterdir()) == ["cell=gru.toml", "cell=rnn.toml"]
    printed = capsys.readouterr().out
    assert "| cell=rnn |" in printed and "| cell=gru |" in printed and "report.html" in printed


def test_the_best_settings_file_reruns_the_best_configuration(tmp_path):
    path = _write(tmp_path, TINY.replace("seeds = 2", "seeds = 1"))
    out = tmp_path / "out"
    summary = run_sweep(parse_sweep(path.read_text(), str(path)), out, workers=1, progress=False)
    rnn = next(g for g in summary.groups if g["group"] == "cell=rnn")["configs"][0]
    args = build_parser().parse_args(["train", "--config", str(out / "best" / "cell=rnn.toml"), "--out",
                                      str(tmp_path / "rerun"), "--quiet"])
    settings_rerun = settings_from_args(args)
    assert settings_rerun["lr"] == rnn["values"]["lr"] and settings_rerun["task_options"]["n_train"] == 48
    assert main(["train", "--config", str(out / "best" / "cell=rnn.toml"), "--out", str(tmp_path / "rerun"),
                 "--quiet"]) == 0
    rerun = json.loads((tmp_path / "rerun" / "result.json").read_text())
    assert rerun["dev_loss"] == pytest.approx(rnn["mean"], rel=1e-12)


def test_diverged_and_failed_trials_are_recorded_and_the_sweep_goes_on(tmp_path):
    text = TINY.replace("length = 6\n", "").replace('cell = ["rnn", "gru"]\n', "").replace(
        "lr = { loguniform = [1e-3, 1e-1] }", "lr = [0.01, 1e100]\n[search.task_options]\nlength = [6, 0]").replace(
        "samples = 2", "samples = 1")
    # a ReLU RNN at a rate of 1e100: its states overflow to Inf within an update or two (the sign of the
    # mean of 0 steps is undefined)
    text = text.replace("seeds = 2", "seeds = 1").replace("hidden = 4", 'hidden = 4\ncell = "rnn"\nactivation = "relu"')
    path = _write(tmp_path, text)
    summary = run_sweep(parse_sweep(text, str(path)), tmp_path / "out", workers=1, progress=False)
    statuses = {(r["values"]["length"], r["values"]["lr"]): (r["status"], r["error"]) for r in summary.records}
    assert statuses[(6, 0.01)][0] == "ok"
    assert statuses[(6, 1e100)][0] == "diverged" and "NaN or Inf" in statuses[(6, 1e100)][1]
    assert statuses[(0, 0.01)][0] == "failed" and "length >= 1, got 0" in statuses[(0, 0.01)][1]
    rows = _rows(tmp_path / "out" / "trials.csv")
    assert sorted(r["status"] for r in rows) == ["diverged", "failed", "failed", "ok"]


@pytest.mark.slow
def test_a_driver_killed_mid_sweep_resumes_to_the_same_results(tmp_path):
    text = TINY.replace("samples = 2", "samples = 3")
    path = _write(tmp_path, text)
    command = [sys.executable, "-m", "rnnlab.cli", "sweep", str(path), "--workers", "2", "--out"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen(command + [str(killed)], start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(list(killed.glob("trials/*/trial.json"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, at once
    proc.wait()
    stored = len(list(killed.glob("trials/*/trial.json")))
    total = len(parse_sweep(text).trials())
    assert 3 <= stored < total, "the sweep finished before it could be killed; make it longer"
    subprocess.run(command + [str(killed)], check=True, capture_output=True)
    subprocess.run(command + [str(tmp_path / "whole")], check=True, capture_output=True)
    resumed, whole = _rows(killed / "trials.csv"), _rows(tmp_path / "whole" / "trials.csv")
    assert len(resumed) == total and len({r["id"] for r in resumed}) == total
    def measured(rows: list[dict]) -> list[dict]:     # without the timings, which no rerun repeats
        return [{k: v for k, v in r.items() if metric(k).kind != SECONDS} for r in rows]
    assert measured(resumed) == measured(whole)


def test_trials_csv_is_rebuilt_from_the_store(tmp_path):
    sweep = parse_sweep(TINY)
    trials = sweep.trials()
    from rnnlab.experiments.sweeps import TrialStore

    store = TrialStore(tmp_path)
    outcome = {"status": "ok", "error": "", "metrics": {"dev_loss": 0.5}, "history": [], "seconds": 1.0}
    store.store(trials[3], outcome)
    store.store(trials[3], outcome)   # stored again (a retry): still one row
    store.store(trials[0], outcome)
    records = write_trials_csv(store, sweep, trials)
    assert [r["id"] for r in records] == [trials[0].id, trials[3].id]
    assert [r["id"] for r in _rows(tmp_path / "trials.csv")] == [trials[0].id, trials[3].id]


def test_asha_is_refused_by_the_local_executor(tmp_path, capsys):
    path = _write(tmp_path, TINY)
    with pytest.raises(SystemExit):
        main(["sweep", str(path), "--early-stop", "asha"])
    assert "--early-stop asha: needs --executor ray" in capsys.readouterr().err


def test_best_toml_values_round_trip(tmp_path):
    from rnnlab.experiments.settings import read_toml
    from rnnlab.experiments.sweeps import to_toml

    values = {"task": "mean-sign", "lr": 0.0123, "back_steps": "none", "bias": False, "milestones": [20, 30],
              "task_options": {"n_train": 10}}
    path = _write(tmp_path, to_toml(values, "header"), "best.toml")
    assert read_toml(path) == values
    assert np.isclose(read_toml(path)["lr"], 0.0123)


# -- the studies' own searches --------------------------------------------------------------------

def _produced_or_skip(trial, name: str) -> list[str]:
    """The metrics the trial's task produces; a skip naming the data when it is not on this machine."""
    from rnnlab.data.registry import DataMissing
    from rnnlab.experiments.sweeps import produced_metrics

    try:
        return produced_metrics(trial)
    except ValueError as err:
        if "DataMissing" in str(err):   # run_job's error names the exception; any other failure is a failure
            pytest.skip(f"{name}: its data is not on this machine ({err})")
        raise
    except DataMissing as err:
        pytest.skip(f"{name}: its data is not on this machine ({err})")


def _study_searches():
    from rnnlab.experiments.studies import EXPERIMENTS

    return [(name, exp) for name, exp in EXPERIMENTS.items() if exp.search]


@pytest.mark.parametrize("name, exp", _study_searches(), ids=[n for n, _ in _study_searches()])
def test_every_declared_search_parses_and_asks_for_a_metric_its_task_produces(name, exp):
    from rnnlab.experiments.sweeps import spec_sweep

    specs = [s for s in exp.specs(True) if exp.tune is None or s.key in exp.tune]
    assert specs, f"{name}: tune names no configuration of the study"
    sweep = spec_sweep(exp.search, specs[0], True, name)
    assert sweep.searched and all(k not in sweep.settings for k in sweep.searched)
    assert sweep.metric in _produced_or_skip(sweep.trials()[0], name)


@pytest.mark.slow
def test_reproduce_tune_runs_the_search_then_trains_the_best(tmp_path):
    from rnnlab.experiments.studies import EXPERIMENTS
    from rnnlab.experiments.sweeps import spec_sweep

    exp = EXPERIMENTS["polyphonic"]
    _produced_or_skip(spec_sweep(exp.search, exp.specs(True)[0], True, "polyphonic").trials()[0], "polyphonic")
    assert main(["reproduce", "polyphonic", "--tune", "--quick", "--seeds", "2", "--out", str(tmp_path)]) == 0
    results = StudyResults.load(tmp_path / "polyphonic-tuned" / "results.json")
    searches = sorted(p.name for p in (tmp_path / "polyphonic-tuned" / "search").iterdir())
    assert searches == sorted(s.key for s in exp.specs(True))
    for spec in results.configurations:
        rows = _rows(tmp_path / "polyphonic-tuned" / "search" / spec["key"] / "trials.csv")
        ok = [r for r in rows if r["status"] == "ok"]
        best = min(ok, key=lambda r: float(r["dev_loss"]))
        assert spec["settings"]["lr"] == pytest.approx(float(best["lr"]))    # the tuned run uses the search's best
        assert math.exp(-12) <= spec["settings"]["lr"] <= math.exp(-6)
    assert any("Tuned: lr of each configuration" in n for n in results.notes)
    assert results.verdicts


def test_a_linked_axis_sets_a_cell_with_its_own_size():
    text = TINY.replace('cell = ["rnn", "gru"]', 'model = [{ cell = "rnn", hidden = 9 }, { cell = "gru", hidden = 5, '
                        'variant = "cho" }]').replace("hidden = 4\n", "")
    sweep = parse_sweep(text)
    assert sweep.searched == ["cell", "hidden", "variant", "lr"]
    trials = sweep.trials()
    assert {t.group for t in trials} == {"cell=rnn,hidden=9", "cell=gru,hidden=5,variant=cho"}
    assert all((t.settings["cell"], t.settings["hidden"]) in {("rnn", 9), ("gru", 5)} for t in trials)
    assert all(t.settings["variant"] == "cho" for t in trials if t.settings["cell"] == "gru")
    with pytest.raises(ValueError, match="search.model: hidden: set in \\[settings\\] too"):
        parse_sweep(text.replace("layers = 1", "layers = 1\nhidden = 3"))
    with pytest.raises(ValueError, match="search.cell: searched by two axes"):
        parse_sweep(text.replace("[search]", '[search]\ncell = ["lstm"]'))


def test_task_options_are_grid_axes_too(tmp_path):
    text = (TINY.replace("length = 6\n", "").replace("seeds = 2", "seeds = 1").replace("samples = 2", "samples = 1")
            + "[search.task_options]\nlength = [4, 7]\n")
    sweep = parse_sweep(text)
    assert sweep.searched == ["cell", "length", "lr"]
    trials = sweep.trials()
    assert sorted((t.settings["cell"], t.settings["task_options"]["length"]) for t in trials) == [
        ("gru", 4), ("gru", 7), ("rnn", 4), ("rnn", 7)]
    assert all(t.settings["task_options"]["n_train"] == 48 and "length" not in t.settings for t in trials)
    summary = run_sweep(sweep, tmp_path / "lengths", workers=1, progress=False)
    assert "length" in summary.plot_axes
    rows = _rows(tmp_path / "lengths" / "trials.csv")
    assert sorted(int(r["length"]) for r in rows) == [4, 4, 7, 7]
    for record in summary.records:   # each trial trained on sequences of its own length
        result = json.loads((tmp_path / "lengths" / "trials" / record["id"] / "result.json").read_text())
        assert result["settings"]["task_options"]["length"] == record["values"]["length"]
    for bad, message in ((("length = [4, 7]", "steps = [4, 7]"), r"sweep:22: search.task_options.steps: task "
                          r"mean-sign has no option 'steps'"),
                         (("length = [4, 7]", "length = []"), r"search.task_options.length: expected a non-empty list"),
                         (("length = [4, 7]", "n_train = [4, 7]"), r"search.task_options.n_train: set in "
                          r"\[task_options\] too")):
        with pytest.raises(ValueError, match=message):
            parse_sweep(text.replace(*bad))


@pytest.mark.slow
def test_replicas_train_seeds_and_rates_together_with_the_same_trials(tmp_path):
    pytest.importorskip("jax", reason="the jax extra is not installed")
    from rnnlab.experiments.executors import Job, replica_groups

    sweep = parse_sweep(TINY)
    groups = replica_groups([Job(t.id, t.settings, None) for t in sweep.trials()])
    # per cell, 2 learning rates × 2 seeds: each seed once per program
    assert [len(g) for g in groups] == [2, 2, 2, 2]
    assert all(len({s["lr"] for _, s, _ in g}) == 1 or len({s["seed"] for _, s, _ in g}) == len(g) for g in groups)
    plain = run_sweep(sweep, tmp_path / "plain", workers=1, progress=False)
    together = run_sweep(sweep, tmp_path / "replicas", workers=1, progress=False, replicas=True)
    a = {r["id"]: r for r in plain.records}
    b = {r["id"]: r for r in together.records}
    assert a.keys() == b.keys()
    for trial_id, record in a.items():
        assert record["metrics"].keys() == b[trial_id]["metrics"].keys()
        for name, value in record["metrics"].items():
            if metric(name).kind != SECONDS:
                assert b[trial_id]["metrics"][name] == pytest.approx(value, rel=1e-6, abs=1e-9), name


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "examples").rglob("*.toml")),
                         ids=lambda p: p.name)
def test_the_example_sweeps_parse_and_ask_for_a_metric_their_task_produces(path):
    sweep = load_sweep(path)
    assert sweep.metric in _produced_or_skip(sweep.trials()[0], path.name)


def test_a_map_compares_its_cells_at_each_point_and_publishes(tmp_path):
    text = TINY.replace("lr = { loguniform = [1e-3, 1e-1] }", "lr = [0.01, 0.1]").replace("samples = 2", "samples = 1")
    path = _write(tmp_path, text)
    out, dest = tmp_path / "map", tmp_path / "docs" / "map"
    args = ["sweep", str(path), "--out", str(out), "--workers", "1", "--publish", str(dest)]
    assert main(args) == 0
    assert main(args) == 0     # again: trains nothing, and the wall time still counts the first call only
    summary_rows = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    assert [c["trained_now"] for c in summary_rows] == [8, 0]
    page = (dest / "report.md").read_text()
    assert f"`rnnlab sweep {path} --out {out}" in page and "rnnlab 0.1.0" in page
    assert "over 1 call that trained (local executor)" in page
    assert (dest / "trials.csv").read_text() == (out / "trials.csv").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert links and all((dest / link).is_file() for link in links)
    # rnn against gru at each learning rate, over the 2 seeds, Holm-corrected
    table = page.split("## Compared at each point")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| lr=")]
    assert [r.split(" | ")[0] for r in rows] == ["| lr=0.01", "| lr=0.1"]
    assert all("cell=rnn vs cell=gru" in r and "exact permutation test" in r for r in rows)
    records = {r["id"]: r for r in csv.DictReader(open(out / "trials.csv"))}
    for row in rows:
        lr = float(row.split(" | ")[0].removeprefix("| lr="))
        values = {cell: [float(r["dev_loss"]) for r in records.values() if r["cell"] == cell and
                         float(r["lr"]) == lr] for cell in ("rnn", "gru")}
        p = stats.permutation_test((values["rnn"], values["gru"]), lambda x, y, axis: x.mean(axis) - y.mean(axis),
                                   vectorized=True, n_resamples=np.inf).pvalue
        assert float(row.split(" | ")[6]) == pytest.approx(p, rel=0.05)
        p_holm = float(row.split(" | ")[7].rstrip(" |"))   # two comparisons: between p and 2p
        assert p * 0.95 <= p_holm <= min(1.0, 2 * p) * 1.05


def test_holm_adjusts_and_stays_monotone():
    from rnnlab.experiments.sweeps import holm

    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])   # 2 × 0.8 capped at 1, then monotone


def test_a_best_value_at_the_edge_of_the_values_tried_is_flagged():
    from rnnlab.experiments.sweeps import _edge_of_search

    configs = [{"values": {"lr": lr, "optimizer": "adam"}} for lr in (0.001, 0.003, 0.01)]
    assert _edge_of_search(configs[2], configs) == "; the highest lr tried"
    assert _edge_of_search(configs[0], configs) == "; the lowest lr tried"
    assert _edge_of_search(configs[1], configs) == ""
    assert _edge_of_search(configs[0], configs[:2]) == ""     # two values: every value is an edge, so none is told


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "examples").rglob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_sweep_file_parses_into_valid_trials(path):
    sweep = load_sweep(path)
    trials = sweep.trials()
    assert len(trials) >= sweep.seeds and len({t.id for t in trials}) == len(trials)
    assert {t.seed for t in trials} == set(range(sweep.seeds))
    assert quick_version(sweep).trials()     # `--quick` checks a file before its long run


def test_a_random_search_reports_what_each_setting_explains(monkeypatch):
    """A random search over two settings gets a fANOVA section: here the score depends on the learning rate alone.
    A grid gets none, and without the extra the page says how to get it."""
    from rnnlab.experiments import importance
    from rnnlab.experiments.sweeps import sweep_results
    from rnnlab.page import markdown
    from rnnlab.pages.sweep import sweep_page

    sweep = parse_sweep('task = "adding"\nmetric = "dev_loss"\nsamples = 40\n[search]\n'
                        'lr = { loguniform = [1e-4, 1e-1] }\nclip = { uniform = [0.5, 5.0] }\n')
    records = [{"id": t.id, "group": t.group, "config": t.config, "values": t.values, "seed": t.seed, "status": "ok",
                "error": "", "seconds": 1.0, "metrics": {"dev_loss": (math.log10(t.values["lr"]) + 2.5) ** 2}}
               for t in sweep.trials()]
    if importance.available():
        found = sweep_results(sweep, records).importance
        assert found["configurations"] == 40 and found["shares"]["lr"] > 0.8 > found["shares"]["clip"]
        assert "## Hyperparameter importance" in markdown(sweep_page(sweep_results(sweep, records), []))
    monkeypatch.setattr(importance, "available", lambda: False)
    page = markdown(sweep_page(sweep_results(sweep, records), []))
    assert "Not computed: pip install 'rnnlab[importance]'" in page
    grid = parse_sweep('task = "adding"\nmetric = "dev_loss"\n[search]\nlr = [0.01, 0.1]\nclip = [1.0, 2.0]\n')
    assert sweep_results(grid, []).importance is None


SCALES = parse_sweep('task = "adding"\nmetric = "dev_loss"\nmode = "min"\nsamples = 4\n[search]\n'
                     'lr = { loguniform = [1e-3, 5e-3] }\n'
                     'momentum = { one_minus_loguniform = [0.01, 1.0] }\ninput_noise = { uniform = [0.01, 1.0] }\n'
                     'hidden = { logint = [8, 128] }\nclip = { int = [1, 100] }\n', "scales")


def test_importance_reads_each_axis_on_the_scale_the_search_declares():
    """Log scales come from the declared distributions, not from the values' spread: a log-uniform rate inside one
    decade is log, a uniform noise spanning two is not; a momentum is read as its distance from 1."""
    rows = [{"lr": 0.002, "momentum": 0.9, "input_noise": 0.5, "hidden": 20, "clip": 5, "model": "gru"}]
    scaled, log = importance_inputs(SCALES.sampled, rows)
    assert set(log) == {"lr", "momentum", "hidden"}
    assert scaled == [{"lr": 0.002, "momentum": pytest.approx(0.1), "input_noise": 0.5, "hidden": 20, "clip": 5,
                       "model": "gru"}]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_draw_on_its_drawn_scale_lies_in_the_declared_range(seed):
    rng = np.random.default_rng(seed)
    for name, dist in SCALES.sampled.items():
        low, high = dist.args
        value = dist.on_drawn_scale(dist.draw(rng))
        assert low * (1 - 1e-3) <= value <= high * (1 + 1e-3), name      # draws keep four significant digits
