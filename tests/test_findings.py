"""Measured reasons as data: the quote engine against constructed tables, and the published findings
against the stored results they quote (their words as well as their numbers)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rnnlab.analysis.run import write_csv
from rnnlab.experiments.findings import (
    FINDINGS_FILE,
    Finding,
    FindingError,
    expand_quotes,
    load_finding_notes,
    load_findings,
    number,
    quote_value,
    render,
    render_reasons,
)
from rnnlab.experiments.studies import COMPARE, EXPERIMENTS
from rnnlab.page import Heading, Items, Page, markdown, page_to_dict

PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "results"
STUDIES = {**EXPERIMENTS, "compare": COMPARE}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A results root with a study's runs (two configurations × 3 seeds) and a map's trials."""
    write_csv(tmp_path / "toy" / "runs.csv", [
        {"key": key, "seed": s, "acc": acc, "loss": loss, "best_epoch": epoch}
        for key, accs, losses, epochs in (("gru-10", (0.90, 0.92, 0.94), (0.30, 0.20, 0.25), (7, 7, 9)),
                                           ("rnn-18", (0.50, 0.60, 0.55), (0.70, 0.75, 0.65), (3, 4, 3)))
        for s, (acc, loss, epoch) in enumerate(zip(accs, losses, epochs))])
    write_csv(tmp_path / "toy-map" / "trials.csv", [
        {"id": f"t{i}", "cell": cell, "lr": lr, "seed": s, "solved": solved, "status": status}
        for i, (cell, lr, s, solved, status) in enumerate([
            ("rnn", "0.01", 0, 0, "ok"), ("rnn", "0.01", 1, 1, "ok"), ("rnn", "0.1", 0, 1, "ok"),
            ("lstm", "0.01", 0, 1, "ok"), ("lstm", "0.01", 1, 1, "ok"), ("lstm", "0.1", 0, 0, "failed")])])
    page = Page("toy", [Heading("Results at the study's setting"),
                        Items(["per sequence: gru-10 0.25 → 0.21; rnn-18 0.70 → 0.80."]),
                        Heading("Results tuned"), Items(["per sequence: gru-10 9 → 9."])])
    (tmp_path / "toy" / "page.json").write_text(json.dumps(page_to_dict(page)))     # the page as data: what is read
    (tmp_path / "toy.md").write_text(markdown(page).replace("0.21", "9.99"))          # its Markdown is never read
    return tmp_path


def test_each_statistic_of_a_selection(root):
    runs = {"table": "toy/runs.csv", "where": {"key": "gru-10"}, "metric": "acc"}
    assert quote_value("m", {**runs, "stat": "mean"}, root) == "0.92"
    assert quote_value("m", {**runs, "stat": "mean", "scale": 100, "digits": 1}, root) == "92.0"
    assert quote_value("m", {**runs, "stat": "range", "digits": 2}, root) == "0.90-0.94"
    assert quote_value("m", {**runs, "stat": "values"}, root) == "0.90 / 0.92 / 0.94"
    assert quote_value("m", {**runs, "stat": "mean_std", "digits": 3}, root) == "0.920 ± 0.020"
    assert quote_value("m", {**runs, "stat": "count"}, root) == "3"
    low, high = stats.t.interval(0.95, 2, loc=0.92, scale=0.02 / np.sqrt(3))
    assert quote_value("m", {**runs, "stat": "interval", "digits": 4}, root) == f"[{low:.4f}, {high:.4f}]"
    epochs = {**runs, "metric": "best_epoch", "digits": 0}
    assert quote_value("m", {**epochs, "stat": "mode"}, root) == "7"
    assert quote_value("m", {**epochs, "stat": "mode_count"}, root) == "2 of 3"
    assert quote_value("m", {**runs, "stat": "z", "value": 0.96}, root) == "2.00"
    # a per-row difference of two columns, and the same range collapsing where both ends round alike
    assert quote_value("m", {**runs, "minus": "loss", "stat": "mean"}, root) == "0.67"
    assert quote_value("m", {**runs, "stat": "range", "digits": 0}, root) == "1"


def test_a_difference_is_decided_by_the_permutation_test_and_says_when_it_is_not_significant(root):
    gru = {"table": "toy/runs.csv", "where": {"key": "gru-10"}, "metric": "acc", "sign": True,
           "against": {"table": "toy/runs.csv", "where": {"key": "rnn-18"}}}
    # 3 vs 3 seeds: the smallest exact permutation p is 2/20, so even a clear gap is not significant
    text = quote_value("m", {**gru, "stat": "difference"}, root)
    assert text == "+0.37 (not significant with 3 seeds, p = 0.1)"
    noisy = {**gru, "where": {"key": "rnn-18"}, "metric": "loss",
             "against": {"table": "toy/runs.csv", "where": {"key": "rnn-18", "seed": [0, 1]}}}
    assert re.fullmatch(r"[−+]0\.0\d \(not significant with 2 seeds, p = [\d.]+\)",
                        quote_value("m", {**noisy, "stat": "difference"}, root))


def test_groups_in_their_declared_order_and_failed_trials_left_out(root):
    trials = {"table": "toy-map/trials.csv", "metric": "solved"}
    assert quote_value("m", {**trials, "where": {"cell": "lstm"}, "stat": "of"}, root) == "2 of 2"   # 'failed' out
    ordered = {**trials, "where": {"cell": ["rnn", "lstm"]}, "per": "cell", "stat": "values"}
    assert quote_value("m", ordered, root) == "0.67 / 1.00"
    reversed_ = {**ordered, "where": {"cell": ["lstm", "rnn"]}}
    assert quote_value("m", reversed_, root) == "1.00 / 0.67"
    assert quote_value("m", {**trials, "where": {"lr": 0.1}, "stat": "sum", "digits": 0}, root) == "1"   # "0.1" = 0.1
    # several tables, each one's groups apart: the lowest mean of any configuration
    lowest = {"tables": [{"table": "toy/runs.csv", "where": {"key": "*"}},
                         {"table": "toy-map/trials.csv", "where": {"cell": "rnn"}}],
              "per": ["key", "lr"], "metric": "solved", "stat": "min"}
    with pytest.raises(FindingError, match="no 'solved' in a selected row of toy/runs.csv"):
        quote_value("m", lowest, root)
    lowest["tables"] = lowest["tables"][1:] + [{"table": "toy-map/trials.csv", "where": {"cell": "lstm"}}]
    assert quote_value("m", lowest, root) == "0.50"


def test_a_pages_notes_and_the_studys_published_numbers_as_sources(root):
    page = {"page": "toy.md", "section": "Results at the study's setting",
            "pattern": r"(?P<key>[\w-]+) (?P<before>\d+\.\d+) → (?P<value>\d+\.\d+)"}
    assert quote_value("m", {**page, "stat": "values"}, root) == "0.21 / 0.80"
    assert quote_value("m", {**page, "minus": "before", "stat": "range"}, root) == "−0.04-0.10"
    published = {("gru-10", "acc"): 0.80, ("rnn-18", "acc"): 0.40}
    left = {**page, "minus_published": "acc", "published_key": "{key}", "stat": "values"}
    assert quote_value("m", left, root, published) == "−0.59 / 0.40"
    assert quote_value("m", {"published": "acc", "where": {"key": "gru-*"}, "stat": "mean", "scale": 100,
                             "digits": 1}, root, published) == "80.0"
    # a table without a key column names the published number by its own columns
    map_left = {"table": "toy-map/trials.csv", "where": {"cell": "rnn"}, "metric": "solved", "per": "cell",
                "minus_published": "acc", "published_key": "{cell}-*", "stat": "mean"}
    assert quote_value("m", map_left, root, published) == "0.27"


def test_quote_families_and_fragments_render_into_one_text(root):
    quotes = expand_quotes({"acc": {"each": {"key": ["gru-10", "rnn-18"]}, "table": "toy/runs.csv",
                                    "where": {"key": "{key}"}, "metric": "acc", "stat": "mean"}})
    assert set(quotes) == {"acc_gru_10", "acc_rnn_18"} and quotes["acc_rnn_18"]["where"] == {"key": "rnn-18"}
    finding = Finding("toy", "{both}; that is all", quotes, {"both": "GRU {acc_gru_10}, RNN {acc_rnn_18}"})
    assert finding.names() == ["acc_gru_10", "acc_rnn_18"]
    assert render(finding, root) == "GRU 0.92, RNN 0.55; that is all"


def test_a_number_is_written_with_a_true_minus_and_an_explicit_plus_where_asked():
    assert number(-0.0612) == "−0.06" and number(0.09, sign=True) == "+0.09" and number(4272, 0, thousands=True) \
        == "4,272"


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(-100, 100, allow_nan=False), min_size=2, max_size=9),
       digits=st.integers(0, 4))
def test_range_and_mean_are_what_numpy_gives(tmp_path_factory, values, digits):
    root = tmp_path_factory.mktemp("r")
    write_csv(root / "t.csv", [{"key": "a", "x": repr(v)} for v in values])
    quote = {"table": "t.csv", "metric": "x", "digits": digits}
    low, high = number(min(values), digits), number(max(values), digits)
    assert quote_value("q", {**quote, "stat": "range"}, root) == (low if low == high else f"{low}-{high}")
    assert quote_value("q", {**quote, "stat": "mean"}, root) == number(float(np.mean(values)), digits)


@pytest.mark.parametrize("quote, message", [
    ({"table": "nowhere.csv", "metric": "acc", "stat": "mean"}, "table .*nowhere.csv does not exist"),
    ({"table": "toy/runs.csv", "where": {"key": "lstm-*"}, "metric": "acc", "stat": "mean"}, "no row of toy/runs.csv"),
    ({"table": "toy/runs.csv", "metric": "nope", "stat": "mean"}, "no 'nope' in a selected row"),
    ({"page": "toy.md", "section": "Else", "pattern": "(?P<value>x)", "stat": "mean"}, "no section '## Else'"),
    ({"page": "toy.md", "pattern": r"([\d.]+) →", "stat": "mean"}, r"needs a group \(\?P<value>"),
    ({"page": "toy.md", "pattern": r"(?P<value>\d+\.\d+\.?)\n", "stat": "mean"}, "'0.80.' is not a number"),
    ({"published": "acc", "where": {"key": "*"}, "minus_published": "loss", "stat": "mean"}, "0 published loss"),
])
def test_a_quote_that_cannot_be_computed_names_itself_and_what_is_missing(root, quote, message):
    with pytest.raises(FindingError, match=f"quote 'q'.*{message}"):
        quote_value("q", quote, root, {("gru-10", "acc"): 0.8})


def test_a_malformed_findings_file_is_refused_naming_the_entry(tmp_path):
    bad = tmp_path / "findings.toml"
    cases = {
        '[[toy.reasons]]\nkeys = ["a"]\ntext = "x"\n': r"\[\[toy.reasons\]\] #1: missing metrics",
        '[[toy.reasons]]\nkeys = ["a"]\nmetrics = ["m"]\ntext = "{nope}"\n': r"quotes \{nope\}, which no",
        '[toy.quotes]\nq = { table = "t.csv", stat = "median" }\n[[toy.reasons]]\nkeys = ["a"]\nmetrics = ["m"]\n'
        'text = "{q}"\n': "stat 'median' is not one of",
        '[toy.quotes]\nq = { table = "t.csv", stat = "mean", colour = 1 }\n[[toy.reasons]]\nkeys = ["a"]\n'
        'metrics = ["m"]\ntext = "{q}"\n': r"unknown field\(s\) colour",
        '[toy.quotes]\nq = { stat = "mean" }\n[[toy.reasons]]\nkeys = ["a"]\nmetrics = ["m"]\ntext = "{q}"\n':
            "needs exactly one source",
        '[[toy.reasons]]\nkeys = ["b-*"]\nmetrics = ["m"]\ntext = "plain"\n': "no published m of toy has a key "
                                                                             "matching 'b-\\*'",
    }
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(FindingError, match=message):
            load_findings("toy", {("a", "m"): 1.0}, path=bad)


def test_a_run_away_from_the_published_results_leaves_the_reason_out_and_never_fails(root):
    finding = Finding("toy", "ours {q}", {"q": {"table": "missing/runs.csv", "metric": "acc", "stat": "mean"}})
    reasons = {("a", "m"): finding, ("b", "m"): "plain words"}
    assert render_reasons(reasons, root, strict=False) == {("b", "m"): "plain words"}
    with pytest.raises(FindingError):
        render_reasons(reasons, root)


# -- the published findings -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_study_reason_is_data_and_computes_from_the_published_results(name):
    """No study holds a measured reason as text: each is a finding of findings.toml, and each computes
    from docs/results (the page's republish then shows exactly that: test_verdicts checks the pages)."""
    exp = STUDIES[name]
    assert all(isinstance(reason, Finding) for reason in exp.reasons.values()), name
    assert set(exp.reasons) <= set(exp.published)
    rendered = render_reasons(exp.reasons, PUBLISHED, exp.published)
    assert all(text and "{" not in text for text in rendered.values())
    for finding in exp.findings:
        assert "{" not in render(finding, PUBLISHED, exp.published)


def test_every_study_of_the_findings_file_is_a_study():
    from rnnlab.experiments.settings import read_toml

    declared = set(read_toml(FINDINGS_FILE)) - {"shared"}
    assert declared <= set(STUDIES)
    assert {f.study for f in load_finding_notes("ptb")} == {"ptb"}


def _rows(path: str) -> list[dict]:
    with open(PUBLISHED / path, newline="") as f:
        return list(csv.DictReader(f))


def _means(path: str, metric: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for row in _rows(path):
        values.setdefault(row["key"], []).append(float(row[metric]))
    return {key: float(np.mean(v)) for key, v in values.items()}


# The numbers of the findings are quotes; their words are not. What the words claim, checked on the data.

def test_the_s4_reasons_words_hold_on_the_published_runs():
    text = load_findings("agreement")[("rnn-*", "test_loss")].fragments["s4_two_reports"]
    table, figure = EXPERIMENTS["agreement"].published, EXPERIMENTS["bptt-depth"].published
    loss = _means("agreement/runs.csv", "test_loss")
    for cell in ("rnn", "gru"):        # S4's own numbers, written into the text, are the declared ones
        for published, key in ((table, f"{cell}-50"), (figure, f"{cell}-k20")):
            assert f"{cell.upper()} {published[(key, 'test_loss')]} / {published[(key, 'test_accuracy')]}" in text
        reports = (table[(f"{cell}-50", "test_loss")], figure[(f"{cell}-k20", "test_loss")])
        assert min(reports) < loss[f"{cell}-50"] < max(reports)       # "lie between the two"
    accuracy, dev = _means("agreement/runs.csv", "test_accuracy"), _means("agreement/runs.csv", "dev_accuracy")
    assert all(dev[k] > table[(k, "test_accuracy")] for k in dev)       # "still above S4's table for every cell"
    tuned = _means("agreement/tuned-runs.csv", "test_accuracy")     # "every cell's mean improves, the GRU-50's least"
    gains = {k: tuned[k] - accuracy[k] for k in accuracy}
    assert all(g > 0 for g in gains.values()) and min(gains, key=gains.get) == "gru-50"


def test_s3s_unit_counts_hold_the_parameters_the_reason_says():
    """S3's "about 20K" counts the recurrent layer alone: with the readout its models are larger than ours."""
    from rnnlab import count_params

    text = load_findings("polyphonic")[("jsb-*", "test_loss")].fragments["s3_units"]
    s3 = {"rnn": 100, "gru": 46, "lstm": 36}
    counts = [count_params(c, input_size=88, hidden_size=h, output_size=88) for c, h in s3.items()]
    assert all(17_500 < n - 88 * h - 88 < 19_000 for n, h in zip(counts, s3.values()))
    assert "RNN 100, GRU 46, LSTM 36" in text and " / ".join(f"{n:,}" for n in counts) in text
    for dataset in ("jsb", "nottingham", "musedata", "piano"):
        trials = _rows(f"polyphonic-{dataset}-s3-units/trials.csv")
        assert {(r["cell"], int(r["hidden"])) for r in trials} == set(s3.items()) and len(trials) == 9


def test_the_polyphonic_reasons_words_hold_on_the_published_runs():
    published = EXPERIMENTS["polyphonic"].published
    ours = _means("polyphonic/runs.csv", "test_loss")
    train = _means("polyphonic/runs.csv", "train_loss")
    for key, value in ours.items():
        s3 = published[(key, "test_loss")]
        if key.startswith("piano-"):
            assert value < s3                                   # "ours are lower than S3's"
        if key.startswith(("nottingham-", "musedata-")):
            assert value > s3 and train[key] > published[(key, "train_loss")]   # "fit more closely than any"


def test_the_sentiment_reasons_words_hold():
    page = (PUBLISHED / "sentiment.md").read_text()
    majority = float(re.search(r"sst2: majority-class test accuracy ([\d.]+)%", page).group(1))
    assert 100 * EXPERIMENTS["sentiment"].published[("sst5-rnn", "test_accuracy")] < majority    # "below"


def test_the_ptb_findings_words_hold():
    rows = _rows("ptb/runs.csv")
    for key, rising in (("gru", True), ("gru-lr10", False)):   # "turns unstable" at lr 20, not at lr 10
        for r in (r for r in rows if r["key"] == key):
            assert (float(r["dev_perplexity_epoch4"]) > float(r["dev_perplexity_epoch2"])) == rising, key
    last = np.array([float(r["dev_perplexity_epoch13"]) for r in rows if r["key"] == "lstm"])
    best = np.array([float(r["dev_perplexity"]) for r in rows if r["key"] == "lstm"])
    assert np.array_equal(last, best)            # our main runs test their last epoch ("our main runs")
