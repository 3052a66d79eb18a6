"""Every backward pass against central differences in float64 (relative error < 1e-6), over
cell × variant × activation × bias × loss × mask × back_steps, with hypothesis choosing shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rnnlab
from helpers import (
    BIASES,
    CELL_CONFIGS,
    LOSS_MODES,
    Head,
    backward_against_finite_differences,
    gradcheck_cell,
    join_state,
    make_mask,
    near_relu_kink,
    split_state,
)

TOL = 1e-6
shapes = st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**31))
grid = settings(max_examples=2)


def _setup(config, bias, loss_mode, masked, shape):
    T, B, I, H, seed = shape
    rng = np.random.default_rng(seed)
    cell = gradcheck_cell(config, bias, I, H, seed)
    head = Head(loss_mode, H, 3, T, B, rng)
    x = rng.normal(size=(T, B, I))
    h0 = join_state(cell, [rng.normal(scale=0.5, size=(B, H)) for _ in range(cell.state_size)])
    mask = make_mask(rng, T, B) if masked else None
    return cell, head, x, h0, mask


def _draw(config, bias, loss_mode, masked, shape):
    """A hypothesis example: as ``_setup``, minus draws where finite differences cannot hold."""
    cell, head, x, h0, mask = _setup(config, bias, loss_mode, masked, shape)
    assume(not near_relu_kink(cell, x, h0))
    return cell, head, x, h0, mask


def _with(cell, head, arrays):
    """Install perturbed arrays into the cell and readout; return x and h0 from them."""
    for name in cell.params:
        cell.params[name] = arrays["cell." + name]
    for name in head.readout.params:
        head.readout.params[name] = arrays["out." + name]
    parts = [arrays[f"h0.{i}"] for i in range(cell.state_size)]
    return arrays["x"], join_state(cell, parts)


def _arrays(cell, head, x, h0):
    arrays = {"cell." + k: v.copy() for k, v in cell.params.items()}
    arrays.update({"out." + k: v.copy() for k, v in head.readout.params.items()})
    arrays["x"] = x
    arrays.update({f"h0.{i}": s for i, s in enumerate(split_state(cell, h0))})
    return arrays


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("loss_mode", LOSS_MODES)
@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize("config", list(CELL_CONFIGS))
@grid
@given(shape=shapes)
def test_full_bptt_matches_finite_differences(config, bias, loss_mode, masked, shape):
    cell, head, x, h0, mask = _draw(config, bias, loss_mode, masked, shape)
    hs, cache = cell.forward(x, h0, mask)
    _, out_grads, dhs = head.loss(hs, mask)
    grads, dx, dh0 = cell.backward(dhs, cache)
    analytic = {"cell." + k: v for k, v in grads.items()}
    analytic.update({"out." + k: v for k, v in out_grads.items()})
    analytic["x"] = dx
    analytic.update({f"h0.{i}": s for i, s in enumerate(split_state(cell, dh0))})

    def loss(arrays):
        x_, h0_ = _with(cell, head, arrays)
        return head.loss(cell.forward(x_, h0_, mask)[0], mask)[0]

    result = rnnlab.gradcheck(loss, _arrays(cell, head, x, h0), analytic)
    assert result.passed(TOL), str(result)


@pytest.mark.parametrize("back_steps", [0, 1, 3])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("loss_mode", LOSS_MODES)
@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize("config", list(CELL_CONFIGS))
@settings(max_examples=1)
@given(shape=shapes)
def test_truncated_bptt_matches_independent_truncated_gradient(config, bias, loss_mode, masked, back_steps, shape):
    cell, head, x, h0, mask = _draw(config, bias, loss_mode, masked, shape)
    result = backward_against_finite_differences(cell, cell, head, x, h0, mask, back_steps)
    assert result.passed(TOL), str(result)


@settings(max_examples=150)
@given(config=st.sampled_from(list(CELL_CONFIGS)), bias=st.sampled_from(list(BIASES)),
       loss_mode=st.sampled_from(LOSS_MODES), masked=st.booleans(), back_steps=st.sampled_from([None, 0, 1, 2, 5]),
       shape=st.tuples(st.integers(1, 7), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4),
                       st.integers(0, 2**31)))
def test_any_configuration_matches_finite_differences(config, bias, loss_mode, masked, back_steps, shape):
    """The property over the whole space at once, with larger shapes than the grid: the backward
    pass is the gradient of the loss (full BPTT) or of the independent truncated construction."""
    cell, head, x, h0, mask = _draw(config, bias, loss_mode, masked, shape)
    result = backward_against_finite_differences(cell, cell, head, x, h0, mask, back_steps)
    assert result.passed(TOL), str(result)


@pytest.mark.parametrize("config", list(CELL_CONFIGS))
def test_truncation_limits(config):
    """back_steps >= T-1 … T is full BPTT for the parameters; k = 0 never reaches h0."""
    cell, head, x, h0, mask = _setup(config, "bias", "ce-steps", False, (5, 2, 3, 4, 7))
    hs, cache = cell.forward(x, h0)
    dhs = head.loss(hs, None)[2]
    full = cell.backward(dhs, cache)
    long = cell.backward(dhs, cache, back_steps=5)
    for name in cell.params:
        np.testing.assert_allclose(long[0][name], full[0][name], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(long[1], full[1], rtol=1e-12, atol=1e-14)
    zero = cell.backward(dhs, cache, back_steps=0)
    for part in split_state(cell, zero[2]):
        assert not part.any()
    short = cell.backward(dhs, cache, back_steps=1)
    assert not np.allclose(short[0]["W_h"], full[0]["W_h"])


@pytest.mark.parametrize("back_steps", [None, 0, 2])
@pytest.mark.parametrize("kinds", [("rnn", "rnn"), ("gru", "lstm", "rnn")], ids=["rnn-rnn", "gru-lstm-rnn"])
def test_stack_gradients(kinds, back_steps):
    rng = np.random.default_rng(3)
    T, B, I, H = 4, 2, 3, 3
    layers = [rnnlab.make_cell(k, I if i == 0 else H, H, seed=i, init="normal", init_scale=0.5)
              for i, k in enumerate(kinds)]
    stack = rnnlab.Stack(layers)
    head = Head("ce-steps", H, 3, T, B, rng)
    x, mask = rng.normal(size=(T, B, I)), make_mask(rng, T, B)
    hs, caches = stack.forward(x, mask=mask)
    dhs = head.loss(hs, mask)[2]
    grads, dx, dh0 = stack.backward(dhs, caches, back_steps=back_steps)
    assert list(grads) == list(stack.params) and len(dh0) == len(kinds)
    if back_steps is None:
        def loss(arrays):
            for name in stack.params:
                stack.params[name] = arrays[name]
            return head.loss(stack.forward(arrays["x"], mask=mask)[0], mask)[0]

        arrays = {k: v.copy() for k, v in stack.params.items()}
        arrays["x"] = x
        result = rnnlab.gradcheck(loss, arrays, {**grads, "x": dx})
        assert result.passed(TOL), str(result)
    else:  # truncation is per layer: the same as running each layer's backward by hand
        d = dhs
        for i in range(len(kinds) - 1, -1, -1):
            g, d, _ = layers[i].backward(d, caches[i], back_steps)
            for name, value in g.items():
                np.testing.assert_array_equal(grads[f"{i}.{name}"], value)
        np.testing.assert_array_equal(dx, d)


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_losses_match_finite_differences(loss_mode):
    rng = np.random.default_rng(0)
    T, B, C = 3, 4, 5
    head = Head(loss_mode, 2, C, T, B, rng)
    logits = rng.normal(size=(B, C) if loss_mode == "ce-last" else (T, B, C))
    mask = None if loss_mode == "ce-last" else make_mask(rng, T, B)
    fn = {"ce-last": rnnlab.softmax_cross_entropy, "ce-steps": rnnlab.softmax_cross_entropy,
          "bce-steps": rnnlab.sigmoid_binary_cross_entropy, "se-steps": rnnlab.squared_error}[loss_mode]
    _, d = fn(logits, head.targets, mask)
    result = rnnlab.gradcheck(lambda a: fn(a["y"], head.targets, mask)[0], {"y": logits}, {"y": d})
    assert result.passed(TOL), str(result)
    if mask is not None:  # padded positions get no gradient
        assert not d[np.asarray(mask) == 0].any()


def test_embedding_gradient():
    emb = rnnlab.Embedding(6, 3, seed=0)
    ids = np.array([[0, 5], [5, 2], [0, 0]])
    rng = np.random.default_rng(1)
    w = rng.normal(size=(3, 2, 3))
    out, cache = emb.forward(ids)
    grads, _ = emb.backward(w, cache)

    def loss(a):
        emb.params["W"] = a["W"]
        return float((emb.forward(ids)[0] * w).sum())

    assert rnnlab.gradcheck(loss, {"W": emb.params["W"].copy()}, grads).passed(TOL)


def test_gradcheck_detects_a_wrong_gradient():
    w = np.array([1.0, -2.0, 0.5])
    result = rnnlab.gradcheck(lambda a: float((a["w"] ** 3).sum()), {"w": w}, {"w": 3 * w**2 + 1e-3})
    assert not result.passed(TOL) and result.worst == "w"



def test_a_kink_inside_the_stencil_is_named_not_differenced():
    from rnnlab.gradcheck import KinkError, numerical_gradient

    def relu_sum(a):
        return float(np.maximum(a["w"], 0.0).sum())

    smooth = numerical_gradient(relu_sum, {"w": np.array([0.5, -0.5])}, kink_tolerance=1e-5)
    np.testing.assert_allclose(smooth["w"], [1.0, 0.0], atol=1e-10)
    with pytest.raises(KinkError, match=r"w\[1\]"):
        numerical_gradient(relu_sum, {"w": np.array([0.5, 1e-5])}, kink_tolerance=1e-5)
