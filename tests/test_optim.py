"""Each optimizer, clipping rule and schedule against its textbook update, computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnlab.common import RowGradient
from rnnlab.machine import cpu_cores
from rnnlab.optim import (
    SGD,
    Adagrad,
    Adam,
    Anneal,
    ExponentialAfter,
    HalveOnRise,
    ReduceOnPlateau,
    RMSProp,
    StepDecay,
    clip_global_norm,
    clip_value,
    global_norm,
    make_optimizer,
    make_schedule,
)

G1, G2 = np.array([0.5, -1.0]), np.array([0.25, 2.0])


def two_steps(opt):
    p = opt.params["w"]
    opt.step({"w": G1})
    first = p.copy()
    opt.step({"w": G2})
    return first, p.copy()


def test_sgd_plain_and_momentum():
    first, second = two_steps(SGD({"w": np.array([1.0, 2.0])}, lr=0.1))
    np.testing.assert_allclose(first, [1 - 0.05, 2 + 0.1])
    np.testing.assert_allclose(second, [0.95 - 0.025, 2.1 - 0.2])
    first, second = two_steps(SGD({"w": np.array([1.0, 2.0])}, lr=0.1, momentum=0.9))
    v1 = G1
    v2 = 0.9 * v1 + G2
    np.testing.assert_allclose(first, np.array([1.0, 2.0]) - 0.1 * v1)
    np.testing.assert_allclose(second, first - 0.1 * v2)


def test_nesterov_sgd_is_pytorchs_and_pylstm_scales_its_rate_by_one_minus_momentum():
    """p ← p − lr (g + μ v), v ← μ v + g (PyTorch's form of Nesterov's momentum); with ``momentum_scales_lr`` the
    rate is lr (1 − μ), as PyLSTM's NesterovStep (Greff et al. 2017)."""
    torch = pytest.importorskip("torch", reason="torch (a test dependency) is not installed")
    for scaled in (False, True):
        w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        reference = torch.optim.SGD([w], lr=0.1 * (0.1 if scaled else 1.0), momentum=0.9, nesterov=True)
        for g in (G1, G2):
            w.grad = torch.tensor(g)
            reference.step()
        _, second = two_steps(SGD({"w": np.array([1.0, 2.0])}, lr=0.1, momentum=0.9, nesterov=True,
                                  momentum_scales_lr=scaled))
        np.testing.assert_allclose(second, w.detach().numpy(), rtol=1e-15)
    first, _ = two_steps(SGD({"w": np.array([1.0, 2.0])}, lr=0.1, momentum=0.75, momentum_scales_lr=True))
    np.testing.assert_allclose(first, np.array([1.0, 2.0]) - 0.1 * 0.25 * G1)      # heavy ball, scaled
    with pytest.raises(ValueError, match="nesterov: needs a momentum above 0"):
        SGD({"w": np.zeros(2)}, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="settings of optimizer sgd, not adam"):
        make_optimizer("adam", {"w": np.zeros(2)}, 0.1, nesterov=True)


def test_rmsprop():
    first, second = two_steps(RMSProp({"w": np.array([1.0, 2.0])}, lr=0.01, alpha=0.9, eps=1e-8))
    s1 = 0.1 * G1**2
    s2 = 0.9 * s1 + 0.1 * G2**2
    np.testing.assert_allclose(first, np.array([1.0, 2.0]) - 0.01 * G1 / (np.sqrt(s1) + 1e-8))
    np.testing.assert_allclose(second, first - 0.01 * G2 / (np.sqrt(s2) + 1e-8))


def test_adam_with_bias_correction():
    first, second = two_steps(Adam({"w": np.array([1.0, 2.0])}, lr=0.01))
    # after one step Adam moves every coordinate by lr (m̂ = g, v̂ = g²)
    np.testing.assert_allclose(first, np.array([1.0, 2.0]) - 0.01 * np.sign(G1), rtol=1e-6)
    m = 0.9 * 0.1 * G1 + 0.1 * G2
    v = 0.999 * 0.001 * G1**2 + 0.001 * G2**2
    step = 0.01 * (m / (1 - 0.9**2)) / (np.sqrt(v / (1 - 0.999**2)) + 1e-8)
    np.testing.assert_allclose(second, first - step)


def test_adagrad():
    first, second = two_steps(Adagrad({"w": np.array([1.0, 2.0])}, lr=0.5))
    np.testing.assert_allclose(first, np.array([1.0, 2.0]) - 0.5 * np.sign(G1), rtol=1e-8)
    np.testing.assert_allclose(second, first - 0.5 * G2 / np.sqrt(G1**2 + G2**2), rtol=1e-8)


def test_weight_decay_is_added_to_the_gradient():
    opt = SGD({"w": np.array([1.0, -2.0])}, lr=0.1, weight_decay=0.5)
    opt.step({"w": np.zeros(2)})
    np.testing.assert_allclose(opt.params["w"], [1 - 0.05, -2 + 0.1])


def test_optimizers_minimise_a_quadratic_and_round_trip_their_state():
    target = np.array([3.0, -1.0])
    for name, lr in (("sgd", 0.1), ("rmsprop", 0.01), ("adam", 0.05), ("adagrad", 0.5)):
        params = {"w": np.zeros(2)}
        opt = make_optimizer(name, params, lr, momentum=0.5 if name == "sgd" else 0.0)
        for _ in range(1500):
            opt.step({"w": params["w"] - target})
        np.testing.assert_allclose(params["w"], target, atol=0.05, err_msg=name)
        twin = make_optimizer(name, {"w": params["w"].copy()}, lr)
        twin.load_state_dict(opt.state_dict())
        opt.step({"w": G1})
        twin.step({"w": G1})
        np.testing.assert_array_equal(params["w"], twin.params["w"])


def test_bad_optimizer_settings_name_the_argument():
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer("lbfgs", {"w": np.zeros(1)}, 0.1)
    with pytest.raises(ValueError, match="lr"):
        SGD({"w": np.zeros(1)}, lr=0)
    with pytest.raises(ValueError, match="momentum"):
        SGD({"w": np.zeros(1)}, lr=0.1, momentum=1.5)
    with pytest.raises(ValueError, match="schedule"):
        make_schedule("cosine", 0.1)


def test_clipping():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    clipped, norm = clip_global_norm(grads, 1.0)
    assert norm == 5.0
    np.testing.assert_allclose(clipped["a"], [0.6, 0.0])
    np.testing.assert_allclose(clipped["b"], [[0.8]])
    unchanged, _ = clip_global_norm(grads, 10.0)
    assert unchanged["a"] is grads["a"]
    np.testing.assert_array_equal(clip_value(grads, 3.5)["b"], [[3.5]])


def test_schedules():
    step = StepDecay(1.0, milestones=(20,), gamma=0.5)
    assert [step.lr_for(e) for e in (0, 19, 20, 49)] == [1.0, 1.0, 0.5, 0.5]
    anneal = Anneal(0.8, a=2)
    assert [anneal.lr_for(e) for e in (0, 1, 2)] == pytest.approx([0.8, 0.8 * 2 / 3, 0.4])
    assert Anneal(0.5, a=0).lr_for(7) == 0.5
    zaremba = ExponentialAfter(1.0, gamma=0.5, start=4)  # epochs 1-4 at lr 1, then halved per epoch
    assert [zaremba.lr_for(e) for e in range(7)] == [1, 1, 1, 1, 0.5, 0.25, 0.125]
    halve = HalveOnRise(0.1)
    for loss in (1.0, 0.9, 0.95, 0.96, 0.5):
        halve.observe(loss, None)
    assert math.isclose(halve.lr_for(5), 0.025)
    plateau = ReduceOnPlateau(1.0, factor=0.1, patience=2)
    for dev in (1.0, 0.9, 0.95, 0.91, 0.92, 0.93):
        plateau.observe(0.0, dev)
    assert plateau.lr_for(0) == pytest.approx(0.01)
    twin = ReduceOnPlateau(1.0, factor=0.1, patience=2)
    twin.load_state_dict(plateau.state_dict())
    assert (twin.lr, twin.best, twin.bad_epochs) == (plateau.lr, plateau.best, plateau.bad_epochs)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["sgd", "sgd-momentum", "sgd-nesterov", "adam", "rmsprop", "adagrad"]),
       dtype=st.sampled_from([np.float32, np.float64]), weight_decay=st.sampled_from([0.0, 1e-2]),
       lr=st.floats(1e-4, 1.0), seed=st.integers(0, 2**16), grad_scale=st.sampled_from([1.0, 0.37]))
def test_the_fused_in_place_update_gives_the_bits_of_the_pure_rule(name, dtype, weight_decay, lr, seed, grad_scale):
    """Optimizer.step runs one compiled pass per parameter; Optimizer.apply (what the JAX replica
    trainer runs) is the reference, and every parameter and slot must come out bit for bit the same,
    with the clipping factor applied inside the pass as clip_global_norm applies it outside."""
    rng = np.random.default_rng(seed)
    start = {"W": rng.normal(size=(13, 6)).astype(dtype), "b": rng.normal(size=5).astype(dtype)}
    kind, extra = {"sgd-momentum": ("sgd", {"momentum": 0.9}),
                   "sgd-nesterov": ("sgd", {"momentum": 0.8, "nesterov": True, "momentum_scales_lr": True}),
                   }.get(name, (name, {}))
    fused_params, pure_params = ({k: v.copy() for k, v in start.items()} for _ in range(2))
    fused = make_optimizer(kind, fused_params, lr, weight_decay=weight_decay, **extra)
    pure = make_optimizer(kind, pure_params, lr, weight_decay=weight_decay, **extra)
    pure.fused = None                                   # the write-back of apply()
    for _ in range(4):
        grads = {k: rng.normal(size=v.shape).astype(dtype) for k, v in start.items()}
        assert fused.step(grads, grad_scale) and pure.step(grads, grad_scale)
    for k in start:
        assert fused_params[k].dtype == dtype and np.array_equal(fused_params[k], pure_params[k])
        for slot in fused.slots:
            assert np.array_equal(fused.state[slot][k], pure.state[slot][k])


def test_the_update_reports_a_parameter_that_turned_non_finite():
    params = {"W": np.ones(5, np.float32), "b": np.ones(3, np.float32)}
    optimizer = make_optimizer("sgd", params, 1.0)
    assert optimizer.step({"W": np.zeros(5, np.float32), "b": np.zeros(3, np.float32)})
    assert not optimizer.step({"W": np.array([0, 0, np.inf, 0, 0], np.float32), "b": np.zeros(3, np.float32)})
    assert np.isinf(params["W"][2])


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64]), rows=st.integers(1, 40), vocab=st.integers(1, 30),
       seed=st.integers(0, 2**16), grad_scale=st.sampled_from([1.0, 0.37]))
def test_a_row_gradient_is_the_dense_scatter_add_and_sgd_on_its_rows_gives_the_dense_bits(dtype, rows, vocab, seed,
                                                                                          grad_scale):
    """An embedding's gradient kept as the rows a batch read (repeated ids accumulate) equals the dense
    scatter-add bit for bit; plain SGD on those rows gives the dense update's bits (the other rows do
    not move); the norm is the dense norm; every other rule is handed the dense gradient."""
    rng = np.random.default_rng(seed)
    ids, values = rng.integers(0, vocab, rows), rng.normal(size=(rows, 4)).astype(dtype)
    dense = np.zeros((vocab, 4), dtype)
    np.add.at(dense, ids, values)
    sparse = RowGradient.scatter(ids, values, (vocab, 4))
    assert np.array_equal(sparse.dense(), dense) and np.array_equal(sparse.rows, np.unique(ids))
    assert float(global_norm({"W": sparse})) == pytest.approx(float(global_norm({"W": dense})), rel=1e-6)
    start = rng.normal(size=(vocab, 4)).astype(dtype)
    for kind, extra in [("sgd", {}), ("sgd", {"momentum": 0.9}), ("sgd", {"weight_decay": 0.1}), ("adam", {})]:
        on_rows, on_dense = {"W": start.copy()}, {"W": start.copy()}
        a, b = make_optimizer(kind, on_rows, 0.3, **extra), make_optimizer(kind, on_dense, 0.3, **extra)
        assert a.takes_rows == (kind == "sgd" and not extra)
        for _ in range(3):
            assert a.step({"W": sparse}, grad_scale) and b.step({"W": dense}, grad_scale)
        assert np.array_equal(on_rows["W"], on_dense["W"]), (kind, extra)
        for slot in a.slots:
            assert np.array_equal(a.state[slot]["W"], b.state[slot]["W"])


def test_sgd_on_rows_reports_a_row_that_turned_non_finite():
    params = {"W": np.ones((6, 2), np.float32)}
    optimizer = make_optimizer("sgd", params, 1.0)
    bad = RowGradient(np.array([1, 4]), np.array([[0, 0], [np.inf, 0]], np.float32), (6, 2))
    assert not optimizer.step({"W": bad}) and np.isinf(params["W"][4, 0]) and params["W"][5, 0] == 1


@pytest.mark.skipif(cpu_cores() < 2, reason="one core: nothing to split the update over")
@pytest.mark.parametrize("name", ["sgd", "adam", "rmsprop", "adagrad"])
def test_the_update_split_over_threads_gives_the_one_thread_bits(name, monkeypatch):
    import rnnlab.engines.threads as threads

    rng = np.random.default_rng(0)
    start = {"W": rng.normal(size=(37, 5)).astype(np.float32)}
    grads = {"W": rng.normal(size=(37, 5)).astype(np.float32)}
    one, two = {"W": start["W"].copy()}, {"W": start["W"].copy()}
    a, b = make_optimizer(name, one, 0.1), make_optimizer(name, two, 0.1)
    monkeypatch.setattr(threads, "MIN_SPLIT", 10)
    for _ in range(3):
        assert a.step(grads, 0.5)
        with threads.blas_threads(2):
            assert b.step(grads, 0.5)
    assert np.array_equal(one["W"], two["W"])
    two["W"][30, 1] = np.nan
    with threads.blas_threads(2):
        assert not b.step(grads)       # a non-finite entry in the second block is counted


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 12), n=st.integers(0, 30), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_the_compiled_scatter_add_is_np_add_at_bit_for_bit_and_refuses_rows_out_of_range(rows, n, seed, dtype):
    from rnnlab.common import scatter_add

    rng = np.random.default_rng(seed)
    index, values = rng.integers(-rows, rows, n), rng.normal(size=(n, 3)).astype(dtype)
    start = rng.normal(size=(rows, 3)).astype(dtype)
    expected = start.copy()
    np.add.at(expected, index, values)
    assert np.array_equal(scatter_add(start.copy(), index, values), expected)
    with pytest.raises(IndexError, match=f"out of bounds for {rows} rows"):
        scatter_add(start.copy(), np.append(index, rows), np.vstack([values, values[:1] if n else start[:1]]))
