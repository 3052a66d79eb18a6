"""The compiled (JAX) engine: the same gradient checks as the NumPy engine over every cell ×
variant × activation × bias × loss × mask × back_steps, and agreement with the NumPy engine."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnlab
from helpers import BIASES, CELL_CONFIGS, LOSS_MODES, Head, join_state, make_mask, split_state, truncated_reference_loss

pytest.importorskip("jax", reason="the compiled engine needs the jax extra: pip install -e '.[jax]'")

COMBOS = list(itertools.product(CELL_CONFIGS, BIASES, LOSS_MODES, (False, True), (None, 0, 1, 3)))


def _pair(config, bias, I, H, seed):
    """The same cell on both engines (the NumPy one computes the finite-difference references)."""
    kind, kwargs = CELL_CONFIGS[config]
    common = dict(seed=seed, init="normal", init_scale=0.5, **kwargs, **BIASES[bias])
    return rnnlab.make_cell(kind, I, H, **common), rnnlab.make_cell(kind, I, H, engine="jax", **common)


@pytest.mark.parametrize("config, bias, loss_mode, masked, back_steps", COMBOS)
def test_compiled_backward_matches_finite_differences(config, bias, loss_mode, masked, back_steps):
    T, B, I, H = 4, 2, 3, 3
    rng = np.random.default_rng(7)
    reference, compiled = _pair(config, bias, I, H, 3)
    head = Head(loss_mode, H, 3, T, B, rng)
    x = rng.normal(size=(T, B, I))
    h0 = join_state(reference, [rng.normal(scale=0.5, size=(B, H)) for _ in range(reference.state_size)])
    mask = make_mask(rng, T, B) if masked else None
    hs, cache = compiled.forward(x, h0, mask)
    dhs = head.loss(hs, mask)[2]
    grads, dx, dh0 = compiled.backward(dhs, cache, back_steps=back_steps)
    analytic = {**{"cell." + k: v for k, v in grads.items()}, "x": dx,
                **{f"h0.{i}": s for i, s in enumerate(split_state(reference, dh0))}}
    arrays = {**{"cell." + k: v.copy() for k, v in reference.params.items()}, "x": x,
              **{f"h0.{i}": s for i, s in enumerate(split_state(reference, h0))}}
    frozen_hs, frozen_cache = reference.forward(x, h0, mask)
    frozen_states = [h0] + [join_state(reference, [s[t] for s in frozen_cache.states]) for t in range(T)]

    def loss(a):
        for name in reference.params:
            reference.params[name] = a["cell." + name]
        h0_ = join_state(reference, [a[f"h0.{i}"] for i in range(reference.state_size)])
        if back_steps is None:
            return head.loss(reference.forward(a["x"], h0_, mask)[0], mask)[0]
        return truncated_reference_loss(reference, head, a["x"], h0_, mask, back_steps, frozen_states, frozen_hs)

    result = rnnlab.gradcheck(loss, arrays, analytic)
    assert result.passed(1e-6), str(result)


@pytest.mark.parametrize("config", list(CELL_CONFIGS))
@settings(max_examples=3)
@given(T=st.integers(1, 6), B=st.integers(1, 4), back_steps=st.sampled_from([None, 0, 2]), masked=st.booleans())
def test_engines_agree(config, T, B, back_steps, masked):
    a, b = _pair(config, "two-biases", 4, 5, 1)
    rng = np.random.default_rng(T * 10 + B)
    x = rng.normal(size=(T, B, 4))
    mask = make_mask(rng, T, B) if masked else None
    ha, ca = a.forward(x, mask=mask)
    hb, cb = b.forward(x, mask=mask)
    np.testing.assert_allclose(hb, ha, rtol=0, atol=1e-12)
    d = rng.normal(size=ha.shape)
    buffers = [np.zeros_like(ha), np.zeros_like(ha)]
    ga, dxa, _ = a.backward(d, ca, back_steps, buffers[0])
    gb, dxb, _ = b.backward(d, cb, back_steps, buffers[1])
    for name in ga:
        np.testing.assert_allclose(gb[name], ga[name], rtol=0, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(dxb, dxa, rtol=0, atol=1e-12)
    np.testing.assert_allclose(buffers[1], buffers[0], rtol=0, atol=1e-12)


def test_float32_stays_float32_and_unknown_engine_is_rejected():
    cell = rnnlab.GRU(3, 4, engine="jax", dtype=np.float32)
    hs, cache = cell.forward(np.ones((3, 2, 3)))
    grads, dx, _ = cell.backward(np.ones_like(hs), cache)
    assert hs.dtype == np.float32 and dx.dtype == np.float32 and grads["W_h"].dtype == np.float32
    with pytest.raises(ValueError, match="engine: unknown engine 'torch'"):
        rnnlab.RNN(2, 3, engine="torch")
