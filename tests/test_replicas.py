"""fit_replicas: R runs as one compiled program give, replica by replica, what fit gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("jax", reason="fit_replicas needs the jax extra (pip install 'rnnlab[jax]')")

from rnnlab.data.containers import SequenceData, StreamData  # noqa: E402
from rnnlab.data.tasks import build_model, get_task  # noqa: E402
from rnnlab.models import RecurrentModel  # noqa: E402
from rnnlab.replicas import fit_replicas  # noqa: E402
from rnnlab.train import TrainConfig, fit  # noqa: E402


def _sequences(kind: str, n: int, seed: int) -> SequenceData:
    """Small data sets of every target kind, with lengths 2..9 so batches need padding."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 10, size=n)
    if kind == "ids-class":          # token ids → a class per sequence
        xs = [rng.integers(0, 6, size=t) for t in lengths]
        return SequenceData(xs, np.array([int(x.sum() % 3) for x in xs]))
    if kind == "dense-regression":   # vectors → a real number per sequence
        xs = [rng.normal(size=(t, 3)) for t in lengths]
        return SequenceData(xs, np.array([[x[:, 0].mean()] for x in xs]))
    if kind == "dense-multilabel":   # vectors → 4 independent 0/1 notes per step
        xs = [rng.normal(size=(t, 3)) for t in lengths]
        return SequenceData(xs, [(x[:, :1] + rng.normal(size=(len(x), 4)) > 0).astype(float) for x in xs],
                            per_step=True)
    xs = [rng.integers(0, 5, size=t) for t in lengths]    # ids → the next id per step
    return SequenceData(xs, [np.roll(x, -1) for x in xs], per_step=True)


CASES = {
    "gru-steps-adam-clip": (dict(cell="gru", input_size=5, output_size=5, head="steps", one_hot=True),
                            "ids-steps", TrainConfig(optimizer="adam", lr=0.02, batch_size=4, epochs=3, clip=0.5)),
    "lstm-2layers-embedding-last-sgd": (
        dict(cell="lstm", input_size=4, output_size=3, head="last", vocab_size=6, num_layers=2),
        "ids-class", TrainConfig(optimizer="sgd", lr=0.3, momentum=0.9, weight_decay=1e-3, batch_size=5, epochs=4,
                                 schedule="plateau", plateau_patience=1, early_stopping=2)),
    "rnn-multilabel-rmsprop-truncated": (
        dict(cell="rnn", input_size=3, output_size=4, head="multilabel"),
        "dense-multilabel", TrainConfig(optimizer="rmsprop", lr=0.01, batch_size=4, epochs=3, clip_value=0.2,
                                        back_steps=2)),
    "rnn-steps-sgd-per-sentence-loss-anneal": (
        dict(cell="rnn", input_size=5, output_size=5, head="steps", one_hot=True, bias=False, activation="sigmoid"),
        "ids-steps", TrainConfig(optimizer="sgd", lr=0.5, batch_size=4, epochs=3, schedule="anneal", anneal=2.0,
                                 loss_normalization="sequence", back_steps=1)),
    "gru-cho-mean-regression-adagrad": (
        dict(cell="gru", input_size=3, output_size=1, head="mean", loss="squared_error", variant="cho"),
        "dense-regression", TrainConfig(optimizer="adagrad", lr=0.1, batch_size=6, epochs=3, schedule="step",
                                        milestones=(2,))),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_every_replica_equals_its_sequential_fit(case):
    model_kwargs, kind, config = CASES[case]
    config = dataclasses.replace(config, progress=False)
    seeds = [3, 7, 11]
    uses_dev = config.early_stopping is not None

    def model(seed: int) -> RecurrentModel:
        return RecurrentModel(hidden_size=5, seed=seed, dtype=np.float64, **model_kwargs)

    # each replica has its own data (as the studies' synthetic tasks do), of equal size
    train = [_sequences(kind, 13, seed) for seed in seeds]
    dev = [_sequences(kind, 6, 100 + seed) for seed in seeds] if uses_dev else None
    test = _sequences(kind, 7, 99)                          # one test set shared by all
    models = [model(seed) for seed in seeds]
    results = fit_replicas(models, train, dev, test, config, seeds)
    for r, seed in enumerate(seeds):
        reference = model(seed)
        expected = fit(reference, train[r], dev[r] if dev else None, test, dataclasses.replace(config, seed=seed))
        for name, p in reference.params.items():
            np.testing.assert_allclose(models[r].params[name], p, rtol=1e-9, atol=1e-12, err_msg=f"{case} {name}")
        got = results[r]
        for key in ("epochs_run", "best_epoch", "stopped_early", "restored_best_dev", "num_params"):
            assert got[key] == expected[key], (case, key)
        numbers = [k for k, v in expected.items() if isinstance(v, float) and k != "seconds_total"]
        assert numbers and all(k in got for k in numbers)
        for key in numbers:
            assert got[key] == pytest.approx(expected[key], rel=1e-9), (case, key)
        assert [h["lr"] for h in got["history"]] == [h["lr"] for h in expected["history"]]
        for mine, theirs in zip(got["history"], expected["history"]):
            assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-9)
        assert got["replicas"] == 3 and got["diverged"] is None and got["config"]["seed"] == seed


@pytest.mark.slow
def test_task_metrics_and_float32_training_match_fit():
    """The embedded Reber task as the studies train it (float32, its 'solved' metrics)."""
    seeds = [0, 1]
    tasks = [get_task("embedded-reber", n_train=32, n_test=16, seed=s) for s in seeds]
    config = TrainConfig(optimizer="adam", lr=0.01, batch_size=8, epochs=2, progress=False)
    models = [build_model(t, "gru", 6, seed=s) for t, s in zip(tasks, seeds)]
    results = fit_replicas(models, [t.splits["train"] for t in tasks], None, [t.splits["test"] for t in tasks],
                           config, seeds, [t.task_metrics for t in tasks])
    for r, (task, seed) in enumerate(zip(tasks, seeds)):
        expected = fit(build_model(task, "gru", 6, seed=seed), task.splits["train"], None, task.splits["test"],
                       dataclasses.replace(config, seed=seed), task_metrics=task.task_metrics)
        assert results[r]["test_loss"] == pytest.approx(expected["test_loss"], rel=1e-4)
        for key in ("test_solved", "test_final_step_accuracy", "train_solved"):
            assert key in results[r]
        assert results[r]["test_step_accuracy"] == pytest.approx(expected["test_step_accuracy"], abs=0.02)


@pytest.mark.slow
def test_a_diverging_replica_is_frozen_and_the_others_go_on():
    seeds = [0, 1, 2]
    config = TrainConfig(optimizer="adam", lr=0.01, batch_size=4, epochs=2, progress=False)
    train = _sequences("ids-steps", 12, 0)

    def model(seed):
        return RecurrentModel("gru", 5, 4, 5, head="steps", one_hot=True, seed=seed, dtype=np.float64)

    models = [model(s) for s in seeds]
    models[1].params["out.b"][0] = np.nan
    before = {k: v.copy() for k, v in models[1].params.items()}
    results = fit_replicas(models, train, None, None, config, seeds)
    assert "epoch 1, batch 1" in results[1]["diverged"]
    for k, v in models[1].params.items():                  # kept as they were: nothing was applied
        np.testing.assert_array_equal(v, before[k])
    for r in (0, 2):
        reference = model(seeds[r])
        fit(reference, train, config=dataclasses.replace(config, seed=seeds[r]))
        assert results[r]["diverged"] is None
        np.testing.assert_allclose(models[r].params["rnn.0.W_h"], reference.params["rnn.0.W_h"], rtol=1e-9)


def test_a_learning_rate_sweep_is_one_program():
    """Replicas may differ in their learning rate: each equals its own fit."""
    rates = [0.003, 0.03, 0.3]
    config = TrainConfig(optimizer="sgd", lr=1.0, momentum=0.5, batch_size=4, epochs=3, schedule="exponential",
                         gamma=0.5, decay_start=1, progress=False)
    train = _sequences("ids-class", 12, 0)

    def model():
        return RecurrentModel("rnn", 4, 5, 3, head="last", vocab_size=6, seed=0, dtype=np.float64)

    models = [model() for _ in rates]
    results = fit_replicas(models, train, None, None, config, [0, 1, 2], learning_rates=rates)
    for r, lr in enumerate(rates):
        reference = model()
        expected = fit(reference, train, config=dataclasses.replace(config, lr=lr, seed=r))
        assert results[r]["config"]["lr"] == lr
        assert [h["lr"] for h in results[r]["history"]] == [h["lr"] for h in expected["history"]]
        np.testing.assert_allclose(models[r].params["rnn.0.W_h"], reference.params["rnn.0.W_h"], rtol=1e-9)
    with pytest.raises(ValueError, match="learning_rates: expected one positive rate per model"):
        fit_replicas([model()], train, config=config, learning_rates=[0.1, 0.2])


def test_bad_arguments_are_named():
    train = _sequences("ids-steps", 8, 0)

    def model(seed, hidden=4):
        return RecurrentModel("rnn", 5, hidden, 5, head="steps", one_hot=True, seed=seed)

    config = TrainConfig(batch_size=4, epochs=1, progress=False)
    with pytest.raises(ValueError, match="train: .*StreamData"):
        fit_replicas([model(0)], StreamData(np.arange(50) % 5, 5), config=config)
    with pytest.raises(ValueError, match="weight_noise"):
        fit_replicas([model(0)], train, config=dataclasses.replace(config, weight_noise=0.1))
    with pytest.raises(ValueError, match="seeds: expected distinct"):
        fit_replicas([model(0), model(1)], train, config=config, seeds=[1, 1])
    with pytest.raises(ValueError, match="models: model 1 differs"):
        fit_replicas([model(0), model(1, hidden=5)], train, config=config)
    with pytest.raises(ValueError, match="train: expected one SequenceData or one per replica"):
        fit_replicas([model(0), model(1), model(2)], [train, train], config=config)
    with pytest.raises(ValueError, match="train: every replica's split needs the same number"):
        fit_replicas([model(0), model(1)], [train, _sequences("ids-steps", 9, 1)], config=config)


@pytest.mark.slow
def test_aligned_lengths_keep_each_replicas_batches_and_train():
    """align_lengths: each replica trains on its own batches (those fit would draw), in an order
    shared by all replicas in which the replicas' batch lengths rise and fall together."""
    from rnnlab.replicas import _aligned, _Padded

    seeds = [0, 1, 2, 3]
    train = [_sequences("ids-steps", 40, s) for s in seeds]
    groups = [d.batch_indices(4, np.random.default_rng(s)) for d, s in zip(train, seeds)]
    padded = _Padded(train, np.float64, 8)
    aligned = _aligned(groups, padded, np.random.default_rng(0))
    for r, (mine, theirs) in enumerate(zip(aligned, groups)):
        assert sorted(map(tuple, mine)) == sorted(map(tuple, theirs)), r
    longest = np.array([[train[r].lengths[g].max() for g in aligned[r]] for r in range(len(seeds))])
    ranks = longest.argsort(axis=1).argsort(axis=1)
    assert (np.ptp(ranks, axis=0) <= 2).mean() > 0.5     # same rank in every replica up to ties

    config = TrainConfig(optimizer="adam", lr=0.05, batch_size=4, epochs=4, progress=False)
    models = [RecurrentModel("gru", 5, 6, 5, head="steps", one_hot=True, seed=s, dtype=np.float64) for s in seeds]
    results = fit_replicas(models, train, None, None, config, seeds, align_lengths=True)
    for result in results:
        losses = [h["train_loss"] for h in result["history"]]
        assert all(np.isfinite(losses)) and losses[-1] < losses[0]
