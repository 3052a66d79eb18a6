"""The public API of cells, layers, budgets and initialisers: shapes, dtypes, errors, counts."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnlab
from rnnlab.budget import count_params, hidden_for_budget
from rnnlab.checks import configurations

CELLS = [("rnn", {}), ("rnn", {"activation": "sigmoid"}), ("gru", {}), ("gru", {"variant": "cho"}), ("lstm", {})]


@pytest.mark.parametrize("kind, kwargs", CELLS)
@settings(max_examples=10)
@given(T=st.integers(1, 6), B=st.integers(1, 4), I=st.integers(1, 5), H=st.integers(1, 6))
def test_shapes(kind, kwargs, T, B, I, H):
    cell = rnnlab.make_cell(kind, I, H, seed=0, **kwargs)
    hs, cache = cell.forward(np.ones((T, B, I)))
    assert hs.shape == (T, B, H)
    grads, dx, dh0 = cell.backward(np.ones_like(hs), cache, back_steps=1)
    assert {k: v.shape for k, v in grads.items()} == {k: v.shape for k, v in cell.params.items()}
    assert dx.shape == (T, B, I)
    parts = dh0 if kind == "lstm" else (dh0,)
    assert all(p.shape == (B, H) for p in parts)


@pytest.mark.parametrize("kind, kwargs", CELLS)
def test_float32_runs_in_float32_and_agrees_with_float64(kind, kwargs):
    c64 = rnnlab.make_cell(kind, 3, 4, seed=1, **kwargs)
    c32 = rnnlab.make_cell(kind, 3, 4, seed=1, dtype=np.float32, **kwargs)
    x = np.random.default_rng(0).normal(size=(7, 2, 3))
    hs64, cache64 = c64.forward(x)
    hs32, cache32 = c32.forward(x)
    assert hs32.dtype == np.float32
    np.testing.assert_allclose(hs32, hs64, atol=1e-5)
    g32, dx32, _ = c32.backward(np.ones_like(hs32), cache32)
    g64, _, _ = c64.backward(np.ones_like(hs64), cache64)
    assert all(g.dtype == np.float32 for g in g32.values()) and dx32.dtype == np.float32
    for name in g64:
        np.testing.assert_allclose(g32[name], g64[name], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind, kwargs", CELLS)
def test_padded_steps_keep_the_state(kind, kwargs):
    cell = rnnlab.make_cell(kind, 2, 3, seed=0, **kwargs)
    x = np.random.default_rng(0).normal(size=(4, 2, 2))
    mask = np.array([[1, 1], [1, 1], [1, 0], [1, 0]])
    hs, cache = cell.forward(x, mask=mask)
    alone, _ = cell.forward(x[:2, 1:2])
    np.testing.assert_array_equal(hs[2:, 1], np.repeat(hs[1:2, 1], 2, axis=0))
    np.testing.assert_allclose(hs[:2, 1], alone[:, 0])
    grads, _, _ = cell.backward(np.ones_like(hs), cache)
    unmasked_grads, _, _ = cell.backward(np.ones_like(hs) * mask[..., None], cell.forward(x, mask=mask)[1])
    # an error injected at a padded step flows to the last valid state, not into a padded step's math
    assert not np.allclose(grads["W_h"], unmasked_grads["W_h"])


def test_seed_makes_initialisation_reproducible():
    a, b, c = rnnlab.GRU(3, 4, seed=5), rnnlab.GRU(3, 4, seed=5), rnnlab.GRU(3, 4, seed=6)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.params["W_h"], c.params["W_h"])


def test_initialisers():
    H = 50
    uni = rnnlab.LSTM(10, H, seed=0, forget_bias=None)
    bound = 1 / np.sqrt(H)
    assert all(np.abs(v).max() <= bound for v in uni.params.values())
    assert np.abs(rnnlab.LSTM(10, H, seed=0).params["b"][H:2 * H] - 1.0).max() == 0  # forget_bias
    ortho = rnnlab.GRU(10, H, seed=0, init="xavier", recurrent_init="orthogonal")
    for g in range(3):
        block = ortho.params["W_h"][:, g * H:(g + 1) * H]
        np.testing.assert_allclose(block.T @ block, np.eye(H), atol=1e-10)
    xav = rnnlab.RNN(400, 400, seed=0, init="xavier").params["W_x"]
    assert abs(xav.std() - np.sqrt(2 / 800)) < 0.002
    assert not rnnlab.RNN(4, 4, init="xavier").params["b"].any()
    normal = rnnlab.RNN(300, 300, seed=0, init="normal", init_scale=1.0).params["W_h"]
    assert abs(normal.std() - 1.0) < 0.01
    lecun = rnnlab.RNN(400, 100, seed=0, init="lecun").params["W_x"]
    assert abs(lecun.std() - np.sqrt(1 / 400)) < 0.002


@pytest.mark.parametrize("kind, kwargs", CELLS)
@settings(max_examples=15, deadline=None)
@given(scale=st.floats(1e-3, 2.0), H=st.integers(1, 40), bias=st.booleans())
def test_uniform_with_a_scale_bounds_every_parameter(kind, kwargs, scale, H, bias):
    """Zaremba et al. 2014's init: weights and both biases U(±scale), whatever the hidden size."""
    no_forget_bias = {"forget_bias": None} if kind == "lstm" else {}
    cell = rnnlab.make_cell(kind, 3, H, seed=1, init="uniform", init_scale=scale, recurrent_bias=bias, **kwargs,
                            **no_forget_bias)
    values = np.concatenate([p.ravel() for p in cell.params.values()])
    assert np.abs(values).max() <= scale
    if values.size >= 60:   # U(±scale) reaches near its bound, PyTorch's ±1/√H does not when scale is wider
        assert np.abs(values).max() > 0.8 * scale


@pytest.mark.parametrize(
    "build, argument",
    [
        (lambda: rnnlab.GRU(3, 4, variant="elman"), "variant"),
        (lambda: rnnlab.RNN(3, 4, activation="gelu"), "activation"),
        (lambda: rnnlab.RNN(0, 4), "input_size"),
        (lambda: rnnlab.LSTM(3, 2.5), "hidden_size"),
        (lambda: rnnlab.RNN(3, 4, init="he"), "init"),
        (lambda: rnnlab.LSTM(3, 4, init_scale=-0.1), "init_scale"),
        (lambda: rnnlab.GRU(3, 4, init_scale=float("nan")), "init_scale"),
        (lambda: rnnlab.RNN(3, 4, recurrent_init="zeros"), "recurrent_init"),
        (lambda: rnnlab.RNN(3, 4, dtype=np.int32), "dtype"),
        (lambda: rnnlab.make_cell("transformer", 3, 4), "cell"),
        (lambda: rnnlab.Stack([rnnlab.RNN(3, 4), rnnlab.RNN(5, 4)]), "layers"),
    ],
)
def test_bad_constructor_arguments_name_the_argument(build, argument):
    with pytest.raises(ValueError, match=argument):
        build()


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda c: c.forward(np.zeros((3, 2, 5))), "x: expected shape .T, B, input_size=3"),
        (lambda c: c.forward(np.zeros((3, 3))), "x: expected"),
        (lambda c: c.forward(np.zeros((3, 2, 3)), h0=np.zeros((2, 5))), "h0: expected shape"),
        (lambda c: c.forward(np.zeros((3, 2, 3)), mask=np.ones((2, 3))), "mask: expected shape"),
        (lambda c: c.forward(np.zeros((3, 2, 3)), mask=np.full((3, 2), 0.5)), "mask: expected only 0/1"),
        (lambda c: c.backward(np.zeros((3, 2, 3)), c.forward(np.zeros((3, 2, 3)))[1]), "dhs: expected shape"),
        (lambda c: c.backward(np.zeros((3, 2, 4)), c.forward(np.zeros((3, 2, 3)))[1], back_steps=-1), "back_steps"),
    ],
)
def test_bad_call_arguments_name_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call(rnnlab.GRU(3, 4))


def test_lstm_state_must_be_a_pair():
    with pytest.raises(ValueError, match=r"h0: expected an \(h, c\) pair"):
        rnnlab.LSTM(2, 3).forward(np.zeros((2, 1, 2)), h0=(np.zeros((1, 3)),))


def test_losses_reject_bad_targets():
    with pytest.raises(ValueError, match="targets: expected class ids in"):
        rnnlab.softmax_cross_entropy(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(ValueError, match="targets: expected shape"):
        rnnlab.squared_error(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="mask: no valid position"):
        rnnlab.sigmoid_binary_cross_entropy(np.zeros((2, 3)), np.zeros((2, 3)), mask=np.zeros(2))


_CONFIGS = [(name, {k: v for k, v in config.items() if k not in ("bias", "recurrent_bias")})
            for name, cls in sorted(rnnlab.CELLS.items()) if ":" not in name for config in configurations(cls)]


@settings(max_examples=60)
@given(
    cell=st.sampled_from(_CONFIGS), I=st.integers(1, 9), H=st.integers(1, 9), O=st.integers(0, 5),
    L=st.integers(1, 3), bias=st.booleans(), recurrent_bias=st.booleans(),
)
def test_count_params_matches_built_models(cell, I, H, O, L, bias, recurrent_bias):
    """Counts from the declared shapes (nothing allocated) equal the built models', for every
    registered cell in every configuration its options allow."""
    kind, extra = cell
    arguments = {"num_layers": L, "bias": bias, "recurrent_bias": recurrent_bias, **extra}
    try:
        stack = rnnlab.Stack.build(kind, I, H, **arguments)
    except ValueError as refused:     # a configuration the cell refuses (GRU3 without a bias): counting refuses it too
        with pytest.raises(ValueError, match=re.escape(str(refused))):
            count_params(kind, input_size=I, hidden_size=H, output_size=O, **arguments)
        return
    built = stack.num_params() + (rnnlab.Linear(H, O).num_params() if O else 0)
    counted = count_params(kind, input_size=I, hidden_size=H, output_size=O, **arguments)
    assert counted == built
    assert count_params(stack) == stack.num_params() == count_params(dict(stack.params))


def test_published_parameter_counts():
    # S5: 2-layer tanh RNN, 10 inputs, 64 units, two bias vectors per layer, linear readout to 2
    assert count_params("rnn", input_size=10, hidden_size=64, output_size=2, num_layers=2, recurrent_bias=True) == 13314
    # S2: vanilla-18 and GRU-10 on 7 symbols are within the paper's ~590-620 parameters
    assert count_params("rnn", input_size=7, hidden_size=18, output_size=7) == 601
    assert count_params("gru", input_size=7, hidden_size=10, output_size=7, variant="cho") == 617


@settings(max_examples=30)
@given(kind=st.sampled_from(["rnn", "gru", "lstm"]), budget=st.integers(50, 30000), I=st.integers(1, 90))
def test_hidden_for_budget_is_the_closest(kind, budget, I):
    h = hidden_for_budget(kind, budget, input_size=I, output_size=88)
    def gap(k):
        return abs(count_params(kind, input_size=I, hidden_size=k, output_size=88) - budget)
    assert all(gap(h) <= gap(k) for k in range(1, h + 40))


def test_twenty_thousand_parameter_budget_of_s3():
    sizes = {k: hidden_for_budget(k, 20000, input_size=88, output_size=88) for k in ("rnn", "gru", "lstm")}
    assert sizes["rnn"] > sizes["gru"] > sizes["lstm"]
    for kind, h in sizes.items():
        assert abs(count_params(kind, input_size=88, hidden_size=h, output_size=88) - 20000) < 600


@settings(max_examples=10, deadline=None)
@given(cell=st.sampled_from(["rnn", "gru", "lstm"]), layers=st.integers(1, 3), embedding=st.booleans())
def test_a_models_parameter_view_walks_every_array_once_live_and_in_order(cell, layers, embedding):
    """items() and values() (the training step's walks) agree with looking each name up, and are
    the live arrays: writing through them changes the model."""
    from rnnlab.models import RecurrentModel

    model = RecurrentModel(cell, 3, 4, 5, num_layers=layers, vocab_size=6 if embedding else None, seed=0)
    view = model.params
    names = list(view)
    assert len(names) == len(set(names)) == len(view) == len(view.items()) == len(view.values())
    assert [name for name, _ in view.items()] == names
    assert all(value is view[name] for name, value in view.items())
    assert all(a is b for a, b in zip(view.values(), (view[name] for name in names)))
    assert ("rnn.0.W_h", view["rnn.0.W_h"]) in view.items() and "rnn.0.W_h" in view
    for value in view.values():
        value[...] = 7.0
    assert all((layer.params["W_h"] == 7.0).all() for layer in model.rnn.layers)
    with pytest.raises(KeyError):
        view["rnn.9.W_h"]
