"""Parity with PyTorch's nn.RNN / nn.GRU / nn.LSTM in float64: outputs, final states and every
gradient agree to 1e-10, for one and several layers, with and without biases and masks."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import rnnlab
from rnnlab.interop import from_torch, params_from_torch, to_torch

torch = pytest.importorskip("torch", reason="torch is the parity reference; install the test extra")
nn = torch.nn

MODULES = {
    "rnn-tanh": lambda I, H, L, bias: nn.RNN(I, H, num_layers=L, bias=bias, nonlinearity="tanh"),
    "rnn-relu": lambda I, H, L, bias: nn.RNN(I, H, num_layers=L, bias=bias, nonlinearity="relu"),
    "gru": lambda I, H, L, bias: nn.GRU(I, H, num_layers=L, bias=bias),
    "lstm": lambda I, H, L, bias: nn.LSTM(I, H, num_layers=L, bias=bias),
}
ATOL = 1e-10


def _state_to_torch(model, h0):
    """Our h0 (per layer for a Stack) → torch's (num_layers, B, H) tensors."""
    per_layer = h0 if isinstance(model, rnnlab.Stack) else [h0]
    if isinstance(per_layer[0], tuple):
        return tuple(torch.tensor(np.stack([s[i] for s in per_layer]), requires_grad=True) for i in range(2))
    return torch.tensor(np.stack(per_layer), requires_grad=True)


ENGINES = ["numpy", "numba", pytest.param("jax", marks=pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="the compiled engine needs the jax extra"))]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("kind", list(MODULES))
def test_forward_and_gradients_match_torch(kind, layers, bias, engine):
    torch.manual_seed(0)
    T, B, I, H = 6, 3, 4, 5
    module = MODULES[kind](I, H, layers, bias).double()
    model = from_torch(module, engine=engine)
    assert isinstance(model, rnnlab.Stack) == (layers > 1)
    assert model.num_params() == sum(p.numel() for p in module.parameters())

    rng = np.random.default_rng(1)
    x = rng.normal(size=(T, B, I))
    lstm = kind == "lstm"
    h0_layers = [(rng.normal(size=(B, H)), rng.normal(size=(B, H))) if lstm else rng.normal(size=(B, H))
                 for _ in range(layers)]
    h0 = h0_layers if layers > 1 else h0_layers[0]
    upstream = rng.normal(size=(T, B, H))

    hs, cache = model.forward(x, h0)
    grads, dx, dh0 = model.backward(upstream, cache)

    xt = torch.tensor(x, requires_grad=True)
    h0t = _state_to_torch(model, h0)
    out, hn = module(xt, h0t)
    (out * torch.tensor(upstream)).sum().backward()

    np.testing.assert_allclose(hs, out.detach().numpy(), rtol=0, atol=ATOL)
    final = model.final_state(cache) if layers > 1 else [cache.final_state]
    hn_parts = hn if lstm else (hn,)
    for i, part in enumerate(hn_parts):
        ours = np.stack([f[i] if lstm else f for f in final])
        np.testing.assert_allclose(ours, part.detach().numpy(), rtol=0, atol=ATOL)
    theirs = params_from_torch(module, grad=True)
    assert sorted(theirs) == sorted(grads)
    for name in grads:
        np.testing.assert_allclose(grads[name], theirs[name], rtol=0, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=0, atol=ATOL)
    dh0_layers = dh0 if layers > 1 else [dh0]
    h0_grads = [t.grad.numpy() for t in h0t] if lstm else [h0t.grad.numpy()]
    for i, g in enumerate(h0_grads):
        ours = np.stack([d[i] if lstm else d for d in dh0_layers])
        np.testing.assert_allclose(ours, g, rtol=0, atol=ATOL)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", list(MODULES))
def test_masks_match_packed_sequences(kind, engine):
    """A padded batch with a mask equals torch on a PackedSequence: same valid outputs, same final
    state per sequence (ours holds the last valid state), same gradients."""
    torch.manual_seed(2)
    T, B, I, H = 5, 3, 2, 4
    module = MODULES[kind](I, H, 2, True).double()
    model = from_torch(module, engine=engine)
    lengths = [5, 2, 4]
    mask = (np.arange(T)[:, None] < np.array(lengths)[None]).astype(float)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(T, B, I))
    upstream = rng.normal(size=(T, B, H)) * mask[..., None]

    hs, cache = model.forward(x, mask=mask)
    grads, dx, _ = model.backward(upstream, cache)

    xt = torch.tensor(x, requires_grad=True)
    packed = nn.utils.rnn.pack_padded_sequence(xt, lengths, enforce_sorted=False)
    out, hn = module(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=T)
    (out * torch.tensor(upstream)).sum().backward()

    np.testing.assert_allclose(hs * mask[..., None], out.detach().numpy(), rtol=0, atol=ATOL)
    top_h = (hn[0] if kind == "lstm" else hn)[-1].detach().numpy()
    final_top = model.final_state(cache)[-1]
    np.testing.assert_allclose(final_top[0] if kind == "lstm" else final_top, top_h, rtol=0, atol=ATOL)
    theirs = params_from_torch(module, grad=True)
    for name in grads:
        np.testing.assert_allclose(grads[name], theirs[name], rtol=0, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=0, atol=ATOL)


@pytest.mark.parametrize("config", [("rnn", {"activation": "relu"}), ("gru", {}), ("lstm", {}),
                                    ("gru", {"bias": False})])
def test_to_torch_round_trip(config):
    kind, kwargs = config
    stack = rnnlab.Stack.build(kind, 3, 4, num_layers=2, seed=0, **kwargs)  # single biases: b_hh is zero
    module = to_torch(stack)
    x = np.random.default_rng(0).normal(size=(4, 2, 3))
    out, _ = module(torch.tensor(x))
    np.testing.assert_allclose(stack.forward(x)[0], out.detach().numpy(), rtol=0, atol=ATOL)
    back = from_torch(module)
    np.testing.assert_allclose(back.forward(x)[0], out.detach().numpy(), rtol=0, atol=ATOL)


def test_float32_modules_give_float32_cells():
    cell = from_torch(nn.GRU(3, 4))
    assert cell.dtype == np.float32 and cell.params["W_x"].dtype == np.float32


@pytest.mark.parametrize(
    "model, message",
    [
        (rnnlab.GRU(2, 3, variant="cho"), "cho"),
        (rnnlab.RNN(2, 3, activation="sigmoid"), "sigmoid"),
        (rnnlab.Stack([rnnlab.RNN(2, 3), rnnlab.GRU(3, 3)]), "same kind"),
    ],
)
def test_to_torch_refuses_what_torch_cannot_express(model, message):
    with pytest.raises(ValueError, match=message):
        to_torch(model)


def test_from_torch_refuses_bidirectional():
    with pytest.raises(ValueError, match="bidirectional"):
        from_torch(nn.LSTM(2, 3, bidirectional=True))
