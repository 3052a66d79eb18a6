"""The verdict machinery against constructed cases whose answer is known."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnlab.experiments.runner import Experiment
from rnnlab.experiments.statistics import compare_means, mean_std_interval
from rnnlab.experiments.studies import EXPERIMENTS
from rnnlab.experiments.verdicts import (
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    Published,
    judge_claim,
    judge_published,
    verdict_table,
)
from rnnlab.report import RUNS_CSV, SETTING, read_runs_csv, stored_verdicts, verdict_cell


def compare_samples(a, b, count: bool = False):
    """(difference, low, high, p, test) of Welch's comparison, as the measured reasons quote it."""
    assert not count
    r = compare_means(a, b)
    return r.difference, r.low, r.high, r.p, r.test


def _runs(**values) -> list[dict]:
    return [{"key": key, "seed": s, "m": v, "test_all_solved": v} for key, vs in values.items()
            for s, v in enumerate(vs)]


CLAIM = Claim("a beats b", better="a", worse="b", metric="m")


def test_a_known_difference_is_reproduced():
    rng = np.random.default_rng(0)
    runs = _runs(a=1.0 + 0.1 * rng.normal(size=5), b=0.1 * rng.normal(size=5))
    v = judge_claim(CLAIM, runs)
    assert v.verdict == REPRODUCED and v.p_value < 0.001 and v.low < v.difference < v.high and v.low > 0
    assert v.test == "Welch's t-test" and v.p_exact == pytest.approx(2 / 252) and v.prob_superiority == 1.0


def test_equal_configurations_are_not_significant_and_say_what_the_seeds_can_detect():
    v = judge_claim(CLAIM, _runs(a=[1, 2, 3, 4, 5], b=[5, 4, 3, 2, 1]))
    assert v.verdict == "not significant with 5 seeds" and v.p_value == pytest.approx(1.0) and v.low < 0 < v.high
    assert v.prob_superiority == 0.5 and v.seeds_needed is None     # no difference: no number of seeds finds one
    assert v.detectable == pytest.approx(2.0244 * np.std([1, 2, 3, 4, 5], ddof=1), abs=1e-3)
    small = judge_claim(CLAIM, _runs(a=[1.0, 2.0, 3.0], b=[0.5, 1.5, 2.5]))
    assert small.verdict == "not significant with 3 seeds" and small.seeds_needed == 64   # d = 0.5 sd


def test_a_reversed_difference_is_not_reproduced():
    v = judge_claim(CLAIM, _runs(a=[0.1, 0.2, 0.15, 0.12], b=[0.9, 0.95, 0.85, 0.92]))
    assert v.verdict == NOT_REPRODUCED and v.difference < 0 and v.high < 0
    lower = Claim("a is lower", better="a", worse="b", metric="m", higher_is_better=False)
    assert judge_claim(lower, _runs(a=[0.1, 0.2, 0.15, 0.12], b=[0.9, 0.95, 0.85, 0.92])).verdict == REPRODUCED


def test_a_side_identical_in_every_seed_is_tested_without_a_warning():
    """Variance exactly 0 on one side is a valid Welch test (the other side's spread decides)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = judge_claim(CLAIM, _runs(a=[0.6, 0.6, 0.6], b=[0.2, 0.3, 0.25]))
    assert v.verdict == REPRODUCED and v.low > 0 and v.test == "Welch's t-test"
    d, low, high, p, _ = compare_samples(np.array([0.6, 0.6, 0.6]), np.array([0.2, 0.3, 0.25]))
    half = 4.302652729911275 * 0.05 / np.sqrt(3)   # t(0.975, df = 2) · s_b / √3 with s_b = 0.05
    assert (low, high) == pytest.approx((d - half, d + half))


def test_no_spread_on_either_side_gives_the_exact_permutation_p_not_zero():
    v = judge_claim(CLAIM, _runs(a=[0.6, 0.6, 0.6], b=[0.2, 0.2, 0.2]))
    assert v.p_value == pytest.approx(2 / 20) and "permutation" in v.test
    assert v.verdict == "not significant with 3 seeds"
    five = judge_claim(CLAIM, _runs(a=[0.6] * 5, b=[0.2] * 5))
    assert five.p_value == pytest.approx(2 / 252) and five.verdict == REPRODUCED


def test_one_seed_cannot_be_tested():
    assert judge_claim(CLAIM, _runs(a=[3.0], b=[1.0])).verdict == "not significant with 1 seed"


def test_counts_of_successful_trials_use_an_exact_unconditional_test_whose_interval_agrees():
    claim = Claim("a solves more often", better="a", worse="b", metric="test_all_solved")
    v = judge_claim(claim, _runs(a=[1, 1, 1, 1, 1], b=[0, 0, 0, 0, 0]))
    assert v.verdict == REPRODUCED and v.p_value == pytest.approx(2 / 2 ** 10) and "Barnard" in v.test
    assert "5 of 5" in v.evidence and "0 of 5" in v.evidence and v.low > 0
    # Fisher's p = 0.17 and a Newcombe interval [0.03, 0.88] disagreed here; test and interval now agree
    three = judge_claim(claim, _runs(a=[1, 1, 1, 0, 0], b=[0, 0, 0, 0, 0]))
    assert three.verdict == "not significant with 5 seeds" and three.low < 0 < three.high
    assert judge_claim(claim, _runs(a=[1, 0, 0], b=[0, 0, 0])).verdict == "not significant with 3 seeds"


def test_a_bimodal_metric_is_tested_as_a_count_at_the_declared_threshold():
    claim = Claim("a learns it more often", "a", "b", "m", threshold=0.9)
    runs = _runs(a=[0.99] * 10, b=[0.5, 0.99, 0.96, 0.45, 0.53, 0.5, 0.48, 0.97, 0.51, 0.5])
    v = judge_claim(claim, runs)
    assert "10 of 10 reach ≥ 0.9" in v.evidence and "3 of 10 reach ≥ 0.9" in v.evidence
    assert v.difference == pytest.approx(0.7) and "Barnard" in v.test and v.verdict == REPRODUCED


def test_a_difference_shown_below_the_smallest_effect_is_not_reproduced():
    claim = Claim("a beats b by a lot", "a", "b", "m", smallest_effect=1.0)
    rng = np.random.default_rng(1)
    v = judge_claim(claim, _runs(a=rng.normal(0, 0.1, 10), b=rng.normal(0, 0.1, 10)))
    assert v.verdict == NOT_REPRODUCED and "below the claim's smallest effect of interest 1" in v.reason


def test_holm_adjusts_the_claims_of_a_study_as_one_family():
    rng = np.random.default_rng(3)
    runs = _runs(a=rng.normal(2.0, 1, 8), b=rng.normal(0, 1, 8), c=rng.normal(1.0, 1, 8), d=rng.normal(1.5, 1, 8))
    claims = [Claim(f"a beats {k}", "a", k, "m") for k in "bcd"]
    rows = verdict_table(claims, {}, {}, runs)
    raw = [judge_claim(c, runs).p_value for c in claims]
    order = np.argsort(raw)
    assert rows[order[0]]["p_adjusted"] == pytest.approx(min(1.0, 3 * raw[order[0]]))
    assert rows[order[2]]["p_adjusted"] == pytest.approx(max(r["p_adjusted"] for r in rows))
    assert all(r["p_adjusted"] >= r["p_value"] for r in rows)
    assert all((r["verdict"] == REPRODUCED) == (r["p_adjusted"] < 0.05) for r in rows)


def test_published_numbers_match_differ_or_are_inconclusive_against_their_tolerance():
    runs = _runs(a=[0.93, 0.94, 0.92, 0.935, 0.925])
    assert judge_published("a", "m", 0.93, runs).verdict == "matches (within ±0.0465)"      # m: 5% of 0.93
    assert judge_published("a", "m", Published(0.93, 0.001, "x"), runs).verdict == "inconclusive with 5 seeds"
    assert judge_published("a", "m", Published(0.93, 0.02, "the paper's spread"), runs).verdict == \
        "matches (within ±0.02)"
    far = judge_published("a", "m", Published(0.80, 0.02, "the paper's spread"), runs, reason="trained longer")
    assert far.verdict == "differs: ours higher by 0.13" and far.reason == "trained longer" and far.low > 0
    near = judge_published("a", "m", Published(0.95, 0.001, "x"), runs)
    assert near.verdict == "differs: ours lower by 0.02"
    assert judge_published("a", "m", "a sentence", runs).verdict == "shown only"
    accuracy = [{"key": "a", "seed": s, "test_accuracy": v} for s, v in enumerate([0.93, 0.931, 0.929, 0.93])]
    matched = judge_published("a", "test_accuracy", 0.932, accuracy)     # an accuracy: ± one point
    assert matched.verdict == "matches (within ±0.01)" and matched.tolerance == 0.01
    assert matched.prediction_low < 0.93 < matched.prediction_high


def test_counts_against_a_published_rate_use_the_exact_binomial_interval():
    assert judge_published("a", "test_all_solved", (0.97, 1.0), _runs(a=[1] * 30)).verdict == "matches (within ±0.1)"
    # 10 of 10: the 90% interval reaches 0.74, below 0.97 − 0.1
    ten = judge_published("a", "test_all_solved", (0.97, 1.0), _runs(a=[1] * 10))
    assert ten.verdict == "inconclusive with 10 seeds"
    few = judge_published("a", "test_all_solved", (0.97, 1.0), _runs(a=[0, 0, 0, 0, 1]))
    assert few.verdict == "differs: ours lower by 0.77 (worse)"
    none = judge_published("a", "test_all_solved", 0.0, _runs(a=[0, 0, 0, 0, 0]))
    assert none.verdict == "inconclusive with 5 seeds" and none.high == pytest.approx(0.5218, abs=1e-4)


@pytest.mark.parametrize("value, message", [
    ((None, None), "open at both ends"), ((0.9, 0.8), "low end 0.9 is above its high end 0.8"),
    ((0.8, 0.9, 1.0), "a range is (low, high)"), (("low", 0.9), "a range is (low, high)"),
    ([0.8, 0.9], "expected a number"), (True, "expected a number"), (None, "expected a number"),
    (Published(0.9, -1.0, "x"), "tolerance must be a number ≥ 0"), (Published(0.9, 0.1, ""), "needs its reason")])
def test_a_published_value_that_cannot_be_tested_is_a_clear_error_naming_its_key(value, message):
    with pytest.raises(ValueError, match=r"published\[\('a', 'm'\)\].*" + re.escape(message)):
        judge_published("a", "m", value, _runs(a=[0.9, 0.95]))
    with pytest.raises(ValueError, match=re.escape(message)):
        Experiment(name="x", title="x", study="x", about="x", specs=lambda quick: [], metric_names=["m"],
                   published={("a", "m"): value})


def test_the_table_has_a_row_per_claim_and_per_published_number():
    runs = _runs(a=[1, 2, 3], b=[1, 2, 3])
    rows = verdict_table([CLAIM], {("a", "m"): 2.0, ("b", "m"): "text"}, {}, runs)
    assert [r["kind"] for r in rows] == ["claim", "published", "published"]


@settings(max_examples=60)
@given(a=st.lists(st.floats(-10, 10), min_size=2, max_size=8), b=st.lists(st.floats(-10, 10), min_size=2, max_size=8))
def test_welch_interval_and_p_value_agree(a, b):
    """The 95% interval excludes 0 exactly when p < 0.05 (both from the same Welch statistic)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.std() < 1e-6 or b.std() < 1e-6:
        return
    d, low, high, p, _ = compare_samples(a, b)
    assert low <= d <= high
    if abs(p - 0.05) > 1e-6:
        assert (p < 0.05) == (low > 0 or high < 0)


PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.mark.parametrize("name", sorted(n for n in EXPERIMENTS if (PUBLISHED / n / RUNS_CSV[SETTING]).is_file()))
def test_every_published_verdict_follows_from_the_runs_published_beside_it(name):
    """A reader can recompute each verdict of docs/results/NAME.md, its interval and p, from the per-run
    metrics beside it; and the page still says what today's verdict code and the study's claims give."""
    page = (PUBLISHED / f"{name}.md").read_text()
    checked = 0
    for label, file in RUNS_CSV.items():
        if not (PUBLISHED / name / file).is_file():
            continue
        for verdict in stored_verdicts(EXPERIMENTS[name], read_runs_csv(PUBLISHED / name / file)):
            if verdict["verdict"] != "shown only":
                assert f"{label}: **{verdict['verdict']}** ({verdict['evidence']})" in page, verdict["claim"]
                assert verdict_cell(verdict) in page, verdict["claim"]
                checked += 1
    assert checked > 0


def _published_rows(path: str) -> list[dict]:
    with open(PUBLISHED / path, newline="") as f:
        return list(csv.DictReader(f))


def _two(x: float, signed: bool = False) -> str:
    """Two decimals as the reasons write them: a true minus sign, an explicit plus where asked."""
    return f"{x:{'+' if signed else ''}.2f}".replace("-", "−")


# each change the polyphonic reasons cite: the map that measured it and its trials
BUDGET_CHANGES = {"3× the epochs": ("budget", lambda r: r["epochs"] == "300"),
                  "e^-5": ("budget", lambda r: r["lr"].startswith("0.00673")),
                  "no weight noise": ("budget", lambda r: r["weight_noise"] == "0.0"),
                  "S3's unit counts": ("s3-units", lambda r: True)}
# how each dataset's test-NLL reason (POLYPHONIC_GAPS) cites each change against the setting's runs: "interval"
# (significant: the difference and its 95% interval), "difference" (named not significant, with its difference),
# "" (named not significant without a number)
BUDGET_CITED = {
    ("nottingham", "3× the epochs"): {"rnn": "interval", "gru": "difference", "lstm": "difference"},
    ("nottingham", "e^-5"): {"rnn": "interval", "gru": "difference", "lstm": "difference"},
    ("nottingham", "no weight noise"): {"rnn": "interval", "gru": "", "lstm": ""},
    ("musedata", "3× the epochs"): {"rnn": "interval", "gru": "difference", "lstm": "interval"},
    ("musedata", "no weight noise"): {"rnn": "interval", "gru": "interval", "lstm": ""},
    ("nottingham", "S3's unit counts"): {"rnn": "interval", "gru": "difference", "lstm": "difference"},
    ("musedata", "S3's unit counts"): {"rnn": "difference", "gru": "difference", "lstm": "difference"},
    ("jsb", "S3's unit counts"): {"rnn": "difference", "gru": "interval", "lstm": "difference"},
    ("piano", "S3's unit counts"): {"rnn": "difference", "gru": "interval", "lstm": "difference"},
}


@pytest.mark.parametrize("dataset, change", list(BUDGET_CITED))
def test_the_polyphonic_reasons_cite_what_the_published_budget_maps_measured(dataset, change):
    """The measured reasons quote numbers from docs/results/polyphonic-*-budget and -s3-units against the
    setting's runs: a map or the study published again with other results must fail here until the prose
    follows."""
    from rnnlab.experiments.studies import POLYPHONIC_GAPS

    text = POLYPHONIC_GAPS[dataset]
    setting = _published_rows("polyphonic/runs.csv")
    suffix, changed_by = BUDGET_CHANGES[change]
    trials = [r for r in _published_rows(f"polyphonic-{dataset}-{suffix}/trials.csv") if changed_by(r)]
    for cell, cited in BUDGET_CITED[(dataset, change)].items():
        changed = np.array([float(r["test_loss"]) for r in trials if r["cell"] == cell])
        base = np.array([float(r["test_loss"]) for r in setting if r["key"].startswith(f"{dataset}-{cell}-")])
        assert len(changed) == len(base) == 3
        difference, low, high, p, _ = compare_samples(changed, base)
        assert (p < 0.05) == (cited == "interval"), (cell, p)
        if cited == "interval":
            assert f"{_two(difference, signed=True)} [{_two(low)}, {_two(high)}]".lstrip("+") in text, cell
        elif cited == "difference":
            assert f"{cell.upper()} {_two(difference, signed=True)}" in text, cell


def test_s3s_unit_counts_hold_the_parameters_the_reasons_say():
    """S3's "about 20K" counts the recurrent layer alone: with the readout its models are larger than ours."""
    from rnnlab import count_params
    from rnnlab.experiments.studies import MUSIC_SIZES, S3_UNITS

    def counts(sizes: dict[str, int], readout: bool = True) -> list[int]:
        return [count_params(c, input_size=88, hidden_size=h, output_size=88) - (0 if readout else 88 * h + 88)
                for c, h in sizes.items()]

    s3 = {"rnn": 100, "gru": 46, "lstm": 36}
    assert all(17_500 < n < 19_000 for n in counts(s3, readout=False))      # "about 20K" without the readout
    assert f"RNN {s3['rnn']}, GRU {s3['gru']}, LSTM {s3['lstm']}" in S3_UNITS
    for sizes in (s3, MUSIC_SIZES):
        assert " / ".join(f"{n:,}" for n in counts(sizes)) in S3_UNITS
    for dataset in ("jsb", "nottingham", "musedata", "piano"):
        trials = _published_rows(f"polyphonic-{dataset}-s3-units/trials.csv")
        assert {(r["cell"], int(r["hidden"])) for r in trials} == set(s3.items()) and len(trials) == 9


def _mean_train_nll(rows: list[dict]) -> float:
    return float(np.mean([float(r["train_loss"]) for r in rows]))


@pytest.mark.parametrize("dataset", ["nottingham", "musedata"])
def test_the_train_nll_reasons_cite_the_lowest_train_nll_of_any_variation_measured(dataset):
    """"The lowest mean train NLL of any variation we trained": the setting's runs, every budget-map
    configuration and S3's unit counts, per cell, from the published files."""
    from rnnlab.experiments.studies import PUBLISHED_TRAIN_NLL, TRAIN_GAPS

    setting = _published_rows("polyphonic/runs.csv")
    budget = _published_rows(f"polyphonic-{dataset}-budget/trials.csv")
    units = _published_rows(f"polyphonic-{dataset}-s3-units/trials.csv")
    for cell, published in zip(("rnn", "gru", "lstm"), PUBLISHED_TRAIN_NLL[dataset], strict=True):
        groups = [[r for r in setting if r["key"].startswith(f"{dataset}-{cell}-")],
                  [r for r in units if r["cell"] == cell]]
        configurations = {(r["lr"], r["epochs"], r["weight_noise"]) for r in budget if r["cell"] == cell}
        groups += [[r for r in budget if r["cell"] == cell and (r["lr"], r["epochs"], r["weight_noise"]) == c]
                   for c in configurations]
        lowest = min(_mean_train_nll(g) for g in groups)
        assert f"{cell.upper()} {lowest:.2f}" in TRAIN_GAPS[dataset], cell
        assert lowest > published, cell       # "still above S3's"


def _span(values: list[float], digits: int = 2) -> str:
    """The range of per-seed values as the reasons write it: "a-b", or "a" where both round alike."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


@pytest.mark.parametrize("dataset, significant", [("jsb", []), ("piano", ["gru"])])
def test_the_train_nll_reasons_cite_the_unit_count_maps(dataset, significant):
    """JSB's and Piano's train-NLL reasons: S3's and our train-to-test gaps, and what S3's unit counts change
    (the cells named significant quote their interval; the others are not significant with 3 seeds)."""
    from rnnlab.experiments.studies import PIANO_GAP, PUBLISHED_NLL, PUBLISHED_TRAIN_NLL, TRAIN_GAPS

    text, cells = TRAIN_GAPS[dataset], ("rnn", "gru", "lstm")
    setting = _published_rows("polyphonic/runs.csv")
    units = _published_rows(f"polyphonic-{dataset}-s3-units/trials.csv")
    ours = {c: [r for r in setting if r["key"].startswith(f"{dataset}-{c}-")] for c in cells}
    bigger = {c: [r for r in units if r["cell"] == c] for c in cells}
    assert " / ".join(f"{_mean_train_nll(bigger[c]):.2f}" for c in cells) in text
    for cell in cells:
        a, b = (np.array([float(r["train_loss"]) for r in rows]) for rows in (bigger[cell], ours[cell]))
        difference, low, high, p, _ = compare_samples(a, b)
        assert (p < 0.05) == (cell in significant), cell
        if cell in significant:
            assert f"{cell.upper()} {_two(difference, signed=True)} [{_two(low)}, {_two(high)}]" in text
    s3_gaps = [t - r for t, r in zip(PUBLISHED_NLL[dataset], PUBLISHED_TRAIN_NLL[dataset], strict=True)]
    our_gaps = [float(np.mean([float(r["test_loss"]) for r in ours[c]])) - _mean_train_nll(ours[c]) for c in cells]
    if dataset == "jsb":
        assert f"to 6.94, {s3_gaps[1]:.2f} nats under its test NLL, ours {our_gaps[1]:.2f} under" in text
        assert PUBLISHED_TRAIN_NLL["jsb"][::2] == (8.82, 8.15)
        assert all(_mean_train_nll(ours[c]) < published for c, published in (("rnn", 8.82), ("lstm", 8.15)))
    else:
        above = [_mean_train_nll(bigger[c]) - published for c, published in zip(cells, PUBLISHED_TRAIN_NLL[dataset])]
        for quoted in (TRAIN_GAPS["piano"], PIANO_GAP):
            assert f"{_span(s3_gaps)} nats under its test NLL, ours {_span(our_gaps)}" in quoted
        assert f"still {_span(above)} nats above S3's" in text


def test_the_reasons_citing_the_data_maps_match_their_published_trials():
    from rnnlab.experiments.studies import COMPARE, MORE_STRINGS

    lstm = [r for r in _published_rows("embedded-reber-map-data/trials.csv") if r["cell"] == "lstm"]
    solved = {lr: f"{sum(float(r['test_all_solved']) for r in lstm if r['lr'] == lr):.0f} of "
                  f"{sum(r['lr'] == lr for r in lstm)}" for lr in ("0.01", "0.03", "0.1")}
    cited = (f"solves {solved['0.03']} trials at lr 0.03 ({solved['0.01'].split(' of ')[0]} and {solved['0.1']} "
             f"at 0.01 and 0.1; docs/results/embedded-reber-map-data)")
    assert cited in MORE_STRINGS
    for exp in (EXPERIMENTS["embedded-reber"], COMPARE):
        assert any(MORE_STRINGS in reason for reason in exp.reasons.values()), exp.name

    sizes = _published_rows("mean-sign-map-data/trials.csv")
    reason = EXPERIMENTS["mean-sign"].reasons[("rnn-64x2", "test_accuracy")]
    for n_train in ("250", "500"):    # "our 95% interval holds its 93.2%"
        interval = mean_std_interval([float(r["test_accuracy"]) for r in sizes if r["n_train"] == n_train])
        assert interval["ci_low"] <= 0.932 <= interval["ci_high"]
        assert f"[{interval['ci_low']:.3f}, {interval['ci_high']:.3f}]" in reason


def _means(path: str, metric: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for row in _published_rows(path):
        values.setdefault(row["key"], []).append(float(row[metric]))
    return {key: float(np.mean(v)) for key, v in values.items()}


def test_the_s4_reasons_cite_s4s_two_reports_and_the_published_runs():
    from rnnlab.experiments.studies import AGREEMENT_GAP, S4_TWO_REPORTS

    table, figure = EXPERIMENTS["agreement"].published, EXPERIMENTS["bptt-depth"].published
    loss, accuracy = _means("agreement/runs.csv", "test_loss"), _means("agreement/runs.csv", "test_accuracy")
    for cell in ("rnn", "gru"):
        name = cell.upper()
        for published, key in ((table, f"{cell}-50"), (figure, f"{cell}-k20")):
            assert f"{name} {published[(key, 'test_loss')]} / {published[(key, 'test_accuracy')]}" in S4_TWO_REPORTS
        assert f"{name} {loss[f'{cell}-50']:.3f} / {accuracy[f'{cell}-50']:.3f}" in S4_TWO_REPORTS
        ours, reports = loss[f"{cell}-50"], (table[(f"{cell}-50", "test_loss")], figure[(f"{cell}-k20", "test_loss")])
        assert min(reports) < ours < max(reports)     # "lie between the two"
        depths = [v for k, v in _means("bptt-depth/runs.csv", "test_loss").items() if k.startswith(f"{cell}-k")]
        assert len(depths) == 6 and f"{name} {min(depths):.3f}-{max(depths):.3f}" in S4_TWO_REPORTS
    dev = _means("agreement/runs.csv", "dev_accuracy")
    gaps = [100 * (accuracy[k] - dev[k]) for k in dev]
    assert f"accuracy is {min(gaps):.1f}-{max(gaps):.1f} points under our test accuracy" in AGREEMENT_GAP
    assert all(dev[k] > table[(k, "test_accuracy")] for k in dev)    # "still above S4's table for every cell"
    tuned = {row["key"]: row for row in _published_rows("agreement/tuned-runs.csv")}   # "improve further, but…"
    tuned_accuracy = _means("agreement/tuned-runs.csv", "test_accuracy")
    assert set(tuned) == set(accuracy)
    assert [k for k in accuracy if tuned_accuracy[k] <= accuracy[k]] == ["gru-50"]
    gru50 = np.array([float(r["test_accuracy"]) for r in _published_rows("agreement/tuned-runs.csv")
                      if r["key"] == "gru-50"])
    assert f"test accuracy {gru50.mean():.3f} ± {gru50.std(ddof=1):.3f} over its 3 seeds" in AGREEMENT_GAP


def test_the_nlu_test_gap_cites_the_tuned_runs():
    from rnnlab.experiments.studies import NLU_TEST_GAP

    published = EXPERIMENTS["nlu-lm"].published
    dev, test = (_means("nlu-lm/runs.csv", m)["tuned"] for m in ("dev_loss", "test_loss"))
    tuned_dev, tuned_test = (_means("nlu-lm/tuned-runs.csv", m)["tuned"] for m in ("dev_loss", "test_loss"))
    s4_dev, s4_test = published[("tuned", "dev_loss")], published[("tuned", "test_loss")]
    assert f"({dev:.3f} vs {s4_dev}; {tuned_dev:.3f} with rnnlab's own search" in NLU_TEST_GAP
    assert abs(dev - s4_dev) < 0.01 * s4_dev       # "matches": within the 1% tolerance
    assert f"test loss lies {test - dev:.3f} above it ({test:.3f}," in NLU_TEST_GAP
    assert f"wiki-test.txt; {tuned_test - tuned_dev:.3f} tuned)" in NLU_TEST_GAP
    assert f"lies {s4_dev - s4_test:.2f} below its dev loss" in NLU_TEST_GAP


def test_the_mean_sign_reasons_cite_the_data_map():
    from rnnlab.experiments.studies import MEAN_SIGN_TRAIN_GAP

    trials = _published_rows("mean-sign-map-data/trials.csv")
    sizes = sorted({int(r["n_train"]) for r in trials})
    train_loss = [np.mean([float(r["train_loss"]) for r in trials if r["n_train"] == str(n)]) for n in sizes]
    assert (sizes[0], sizes[-1]) == (250, 4000)
    assert f"train losses of {min(train_loss):.3f}-{max(train_loss):.3f}" in MEAN_SIGN_TRAIN_GAP
    assert max(train_loss) < EXPERIMENTS["mean-sign"].published[("rnn-64x2", "train_loss")]
    interval = mean_std_interval([float(r["test_loss"]) for r in trials if r["n_train"] == "250"])
    assert interval["ci_low"] <= EXPERIMENTS["mean-sign"].published[("rnn-64x2", "test_loss")] <= interval["ci_high"]
    assert f"[{interval['ci_low']:.3f}, {interval['ci_high']:.3f}]" in \
        EXPERIMENTS["mean-sign"].reasons[("rnn-64x2", "test_loss")]


def test_the_sentiment_reason_cites_s1_and_the_published_runs():
    import re

    from rnnlab.experiments.studies import SENTIMENT_GAP

    exp, page = EXPERIMENTS["sentiment"], (PUBLISHED / "sentiment.md").read_text()
    ours = _means("sentiment/runs.csv", "test_accuracy")
    s1_gru, s1_rnn = exp.published[("sst5-gru", "test_accuracy")], exp.published[("sst5-rnn", "test_accuracy")]
    majority = float(re.search(r"sst2: majority-class test accuracy ([\d.]+)%", page).group(1))
    assert f"its GRU's {100 * s1_gru:.1f}%" in SENTIMENT_GAP and f"our SST-2 GRU ({100 * ours['sst2-gru']:.1f}%)" \
        in SENTIMENT_GAP
    assert f"its RNN's {100 * s1_rnn:.1f}% below SST-2's majority baseline ({majority:.1f}%)" in SENTIMENT_GAP
    assert f"our SST-5 RNN ({100 * ours['sst5-rnn']:.1f}%)" in SENTIMENT_GAP and 100 * s1_rnn < majority
    assert exp.published[("sst5-lstm", "test_accuracy")].endswith("0.464") and "46.4% with GloVe" in SENTIMENT_GAP


def test_the_polyphonic_reasons_cite_the_pages_loss_averaging():
    """MuseData's and Piano's reasons quote the LossAveraging note of the study's own page (at its setting)."""
    import re

    from rnnlab.experiments.studies import MUSEDATA_GAP, NOTTINGHAM_GAP, PIANO_GAP, PUBLISHED_NLL

    note = next(line for line in (PUBLISHED / "polyphonic.md").read_text().splitlines()
                if line.startswith("- Test loss averaged over all steps → per sequence first"))
    pairs = {key: (float(a), float(b)) for key, a, b in
             re.findall(r"(\w+-\w+-\d+) ([\d.]+) ± [\d.]+ → ([\d.]+) ± [\d.]+", note)}
    assert len(pairs) == 12

    def of(dataset: str) -> list[tuple[float, float]]:
        return [pairs[k] for cell in ("rnn", "gru", "lstm") for k in pairs if k.startswith(f"{dataset}-{cell}-")]

    muse = of("musedata")
    drops = [a - b for a, b in muse]
    left = [b - published for (_, b), published in zip(muse, PUBLISHED_NLL["musedata"], strict=True)]
    assert f"drop {min(drops):.2f}-{max(drops):.2f} nats, to {' / '.join(f'{b:.2f}' for _, b in muse)}" in MUSEDATA_GAP
    assert f"leaving {min(left):.2f}-{max(left):.2f} nats" in MUSEDATA_GAP
    piano = of("piano")
    assert f"to {' / '.join(f'{b:.2f}' for _, b in piano)}" in PIANO_GAP
    assert all(0.25 < b - a < 0.35 for a, b in piano)                                  # "rise ~0.3 nats"
    rises = [b - a for a, b in of("nottingham")]
    assert 0.01 <= min(rises) and max(rises) <= 0.05 and "ours rise 0.01-0.05" in NOTTINGHAM_GAP


def test_what_goes_into_a_markdown_table_cell_has_no_pipe():
    """Metric labels, claims and reasons become cells of the published tables: a '|' would split the row."""
    from rnnlab.experiments.studies import COMPARE
    from rnnlab.report import METRIC_NAMES

    texts = list(METRIC_NAMES.values())
    for exp in (*EXPERIMENTS.values(), COMPARE):
        texts += [c.text for c in exp.claims] + list(exp.reasons.values())
        texts += [v for v in exp.published.values() if isinstance(v, str)]
    assert texts and not [t for t in texts if "|" in t]


def test_a_range_open_at_one_end_is_at_most_or_at_least():
    """S5's "orders of magnitude smaller" as log10 ≤ −2: our interval must lie inside the open range."""
    deep = [{"key": "a", "seed": s, "first_step_gradient_log10": v} for s, v in enumerate([-3.1, -2.9, -3.3, -2.8])]
    shallow = [{"key": "a", "seed": s, "first_step_gradient_log10": v} for s, v in enumerate([-1.1, -0.9, -1.0, -1.2])]
    metric = "first_step_gradient_log10"     # tolerance: half an order of magnitude
    at_most = judge_published("a", metric, (None, -2.0), deep)
    assert at_most.verdict == "matches (within ±0.5)"
    assert at_most.claim == "a first step gradient log10 ≤ -2 (published)"
    assert judge_published("a", metric, (None, -2.0), shallow).verdict == "differs: ours higher by 0.95"
    assert judge_published("a", metric, (-2.0, None), shallow).verdict == "matches (within ±0.5)"
    at_least = judge_published("a", metric, (-2.0, None), deep)
    assert at_least.verdict == "differs: ours lower by 1.03"
    assert at_least.difference == pytest.approx(np.mean([-3.1, -2.9, -3.3, -2.8]) + 2.0)


def test_the_mean_sign_learning_curve_reason_cites_the_studys_runs():
    from rnnlab.experiments.studies import MEAN_SIGN_CURVE

    published = EXPERIMENTS["mean-sign"].published
    first, tenth = (_means("mean-sign/runs.csv", f"train_accuracy_epoch{n}") for n in (1, 10))
    small, full = "rnn-64x2-n250", "rnn-64x2"
    blog_first, blog_tenth = (published[(full, f"train_accuracy_epoch{n}")] for n in (1, 10))
    assert (f"ends at {100 * first[small]:.1f}% train accuracy, as the blog's ({100 * blog_first:.1f}%; with "
            f"4,000: {100 * first[full]:.1f}%)") in MEAN_SIGN_CURVE
    assert abs(first[small] - blog_first) < 0.01
    assert (f"its {100 * blog_tenth:.1f}% after epoch 10 (ours {100 * tenth[small]:.1f}% and "
            f"{100 * tenth[full]:.1f}%)") in MEAN_SIGN_CURVE
    assert min(tenth.values()) > blog_tenth + 0.05


def test_the_ptb_gru_note_cites_the_published_runs_at_epochs_2_and_4():
    from rnnlab.experiments.studies import PTB_GRU_RATE

    rows = _published_rows("ptb/runs.csv")

    def spans(key: str, metric: str, digits: int) -> tuple[str, str]:
        return tuple(_span([float(r[f"{metric}_epoch{n}"]) for r in rows if r["key"] == key], digits) for n in (2, 4))

    (loss2, loss4), (dev2, dev4) = spans("gru", "train_loss", 2), spans("gru", "dev_perplexity", 0)
    assert f"loss rises from {loss2} to {loss4} nats and its dev perplexity from {dev2} to {dev4}" in PTB_GRU_RATE
    (loss2, loss4), (dev2, dev4) = spans("gru-lr10", "train_loss", 2), spans("gru-lr10", "dev_perplexity", 0)
    assert f"both fall: {loss2} → {loss4} nats and {dev2} → {dev4}." in PTB_GRU_RATE
    for key, rising in (("gru", True), ("gru-lr10", False)):
        for r in (r for r in rows if r["key"] == key):
            for metric in ("train_loss", "dev_perplexity"):
                assert (float(r[f"{metric}_epoch4"]) > float(r[f"{metric}_epoch2"])) == rising, (key, metric)


def test_the_ptb_dev_reason_cites_the_published_runs_and_one_stream_evaluation():
    from rnnlab.experiments.studies import PTB_DEV_GAP, PTB_EPOCHS

    rows, published = _published_rows("ptb/runs.csv"), EXPERIMENTS["ptb"].published
    zaremba_dev, zaremba_test = published[("lstm", "dev_perplexity")], published[("lstm", "test_perplexity")]
    last = f"dev_perplexity_epoch{PTB_EPOCHS}"     # what the Lua code prints

    def values(key: str, metric: str) -> np.ndarray:
        return np.array([float(r[metric]) for r in rows if r["key"] == key])

    dev = values("lstm", "dev_perplexity")
    assert len(dev) == 3 and f"our 3 seeds span {_span(dev, 1)}" in PTB_DEV_GAP
    above = (zaremba_dev - dev.mean()) / dev.std(ddof=1)
    assert f"it lies {above:.1f} of our standard deviations above our mean" in PTB_DEV_GAP and above > 3
    assert all(values("lstm", "dev_perplexity") == values("lstm", last))     # our main runs test their last epoch
    lua = mean_std_interval(list(values("lstm-lua-schedule", last)))
    inside = lua["ci_low"] <= zaremba_dev <= lua["ci_high"]
    assert (f"prints, is {lua['mean']:.1f} [{lua['ci_low']:.1f}, {lua['ci_high']:.1f}] (our main runs: "
            f"{dev.mean():.1f}), {'which holds' if inside else 'still under'} {zaremba_dev}") in PTB_DEV_GAP
    assert lua["mean"] - dev.mean() > 0.5 * (zaremba_dev - dev.mean())    # "for the most part"
    test = mean_std_interval(list(values("lstm-lua-schedule", "test_perplexity")))
    assert test["ci_low"] <= zaremba_test <= test["ci_high"]
    assert f"its test perplexity, {test['mean']:.1f} [{test['ci_low']:.1f}, {test['ci_high']:.1f}], holds the " \
           f"published {zaremba_test}" in PTB_DEV_GAP
    for key in ("lstm-rnnlab-init", "lstm-lua-schedule"):
        best, other = values(key, "best_epoch"), values(key, "dev_perplexity")
        assert len(set(best)) == 1 and f"{key}: {other.mean():.1f} ± {other.std(ddof=1):.2f}, best at epoch " \
               f"{best[0]:.0f} in 3 of 3 runs" in PTB_DEV_GAP
    page = (PUBLISHED / "ptb.md").read_text()     # the one-stream evaluation counts the last-epoch runs too
    assert re.search(r"\blstm: [^;]* as one stream; the tested parameters are the last epoch's in 3 of 3 runs", page)
    gap = dev - values("lstm", "test_perplexity")
    assert f"test perplexity lies {zaremba_dev - zaremba_test:.1f} below its dev perplexity, ours {gap.mean():.1f} " \
           f"({_span(gap, 1)} per seed)" in PTB_DEV_GAP


def test_every_published_page_and_map_is_what_todays_statistics_give_from_its_stored_runs(tmp_path):
    """Republishing from the runs and trials published beside each page (``republish_verdicts``,
    ``republish_sweep_comparisons``) changes no page: the words, numbers, intervals and budget findings on
    docs/results are today's code applied to the stored data."""
    import shutil

    from rnnlab.report import republish_sweep_comparisons, republish_verdicts

    copy = tmp_path / "results"
    shutil.copytree(PUBLISHED, copy)
    for name in sorted(n for n in EXPERIMENTS if (PUBLISHED / f"{n}.md").is_file()):
        republish_verdicts(name, copy)
        assert (copy / f"{name}.md").read_text() == (PUBLISHED / f"{name}.md").read_text(), name
    for report in sorted(PUBLISHED.glob("*/report.md")):
        republish_sweep_comparisons(copy / report.parent.name / "report.md")
        assert (copy / report.parent.name / "report.md").read_text() == report.read_text(), report.parent.name


def test_a_look_at_n_seeds_takes_each_configurations_first_n_seeds_wherever_its_seeds_start():
    """A sequential plan's look judges the first n seeds in seed order, also for a tuned study (seeds 1000…)."""
    from rnnlab.experiments.verdicts import values_of

    runs = [{"key": "a", "seed": 1000 + s, "m": float(s)} for s in (4, 0, 3, 1, 2)]
    assert list(values_of(runs, "a", "m", seeds=3)) == [0.0, 1.0, 2.0]
    assert len(values_of(runs, "a", "m")) == 5
    assert judge_claim(CLAIM, runs + [{"key": "b", "seed": 1000 + s, "m": 9.0 + s} for s in range(5)],
                       seeds=3).seeds == 3
