"""Greff et al. 2017's JSB arm (``rnnlab greff``): the plan is the paper's, the judge decides constructed cases as
built, and the command runs, stores and resumes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import JSON_DAMAGES, damaged_json
from rnnlab.cli import main
from rnnlab.data.registry import find_file
from rnnlab.experiments import greff
from rnnlab.experiments.importance import available
from rnnlab.experiments.settings import resolve_settings
from rnnlab.pages.greff import check_replaces_no_fewer

TRIALS = 60


@pytest.fixture
def no_importance(monkeypatch):
    """The judge without its fANOVA (nine forests × 21 refits: minutes), for the tests not about it."""
    monkeypatch.setattr(greff.importance, "available", lambda: False)


def test_the_plan_is_nine_variants_times_the_trials_at_the_papers_settings():
    sweep = greff.greff_sweep(7)
    trials = sweep.trials()
    assert len(trials) == 9 * 7 and sweep.seeds == 1
    assert sorted(greff.variant_of(t.values) for t in trials) == sorted(list(greff.VARIANTS) * 7)
    fixed = resolve_settings(("greff", dict(greff.SETTINGS)))
    for t in trials:
        assert {k: t.settings[k] for k in greff.SETTINGS} == {k: fixed[k] for k in greff.SETTINGS}
        assert 20 <= t.settings["hidden"] <= 200 and 1e-6 <= t.settings["lr"] <= 1e-2
        assert 0 <= t.settings["momentum"] <= 0.99 and 0 <= t.settings["input_noise"] <= 1
    options = {greff.variant_of(t.values): {k: t.settings[k] for k in ("ablate", "peepholes", "gate_recurrence")}
               for t in trials}
    assert options["V"] == {"ablate": "none", "peepholes": True, "gate_recurrence": False}
    assert options["NP"] == {"ablate": "none", "peepholes": False, "gate_recurrence": False}
    assert options["FGR"]["gate_recurrence"] and options["CIFG"]["ablate"] == "cifg"
    assert greff.greff_sweep(7).trials()[:9] != greff.greff_sweep(7).trials()[9:18]     # draws differ by variant
    assert [t.id for t in greff.greff_sweep(3).trials()] == [t.id for t in trials if t.values["lr"] in {
        u.values["lr"] for u in greff.greff_sweep(3).trials()}]                        # growing keeps the draws


def _records(shift: dict[str, float], seed: int = 0) -> list[dict]:
    """TRIALS per variant whose test NLL is 8.5 + a bowl in log10(lr) + noise; a variant's ``shift`` added."""
    rng = np.random.default_rng(seed)
    draws = [(10 ** rng.uniform(-6, -2), int(rng.integers(20, 201)), float(rng.uniform(0, 0.99)),
              float(rng.uniform(0, 1)), rng.normal(0, 0.01)) for _ in range(TRIALS)]
    records = []
    for name, options in greff.VARIANTS.items():
        for i, (lr, hidden, momentum, noise, jitter) in enumerate(draws):
            nll = 8.5 + 0.5 * (math.log10(lr) + 2) ** 2 + jitter + shift.get(name, 0.0)
            records.append({"id": f"{name}{i}", "values": {**options, "hidden": hidden, "lr": lr,
                                                          "momentum": momentum, "input_noise": noise},
                            "metrics": {"dev_nll_per_step": nll, "test_nll_per_step": nll, "num_params": 1000},
                            "seconds": 1.0, "status": "ok"})
    return records


def test_the_judge_decides_constructed_differences_as_built(no_importance):
    """Equal variants are 'same' (within ±0.05), a variant 0.5 nats worse is 'worse'; the findings follow."""
    judged = greff.judge(_records({"NFG": 0.5, "NOAF": 0.8, "FGR": -0.5}))
    words = {(c["variant"], c["panel"]): c["word"] for c in judged["comparisons"]}
    assert words["CIFG", "top"] == words["NP", "top"] == "same"
    assert words["NFG", "top"] == words["NOAF", "top"] == "worse" and words["FGR", "top"] == "better"
    nfg = next(c for c in judged["comparisons"] if c["variant"] == "NFG" and c["panel"] == "top")
    assert nfg["difference"] == pytest.approx(0.5) and nfg["interval"][0] < 0.5 < nfg["interval"][1]
    assert nfg["p_bonferroni"] == pytest.approx(min(1.0, 8 * nfg["p"]))
    assert judged["variants"]["V"]["top"]["n"] == TRIALS // 10 and judged["variants"]["V"]["finished"] == TRIALS
    found = {f["finding"]: f["word"] for f in judged["findings"]}
    assert found["nothing lost"] == "holds" and found["critical parts"] == "holds"
    opposite = {f["finding"]: f["word"] for f in greff.judge(_records({"NOAF": -0.8}))["findings"]}
    assert opposite["critical parts"] == "does not hold"
    helped = {f["finding"]: f for f in greff.judge(_records({"CIFG": -0.5}))["findings"]}["nothing lost"]
    assert helped["words"] == {"CIFG": "better", "NP": "same"} and helped["word"] == "holds"   # cost nothing: not worse
    hurt = {f["finding"]: f for f in greff.judge(_records({"CIFG": 0.5}))["findings"]}["nothing lost"]
    assert hurt["words"]["CIFG"] == "worse" and hurt["word"] == "does not hold"


def test_a_difference_the_trials_cannot_resolve_is_undecided_never_same(no_importance):
    rng = np.random.default_rng(3)
    records = _records({})
    for r in records:       # a spread of 1 nat hides both a 0.05 equivalence and any small difference
        r["metrics"]["test_nll_per_step"] += float(rng.normal(0, 1.0))
    judged = greff.judge(records)
    assert {c["word"] for c in judged["comparisons"]} == {"undecided"}
    assert {f["word"] for f in judged["findings"][:2]} == {"undecided"}


@pytest.mark.skipif(not available(), reason="the importance extra is not installed")
def test_the_learning_rate_finding_reads_the_importance(monkeypatch):
    monkeypatch.setattr(greff, "IMPORTANCE_DRAWS", 4)
    fitted, fit = {}, greff._importance

    def fit_each_table_once(table):     # the nine variants' tables are equal here (no shift): one fit serves all
        key = json.dumps(table, sort_keys=True)
        return fitted[key] if key in fitted else fitted.setdefault(key, fit(table))
    monkeypatch.setattr(greff, "_importance", fit_each_table_once)
    judged = greff.judge(_records({}))
    assert len(fitted) == 1 and all(judged["importance"][name] == judged["importance"]["V"] for name in greff.VARIANTS)
    shares = judged["importance"]["V"]
    assert shares["shares"]["lr"] > 0.9 and shares["configurations"] == TRIALS
    assert judged["findings"][2]["word"] == "holds" and set(judged["findings"][2]["words"]) == set(shares["shares"]) | {
        "interactions"}


def test_judging_again_from_the_published_numbers_gives_the_same_results(no_importance):
    results = greff.GreffResults(trials=TRIALS, quick=False, **greff.judge(_records({"NFG": 0.5})))
    again = greff.judge_again(greff.GreffResults(**json.loads(results.to_json())))
    assert json.loads(again.to_json()) == json.loads(results.to_json())


def test_a_trial_of_no_variant_is_refused():
    with pytest.raises(ValueError, match="no variant of the arm"):
        greff.variant_of({"peepholes": False, "ablate": "nfg"})


def test_quick_and_trials_or_publish_are_refused_before_training(tmp_path, capsys):
    for args, message in ((["--trials", "5"], "--trials: --quick sets its own"),
                          (["--publish", str(tmp_path / "g.md")], "--publish: quick runs are not published")):
        with pytest.raises(SystemExit):
            main(["greff", "--quick", *args, "--out", str(tmp_path / "out")])
        assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_quick_arm_runs_stores_and_resumes(tmp_path, capsys, monkeypatch):
    if find_file("polyphonic", "JSB_Chorales.mat") is None:
        pytest.skip("JSB_Chorales.mat is not in the data folders ($RNNLAB_DATA_DIR, ../shared/data)")

    def no_sweep_summary(*args, **kwargs):   # the arm judges once, itself: a sweep's forests each round cost minutes
        raise AssertionError("the arm judged a round as a sweep")
    monkeypatch.setattr("rnnlab.experiments.sweeps.sweep_results", no_sweep_summary)
    assert main(["greff", "--quick", "--out", str(tmp_path), "--workers", "1"]) == 0
    page = capsys.readouterr().out
    assert "| FGR |" in page and "The paper's findings" in page
    results = greff.GreffResults.load(tmp_path / "results.json")
    assert all(v["trained"] == 3 for v in results.variants.values())
    assert main(["greff", "--quick", "--out", str(tmp_path), "--workers", "1"]) == 0
    assert "0 to train" in capsys.readouterr().err
    checked = greff.run_greff(tmp_path, quick=True, workers=1, progress=False, check=["NIG"])   # stored: 2 to train
    pairs = checked.matched["NIG"]["pairs"]
    assert [p["best_of"] for p in pairs] == ["V", "NIG"] and all(p["variant"] and p["vanilla"] for p in pairs)
    assert pairs[0]["vanilla"] == checked.variants["V"]["trials"][0]["test"]
    assert len(list((tmp_path / greff.MATCHED / "nig" / "trials").iterdir())) == 2


def test_the_published_arm_is_its_stored_results_rendered_byte_for_byte(tmp_path, no_importance):
    """Publishing writes the page, its data, the judged results and the figure; republishing from the results alone
    (every Markdown deleted first) writes the same bytes, and a page it did not write is never replaced."""
    from rnnlab.pages.greff import MARGINALS, publish_greff, republish_greff

    results = greff.GreffResults(trials=TRIALS, quick=False, **greff.judge(_records({"NFG": 0.5})), command="test")
    target = tmp_path / "docs" / "greff-jsb.md"
    publish_greff(results, target)
    written = {p.relative_to(target.parent): p.read_bytes() for p in target.parent.rglob("*") if p.is_file()}
    assert {str(p) for p in written} >= {"greff-jsb.md", "greff-jsb.json", "greff-jsb/page.json", MARGINALS}
    assert b"| NFG |" in written[target.relative_to(target.parent)]
    target.unlink()
    republish_greff(target)
    again = {p.relative_to(target.parent): p.read_bytes() for p in target.parent.rglob("*") if p.is_file()}
    assert again == written
    from rnnlab.pages.overview import results_overview

    line = next(x for x in results_overview(target.parent, links="").splitlines() if "greff-jsb.md" in x)
    assert line.startswith(f"[LSTM: A Search Space Odyssey, the JSB arm](greff-jsb.md) (9 variants, {TRIALS} trials "
                           "per variant, interim: the paper ran 200; each finding's word): ")
    assert all(f"{f['claim']}: {f['word']}" in line for f in results.findings)
    foreign = tmp_path / "other" / "greff-jsb.md"
    foreign.parent.mkdir()
    foreign.write_text("someone's page")
    with pytest.raises(ValueError):
        publish_greff(results, foreign)
    assert foreign.read_text() == "someone's page"


def test_a_page_below_the_papers_budget_says_it_is_interim_before_its_words(no_importance):
    from rnnlab.page import markdown
    from rnnlab.pages.greff import greff_page

    judged = greff.judge(_records({"NFG": 0.5}))
    interim = markdown(greff_page(greff.GreffResults(trials=TRIALS, quick=False, **judged)))
    assert f"**Interim: {TRIALS} of the paper's 200 trials per variant.**" in interim
    assert f"holds {TRIALS // 10} trials a variant (the paper's: 20)" in interim
    assert interim.index("Interim:") < interim.index("## The paper's findings")
    assert "Interim" not in markdown(greff_page(greff.GreffResults(trials=200, quick=False, **judged)))


def test_the_arms_eta_is_the_rate_of_its_timed_trials():
    records = [{"seconds": 60.0}, {"seconds": 120.0}, {"seconds": None}, {"seconds": 90.0}]
    line = greff.remaining_cost(records, 1800, 2)
    assert "4 of 1800 trials stored, 40 per core-hour so far" in line     # 90 s a trial, the untimed one left out
    assert "the 1796 left ≈ 44.9 core-hours, ≈ 22.4 h on 2 workers" in line
    assert "no finished trial to time yet" in greff.remaining_cost([], 1800, 1)


def test_the_arms_eta_counts_the_trials_of_later_rounds_already_stored(tmp_path):
    """A resumed arm: after round 10 the line counts every trial of the final round the store holds."""
    store = greff.TrialStore(tmp_path)
    trials = greff.greff_sweep(20).trials()
    first_round = {t.id for t in greff.greff_sweep(10).trials()}
    early, later = ([t for t in trials if (t.id in first_round) == first] for first in (True, False))
    assert len(early) == 90 and len(later) == 90
    for t in [*early[:5], *later[:7]]:
        store.store(t, {"status": "ok", "seconds": 36.0, "metrics": {}})
    line = greff.remaining_cost(greff.stored_records(tmp_path, 20), 180, 2)
    assert "12 of 180 trials stored, 100 per core-hour so far; the 168 left ≈ 1.7 core-hours" in line


def test_the_published_arm_is_its_stored_trials_judged_and_rendered(no_importance):
    """docs/results/greff-jsb.md is its greff-jsb.json rendered, the JSON round-trips byte for byte, and the tests and
    words against V come again from the per-trial numbers it keeps (the importance, minutes of forests, aside)."""
    from pathlib import Path

    from rnnlab.page import markdown
    from rnnlab.pages.greff import greff_page

    docs = Path(__file__).resolve().parents[1] / "docs" / "results"
    stored = greff.GreffResults.load(docs / "greff-jsb.json")
    assert markdown(greff_page(stored)) == (docs / "greff-jsb.md").read_text()
    assert stored.to_json() == (docs / "greff-jsb.json").read_text()
    assert stored.trials >= 20 and all(v["finished"] >= stored.trials * 0.9 for v in stored.variants.values())
    again = greff.judge_again(stored)
    assert json.loads(json.dumps(again.comparisons, default=float)) == json.loads(json.dumps(stored.comparisons,
                                                                                             default=float))


def _bowl(draw: dict) -> float:
    return 8.5 + 0.5 * (math.log10(draw["lr"]) + 2) ** 2


def _unlucky_records(cell_shift: float) -> list[dict]:
    """The arm's records where NIG's own draws all fall at rates of 1e−6 to 1e−4 (the others span the range), NIG
    ``cell_shift`` worse at every draw; NFG, NOAF and FGR worse than V, as the paper found."""
    records = _records({"NIG": cell_shift, "NFG": 0.5, "NOAF": 0.8, "FGR": 0.5})
    rng = np.random.default_rng(7)
    for r in records:
        if greff.variant_of(r["values"]) == "NIG":
            r["values"]["lr"] = float(10 ** rng.uniform(-6, -4))
            nll = _bowl(r["values"]) + cell_shift + float(rng.normal(0, 0.01))
            r["metrics"].update(dev_nll_per_step=nll, test_nll_per_step=nll)
    return records


def _retrained(name: str, variants: dict, cell_shift: float) -> list[dict]:
    """Each matched draw trained as the other model: the same bowl, NIG ``cell_shift`` worse."""
    rng = np.random.default_rng(11)
    out = []
    for whose, draw in greff.matched_draws(name, variants):
        model = name if whose == greff.VANILLA else greff.VANILLA
        nll = _bowl(draw) + (cell_shift if model == "NIG" else 0.0) + float(rng.normal(0, 0.01))
        out.append({"values": {**greff.VARIANTS[model], **draw}, "status": "ok",
                    "metrics": {"test_nll_per_step": nll, "dev_nll_per_step": nll}})
    return out


@pytest.mark.parametrize("cell_shift, matched_word, whose", [(0.0, "same", "the draws'"),
                                                             (0.3, "worse", "the cell's")])
def test_a_word_against_the_paper_is_checked_at_matched_draws(no_importance, cell_shift, matched_word, whose):
    """NIG's search drew only slow rates, so its best 10% is worse than V's, which the paper did not find; retrained
    at each other's best draws, an equal cell is 'same' (the draws' doing) and a worse cell stays 'worse'."""
    from rnnlab.page import markdown
    from rnnlab.pages.greff import greff_page

    judged = greff.judge(_unlucky_records(cell_shift))
    top = {c["variant"]: c["word"] for c in judged["comparisons"] if c["panel"] == "top"}
    assert top["NIG"] == "worse" and greff.differs_from_paper(judged["comparisons"]) == ["NIG"]
    draws = greff.matched_draws("NIG", judged["variants"])
    k = TRIALS // 10
    assert [w for w, _ in draws] == ["V"] * k + ["NIG"] * k
    assert [d for _, d in draws[:k]] == [{key: t[key] for key in greff.SPACE}
                                         for t in judged["variants"]["V"]["trials"][:k]]
    plan = greff.matched_sweep("NIG", judged["variants"]).trials()
    assert [greff.variant_of(t.values) for t in plan] == ["NIG"] * k + ["V"] * k
    assert all(t.settings["epochs"] == greff.SETTINGS["epochs"] and t.seed == 0 for t in plan)
    check = greff.matched_check("NIG", judged["variants"], _retrained("NIG", judged["variants"], cell_shift), 1)
    assert check["n"] == 2 * k and check["unfinished"] == 0 and check["word"] == matched_word
    assert check["difference"] == pytest.approx(cell_shift, abs=0.02)
    assert check["interval"][0] < check["difference"] < check["interval"][1]
    results = greff.GreffResults(trials=TRIALS, quick=False, **judged, matched={"NIG": check})
    page = markdown(greff_page(results))
    assert "## Where our words differ from the paper's" in page and f"| {matched_word} | {whose}" in page
    assert page.count("| NIG | V's best 10% |") == k and page.count("| NIG | NIG's best 10% |") == k
    again = greff.judge_again(greff.GreffResults(**json.loads(results.to_json())))
    assert json.loads(again.to_json()) == json.loads(results.to_json())


def test_a_matched_run_that_did_not_finish_is_shown_and_left_out_of_the_test(no_importance):
    judged = greff.judge(_unlucky_records(0.0))
    retrained = _retrained("NIG", judged["variants"], 0.0)
    retrained[0]["status"] = "diverged"
    check = greff.matched_check("NIG", judged["variants"], retrained[:-1], 1)     # the last one never ran
    assert check["n"] == 2 * (TRIALS // 10) - 2 and check["unfinished"] == 2
    assert [p["variant"] is None for p in check["pairs"]][:2] == [True, False] and check["pairs"][-1]["vanilla"] is None
    equal = greff.judge(_records({}))["comparisons"]     # all "same": a contradiction where the paper found worse
    assert greff.differs_from_paper(equal) == ["NFG", "NOAF", "FGR"]


def test_the_page_says_how_much_of_a_panels_difference_the_same_draws_leave():
    from rnnlab.pages.greff import _whose

    panel = {"word": "worse", "difference": 0.69}
    undecided = {"word": "undecided", "interval": (-0.12, 0.28)}
    assert _whose(panel, undecided).startswith("mostly the draws': at the same draws it is at most +0.28, below the "
                                               "panel's +0.69")
    assert _whose(panel, {**undecided, "interval": (-0.12, 0.8)}).startswith("not shown at the same draws")
    assert _whose({"word": "better", "difference": -0.5}, {**undecided, "interval": (-0.2, 0.1)}).startswith(
        "mostly the draws': at the same draws it is at least -0.20")
    assert _whose(panel, {"word": "worse"}).startswith("the cell's") and _whose(panel, {"word": "same"}).startswith(
        "the draws'")
    assert _whose(panel, {"word": "better"}) == "not the panel's: at the same draws the variant is better"


def _stored_arm(out, trials: int = 3) -> list:
    """A store holding the arm's first ``trials`` per variant with made-up outcomes (a diverged one among them)."""
    store = greff.TrialStore(out)
    arm = greff.greff_sweep(trials).trials()
    for i, t in enumerate(arm):
        status = "diverged" if i == 4 else "ok"
        metrics = {} if status != "ok" else {"dev_nll_per_step": 8.0 + i / 100, "test_nll_per_step": 8.1 + i / 100,
                                             "num_params": 1000 + i, "epochs_run": 10 + i, "train_loss": 7.0}
        store.store(t, {"status": status, "seconds": 30.0 + i, "metrics": metrics,
                        "error": "loss not finite" if status != "ok" else ""})
    return arm


def test_saved_trials_restore_into_an_empty_store_as_the_same_judged_arm(tmp_path, capsys, no_importance):
    """A new machine: the saved lines bring back every trial, unfinished ones too, and the arm judges the same;
    a second restore adds nothing, and a stored trial is never replaced."""
    _stored_arm(tmp_path / "old")
    assert main(["greff", "--out", str(tmp_path / "old"), "--save-trials", str(tmp_path / "pub" / "t.jsonl")]) == 0
    lines = (tmp_path / "pub" / "t.jsonl").read_text().splitlines()
    assert len(lines) == 27 and json.loads(lines[4])["status"] == "diverged"
    before = greff.judge(greff.stored_records(tmp_path / "old", 3))
    assert greff.restore_trials(tmp_path / "new", [json.loads(x) for x in lines], "t.jsonl") == 27
    after = greff.judge(greff.stored_records(tmp_path / "new", 3))
    assert after["variants"] == before["variants"] and after["comparisons"] == before["comparisons"]
    assert sum(v["not_finished"]["diverged"] for v in after["variants"].values()) == 1
    changed = [dict(json.loads(x), test=99.0) for x in lines]
    assert greff.restore_trials(tmp_path / "new", changed, "t.jsonl") == 0
    assert greff.judge(greff.stored_records(tmp_path / "new", 3))["variants"] == before["variants"]


def test_a_published_arm_restores_its_finished_trials(tmp_path, no_importance):
    _stored_arm(tmp_path / "old")
    results = greff.GreffResults(trials=3, quick=False, **greff.judge(greff.stored_records(tmp_path / "old", 3)))
    (tmp_path / "greff-jsb.json").write_text(results.to_json())
    assert main(["greff", "--out", str(tmp_path / "new"), "--restore", str(tmp_path / "greff-jsb.json"),
                 "--save-trials", str(tmp_path / "t.jsonl")]) == 0
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 26          # the diverged one is only counted
    restored = greff.stored_records(tmp_path / "new", 3)
    assert greff.judge(restored)["variants"]["V"]["trials"] == results.variants["V"]["trials"]
    with pytest.raises(ValueError, match="quick results are no trials of the arm"):
        greff.published_rows(dataclasses.replace(results, quick=True))
    assert {r["id"] for r in restored} < {t.id for t in greff.greff_sweep(3).trials()}


def test_rows_that_are_no_trials_of_the_arm_are_refused_naming_the_row(tmp_path):
    arm = _stored_arm(tmp_path / "old")
    rows = greff.save_trials(tmp_path / "old")
    for bad, message in (({"lr": 0.5}, "row 2 .*is no trial of the arm"),
                         ({"id": "0123456789ab"}, "row 2 .*is no trial of the arm"),
                         ({"variant": None}, "row 2 .*is no trial of the arm"),
                         ({"hidden": None, "lr": None}, "row 2 .*is no trial")):
        with pytest.raises(ValueError, match=message):
            greff.restore_trials(tmp_path / "new", [rows[0], {**rows[1], **bad}], "t.jsonl")
    with pytest.raises(ValueError, match=r"row 2 is not a trial of the arm \(no 'momentum'\)"):
        greff.restore_trials(tmp_path / "new", [rows[0], {k: v for k, v in rows[1].items() if k != "momentum"}], "f")
    with pytest.raises(ValueError, match="rows 1 and 3 are the same trial"):
        greff.restore_trials(tmp_path / "new", [rows[0], rows[1], rows[0]], "t.jsonl")
    assert not (tmp_path / "new").exists()
    assert len(arm) == 27


def test_restore_and_save_refuse_bad_files_and_quick_runs(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text('{"variant": "V"}\nnot json\n')
    for args, message in ((["--restore", str(tmp_path / "t.jsonl")], "t.jsonl, line 2: not JSON"),
                          (["--restore", str(tmp_path / "none.jsonl")], "none.jsonl: no such file"),
                          (["--quick", "--restore", str(tmp_path / "t.jsonl")], "--restore: quick trials"),
                          (["--quick", "--save-trials", str(tmp_path / "s.jsonl")], "--save-trials: quick trials")):
        with pytest.raises(SystemExit):
            main(["greff", *args, "--out", str(tmp_path / "out")])
        assert message in capsys.readouterr().err
    (tmp_path / "mine.jsonl").write_text("kept\n")
    with pytest.raises(SystemExit):
        main(["greff", "--out", str(tmp_path / "out"), "--save-trials", str(tmp_path / "mine.jsonl")])
    assert "did not publish" in capsys.readouterr().err and (tmp_path / "mine.jsonl").read_text() == "kept\n"


def test_the_committed_progress_restores_the_published_arm(tmp_path, no_importance):
    """docs/results/greff-jsb/trials.jsonl (what a new machine resumes from) holds every published trial with the
    published numbers: restored into an empty store, the arm at the published budget judges as published."""
    from pathlib import Path

    from rnnlab.files import read_json_lines

    docs = Path(__file__).resolve().parents[1] / "docs" / "results"
    rows, bad = read_json_lines(docs / "greff-jsb" / "trials.jsonl")
    assert not bad
    published = greff.GreffResults.load(docs / "greff-jsb.json")
    assert greff.restore_trials(tmp_path, rows, "trials.jsonl") == len(rows) >= 9 * published.trials
    judged = greff.judge(greff.stored_records(tmp_path, published.trials))
    assert judged["variants"] == published.variants


def test_a_publish_never_shows_fewer_trials_than_the_arm_published_there(tmp_path, capsys, monkeypatch):
    """Fewer trials per variant asked for is refused before training; fewer finished after training (a machine
    that did not restore the published trials) is refused before publishing, with the run's own page kept."""
    from pathlib import Path

    from rnnlab.pages.greff import publish_greff

    published = greff.GreffResults.load(Path(__file__).resolve().parents[1] / "docs" / "results" / "greff-jsb.json")
    page = tmp_path / "docs" / "greff-jsb.md"
    publish_greff(published, page)
    before = {path: path.read_bytes() for path in page.parent.rglob("*") if path.is_file()}
    trained = []
    fewer = dataclasses.replace(published, variants={**published.variants,
                                                     "NP": {**published.variants["NP"], "finished": 150}})
    monkeypatch.setattr(greff, "run_greff", lambda *args, **kwargs: trained.append(args) or fewer)

    def run(*argv) -> tuple[int | str, str]:
        try:
            code = main(["greff", *argv, "--out", str(tmp_path / "out"), "--publish", str(page)])
        except SystemExit as exit:
            code = exit.code
        return code, capsys.readouterr().err

    code, err = run("--trials", "10")
    assert code == 2 and "has 200 trials per variant; --trials 10 would replace it with fewer" in err
    assert not trained and not (tmp_path / "out").exists()
    code, err = run()
    assert code == 2 and "fewer finished trials (NP 150 of its 200)" in err and "--restore" in err
    assert len(trained) == 1 and (tmp_path / "out" / "greff-jsb.md").is_file()      # the run's own page is kept
    assert {path: path.read_bytes() for path in page.parent.rglob("*") if path.is_file()} == before
    monkeypatch.setattr(greff, "run_greff", lambda *args, **kwargs: published)
    assert run()[0] == 0                                                             # the arm as published: allowed


@pytest.fixture(scope="module")
def checked_results(tmp_path_factory) -> Path:
    """An arm's results with a matched check, as published (JSON), judged without the fANOVA."""
    available, greff.importance.available = greff.importance.available, lambda: False
    try:
        judged = greff.judge(_unlucky_records(0.0))
        check = greff.matched_check("NIG", judged["variants"], _retrained("NIG", judged["variants"], 0.0), 1)
        path = tmp_path_factory.mktemp("greff") / "greff-jsb.json"
        path.write_text(greff.GreffResults(trials=TRIALS, quick=False, **judged, matched={"NIG": check}).to_json())
        return path
    finally:
        greff.importance.available = available


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place=st.integers(0, 10**6), key=st.integers(0, 10**6), how=st.sampled_from(JSON_DAMAGES))
def test_damaged_published_results_are_refused_naming_the_file_or_read_as_the_arm(checked_results, tmp_path,
                                                                                  no_importance, place, key, how):
    """A changed key or value in a published greff-jsb.json (valid JSON still) is refused naming the file and what
    is wrong, or is results the arm can restore, guard and judge again: never a KeyError or TypeError."""
    data = damaged_json(json.loads(checked_results.read_text()), place, key, how)
    path = tmp_path / f"greff-{place}-{key}-{how}.json"
    path.write_text(json.dumps(data))
    try:
        results = greff.GreffResults.load(path)
    except ValueError as err:
        assert str(path) in str(err) and "not the results of rnnlab greff" in str(err)
        return
    check_replaces_no_fewer(path.with_suffix(".md"), TRIALS, results)
    greff.published_rows(results)
    greff.judge_again(results)
