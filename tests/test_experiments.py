"""Every experiment end to end in --quick mode: structure and sanity of results.json, the reports,
resumable runs, the main job through the real entry point, and the report in a real browser."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import pin_fixture_data
from rnnlab.experiments.results import StudyResults
from rnnlab.experiments.runner import run_experiment
from rnnlab.experiments.settings import build, load_trained
from rnnlab.experiments.studies import COMPARE, EXPERIMENTS
from rnnlab.pages.run import write_report
from rnnlab.train import CHECKPOINT, load_checkpoint

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
NEEDS = {"sentiment": ["sst"], "polyphonic": ["polyphonic"], "nlu-lm": ["nlu"], "agreement": ["nlu"],
         "bptt-depth": ["nlu"], "ptb": ["ptb"]}


def _check_results(exp, results, exp_dir: Path, seeds: int):
    specs = exp.specs(True)
    assert results.quick is True
    got = {(r.key, r.seed) for r in results.runs}
    assert got == {(s.key, seed) for s in specs for seed in range(seeds)}, "every configuration × seed"
    for run in results.runs:
        _, model = build(run.settings)
        assert run.metrics["num_params"] == model.num_params(), run.key
        for metric in exp.metric_names:
            if run.metrics.get(metric) is not None:
                assert math.isfinite(run.metrics[metric]), (run.key, metric)
    for row in results.summary:
        assert row["seeds"] == seeds
        assert any(k.endswith("_mean") for k in row), row["key"]
    saved = json.loads((exp_dir / "results.json").read_text())
    assert saved["summary"] == json.loads(json.dumps(results.summary))
    assert (exp_dir / "results.csv").read_text().count("\n") == len(specs) * seeds + 1
    for fig in results.figures:
        assert (exp_dir / fig["path"]).stat().st_size > 1000, fig["path"]
    # every claim and every published number has its verdict row, with one of the three outcomes
    verdicts = results.verdicts
    assert [v.claim for v in verdicts if v.kind == "claim"] == [c.text for c in exp.claims]
    assert len([v for v in verdicts if v.kind == "published"]) == len(exp.published)
    allowed = ("reproduced", "not reproduced", "not significant with", "shown only", "not run (quick mode)",
               "matches (within ±", "differs: ours ", "inconclusive with")
    assert all(v.verdict.startswith(allowed) for v in verdicts), [v.verdict for v in verdicts]
    html_path, md_path = write_report(results, exp_dir)
    page = html_path.read_text()
    strips = (exp_dir / "claims.png").is_file()     # the per-seed dots behind the claims, when any was tested
    assert "Quick mode" in page and page.count("data:image/png;base64,") == len(results.figures) + strips
    markdown = md_path.read_text()
    assert "Quick mode" in markdown
    if verdicts:   # the verdicts lead the report, before the tables
        assert page.index("id='verdicts'") < page.index("<h2>Results</h2>")
        assert markdown.index("## Verdicts") < markdown.index("## Results")
    assert all(f["caption"] for f in results.figures), "every figure says what to see in it"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_experiment_runs_in_quick_mode(name, tmp_path):
    missing = [d for d in NEEDS.get(name, []) if not (SHARED / d).is_dir()]
    if missing:
        pytest.skip(f"real data absent: {', '.join(str(SHARED / d) for d in missing)}")
    if name == "polyphonic":
        pytest.importorskip("scipy.io", reason="the .mat files need scipy (the mat extra)")
    exp = EXPERIMENTS[name]
    results = run_experiment(exp, tmp_path, seeds=2, workers=1, quick=True, progress=False)
    _check_results(exp, results, tmp_path / name, seeds=2)


@pytest.mark.parametrize("name", list(EXPERIMENTS) + ["compare"])
def test_every_published_number_and_claim_names_a_configuration_of_the_full_study(name):
    exp = COMPARE if name == "compare" else EXPERIMENTS[name]
    specs = exp.specs(False)
    keys = {s.key for s in specs}
    assert len(keys) == len(specs), "configuration keys are unique"
    for key, metric in exp.published:
        assert key in keys, f"{name}: published {key!r} is not a configuration ({sorted(keys)})"
        assert metric in exp.metric_names, f"{name}: published metric {metric!r} is not in the tables"
    for claim in exp.claims:
        for key in (claim.better, claim.worse):
            assert key in keys, f"{name}: claim {claim.text!r} names {key!r}, not a configuration"
    for key, metric in exp.reasons:
        assert (key, metric) in exp.published, f"{name}: a reason for {key} {metric}, which has no published number"


@pytest.mark.slow
def test_reruns_skip_finished_jobs_and_force_retrains(tmp_path):
    exp = EXPERIMENTS["mean-sign"]
    run_experiment(exp, tmp_path, seeds=2, workers=1, quick=True, progress=False)
    result_file = tmp_path / "mean-sign" / "jobs" / "rnn-64x2-s1" / "result.json"
    stamp = result_file.stat().st_mtime_ns
    run_experiment(exp, tmp_path, seeds=2, workers=1, quick=True, progress=False)
    assert result_file.stat().st_mtime_ns == stamp
    run_experiment(exp, tmp_path, seeds=2, workers=1, quick=True, force=True, progress=False)
    assert result_file.stat().st_mtime_ns != stamp


def test_jobs_stored_before_a_setting_existed_are_kept_and_load(tmp_path):
    """A setting added to rnnlab later (here forget_bias) is absent from older jobs; its default is the
    behaviour they had, so a rerun keeps them (nothing retrained, nothing deleted) and they still load."""
    from rnnlab.experiments.runner import Experiment, RunSpec

    options = {"n_train": 40, "n_dev": 20, "n_test": 20, "length": 5, "features": 3}
    exp = Experiment(name="old", title="Old jobs", study="a test", about="One LSTM.", metric_names=["test_loss"],
                     specs=lambda quick: [RunSpec("lstm", "mean-sign", {"cell": "lstm", "hidden": 4, "layers": 1,
                                                                        "epochs": 2, "batch_size": 20}, options)])
    first = run_experiment(exp, tmp_path, seeds=1, workers=1, progress=False)
    job = tmp_path / "old" / "jobs" / "lstm-s0"
    result = json.loads((job / "result.json").read_text())
    assert result["run"]["settings"]["forget_bias"] == 1.0
    del result["run"]["settings"]["forget_bias"]
    (job / "result.json").write_text(json.dumps(result))
    arrays, meta = load_checkpoint(job / CHECKPOINT)
    del meta["run"]["settings"]["forget_bias"]
    np.savez(job / CHECKPOINT, meta=np.array(json.dumps(meta)), **arrays)
    stamp = (job / "result.json").stat().st_mtime_ns
    again = run_experiment(exp, tmp_path, seeds=1, workers=1, progress=False)
    assert (job / "result.json").stat().st_mtime_ns == stamp
    assert [r.metrics["test_loss"] for r in again.runs] == [r.metrics["test_loss"] for r in first.runs]
    trained = load_trained(job / CHECKPOINT)
    assert trained.settings["forget_bias"] == 1.0
    assert all(np.array_equal(trained.model.params[k], arrays[f"best/{k}"]) for k in trained.model.params)


@pytest.mark.slow
def test_replicas_give_the_same_results_as_seed_by_seed_runs(tmp_path):
    """--replicas trains each configuration's seeds as one compiled program: same results (float32
    training, so to rounding), same files, and the stored parameters load for the analyses."""
    pytest.importorskip("jax", reason="--replicas needs the jax extra")
    exp = EXPERIMENTS["mean-sign"]
    plain = run_experiment(exp, tmp_path / "plain", seeds=2, workers=1, quick=True, progress=False)
    together = run_experiment(exp, tmp_path / "replicas", seeds=2, workers=2, quick=True, progress=False,
                              replicas=True)
    _check_results(exp, together, tmp_path / "replicas" / "mean-sign", seeds=2)
    for a, b in zip(plain.runs, together.runs):
        assert (a.key, a.seed) == (b.key, b.seed)
        for metric in ("test_loss", "test_accuracy", "train_loss"):
            assert b.metrics[metric] == pytest.approx(a.metrics[metric], rel=2e-3, abs=2e-3), metric
    job = json.loads((tmp_path / "replicas" / "mean-sign" / "jobs" / "rnn-64x2-s1" / "result.json").read_text())
    assert job["replicas"] == 2
    from rnnlab.train import RunFolder

    one, other = (RunFolder(tmp_path / way / "mean-sign" / "jobs" / "rnn-64x2-s1") for way in ("plain", "replicas"))
    assert one.done() and other.done() and not other.can_resume()         # one layout, written by both trainers
    assert {p.name for p in one.path.iterdir()} == {p.name for p in other.path.iterdir()} >= set(RunFolder.FILES)
    assert one.record()[1]["settings"] == other.record()[1]["settings"]


def test_replica_jobs_fall_back_to_seed_by_seed_where_replicas_cannot_train(tmp_path):
    """Weight noise (and streams) train through fit, seed by seed, stored as usual."""
    pytest.importorskip("jax", reason="--replicas needs the jax extra")
    from rnnlab.experiments.executors import run_replica_group

    spec = EXPERIMENTS["mean-sign"].specs(True)[0]
    settings = [{**spec.full_settings(seed), "weight_noise": 0.01} for seed in (0, 1)]
    dirs = [str(tmp_path / f"s{seed}") for seed in (0, 1)]
    assert [o["replicas"] for o in run_replica_group(settings, dirs)] == [1, 1]
    for d, s in zip(dirs, settings):
        result = json.loads((Path(d) / "result.json").read_text())
        assert result["run"]["settings"] == s and "replicas" not in result
        assert (Path(d) / "checkpoint.npz").is_file() and math.isfinite(result["test_loss"])


def _compare_quick(tmp_path: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "rnnlab.cli", "compare", "--quick", "--seeds", "2", "--workers", "2",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "report: " in proc.stdout and "rnnlab reproduce" in proc.stdout
    assert proc.stdout.index("Claims, tested over seeds") < proc.stdout.index("| configuration |")
    return tmp_path / "compare" / "report.html"


@pytest.mark.slow
def test_compare_quick_through_the_entry_point(tmp_path):
    report = _compare_quick(tmp_path)
    results = StudyResults.load(report.parent / "results.json")
    _check_results(COMPARE, results, report.parent, seeds=2)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no Chromium on this machine (.ci/run installs Debian's chromium)")
def test_report_renders_in_a_real_browser(tmp_path):
    report = _compare_quick(tmp_path)
    results = StudyResults.load(report.parent / "results.json")
    proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                           "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert "<table" in dom and "embedded-reber-gru-10" in dom, proc.stderr[-2000:]
    verdicts = dom[dom.index('id="verdicts"'):dom.index("<h2>Results</h2>")]
    assert "Claims, tested over seeds" in verdicts and "Published numbers against ours" in verdicts
    assert verdicts.count("<tr>") >= len(results.verdicts) + 2
    expected = len(results.figures) + 1      # and the strip of per-seed dots behind the claims
    assert expected >= 6 and (report.parent / "claims.png").is_file()
    assert re.search(rf'data-images="{expected}"', dom), "the browser did not see every image"
    assert re.search(rf'data-images-decoded="{expected}"', dom), "the browser could not decode every image"


def _tiny_study():
    """A study shaped like the real ones (claims, a published number, a search, a figure) that trains
    in seconds without --quick, so that what --publish refuses for quick runs can be tested."""
    from rnnlab.analysis.steps import LearningCurves
    from rnnlab.experiments.runner import Experiment, RunSpec
    from rnnlab.experiments.verdicts import Claim

    options = {"n_train": 40, "n_dev": 20, "n_test": 20, "length": 5, "features": 3}

    def specs(quick: bool) -> list[RunSpec]:
        return [RunSpec(cell, "mean-sign", {"cell": cell, "hidden": 4, "layers": 1, "epochs": 2, "batch_size": 20},
                        options) for cell in ("rnn", "gru")]

    return Experiment(name="tiny", title="A tiny study", study="a test", about="Two cells, two epochs.", specs=specs,
                      metric_names=["test_accuracy", "test_loss"],
                      published={("gru", "test_accuracy"): 0.9}, reasons={("gru", "test_accuracy"): "tiny data"},
                      claims=[Claim("the GRU beats the RNN", "gru", "rnn", "test_accuracy", source="a test")],
                      search='metric = "dev_loss"\nmode = "min"\nseeds = 2\nsamples = 2\n[search]\n'
                             'lr = { loguniform = [1e-3, 1e-1] }\n',
                      analyses=[LearningCurves("dev_loss", "dev loss", name="Dev loss", caption="Two cells.")])


def test_a_study_that_counts_failed_runs_keeps_them_and_one_that_stops_names_them(tmp_path):
    """failed_runs="count" (the benchmark's): a run that fails is kept with its status, has no metrics, and is not
    trained again; "stop" (a study's): the first failure stops the study, naming the run."""
    from rnnlab.experiments.executors import StudyRunFailed
    from rnnlab.experiments.runner import COUNT, Experiment, RunSpec, run_experiment

    good = {"n_train": 40, "n_dev": 20, "n_test": 20, "length": 5, "features": 3}

    def specs(quick: bool) -> list[RunSpec]:
        settings = {"cell": "rnn", "hidden": 3, "epochs": 1, "batch_size": 20}
        return [RunSpec("ok", "mean-sign", settings, good), RunSpec("bad", "mean-sign", settings, {**good, "bogus": 1})]

    counting = Experiment(name="counting", title="t", study="a test", about="t", specs=specs,
                          metric_names=["test_loss"], failed_runs=COUNT)
    results = run_experiment(counting, tmp_path, seeds=2, workers=1, progress=False)
    assert [(r.key, r.status, bool(r.metrics)) for r in results.runs] == [("ok", "ok", True)] * 2 + \
        [("bad", "failed", False)] * 2
    assert {row["key"]: row.get("test_loss_n") for row in results.summary} == {"ok": 2, "bad": None}
    again = run_experiment(counting, tmp_path, seeds=2, workers=1, progress=False)
    assert again.trained_now == 0 and [r.status for r in again.runs] == [r.status for r in results.runs]
    stopping = dataclasses.replace(counting, name="stopping", failed_runs="stop")
    with pytest.raises(StudyRunFailed, match="bad seed 0: failed"):
        run_experiment(stopping, tmp_path, seeds=1, workers=1, progress=False)
    with pytest.raises(ValueError, match="failed_runs is 'stop' or 'count'"):
        dataclasses.replace(counting, failed_runs="skip")


@pytest.mark.slow
def test_reproduce_publish_writes_the_study_setting_and_tuned_side_by_side(tmp_path, monkeypatch):
    from rnnlab.cli import main
    from rnnlab.pages.study import write_published

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())
    out, dest = tmp_path / "runs", tmp_path / "docs"
    common = ["--seeds", "2", "--workers", "1", "--out", str(out), "--publish", str(dest)]
    assert main(["reproduce", "tiny", *common]) == 0
    page = (dest / "tiny.md").read_text()
    assert "| at the study's setting |" in page and "tuned" not in page.split("## Verdicts")[0]
    assert main(["reproduce", "tiny", "--tune", *common]) == 0
    page = (dest / "tiny.md").read_text()
    assert "|  | at the study's setting | tuned |" in page
    # the verdicts in one line each, before anything else
    short = page.split("**In short**")[1].split("Study: ")[0]
    assert "- the GRU beats the RNN — at the study's setting: **" in short and "; tuned: **" in short
    assert f"`rnnlab reproduce tiny --seeds 2 --workers 1 --out {out}" in page
    assert "--tune" in page and "rnnlab 0.1.0" in page and re.search(r"20\d\d-\d\d-\d\d", page)
    assert re.search(r"wall time of the calls that trained \| \d+\.\d min \(1 call, 4 runs\) \| "
                     r"\d+\.\d min \(1 call, 4 runs\) \|", page)
    assert re.search(r"search before training, summed over trials \| – \| \d+\.\d min \(8 trials\)", page)
    # the verdicts come first, one row per claim with a cell for each variant
    assert page.index("## Verdicts") < page.index("## Results at the study's setting") < page.index("## Results tuned")
    claim_rows = [line for line in page.splitlines() if line.startswith("| the GRU beats the RNN |")]
    assert len(claim_rows) == 1 and claim_rows[0].count("**") == 4, claim_rows
    published = next(line for line in page.splitlines() if line.startswith("| gru test accuracy = 0.9"))
    assert published.count("**") == 4
    assert "Tuned: lr of each configuration" in page
    # each run's metrics beside the page, so every verdict can be recomputed from the repository
    assert "[at the study's setting](tiny/runs.csv) · [tuned](tiny/tuned-runs.csv)" in page
    for file in ("runs.csv", "tuned-runs.csv"):
        assert (dest / "tiny" / file).read_text().count("\n") == 4 + 1
    # every figure of both runs is copied beside the page and linked from it, with each variant's strip of
    # per-seed dots behind the claims and the search's expected best score against its budget
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert sorted(links) == ["tiny/claims.png", "tiny/dev_loss_epochs.png", "tiny/tuned-claims.png",
                             "tiny/tuned-dev_loss_epochs.png", "tiny/tuned-expected-best.png"]
    assert all((dest / link).stat().st_size > 1000 for link in links)
    assert "## Tuning budget" in page and (dest / "tiny" / "search-trials.csv").read_text().count("\n") == 8 + 1
    assert re.search(r"gru: [\d.]+ after 1 trial → [\d.]+ after 2; rnn: ", page)
    with pytest.raises(SystemExit):
        main(["reproduce", "tiny", "--quick", *common])
    # a later call that trains nothing re-reads the runs; the page still names and dates the call that trained
    monkeypatch.setattr("rnnlab.experiments.runner.time.strftime", lambda *args: "2099-01-01")
    assert main(["reproduce", "tiny", "--seeds", "2", "--out", str(out), "--publish", str(dest)]) == 0
    page = (dest / "tiny.md").read_text()
    assert "2099-01-01" not in page and re.search(r"\| measured \| 20\d\d-\d\d-\d\d, rnnlab", page)
    assert f"| `rnnlab reproduce tiny --seeds 2 --workers 1 --out {out}" in page
    # without the setting's runs here (PTB's 28 hours), publishing the tuned runs keeps the setting's column as
    # published: its compute cells, results, figures, settings, runs.csv and verdicts, word for word
    before = page
    kept = ("runs.csv", "dev_loss_epochs.png", "tuned-runs.csv", "tuned-dev_loss_epochs.png", "search-trials.csv")
    files = {f: (dest / "tiny" / f).read_bytes() for f in kept}
    shutil.move(out / "tiny", tmp_path / "setting-runs")
    assert main(["reproduce", "tiny", "--tune", *common]) == 0
    assert (dest / "tiny.md").read_text() == before
    # and the other way round: the setting's runs here, the tuned column (and its search) kept as published
    shutil.move(tmp_path / "setting-runs", out / "tiny")
    shutil.rmtree(out / "tiny-tuned")
    assert main(["reproduce", "tiny", *common]) == 0
    assert (dest / "tiny.md").read_text() == before
    assert {f: (dest / "tiny" / f).read_bytes() for f in kept} == files
    shutil.rmtree(out / "tiny")
    with pytest.raises(FileNotFoundError, match="no results of tiny"):
        write_published(out, "tiny", dest)        # a page is never made from kept columns alone


@pytest.mark.parametrize("name", [n for n, e in EXPERIMENTS.items() if e.search])
def test_every_tuned_configuration_is_a_configuration_of_the_study(name):
    exp = EXPERIMENTS[name]
    for quick in (True, False):
        keys = {s.key for s in exp.specs(quick)}
        assert set(exp.tune or keys) <= keys, (name, quick)


def test_tune_trains_only_the_tuned_configurations_with_the_claims_about_them(tmp_path):
    import dataclasses

    from rnnlab.experiments.sweeps import tune_experiment

    exp = dataclasses.replace(_tiny_study(), tune=["gru"])
    tuned = tune_experiment(exp, tmp_path, workers=1, progress=False).experiment
    assert [s.key for s in tuned.specs(False)] == ["gru"]
    assert tuned.claims == [] and list(tuned.published) == [("gru", "test_accuracy")]
    assert tuned.reasons == {("gru", "test_accuracy"): "tiny data"}     # the study's reasons hold for its tuned runs
    assert [p.name for p in (tmp_path / "tiny-tuned" / "search").iterdir()] == ["gru"]


class _SessionEnded(BaseException):
    """The session ends (as a KeyboardInterrupt or a kill would): not a run's failure to record."""


def test_a_run_cut_off_after_an_epoch_resumes_there_and_ends_as_an_uninterrupted_one(tmp_path, monkeypatch):
    import dataclasses

    import rnnlab.train
    from rnnlab.experiments.runner import run_experiment

    study, fit = _tiny_study(), rnnlab.train.fit
    whole = run_experiment(study, tmp_path / "whole", seeds=1, workers=1, progress=False)

    def cut_in_second_epoch(*args, **kwargs):
        def stop(row):  # called before the epoch's checkpoint is written: epoch 1's is the last
            if row["epoch"] == 2:
                raise _SessionEnded
        return fit(*args, **{**kwargs, "on_epoch": stop})

    monkeypatch.setattr(rnnlab.train, "fit", cut_in_second_epoch)
    with pytest.raises(_SessionEnded):
        run_experiment(study, tmp_path / "cut", seeds=1, workers=1, progress=False)
    job = tmp_path / "cut" / "tiny" / "jobs" / "rnn-s0"
    assert (job / "checkpoint.npz").is_file() and not (job / "result.json").exists()
    epochs_trained = []

    def count_epochs(*args, **kwargs):
        return fit(*args, **{**kwargs, "on_epoch": lambda row: epochs_trained.append(row["epoch"])})

    monkeypatch.setattr(rnnlab.train, "fit", count_epochs)
    resumed = run_experiment(study, tmp_path / "cut", seeds=1, workers=1, progress=False)
    assert epochs_trained == [2, 1, 2]          # the RNN from its checkpoint on; the GRU had not started
    for a, b in zip(whole.runs, resumed.runs):
        assert a.key == b.key and a.metrics["test_loss"] == b.metrics["test_loss"] \
            and a.metrics["dev_loss"] == b.metrics["dev_loss"]
    assert len((job / "metrics.csv").read_text().splitlines()) == 1 + 2      # header and both epochs, once each
    # a checkpoint left by other settings is not resumed: the job starts over
    changed = dataclasses.replace(study, specs=lambda quick: [dataclasses.replace(
        s, settings={**s.settings, "hidden": 5}) for s in study.specs(quick)])
    (job / "result.json").unlink()
    monkeypatch.setattr(rnnlab.train, "fit", fit)
    again = run_experiment(changed, tmp_path / "cut", seeds=1, workers=1, progress=False)
    assert {r.metrics["num_params"] for r in again.runs} != {r.metrics["num_params"] for r in whole.runs}


def test_tuned_runs_train_on_seeds_the_search_never_trained(tmp_path, monkeypatch):
    """The runs that won the selection are not the ones reported (Bouthillier et al.: the search's own
    seeds flatter the winner): tuned seeds start at FRESH_FIRST_SEED, and the analyses show that seed."""
    import csv as csv_module

    from rnnlab.cli import main
    from rnnlab.experiments.defaults import FRESH_FIRST_SEED

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())
    assert main(["reproduce", "tiny", "--tune", "--seeds", "2", "--workers", "1", "--out", str(tmp_path)]) == 0
    tuned = StudyResults.load(tmp_path / "tiny-tuned" / "results.json")
    assert sorted({r.seed for r in tuned.runs}) == [FRESH_FIRST_SEED, FRESH_FIRST_SEED + 1]
    searched = set()
    for path in (tmp_path / "tiny-tuned" / "search").glob("*/trials.csv"):
        with open(path, newline="") as f:
            searched |= {int(row["seed"]) for row in csv_module.DictReader(f)}
    assert searched == {0, 1} and not searched & {r.seed for r in tuned.runs}
    assert (tmp_path / "tiny-tuned" / "jobs" / f"gru-s{FRESH_FIRST_SEED}" / "result.json").is_file()


def test_a_search_that_selects_on_one_seed_is_refused(tmp_path):
    import dataclasses

    from rnnlab.experiments.sweeps import tune_experiment

    one = dataclasses.replace(_tiny_study(), search=_tiny_study().search.replace("seeds = 2", "seeds = 1"))
    with pytest.raises(ValueError, match="trains 1 seed per configuration; selection on one seed"):
        tune_experiment(one, tmp_path, workers=1, progress=False)


def test_a_search_may_train_its_trials_on_a_shorter_budget_than_the_tuned_runs(tmp_path):
    import dataclasses

    from rnnlab.experiments.sweeps import tune_experiment

    study = _tiny_study()
    exp = dataclasses.replace(study, search=study.search.replace("[search]", "[settings]\nepochs = 1\n[search]"))
    tuned = tune_experiment(exp, tmp_path, workers=1, progress=False).experiment
    trials = list((tmp_path / "tiny-tuned" / "search" / "gru" / "trials").glob("*/result.json"))
    assert len(trials) == 4 and all(json.loads(t.read_text())["settings"]["epochs"] == 1 for t in trials)
    assert {s.settings["epochs"] for s in tuned.specs(False)} == {2}     # the study's own budget


def test_loss_averaging_weighs_steps_or_sequences_and_matches_the_stored_test_loss(tmp_path):
    import dataclasses

    from rnnlab.analysis.steps import LossAveraging, sequence_losses
    from rnnlab.experiments.runner import Context, RunSpec, run_experiment
    from rnnlab.train import evaluate

    def specs(quick: bool) -> list[RunSpec]:
        return [RunSpec("rnn", "reber", {"cell": "rnn", "hidden": 4, "epochs": 1, "batch_size": 8},
                        {"n_train": 16, "n_test": 12})]

    exp = dataclasses.replace(_tiny_study(), name="lengths", specs=specs, claims=[], published={}, reasons={},
                              metric_names=["test_loss"], analyses=[LossAveraging("test")], search="")
    results = run_experiment(exp, tmp_path, seeds=2, workers=1, progress=False)
    ctx = Context(tmp_path / "lengths", exp.specs(False), results.runs, quick=False)
    task, model = ctx.load("rnn", 1)
    test = task.splits["test"]
    sums, counts = sequence_losses(model, test)
    assert len(sums) == len(test) and list(counts) == list(test.lengths)   # Reber strings differ in length
    assert sums.sum() / counts.sum() == pytest.approx(evaluate(model, test, 5)["eval_loss"], rel=1e-6)  # float32
    assert np.mean(sums / counts) != pytest.approx(sums.sum() / counts.sum(), rel=1e-6)
    with open(tmp_path / "lengths" / "analysis" / "test_loss_averaging.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["seed"]) for r in rows] == [0, 1]
    stored = {run.seed: run.metrics["test_loss"] for run in results.runs}
    for row in rows:
        assert float(row["over_steps"]) == pytest.approx(stored[int(row["seed"])], rel=1e-6)
    assert float(rows[1]["over_sequences"]) == pytest.approx(np.mean(sums / counts), rel=1e-9)
    assert any(n.startswith("Test loss averaged over all steps → per sequence first (2 runs") for n in results.notes)


def test_stream_evaluation_reads_the_test_stream_as_one_and_as_the_runs_parallel_streams(tmp_path, monkeypatch):
    """Zaremba et al.'s Lua run_test reads the test set as one stream whose state is never reset: that must be
    one forward pass over the whole stream, while the other reading is the run's own stored test perplexity."""
    import dataclasses

    from rnnlab.analysis.steps import StreamEvaluation
    from rnnlab.data.containers import Batch
    from rnnlab.experiments.runner import Context, RunSpec
    from rnnlab.train import evaluate

    words = np.random.default_rng(0).choice([f"w{i}" for i in range(12)], size=(3, 40, 6))
    (tmp_path / "data" / "ptb").mkdir(parents=True)
    for split, lines in zip(("train", "valid", "test"), words):
        (tmp_path / "data" / "ptb" / f"ptb.{split}.txt").write_text("\n".join(" " + " ".join(w) for w in lines))
    monkeypatch.setenv("RNNLAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    pin_fixture_data(tmp_path / "data", monkeypatch)

    def specs(quick: bool) -> list[RunSpec]:
        return [RunSpec("lstm", "ptb", {"cell": "lstm", "hidden": 6, "embedding_dim": 5, "layers": 2, "epochs": 2,
                                        "batch_size": 4, "lr": 1.0})]

    exp = dataclasses.replace(_tiny_study(), name="streams", specs=specs, claims=[], published={}, reasons={},
                              metric_names=["test_perplexity"], analyses=[StreamEvaluation(("lstm",))], search="")
    results = run_experiment(exp, tmp_path, seeds=2, workers=1, progress=False)
    with open(tmp_path / "streams" / "analysis" / "test_stream_evaluation.csv") as f:
        rows = list(csv.DictReader(f))
    ctx = Context(tmp_path / "streams", exp.specs(False), results.runs, quick=False)
    for row, run in zip(rows, results.runs, strict=True):
        task, model = ctx.load("lstm", run.seed)
        tokens = task.splits["test"].tokens
        stats, _ = model.evaluate(Batch(tokens[:-1, None], tokens[1:, None], None))
        assert stats.count == len(tokens) - 1
        assert float(row["one_stream"]) == pytest.approx(math.exp(stats.loss_sum / stats.count), rel=1e-5)
        assert float(row["streams"]) == pytest.approx(run.metrics["test_perplexity"], rel=1e-6)
        assert float(row["streams"]) == pytest.approx(evaluate(model, task.splits["test"], 4)["eval_perplexity"],
                                                      rel=1e-6)     # the stored figure is the 4-stream reading
        # 4 parallel streams score 236 of the 239 predictions, and start 4 times from a zero state
        assert float(row["streams"]) != pytest.approx(float(row["one_stream"]), rel=1e-6)
        assert row["best_is_last"] == str(run.metrics["best_epoch"] == 2)
    assert any("as one stream" in n and "of 2 runs" in n for n in results.notes)


def test_a_metric_an_analysis_measures_on_every_run_joins_the_runs_tables_and_claims(tmp_path):
    """GradientDistribution measures each run's median gradient coefficient (every seed, not only the figure's
    seed 0); the runs, the summary table, results.csv and the claims about it all see it."""
    import dataclasses

    from rnnlab.analysis.gradients import bptt_depth, gradient_distribution
    from rnnlab.analysis.steps import GradientDistribution, GradientFlow, first_batch
    from rnnlab.experiments.runner import Context, RunSpec
    from rnnlab.experiments.verdicts import Claim

    def specs(quick: bool) -> list[RunSpec]:
        return [RunSpec(cell, "reber", {"cell": cell, "hidden": 4, "epochs": 1, "batch_size": 8},
                        {"n_train": 12, "n_test": 8}) for cell in ("rnn", "gru")]

    claim = Claim("the vanilla RNN's gradients are the larger", "rnn", "gru", "gradient_median", higher_is_better=True,
                  source="a test")
    exp = dataclasses.replace(_tiny_study(), name="grads", specs=specs, claims=[claim], published={}, reasons={},
                              metric_names=["test_loss", "gradient_median"], search="",
                              analyses=[GradientDistribution({"rnn": "rnn", "gru": "gru"}, examples=6),
                                        GradientFlow({"gru": "gru"}, examples=4)])
    results = run_experiment(exp, tmp_path, seeds=3, workers=1, progress=False)
    ctx = Context(tmp_path / "grads", exp.specs(False), results.runs, quick=False)
    for run in results.runs:
        task, model = ctx.load(run.key, run.seed)
        expected = gradient_distribution(model, task.splits["train"], 6)["summary"]["q50"]
        assert run.metrics["gradient_median"] == pytest.approx(expected, rel=1e-12)
        if run.key == "gru":     # GradientFlow's metric, only for the models it was given
            depth = bptt_depth(model, first_batch(task.splits["test"], 4), 10)
            assert run.metrics["step10_gradient_share"] == pytest.approx(depth["increment"][-1] / depth["full"],
                                                                         rel=1e-12)
        else:
            assert "step10_gradient_share" not in run.metrics
    assert len({run.metrics["gradient_median"] for run in results.runs}) == 6
    assert all(row["gradient_median_n"] == 3 for row in results.summary)
    (verdict,) = results.verdicts
    assert verdict.claim == claim.text and "(3 seeds)" in verdict.evidence and verdict.p_value is not None
    with open(tmp_path / "grads" / "results.csv") as f:
        assert all(float(row["gradient_median"]) > 0 for row in csv.DictReader(f))


def test_a_sequential_plan_adds_seeds_only_where_a_claim_is_undecided(tmp_path):
    """Looks after 5 and 6 seeds (5 a side is the fewest with which the exact permutation test reaches the first
    look's level): the claim that 5 seeds decide keeps its configurations at 5; the other claim's
    configurations get a sixth seed; each verdict row says with how many seeds and at which level
    it was decided, with its raw and Holm-adjusted p, P(A>B) and the seeds used, as results.json keeps it."""
    import dataclasses

    from rnnlab.experiments.runner import RunSpec, run_experiment
    from rnnlab.experiments.statistics import SequentialPlan
    from rnnlab.experiments.verdicts import Claim

    options = {"n_train": 40, "n_dev": 20, "n_test": 20, "length": 5, "features": 3}

    def specs(quick: bool) -> list[RunSpec]:
        settings = {"hidden": 4, "layers": 1, "epochs": 1, "batch_size": 20}
        return [RunSpec(name, "mean-sign", {**settings, "cell": "gru" if name != "rnn-big" else "rnn",
                                            **({"lr": 1e-9} if name == "frozen" else {})}, options)
                for name in ("frozen", "gru", "rnn-big")]

    # "frozen" (lr 1e-9) vs "gru": their test losses differ; a claim that a lr of 1e-9 trains better than
    # itself is decided "not reproduced" only if the plan can tell; a claim with a huge smallest effect is
    # shown absent at once
    exp = dataclasses.replace(
        _tiny_study(), name="seq", specs=specs, published={}, reasons={}, analyses=[], search="",
        claims=[Claim("gru beats rnn-big by ten points", "gru", "rnn-big", "test_accuracy", smallest_effect=10.0),
                Claim("gru beats frozen", "gru", "frozen", "test_accuracy")],
        sequential=SequentialPlan(looks=(5, 6)))
    results = run_experiment(exp, tmp_path, seeds=None, workers=1, progress=False)
    absent, other = results.verdicts
    assert absent.verdict == "not reproduced" and absent.look == 1 and absent.seeds == 5
    assert "smallest effect of interest 10" in absent.reason
    assert results.seeds_by_key["rnn-big"] == 5          # decided at the first look: no more seeds
    if other.look == 2:
        assert results.seeds_by_key["gru"] == results.seeds_by_key["frozen"] == 6 and other.seeds == 6
    assert all(v.level == pytest.approx(0.025) for v in results.verdicts)
    saved = json.loads((tmp_path / "seq" / "results.json").read_text())
    for v in saved["verdicts"]:
        assert {"p_value", "p_adjusted", "test", "prob_superiority", "seeds", "look", "level"} <= set(v)
    assert saved["sequential"] == {"looks": [5, 6], "alpha": 0.05, "level": 0.025}
    (plan_note,) = [note for note in saved["notes"] if "group-sequential plan" in note]
    assert "measured" not in plan_note        # no family-wise rate was measured for these looks: none is quoted


def test_a_study_report_names_the_blas_its_runs_multiplied_with_and_counts_runs_that_differ(tmp_path):
    """Another BLAS changes last bits, and with them which seeds of a bimodal task learn: the report says which
    provider computed each class of products, from the records the runs kept, and how many runs each record
    covers when they differ (a job store filled on two machines)."""
    from rnnlab.cells.kernel_blas import CHOICE

    study = _tiny_study()
    results = run_experiment(study, tmp_path, seeds=2, workers=1, progress=False)
    here = CHOICE.describe("where they trained")
    assert results.products() == [here] and "RNNLAB_BLAS=openblas" in here      # conftest pins the provider
    saved = StudyResults.load(tmp_path / study.name / "results.json")
    assert saved.runs[0].blas == CHOICE.record() and saved.products() == [here]
    _, md_path = write_report(results, tmp_path / study.name)
    assert f"Matrix products: {here}." in md_path.read_text()
    first = next((tmp_path / study.name / "jobs").rglob("result.json"))
    stored = json.loads(first.read_text())
    stored["run"]["blas"] = {**stored["run"]["blas"], "mode": "mkl", "providers": dict.fromkeys(CHOICE.providers,
                                                                                                   "mkl")}
    first.write_text(json.dumps(stored))
    again = run_experiment(study, tmp_path, seeds=2, workers=1, progress=False)
    runs = len(again.runs)
    products = again.products()
    assert again.trained_now == 0 and len(products) == 2
    assert products[0] == f"{here} ({runs - 1} runs)"
    assert products[1].startswith("small products in mkl") and products[1].endswith("(1 run)")
    again.runs[0].blas = {"mode": "fastest", "providers": []}     # edited: named as unreadable, the report still made
    assert any(text.startswith("a BLAS record rnnlab cannot read") for text in again.products())
    write_report(again, tmp_path / study.name)
    for run in again.runs:      # results kept before the runs carried their records describe none
        run.blas = {}
    assert again.products() == []


def test_the_analyses_of_a_study_run_build_each_data_set_and_trained_model_once(tmp_path, monkeypatch):
    import rnnlab.experiments.settings as settings_module
    from rnnlab.analysis.steps import load_models, trained_runs
    from rnnlab.experiments.runner import Context

    study = _tiny_study()
    results = run_experiment(study, tmp_path, seeds=2, workers=1, progress=False)
    built: list[tuple] = []
    real = settings_module.get_task

    def counting(name, seed, **options):
        built.append((name, seed))
        return real(name, seed=seed, **options)

    monkeypatch.setattr(settings_module, "get_task", counting)
    ctx = Context(tmp_path / "tiny", study.specs(False), results.runs, False)
    first = [(task, model) for _, _, task, model in trained_runs(ctx)]
    again = [(task, model) for _, _, task, model in trained_runs(ctx)]
    task, models = load_models(ctx, {"a": "rnn", "b": "gru"})
    assert len(first) == 4 and all(a[1] is b[1] for a, b in zip(first, again))     # each model once
    assert sorted(built) == [("mean-sign", 0), ("mean-sign", 1)]    # each seed's data once, shared by both cells
    assert models["a"] is first[0][1] and task is first[0][0]


def test_results_json_round_trips_and_an_older_schema_is_refused_naming_the_file(tmp_path):
    from rnnlab.experiments.results import SCHEMA_VERSION, Run

    results = run_experiment(_tiny_study(), tmp_path, seeds=2, workers=1, progress=False)
    path = tmp_path / "tiny" / "results.json"
    again = StudyResults.load(path)
    assert again == results and again.schema == SCHEMA_VERSION
    assert all(isinstance(r, Run) and r.history and "test_loss" in r.metrics for r in again.runs)
    old = json.loads(path.read_text())
    del old["schema"]
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"results.json: results of schema 1.*rerun `rnnlab reproduce tiny`"):
        StudyResults.load(path)
    assert Run.from_row({"key": "gru", "group": "", "label": "gru", "seed": "3", "test_loss": "0.5", "x": ""}) == \
        Run("gru", 3, {"test_loss": 0.5}, "", "gru")


def test_seconds_per_epoch_is_not_the_first_epochs_compilation(tmp_path):
    """A run's first epoch also compiles the kernels (15 s against 0.02 s an epoch, measured on the agreement
    study): seconds per epoch is the median over epochs, so a published timing is compared with training."""
    from rnnlab.experiments.runner import Experiment, RunSpec

    options = {"n_train": 40, "n_dev": 20, "n_test": 20, "length": 5, "features": 3}
    exp = Experiment(name="timed", title="Timed", study="a test", about="One GRU.", metric_names=["test_loss"],
                     specs=lambda quick: [RunSpec("gru", "mean-sign", {"cell": "gru", "hidden": 4, "layers": 1,
                                                                       "epochs": 3, "batch_size": 20}, options)])
    run_experiment(exp, tmp_path, seeds=1, workers=1, progress=False)
    job = tmp_path / "timed" / "jobs" / "gru-s0"
    result = json.loads((job / "result.json").read_text())
    for row, seconds in zip(result["history"], (16.0, 0.02, 0.03)):
        row["seconds"] = seconds
    (job / "result.json").write_text(json.dumps(result))
    again = run_experiment(exp, tmp_path, seeds=1, workers=1, progress=False)
    assert again.runs[0].metrics["seconds_per_epoch"] == pytest.approx(0.03)


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["evaluate", "--help"], ["compare", "--help"]])
def test_the_command_lines_help_imports_no_study_analysis_or_plotting(argv):
    """`rnnlab --help` and a command's help start fast: the studies (which build their specs and budgets), the
    analyses and matplotlib are imported only by the commands that run them (and `reproduce`, whose choices
    are the studies)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom rnnlab.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "heavy = sorted(m for m in sys.modules if m.startswith(('rnnlab.experiments.studies', 'rnnlab.analysis', "
             "'matplotlib', 'rnnlab.pages')))\nprint('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out and "usage: rnnlab" in out
    names = subprocess.run([sys.executable, "-c", probe, "reproduce", "--help"], capture_output=True, text=True,
                           check=True).stdout
    assert "polyphonic" in names        # reproduce's help still lists the studies


def test_one_fresh_seed_rule_for_every_search():
    """What a search selected is retrained on seeds no search trains, by one rule: a tuned study's runs and the
    cell benchmark's final runs alike."""
    from rnnlab.experiments import bench_cells
    from rnnlab.experiments.defaults import FRESH_FIRST_SEED, fresh_seeds

    assert bench_cells.FINAL_SEEDS == fresh_seeds(10) == tuple(range(FRESH_FIRST_SEED, FRESH_FIRST_SEED + 10))
    assert max(bench_cells.SEARCH_SEEDS) < FRESH_FIRST_SEED


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(1, 6), st.integers(0, 50), st.integers(1, 10**6))
def test_the_budget_matcher_finds_the_closest_size_ties_to_the_smaller(a, b, c, target):
    """``closest_size`` (doubling, then bisection) against a scan of every size, for increasing counts a·h² + b·h + c
    such as a cell's."""
    from rnnlab.budget import closest_size

    def count(h):
        return a * h * h + b * h + c
    scan = min(range(1, 2 * int((target / a) ** 0.5) + 3), key=lambda h: (abs(count(h) - target), h))
    assert closest_size(count, target) == scan
