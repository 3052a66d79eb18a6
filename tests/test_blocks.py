"""The residual block (``rnnlab.blocks``): each op against PyTorch's, the whole block against finite
differences in float64 around classic and modern cells, its parameter count, and a run from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rnnlab.blocks import (
    ResidualBlocks,
    gelu,
    gelu_backward,
    glu,
    glu_backward,
    layer_norm,
    layer_norm_backward,
    mlp,
    mlp_backward,
    rms_norm,
    rms_norm_backward,
)
from rnnlab.budget import count_params
from rnnlab.data import Batch
from rnnlab.gradcheck import gradcheck
from rnnlab.models import RecurrentModel

torch = pytest.importorskip("torch", reason="the ops are checked against PyTorch's own")


def _torch_grads(fn, *arrays):
    """PyTorch's value of fn and the gradient of Σ value ⊙ w for a fixed random cotangent w."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    y = fn(*ts)
    w = torch.tensor(np.random.default_rng(1).normal(size=tuple(y.shape)))
    (y * w).sum().backward()
    return y.detach().numpy(), w.numpy(), [t.grad.numpy() for t in ts]


def test_the_norms_and_gelu_match_pytorch_forward_and_backward():
    rng = np.random.default_rng(0)
    x, g, b = rng.normal(size=(4, 3, 6)) * 2 + 0.5, rng.normal(size=6), rng.normal(size=6)
    ref, w, (dx, dg) = _torch_grads(lambda x, g: torch.nn.functional.rms_norm(x, (6,), g, eps=1e-6), x, g)
    y, saved = rms_norm({"g": g}, x)
    grads, ours_dx = rms_norm_backward({"g": g}, w, saved)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours_dx, dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["g"], dg, rtol=1e-10, atol=1e-12)

    ref, w, (dx, dg, db) = _torch_grads(lambda x, g, b: torch.nn.functional.layer_norm(x, (6,), g, b, eps=1e-6),
                                        x, g, b)
    y, saved = layer_norm({"g": g, "b": b}, x)
    grads, ours_dx = layer_norm_backward({"g": g, "b": b}, w, saved)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours_dx, dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["g"], dg, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["b"], db, rtol=1e-10, atol=1e-12)

    ref, w, (dz,) = _torch_grads(lambda z: torch.nn.functional.gelu(z, approximate="tanh"), x)
    y, saved = gelu(x)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gelu_backward(w, saved), dz, rtol=1e-10, atol=1e-14)


def test_the_feed_forward_parts_match_pytorch():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 2, 4))
    p = {"W1": rng.normal(size=(4, 8)), "b1": rng.normal(size=8), "W2": rng.normal(size=(8, 4)),
         "b2": rng.normal(size=4)}
    F = torch.nn.functional
    ref, w, grads = _torch_grads(lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1, approximate="tanh") @ W2 + b2,
                                 x, *p.values())
    y, saved = mlp(p, x)
    ours, dx = mlp_backward(p, w, saved)
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    for got, want in zip([dx, ours["W1"], ours["b1"], ours["W2"], ours["b2"]], grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    q = {"W_g": rng.normal(size=(4, 6)), "W_u": rng.normal(size=(4, 6)), "W_d": rng.normal(size=(6, 4))}
    ref, w, grads = _torch_grads(lambda x, Wg, Wu, Wd: (F.gelu(x @ Wg, approximate="tanh") * (x @ Wu)) @ Wd,
                                 x, *q.values())
    y, saved = glu(q, x)
    ours, dx = glu_backward(q, w, saved)
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    for got, want in zip([dx, ours["W_g"], ours["W_u"], ours["W_d"]], grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _model_and_batch(cell, block, norm, head="steps", inputs="dense", **options):
    T, B, I, H = 5, 2, 3, 4
    rng = np.random.default_rng(3)
    kind = {"dense": {}, "one_hot": {"one_hot": True}, "embedding": {"vocab_size": 5}}[inputs]
    model = RecurrentModel(cell, H if inputs == "embedding" else I, H, 3, num_layers=2, head=head, seed=1,
                           block=block, block_norm=norm, block_expansion=1, engine="numpy", **kind, **options)
    x = rng.normal(size=(T, B, I)) if inputs == "dense" else rng.integers(0, I, (T, B))
    y = rng.integers(0, 3, (T, B) if head == "steps" else (B,))
    mask = np.ones((T, B))
    mask[3:, 1] = 0                                       # the second sequence is padded
    h0 = []
    for layer in model.rnn.layers:
        parts = layer.random_state(rng, B)
        h0.append(parts[0] if len(parts) == 1 else parts)
    return model, Batch(x, y, mask), h0


def _gradcheck(model, batch, h0):
    _, grads, _, _ = model.loss_and_grads(batch, h0)
    names = list(model.params)
    saved = {k: np.array(model.params[k]) for k in names}

    def loss(arrays):
        for k in names:
            model.params[k][...] = arrays[k]
        return model.loss_and_grads(batch, h0)[0]

    try:
        return gradcheck(loss, saved, grads)
    finally:
        for k in names:
            model.params[k][...] = saved[k]


@pytest.mark.parametrize("cell,block,norm", [
    ("lstm", "mlp", "rms"), ("lstm", "glu", "layer"), ("minlstm", "glu", "layer"),
    pytest.param("s6", "glu", "rms", marks=pytest.mark.slow),
    pytest.param("s6", "mixer", "layer", marks=pytest.mark.slow),
    pytest.param("mlstm", "mlp", "rms", marks=pytest.mark.slow),
    pytest.param("deltanet", "mixer", "rms", marks=pytest.mark.slow),
])
def test_the_block_is_exact_against_finite_differences(cell, block, norm):
    """Two blocks deep, a padded sequence, a random initial state in every layer: every parameter, the
    cells', the norms', the feed-forward parts' and the input map's, to < 1e-6 in float64."""
    result = _gradcheck(*_model_and_batch(cell, block, norm))
    assert result.passed(1e-6), str(result)


@pytest.mark.parametrize("inputs,head", [("one_hot", "last"), ("embedding", "mean")])
def test_the_block_reads_token_ids_exactly(inputs, head):
    model, batch, h0 = _model_and_batch("gru", "glu", "rms", head=head, inputs=inputs)
    assert ("rnn.in.W" in model.params) == (inputs == "one_hot")     # an embedding hidden wide needs no map
    result = _gradcheck(model, batch, h0)
    assert result.passed(1e-6), str(result)


def test_truncation_reaches_each_cell_and_nothing_else():
    """back_steps truncates the cells' recurrences only: at k ≥ T − 1 it is full BPTT; at k = 0 the
    recurrent matrix loses the paths through time but the per-position parts keep their gradients."""
    model, batch, h0 = _model_and_batch("lstm", "mlp", "rms")
    full = model.loss_and_grads(batch, h0)[1]
    long = model.loss_and_grads(batch, h0, back_steps=4)[1]
    short = model.loss_and_grads(batch, h0, back_steps=0)[1]
    for k in full:
        np.testing.assert_allclose(long[k], full[k], rtol=1e-12, atol=1e-14)
    assert not np.allclose(short["rnn.0.W_h"], full["rnn.0.W_h"])
    assert np.abs(short["rnn.1.ff.W2"]).sum() > 0


@pytest.mark.parametrize("block", ["mlp", "glu", "mixer"])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_the_parameter_count_counts_every_part_of_the_block(block, norm):
    for cell, options in [("lstm", {}), ("s6", {"d_state": 4}), ("slstm", {"heads": 2})]:
        for bias in (True, False):
            built = RecurrentModel(cell, 7, 8, 3, num_layers=3, block=block, block_norm=norm, bias=bias,
                                   block_expansion=2, seed=0, **options)
            counted = count_params(cell, input_size=7, hidden_size=8, output_size=3, num_layers=3, block=block,
                                   block_norm=norm, block_expansion=2, bias=bias, **options)
            # the readout's bias follows ``bias`` in a built model; count_params always counts one
            assert built.num_params() == counted - (0 if bias else 3)


def test_blocks_keep_each_cells_state_and_stream_width():
    blocks = ResidualBlocks.build("mlstm", 5, 8, 2, block="glu", heads=2, seed=0)
    x = np.random.default_rng(0).normal(size=(4, 2, 5))
    out, cache = blocks.forward(x)
    assert out.shape == (4, 2, 8)
    states = blocks.final_state(cache)
    assert len(states) == 2 and states[0][1].shape == (2, 2, 4, 4)      # mLSTM's C per head, each layer
    with pytest.raises(ValueError, match="block: expected one of"):
        ResidualBlocks.build("lstm", 5, 8, block="attention")
    with pytest.raises(ValueError, match="block_norm"):
        RecurrentModel("lstm", 5, 8, 2, block="glu", block_norm="batch")


def test_a_block_model_trains_and_restores_from_the_command_line(tmp_path):
    from rnnlab.cli import main

    out = tmp_path / "run"
    assert main(["train", "--task", "adding", "--cell", "rglru", "--block", "--layers", "2", "--hidden", "4",
                 "--epochs", "1", "--engine", "numpy", "--quiet", "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    settings = result["run"]["settings"]
    assert (settings["block"], settings["layers"]) == ("glu", 2)
    assert result["num_params"] == count_params("rglru", input_size=2, hidden_size=4, output_size=1, num_layers=2,
                                                block="glu")
    assert main(["evaluate", "--checkpoint", str(out / "checkpoint.npz"), "--split", "test"]) == 0
