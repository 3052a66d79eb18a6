"""Each analysis against a case computed independently here."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnlab
from rnnlab.analysis.discrepancy import discrepancy_curve, draw_weights, trained_discrepancy
from rnnlab.analysis.dynamics import classify_units, jacobian_spectrum, jacobians, lyapunov_exponent
from rnnlab.analysis.gradients import bptt_depth, first_step_log10, gradient_distribution, gradient_flow
from rnnlab.analysis.steps import seed_band
from rnnlab.data.containers import Batch, SequenceData
from rnnlab.models import RecurrentModel


def sig(a):
    return 1 / (1 + np.exp(-a))


# -- discrepancy ----------------------------------------------------------------------------------


def test_d1_of_a_one_unit_sigmoid_rnn_by_hand():
    """l = 1, k = 1: h_u = σ(w_0), h_v = σ(w_1), so D = mean |σ(w_0) − σ(w_1)| over the draws."""
    draws, seed = 500, 11
    w = np.random.default_rng(seed).normal(size=(draws, 2, 1))  # W_x is drawn first
    expected = np.abs(sig(w[:, 0, 0]) - sig(w[:, 1, 0])).mean()
    D, se = discrepancy_curve("rnn", 1, "normal", max_l=1, draws=draws, seed=seed)
    assert D[0] == pytest.approx(expected, rel=1e-12)
    assert se[0] == pytest.approx(np.abs(sig(w[:, 0, 0]) - sig(w[:, 1, 0])).std(ddof=1) / np.sqrt(draws))


@pytest.mark.parametrize("init", ["normal", "xavier", "uniform"])
@pytest.mark.parametrize("cell", ["rnn", "gru"])
def test_discrepancy_equals_a_per_draw_loop(cell, init):
    """The vectorised D(l,k) against a plain loop over draws with the S2 equations written out."""
    draws, k, L, seed = 40, 3, 6, 5
    D, _ = discrepancy_curve(cell, k, init, max_l=L, draws=draws, seed=seed)
    rng = np.random.default_rng(seed)
    gates = 1 if cell == "rnn" else 3
    Wx = draw_weights(rng, draws, 2, gates * k, init)
    Wh = draw_weights(rng, draws, k, gates * k, init)
    dists = np.zeros((draws, L))
    for p in range(draws):
        states = []
        for word in ("u", "v"):
            h = np.zeros(k)
            row = []
            for t in range(L):
                x = np.array([0.0, 1.0]) if (word == "v" and t == 0) else np.array([1.0, 0.0])
                if cell == "rnn":
                    h = sig(x @ Wx[p] + h @ Wh[p])
                else:  # Cho GRU, gate order r, z, n; z weights the old state
                    xr, xz, xn = np.split(x @ Wx[p], 3)
                    Ur, Uz, Un = np.split(Wh[p], 3, axis=1)
                    r, z = sig(xr + h @ Ur), sig(xz + h @ Uz)
                    n = np.tanh(xn + (r * h) @ Un)
                    h = (1 - z) * n + z * h
                row.append(h)
            states.append(np.array(row))
        dists[p] = np.linalg.norm(states[0] - states[1], axis=1)
    np.testing.assert_allclose(D, dists.mean(axis=0), rtol=1e-10)


def test_vanilla_forgets_and_gru_remembers():
    rnn, _ = discrepancy_curve("rnn", 10, "normal", max_l=30, draws=500)
    gru, _ = discrepancy_curve("gru", 10, "normal", max_l=30, draws=500)
    assert rnn[-1] < 0.05 * rnn[0] and gru[-1] > 0.3 * gru[0]


def test_trained_discrepancy_of_identical_inputs_is_zero():
    model = RecurrentModel("gru", 7, 5, 7, head="steps", one_hot=True, seed=0)
    a, b = np.array([0, 1, 3, 4]), np.array([0, 5, 3, 4])
    assert not trained_discrepancy(model, a, a).any()
    assert trained_discrepancy(model, a, b)[1] > 0


@pytest.mark.slow
def test_cli_writes_discrepancy_csv_and_plots(tmp_path):
    subprocess.run([sys.executable, "-m", "rnnlab.cli", "analyze", "discrepancy", "--cells", "rnn,gru", "--draws", "30",
                    "--max-l", "5", "--max-k", "3", "--out", str(tmp_path)], check=True, capture_output=True)
    rows = list(csv.DictReader(open(tmp_path / "discrepancy.csv")))
    assert list(rows[0]) == ["cell", "init", "l", "k", "D", "se", "below_precision"]
    assert len(rows) == 2 * 3 * 5 * 3 and {r["init"] for r in rows} == {"normal", "xavier", "uniform"}
    assert (tmp_path / "discrepancy_heatmap_normal.png").stat().st_size > 1000


# -- gradient flow ------------------------------------------------------------------------------


def _model_and_batch(cell="rnn", T=6, B=3):
    rng = np.random.default_rng(0)
    model = RecurrentModel(cell, 2, 4, 3, head="steps", seed=1, dtype=np.float64)
    return model, Batch(rng.normal(size=(T, B, 2)), rng.integers(0, 3, size=(T, B)))


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_state_gradients_match_finite_differences(cell):
    """dL/dh_t from the backward pass against perturbing h_t and rerunning the rest of the sequence."""
    model, batch = _model_and_batch(cell)
    T, B = batch.x.shape[:2]
    buf = [np.zeros((T, B, 4))]
    model.loss_and_grads(batch, dh_out=buf)
    layer = model.rnn.layers[0]
    _, cache = layer.forward(batch.x)

    def loss_with_state(t, state):
        later, _ = layer.forward(batch.x[t + 1:], state) if t + 1 < T else (np.zeros((0, B, 4)), None)
        hs = np.concatenate([cache.states[0][:t], state[0][None] if cell == "lstm" else state[None], later])
        y, _ = model.readout.forward(hs)
        return rnnlab.softmax_cross_entropy(y, batch.y)[0]

    for t in (0, 2, T - 1):
        h_t = cache.states[0][t]
        state = (h_t, cache.states[1][t]) if cell == "lstm" else h_t
        numeric = np.zeros_like(h_t)
        for idx in np.ndindex(h_t.shape):
            for sign in (1, -1):
                h = h_t.copy()
                h[idx] += sign * 1e-6
                s = (h, state[1]) if cell == "lstm" else h
                numeric[idx] += sign * loss_with_state(t, s) / 2e-6
        np.testing.assert_allclose(buf[0][t], numeric, atol=1e-8)
    flow = gradient_flow(model, batch)
    np.testing.assert_allclose(flow["norms"][0], np.linalg.norm(buf[0], axis=-1).mean(axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_first_step_gradient_that_vanishes_to_zero_reads_as_the_floor_of_its_dtype(dtype):
    """With no recurrence (W_h = 0) and the loss at the last step only, no error reaches h_1: the ratio is exactly
    0, which has no logarithm, and the analysis of a whole study stopped on it. It reads as log10 of the dtype's
    smallest normal number ("this small or smaller"); a gradient that reaches h_1 keeps its own logarithm."""
    rng = np.random.default_rng(0)
    model = RecurrentModel("rnn", 2, 4, 3, head="last", seed=1, dtype=dtype)
    batch = Batch(rng.normal(size=(6, 3, 2)).astype(dtype), rng.integers(0, 3, size=3))
    recurrent = model.rnn.layers[0].params["W_h"].copy()
    model.rnn.layers[0].params["W_h"][:] = 0.0
    assert gradient_flow(model, batch)["relative"][-1][0] == 0.0
    assert first_step_log10(model, batch) == pytest.approx(math.log10(np.finfo(dtype).tiny))
    model.rnn.layers[0].params["W_h"][:] = recurrent
    first = gradient_flow(model, batch)["relative"][-1][0]
    assert 0.0 < first < 1.0 and first_step_log10(model, batch) == pytest.approx(math.log10(first))


def test_gradient_distribution_pools_every_coefficient():
    rng = np.random.default_rng(0)
    data = SequenceData([rng.normal(size=(4, 2)) for _ in range(5)], rng.integers(0, 2, size=5))
    model = RecurrentModel("rnn", 2, 3, 2, seed=0)
    d = gradient_distribution(model, data)
    assert d["summary"]["count"] == 5 * model.num_params() == d["values"].size
    assert d["hist"].sum() + d["below"] + (d["values"] >= d["bins"][-1]).sum() == d["values"].size
    assert d["summary"]["fraction_below_1e-6"] == pytest.approx((d["values"] < 1e-6).mean())


# -- dynamics -------------------------------------------------------------------------------------


def test_unit_classifier_on_constructed_signals():
    rng = np.random.default_rng(0)
    t = np.arange(40)
    inputs = []
    for _ in range(30):
        sine = np.sin(2 * np.pi * t / 8 + rng.uniform(0, 6))
        walk = np.cumsum(rng.normal(size=40))
        noise = rng.normal(size=40)
        decay = rng.normal() * np.exp(-t / 3)
        inputs.append(np.stack([sine, walk, noise, decay], axis=-1))
    result = classify_units(np.array(inputs))
    assert list(result["labels"]) == ["oscillating", "accumulating", "transient", "transient"]
    assert result["counts"] == {"transient": 2, "accumulating": 1, "oscillating": 1}
    with pytest.raises(ValueError, match="trajectories"):
        classify_units(np.zeros((3, 4)))


def _linear_rnn():
    """A ReLU RNN whose pre-activations stay positive is linear: J_t = W_hᵀ at every step."""
    rng = np.random.default_rng(0)
    cell = rnnlab.RNN(3, 5, activation="relu", bias=False, seed=0)
    cell.params["W_h"] = np.abs(rng.normal(size=(5, 5))) * 0.25
    cell.params["W_x"] = np.abs(cell.params["W_x"]) + 0.1
    return cell, np.abs(rng.normal(size=(8, 2, 3))) + 0.1


def test_jacobian_spectrum_of_a_linear_rnn_is_the_eigenvalues_of_w():
    cell, x = _linear_rnn()
    spec = jacobian_spectrum(cell, x)
    expected = np.sort(np.abs(np.linalg.eigvals(cell.params["W_h"])))[::-1]
    for t in range(x.shape[0]):
        for b in range(x.shape[1]):
            np.testing.assert_allclose(spec["eigenvalue_moduli"][t, b], expected, rtol=1e-10)
    sv = np.linalg.svd(cell.params["W_h"], compute_uv=False)
    np.testing.assert_allclose(spec["singular_values"][0, 0], sv, rtol=1e-10)
    lyap = lyapunov_exponent(cell, np.concatenate([x] * 25))
    assert lyap["exponent"] == pytest.approx(np.log(expected[0]), abs=0.02)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_jacobians_match_finite_differences(kind):
    cell = rnnlab.make_cell(kind, 2, 3, seed=4)
    x = np.random.default_rng(1).normal(size=(3, 1, 2))
    J = jacobians(cell, x)
    _, cache = cell.forward(x)
    parts = [s[0, 0] for s in cache.states]
    s0 = np.concatenate(parts)
    n = len(s0)

    def step(s):
        h0 = (s[None, :3], s[None, 3:]) if kind == "lstm" else s[None]
        _, c = cell.forward(x[1:2], h0)
        return np.concatenate([st[0, 0] for st in c.states])

    numeric = np.stack([(step(s0 + 1e-6 * e) - step(s0 - 1e-6 * e)) / 2e-6 for e in np.eye(n)], axis=1)
    np.testing.assert_allclose(J[1, 0], numeric, atol=1e-8)


@pytest.mark.parametrize("kind, options", [("s6", {"d_state": 2}), ("mlstm", {"heads": 2})])
def test_jacobians_of_a_matrix_state_match_finite_differences(kind, options):
    cell = rnnlab.make_cell(kind, 2, 4, seed=4, **options)
    x = np.random.default_rng(1).normal(size=(3, 1, 2))
    J = jacobians(cell, x)
    _, cache = cell.forward(x)
    shapes = cell.state_shapes()
    s0 = np.concatenate([s[0, 0].ravel() for s in cache.states])
    sizes = np.cumsum([0] + [int(np.prod(shape)) for shape in shapes])
    assert J.shape == (3, 1, sizes[-1], sizes[-1])

    def step(s):
        h0 = tuple(s[a:b].reshape((1,) + shape) for a, b, shape in zip(sizes[:-1], sizes[1:], shapes))
        _, c = cell.forward(x[1:2], h0)
        return np.concatenate([st[0, 0].ravel() for st in c.states])

    numeric = np.stack([(step(s0 + 1e-6 * e) - step(s0 - 1e-6 * e)) / 2e-6 for e in np.eye(len(s0))], axis=1)
    np.testing.assert_allclose(J[1, 0], numeric, atol=1e-7)


def test_the_discrepancy_refuses_a_cell_it_cannot_draw():
    from rnnlab.analysis.discrepancy import discrepancy_curve

    with pytest.raises(ValueError, match=r"'s6' has state shapes \(\(3,\), \(3, 16\)\)"):
        discrepancy_curve("s6", 3, draws=2, max_l=2)
    with pytest.raises(ValueError, match=r"'slstm' has the parameter\(s\) \['R'\] of more than two axes"):
        discrepancy_curve("slstm", 3, draws=2, max_l=2)


def test_discrepancy_marks_rounding_noise_and_draws_distinct_streams():
    from rnnlab.analysis.discrepancy import discrepancy, precision_floor

    records = discrepancy(("rnn", "gru"), ("uniform",), ks=(2, 102), max_l=40, draws=50)
    vanilla_late = [r for r in records if r["cell"] == "rnn" and r["l"] == 40 and r["k"] == 2]
    assert all(r["below_precision"] for r in vanilla_late)                   # S2: vanilla forgets entirely
    assert all(r["D"] < precision_floor(r["k"]) for r in vanilla_late)
    assert not any(r["below_precision"] for r in records if r["cell"] == "gru" and r["l"] == 1)
    # k = 2 and k = 102 of the same cell once shared a seed (seed + 100·init + k); every point has its own now
    first = {k: discrepancy_curve("gru", k, "normal", 3, 50, seed=0)[0] for k in (2, 102)}
    assert not np.allclose(first[2][0], first[102][0])


@pytest.mark.parametrize("cell", ["rnn", "gru"])
def test_bptt_depth_reaches_full_bptt_and_stops_at_the_sequence_length(cell):
    """With T steps and a zero initial state, back steps T−2 already reach every W_h term (the first
    step's recurrent input is the zero state): the curve stops there instead of adding zeros."""
    model, batch = _model_and_batch(cell)
    r = bptt_depth(model, batch, max_steps=20)
    assert r["k"][-1] == batch.x.shape[0] - 2
    assert r["increment"].min() > 1e-12              # no step that adds nothing drawn as 1e-28
    assert r["norm"][-1] == pytest.approx(r["full"], rel=1e-12)


def test_the_discrepancy_note_states_s2s_finding_in_numbers():
    """D along l, what is left of D(1,k) after 10 steps, and at how many l the gated cell is above the vanilla
    network by more than 1.96 standard errors; a table built so each answer is known."""
    from rnnlab.analysis.steps import _discrepancy_along_l

    k, max_l = 3, 12
    table = {}
    for l in range(1, max_l + 1):
        table[("rnn", l, k)] = {"D": 0.5 ** l, "se": 0.01}
        # equal to the vanilla's at l = 1 and 2, clearly above from l = 3 on
        table[("gru", l, k)] = {"D": 0.5 ** l + (0.0 if l <= 2 else 0.2), "se": 0.01}
    note = _discrepancy_along_l(table, ("rnn", "gru"), k, max_l, draws=100)
    assert "for l = 1, 2, 5, 10:" in note and "vanilla 0.5, 0.25, 0.031, 0.00098" in note
    assert f"vanilla {100 * 0.5 ** 9:.2g}%" in note and f"GRU {100 * (0.5 ** 10 + 0.2) / 0.5:.2g}%" in note
    assert "GRU at 10 of 12 lengths l" in note


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_step_share_is_bptt_depths_increment_over_the_full_norm(cell):
    from rnnlab.analysis.gradients import bptt_depth, step_share
    from rnnlab.data.containers import Batch

    rng = np.random.default_rng(3)
    model = RecurrentModel(cell, 3, 5, 2, head="last", seed=1, dtype=np.float64, num_layers=2)
    batch = Batch(rng.normal(size=(14, 4, 3)), rng.integers(0, 2, size=4), None)
    depth = bptt_depth(model, batch, 40)       # capped at 14 − 2 steps, as step_share is
    assert len(depth["increment"]) == 12
    assert step_share(model, batch, 10) == pytest.approx(depth["increment"][9] / depth["full"], rel=1e-12)
    assert step_share(model, batch, 40) == pytest.approx(depth["increment"][11] / depth["full"], rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.floats(-10, 10), min_size=1, max_size=8), min_size=1, max_size=5))
def test_the_seed_band_counts_early_stopped_runs_until_their_end_without_warnings(curves):
    """Mean ± std over the seeds still running at each epoch; where one is left the band is its curve."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, low, high = seed_band(curves)
    for t in range(max(len(c) for c in curves)):
        alive = [c[t] for c in curves if len(c) > t]
        std = np.std(alive, ddof=1) if len(alive) > 1 else 0.0
        assert mean[t] == pytest.approx(np.mean(alive)) and high[t] - mean[t] == pytest.approx(std, abs=1e-9)
        assert mean[t] - low[t] == pytest.approx(std, abs=1e-9)
