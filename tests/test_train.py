"""The training engine: model gradients per head, data containers, trainer, checkpoints, resume,
divergence, and the command line through the real entry point."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import rnnlab
from rnnlab.data.containers import Batch, SequenceData, StreamData
from rnnlab.models import RecurrentModel
from rnnlab.optim import make_optimizer
from rnnlab.train import (
    TrainConfig,
    TrainingDiverged,
    evaluate,
    fit,
    load_checkpoint,
    train_step,
)

RNNLAB = [sys.executable, "-m", "rnnlab.cli"]
TIMING = {"seconds", "sequences_per_second", "seconds_total"}


# -- models ---------------------------------------------------------------------------------

HEAD_CASES = {
    "last-dense": dict(head="last", inputs="dense"),
    "mean-dense": dict(head="mean", inputs="dense"),
    "steps-embedding": dict(head="steps", inputs="embedding"),
    "steps-onehot-squared": dict(head="steps", inputs="one_hot", loss="squared_error"),
    "multilabel": dict(head="multilabel", inputs="dense"),
}


def _batch(case, rng, T=4, B=3, I=5, O=4):
    mask = (np.arange(T)[:, None] < np.array([T, 2, 3])[None]).astype(float)
    x = rng.integers(0, I, size=(T, B)) if case["inputs"] != "dense" else rng.normal(size=(T, B, I))
    if case["head"] in ("last", "mean"):
        y = rng.integers(0, O, size=B)
    elif case["head"] == "steps":
        y = rng.integers(0, O, size=(T, B))
    else:
        y = rng.integers(0, 2, size=(T, B, O)).astype(float)
    return Batch(x, y, mask)


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("case", list(HEAD_CASES))
def test_model_gradients_match_finite_differences(case, cell):
    spec = HEAD_CASES[case]
    rng = np.random.default_rng(0)
    model = RecurrentModel(cell, 5, 3, 4, num_layers=2, head=spec["head"], loss=spec.get("loss"),
                           vocab_size=5 if spec["inputs"] == "embedding" else None,
                           one_hot=spec["inputs"] == "one_hot", seed=1, dtype=np.float64)
    batch = _batch(spec, rng)
    loss, grads, stats, _ = model.loss_and_grads(batch)
    assert stats.loss_sum / stats.count == pytest.approx(loss)

    def f(arrays):
        for k in model.params:
            model.params[k][...] = arrays[k]
        return model.loss_and_grads(batch)[0]

    original = {k: v.copy() for k, v in model.params.items()}
    result = rnnlab.gradcheck(f, original, grads)
    assert result.passed(1e-6), str(result)


def test_stream_state_is_carried_between_chunks():
    """Evaluating a stream in chunks of 3 with carried state equals one pass over the whole stream."""
    tokens = np.random.default_rng(0).integers(0, 6, size=61)
    model = RecurrentModel("lstm", 4, 5, 6, head="steps", vocab_size=6, seed=0, dtype=np.float64)
    chunked = evaluate(model, StreamData(tokens, bptt=3), batch_size=2)
    whole = evaluate(model, StreamData(tokens, bptt=1000), batch_size=2)
    assert chunked["eval_loss"] == pytest.approx(whole["eval_loss"], rel=1e-12)
    assert "eval_perplexity" in chunked


def test_sequence_batches_cover_every_sequence_once_with_masks():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, size=53)
    data = SequenceData([np.full((n, 1), i, float) for i, n in enumerate(lengths)], np.arange(53))
    seen = []
    for batch in data.batches(8, np.random.default_rng(1)):
        assert batch.size <= 8
        mask = np.ones(batch.x.shape[:2]) if batch.mask is None else batch.mask
        np.testing.assert_array_equal(mask.sum(0), lengths[batch.y])
        seen += list(batch.y)
    assert sorted(seen) == list(range(53))
    with pytest.raises(ValueError, match="targets: expected one per sequence"):
        SequenceData([np.zeros((2, 1))], [0, 1])


# -- trainer --------------------------------------------------------------------------------


def _toy_task(seed=0, n=200):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6, 3))
    y = (x[:, :, 0].sum(1) > 0).astype(int)
    return SequenceData(list(x[: n // 2]), y[: n // 2]), SequenceData(list(x[n // 2:]), y[n // 2:])


def test_fit_writes_metrics_checkpoint_and_result(tmp_path):
    train, dev = _toy_task()
    model = RecurrentModel("gru", 3, 8, 2, seed=0)
    config = TrainConfig(epochs=4, batch_size=16, lr=0.01, progress=False)
    result = fit(model, train, dev, dev, config, tmp_path)
    assert result["epochs_run"] == 4
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4]
    expected = {"train_loss", "train_accuracy", "dev_loss", "dev_accuracy", "seconds", "sequences_per_second"}
    assert expected <= set(rows[0])
    saved = json.loads((tmp_path / "result.json").read_text())
    for key in ("config", "num_params", "best_epoch", "train_accuracy", "dev_accuracy", "test_accuracy", "test_loss"):
        assert key in saved
    assert saved["num_params"] == model.num_params()
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    arrays, meta = load_checkpoint(tmp_path / "checkpoint.npz")
    assert meta["progress"]["epoch"] == 4 and "param/rnn.0.W_h" in arrays and "opt/m/out.W" in arrays


@pytest.mark.parametrize("batch_size, timed", [(16, 3), (7, 2), (64, 3)])
def test_a_timed_epoch_is_the_timed_batches_scaled_to_the_epoch_and_leaves_the_model_as_it_was(
        monkeypatch, batch_size, timed):
    """A clock that advances 2 s per update and 0.5 s per evaluated batch: the epoch costs 2 s per training batch
    and 0.5 s per dev batch, whatever the number timed (a lone batch, at 64, is timed on its second call)."""
    import rnnlab.train as train_module

    clock = [0.0]
    real_step, real_evaluate = train_module.train_step, RecurrentModel.evaluate

    def step(*args, **kwargs):
        clock[0] += 2.0
        return real_step(*args, **kwargs)

    def evaluate_batch(self, *args, **kwargs):
        clock[0] += 0.5
        return real_evaluate(self, *args, **kwargs)

    monkeypatch.setattr(train_module.time, "process_time", lambda: clock[0])
    monkeypatch.setattr(train_module, "train_step", step)
    monkeypatch.setattr(RecurrentModel, "evaluate", evaluate_batch)
    train, dev = _toy_task()
    model = RecurrentModel("gru", 3, 8, 2, seed=0)
    before = {k: p.copy() for k, p in model.params.items()}
    config = TrainConfig(batch_size=batch_size, lr=0.5, progress=False)
    seconds = train_module.timed_epoch(model, train, dev, config, batches=timed)
    assert seconds == pytest.approx(2.0 * train.num_batches(batch_size) + 0.5 * dev.num_batches(batch_size))
    assert all(np.array_equal(model.params[k], before[k]) for k in before)       # the updates are undone
    assert train_module.timed_epoch(model, train, None, config, batches=timed) == pytest.approx(
        2.0 * train.num_batches(batch_size))


def test_music_metrics_report_the_nll_per_time_step():
    rng = np.random.default_rng(0)
    rolls = [rng.integers(0, 2, size=(n, 88)).astype(float) for n in (5, 9, 3)]
    data = SequenceData([r[:-1] for r in rolls], [r[1:] for r in rolls], per_step=True)
    model = RecurrentModel("gru", 88, 6, 88, head="multilabel", seed=0)
    metrics = evaluate(model, data, batch_size=2)
    # the mean over all 14 predicted frames of the summed Bernoulli NLL of the 88 notes
    nll = []
    for r in rolls:
        y, _, _ = model.forward(Batch(r[:-1, None], r[1:, None]))
        p = 1 / (1 + np.exp(-y[:, 0]))
        nll += list(-(r[1:] * np.log(p) + (1 - r[1:]) * np.log(1 - p)).sum(axis=1))
    assert metrics["eval_nll_per_step"] == pytest.approx(np.mean(nll), rel=1e-9)


def test_best_dev_parameters_are_restored_and_early_stopping(tmp_path):
    train, dev = _toy_task()
    model = RecurrentModel("rnn", 3, 8, 2, seed=0)
    # a rate this high makes the dev loss bounce; early stopping must end the run
    config = TrainConfig(optimizer="sgd", lr=3.0, epochs=30, batch_size=10, early_stopping=2, progress=False)
    result = fit(model, train, dev, None, config, tmp_path)
    assert result["stopped_early"] and result["epochs_run"] < 30
    best_row = result["history"][result["best_epoch"] - 1]
    assert result["dev_loss"] == pytest.approx(best_row["dev_loss"], rel=1e-6)


def test_divergence_names_epoch_batch_and_parameter_and_keeps_the_last_good_checkpoint(tmp_path):
    train, dev = _toy_task()
    model = RecurrentModel("rnn", 3, 8, 2, seed=0)
    real = model.loss_and_grads
    calls = {"n": 0}

    def poisoned(batch, h0=None, back_steps=None, **kwargs):
        calls["n"] += 1
        loss, grads, stats, state = real(batch, h0, back_steps, **kwargs)
        if calls["n"] == 10 + 3:  # epoch 2 (10 batches per epoch), batch 3
            grads["rnn.0.W_h"] = grads["rnn.0.W_h"] * np.nan
        return loss, grads, stats, state

    model.loss_and_grads = poisoned
    with pytest.raises(TrainingDiverged, match=r"epoch 2, batch 3: the gradient of parameter 'rnn.0.W_h'"):
        fit(model, train, dev, None, TrainConfig(epochs=5, batch_size=10, progress=False), tmp_path)
    arrays, meta = load_checkpoint(tmp_path / "checkpoint.npz")
    assert meta["progress"]["epoch"] == 1
    assert all(np.isfinite(v).all() for v in arrays.values())


def _poison_gradient_at(model, call: int):
    """Make the model's ``call``-th gradient NaN (10 batches per epoch of the toy task at batch 10)."""
    real = model.loss_and_grads
    calls = {"n": 0}

    def poisoned(batch, h0=None, back_steps=None, **kwargs):
        calls["n"] += 1
        loss, grads, stats, state = real(batch, h0, back_steps, **kwargs)
        if calls["n"] == call:
            grads["rnn.0.W_h"] = grads["rnn.0.W_h"] * np.nan
        return loss, grads, stats, state

    model.loss_and_grads = poisoned


@pytest.mark.parametrize("seconds, kept", [(0.0, 3), (1e9, 1)])
def test_checkpoints_follow_checkpoint_seconds_and_divergence_names_the_one_kept(tmp_path, seconds, kept):
    """0: a checkpoint after every epoch; a long interval: only after the first (and the last)."""
    train, dev = _toy_task()
    model = RecurrentModel("rnn", 3, 8, 2, seed=0)
    _poison_gradient_at(model, 3 * 10 + 2)      # epoch 4, batch 2
    config = TrainConfig(epochs=6, batch_size=10, progress=False, checkpoint_seconds=seconds)
    with pytest.raises(TrainingDiverged, match=f"epoch 4, batch 2: .*the checkpoint of epoch {kept} is kept"):
        fit(model, train, dev, None, config, tmp_path)
    assert load_checkpoint(tmp_path / "checkpoint.npz")[1]["progress"]["epoch"] == kept
    assert len(list(csv.DictReader(open(tmp_path / "metrics.csv")))) == 3


def test_resume_from_an_older_checkpoint_retrains_the_epochs_after_it_bit_for_bit(tmp_path):
    """Cut off at epoch 4 with the checkpoint of epoch 1 on disk (metrics.csv has 3 rows): resuming
    trains epochs 2–5 again and ends exactly where an uninterrupted run ends, rows rewritten."""
    train, dev = _toy_task()
    config = TrainConfig(epochs=5, batch_size=10, progress=False, checkpoint_seconds=1e9)
    straight = fit(RecurrentModel("rnn", 3, 8, 2, seed=0), train, dev, None, config, tmp_path / "straight")
    cut = RecurrentModel("rnn", 3, 8, 2, seed=0)
    _poison_gradient_at(cut, 3 * 10 + 2)
    with pytest.raises(TrainingDiverged):
        fit(cut, train, dev, None, config, tmp_path / "cut")
    resumed = fit(RecurrentModel("rnn", 3, 8, 2, seed=0), train, dev, None, config, tmp_path / "cut", resume=True)
    rows = [_non_timing_rows(tmp_path / d / "metrics.csv") for d in ("straight", "cut")]
    assert rows[0] == rows[1] and len(rows[0]) == 5
    a, b = (load_checkpoint(tmp_path / d / "checkpoint.npz")[0] for d in ("straight", "cut"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert {k: v for k, v in straight.items() if k not in TIMING | {"history"}} == \
        {k: v for k, v in resumed.items() if k not in TIMING | {"history"}}


def test_weight_noise_changes_gradients_but_not_the_clean_weights_between_batches(tmp_path):
    train, dev = _toy_task()
    runs = []
    for noise in (0.0, 0.075):
        model = RecurrentModel("lstm", 3, 6, 2, seed=0)
        fit(model, train, None, None, TrainConfig(epochs=1, batch_size=20, weight_noise=noise, progress=False))
        runs.append({k: v.copy() for k, v in model.params.items()})
    assert not np.allclose(runs[0]["rnn.0.W_h"], runs[1]["rnn.0.W_h"])
    # noise is removed after each gradient: the weights stay near the noiseless run, not 0.075 away
    assert np.abs(runs[0]["rnn.0.W_h"] - runs[1]["rnn.0.W_h"]).mean() < 0.05


def test_input_noise_is_the_step_on_the_inputs_plus_gaussian_noise_and_token_ids_are_refused():
    """Greff et al.'s regulariser: each training batch's inputs plus N(0, σ²), drawn from the run's generator; the
    same step on the noisy batch given by hand gives the same bits."""
    train, _ = _toy_task()
    batch = next(train.batches(10, np.random.default_rng(0)))
    updated = []
    for noise, given in ((0.3, batch), (0.0, None)):
        model = RecurrentModel("lstm", 3, 5, 2, seed=1, peepholes=True)
        optimizer = make_optimizer("sgd", model.params, 0.1)
        rng = np.random.default_rng(7)
        if given is None:      # the noise the first run drew, added by hand
            given = Batch(batch.x + np.random.default_rng(7).normal(0.0, 0.3, batch.x.shape), batch.y, batch.mask)
        train_step(model, given, None, TrainConfig(input_noise=noise), optimizer, rng)
        updated.append(dict(model.params))
    for name in updated[0]:
        np.testing.assert_array_equal(updated[0][name], updated[1][name])
    ids = Batch(np.zeros((4, 2), dtype=np.int64), np.zeros((4, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="input_noise: this task's inputs are token ids"):
        train_step(RecurrentModel("rnn", 3, 4, 3, seed=0), ids, None, TrainConfig(input_noise=0.1),
                   make_optimizer("sgd", {}, 0.1), np.random.default_rng(0))


def test_the_gaussian_initialiser_draws_biases_and_peepholes_too():
    """Greff et al.: every parameter from N(0, 0.1²); ``normal`` leaves the vectors at zero."""
    drawn = RecurrentModel("lstm", 88, 100, 88, seed=0, peepholes=True, init="gaussian", forget_bias=None).params
    zeros = RecurrentModel("lstm", 88, 100, 88, seed=0, peepholes=True, init="normal", forget_bias=None).params
    for name in ("rnn.0.b", "rnn.0.peep", "out.b", "rnn.0.W_h"):
        assert 0.08 < drawn[name].std() < 0.12, name
    assert not zeros["rnn.0.b"].any() and not zeros["rnn.0.peep"].any()


def test_corrupt_checkpoint_gets_a_clear_error(tmp_path):
    bad = tmp_path / "checkpoint.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match=f"checkpoint {bad}: not a readable rnnlab checkpoint"):
        load_checkpoint(bad)


# -- command line ---------------------------------------------------------------------------


def run_cli(*args, env=None, check=True):
    proc = subprocess.run(RNNLAB + list(args), capture_output=True, text=True, env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"rnnlab {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def _single_thread_env():
    # same BLAS thread count in both runs, so the floating-point sums happen in the same order
    return dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


TRAIN_ARGS = ["train", "--task", "mean-sign", "--hidden", "32", "--layers", "2", "--epochs", "6", "--quiet"]


def _non_timing_rows(path: Path):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(open(path))]


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_for_bit(tmp_path):
    env = _single_thread_env()
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run_cli(*TRAIN_ARGS, "--out", str(straight), env=env)

    proc = subprocess.Popen(RNNLAB + TRAIN_ARGS + ["--out", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoint.npz").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(0.05)  # somewhere inside a later epoch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _, meta = load_checkpoint(killed / "checkpoint.npz")
    assert 1 <= meta["progress"]["epoch"] < 6, "the run was not interrupted mid-training"

    run_cli(*TRAIN_ARGS, "--out", str(killed), "--resume", env=env)
    a, _ = load_checkpoint(straight / "checkpoint.npz")
    b, _ = load_checkpoint(killed / "checkpoint.npz")
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    assert _non_timing_rows(straight / "metrics.csv") == _non_timing_rows(killed / "metrics.csv")
    ra, rb = (json.loads((d / "result.json").read_text()) for d in (straight, killed))
    for key in ra:
        if key not in TIMING and key != "history":
            assert ra[key] == rb[key], key


@pytest.mark.slow
def test_cli_divergence_exits_non_zero_with_a_message(tmp_path):
    proc = run_cli("train", "--task", "mean-sign", "--layers", "1", "--hidden", "16", "--activation", "relu",
                   "--optimizer", "sgd", "--lr", "1e30", "--epochs", "2", "--quiet", "--out", str(tmp_path),
                   check=False)
    assert proc.returncode == 1
    assert "training diverged at epoch 1, batch" in proc.stderr and "NaN or Inf" in proc.stderr


def test_cli_help_explains_every_option_with_its_default():
    out = run_cli("train", "--help").stdout
    for flag in ("--task", "--cell", "--variant", "--activation", "--hidden", "--layers", "--optimizer", "--lr",
                 "--epochs", "--batch-size", "--back-steps", "--clip", "--seed", "--out", "--resume", "--config"):
        assert flag in out
    assert out.count("(default:") >= 25


def test_every_option_states_its_default_once():
    """Help written with its default in words is not followed by argparse's own "(default: None)"."""
    import argparse

    from rnnlab.cli import build_parser

    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.help and action.help != argparse.SUPPRESS:
                shown = formatter._get_help_string(action)
                assert shown.count("(default:") <= 1, (parser.prog, action.dest, shown)


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--bogus", "3"], "unrecognized arguments: --bogus"),
        (["train", "--cell", "transformer"], "--cell: invalid value 'transformer'"),
        (["train", "--hidden", "many"], "--hidden: invalid value 'many'"),
        (["train", "--task", "imagenet"], "--task: invalid value 'imagenet'"),
        (["train", "--optimizer", "lbfgs"], "--optimizer: invalid value 'lbfgs'"),
        (["evaluate", "--checkpoint", "/nonexistent/ckpt.npz"], "checkpoint /nonexistent/ckpt.npz: no such"),
    ],
)
@pytest.mark.slow
def test_cli_rejects_bad_options_by_name(args, message):
    proc = run_cli(*args, check=False)
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.slow
def test_cli_config_file_and_evaluate(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('cell = "gru"\nhidden = 8\nlayers = 1\nepochs = 2\nbatch-size = 64\nvariant = "cho"\n')
    proc = run_cli("train", "--config", str(config), "--epochs", "1", "--quiet", "--out", str(tmp_path / "run"))
    result = json.loads(proc.stdout)
    assert result["epochs_run"] == 1  # the flag overrides the file
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["config"]["batch_size"] == 64 and saved["run"]["settings"]["variant"] == "cho"
    assert saved["num_params"] == rnnlab.count_params("gru", input_size=10, hidden_size=8, output_size=2,
                                                      variant="cho", recurrent_bias=True)
    evaluated = json.loads(run_cli("evaluate", "--checkpoint", str(tmp_path / "run" / "checkpoint.npz")).stdout)
    assert evaluated["test_accuracy"] == pytest.approx(saved["test_accuracy"])

    bad = tmp_path / "bad.toml"
    bad.write_text("hiden = 3\n")
    proc = run_cli("train", "--config", str(bad), check=False)
    assert proc.returncode == 2 and "unknown setting(s) ['hiden']" in proc.stderr


@pytest.mark.slow
def test_a_checkpoint_runs_on_another_engine_with_the_same_numbers(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('cell = "lstm"\nhidden = 6\nlayers = 1\nepochs = 1\ndtype = "float64"\n'
                      "[task_options]\nn_train = 64\nn_dev = 32\nn_test = 32\n")
    trained = run_cli("train", "--config", str(config), "--quiet", "--out", str(tmp_path / "run"))
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["run"]["settings"]["engine"] == "numba"            # the training default
    blas = saved["run"]["blas"]                                      # RNNLAB_BLAS=openblas, as the suite pins it
    assert blas["mode"] == "openblas" and set(blas["providers"].values()) == {"openblas"}
    assert "BLAS products: small products in openblas, large products in openblas, readout products in openblas" \
        in trained.stderr
    assert saved["run"]["settings"]["task_options"] == {"n_train": 64, "n_dev": 32, "n_test": 32}
    checkpoint = str(tmp_path / "run" / "checkpoint.npz")
    for engine in ("numpy", "numba"):
        evaluated = json.loads(run_cli("evaluate", "--checkpoint", checkpoint, "--engine", engine).stdout)
        for metric in ("dev_loss", "test_loss", "test_accuracy"):
            assert evaluated[metric] == pytest.approx(saved[metric], rel=1e-10), (engine, metric)
    proc = run_cli("evaluate", "--checkpoint", checkpoint, "--engine", "torch", check=False)
    assert proc.returncode == 2 and "--engine" in proc.stderr


def test_every_study_default_belongs_to_a_task_and_is_a_known_setting():
    from rnnlab.data.tasks import TASKS
    from rnnlab.experiments.defaults import STUDY_DEFAULTS
    from rnnlab.experiments.settings import convert, settings_table

    table = {s.name: s for s in settings_table()}
    for task, defaults in STUDY_DEFAULTS.items():
        assert task in TASKS, f"STUDY_DEFAULTS[{task!r}] is not a task name, so rnnlab train would never apply it"
        for name, value in defaults.items():
            convert(table[name], value, f"task {task}")


@pytest.mark.parametrize("optimizer,clip", [("sgd", 0.5), ("sgd", None), ("adam", 0.5)])
def test_a_training_step_on_the_rows_a_batch_read_equals_the_dense_step(optimizer, clip):
    """train_step hands plain SGD the embedding's gradient as the rows the batch read: in float64 the
    parameters after a few steps equal the dense path's (the clipping norm sums in another order),
    and the rows no batch read are untouched."""
    from rnnlab.optim import make_optimizer
    from rnnlab.train import train_step

    rng = np.random.default_rng(3)
    batches = [Batch(rng.integers(0, 6, size=(5, 3)), rng.integers(0, 4, size=(5, 3)), None) for _ in range(3)]
    finals = []
    for rows in (True, False):
        model = RecurrentModel("lstm", 5, 3, 4, head="steps", vocab_size=40, seed=1, dtype=np.float64)
        start = model.params["emb.W"].copy()
        opt = make_optimizer(optimizer, model.params, 0.5)
        if not rows:
            opt.__class__ = type("Dense", (type(opt),), {"takes_rows": property(lambda self: False)})
        config = TrainConfig(optimizer=optimizer, lr=0.5, clip=clip)
        for batch in batches:
            train_step(model, batch, None, config, opt, np.random.default_rng(0))
        finals.append({k: v.copy() for k, v in model.params.items()})
    for k in finals[0]:
        np.testing.assert_allclose(finals[0][k], finals[1][k], rtol=1e-12, atol=1e-14)
    if optimizer == "sgd":
        assert np.array_equal(finals[0]["emb.W"][6:], start[6:])
