"""The compiled engines (Numba's fused loops, and JAX when its extra is installed): the same gradient
checks as the NumPy engine over every cell × variant × activation × bias × loss × mask × back_steps,
and agreement with the NumPy engine, the reference (float64 to 1e-10, float32 within its precision)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnlab
from helpers import BIASES, CELL_CONFIGS, LOSS_MODES, Head, backward_against_finite_differences, join_state, make_mask

try:
    import jax  # noqa: F401
    ENGINES = ["numba", "jax"]
except ImportError:  # the jax extra is optional; its tests are skipped, naming why
    ENGINES = ["numba", pytest.param("jax", marks=pytest.mark.skip(reason="the jax extra is not installed"))]

COMBOS = list(itertools.product(CELL_CONFIGS, BIASES, LOSS_MODES, (False, True), (None, 0, 1, 3)))


def _pair(config, bias, I, H, seed, engine, dtype=np.float64):
    """The same cell on the NumPy engine (which computes the finite-difference references) and on ``engine``."""
    kind, kwargs = CELL_CONFIGS[config]
    common = dict(seed=seed, init="normal", init_scale=0.5, dtype=dtype, **kwargs, **BIASES[bias])
    return rnnlab.make_cell(kind, I, H, **common), rnnlab.make_cell(kind, I, H, engine=engine, **common)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("config, bias, loss_mode, masked, back_steps", COMBOS)
def test_compiled_backward_matches_finite_differences(config, bias, loss_mode, masked, back_steps, engine):
    T, B, I, H = 4, 2, 3, 3
    rng = np.random.default_rng(7)
    reference, compiled = _pair(config, bias, I, H, 3, engine)
    head = Head(loss_mode, H, 3, T, B, rng)
    x = rng.normal(size=(T, B, I))
    h0 = join_state(reference, [rng.normal(scale=0.5, size=(B, H)) for _ in range(reference.state_size)])
    mask = make_mask(rng, T, B) if masked else None
    result = backward_against_finite_differences(compiled, reference, head, x, h0, mask, back_steps)
    assert result.passed(1e-6), str(result)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize("config", list(CELL_CONFIGS))
@settings(max_examples=4)
@given(T=st.integers(1, 7), B=st.integers(1, 4), back_steps=st.sampled_from([None, 0, 2, 9]), masked=st.booleans(),
       seed=st.integers(0, 2**31))
def test_engines_agree_with_the_reference_in_float64(config, bias, engine, T, B, back_steps, masked, seed):
    a, b = _pair(config, bias, 4, 5, 1, engine)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, B, 4))
    mask = make_mask(rng, T, B) if masked else None
    ha, ca = a.forward(x, mask=mask)
    hb, cb = b.forward(x, mask=mask)
    np.testing.assert_allclose(hb, ha, rtol=0, atol=1e-10)
    for name in ca.steps:                   # the same intermediates: one engine's cache serves the other
        np.testing.assert_allclose(cb.steps[name], ca.steps[name], rtol=0, atol=1e-10, err_msg=name)
    d = rng.normal(size=ha.shape)
    buffers = [np.zeros_like(ha), np.zeros_like(ha)]
    ga, dxa, d0a = a.backward(d, ca, back_steps, buffers[0])
    gb, dxb, d0b = b.backward(d, cb, back_steps, buffers[1])
    for name in ga:
        np.testing.assert_allclose(gb[name], ga[name], rtol=0, atol=1e-10, err_msg=name)
    np.testing.assert_allclose(dxb, dxa, rtol=0, atol=1e-10)
    np.testing.assert_allclose(buffers[1], buffers[0], rtol=0, atol=1e-10)
    for u, v in zip(d0a if isinstance(d0a, tuple) else (d0a,), d0b if isinstance(d0b, tuple) else (d0b,)):
        np.testing.assert_allclose(v, u, rtol=0, atol=1e-10)


@pytest.mark.parametrize("config", list(CELL_CONFIGS))
def test_numba_float32_agrees_with_the_reference_within_float32(config):
    a, b = _pair(config, "bias", 6, 8, 2, "numba", np.float32)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(9, 5, 6)).astype(np.float32)
    mask = make_mask(rng, 9, 5)
    ha, ca = a.forward(x, mask=mask)
    hb, cb = b.forward(x, mask=mask)
    assert hb.dtype == np.float32
    np.testing.assert_allclose(hb, ha, rtol=1e-5, atol=1e-5)
    d = rng.normal(size=ha.shape).astype(np.float32)
    ga, dxa, _ = a.backward(d, ca, 3)
    gb, dxb, _ = b.backward(d, cb, 3)
    for name in ga:
        assert gb[name].dtype == np.float32
        np.testing.assert_allclose(gb[name], ga[name], rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(dxb, dxa, rtol=1e-4, atol=1e-4)


def test_float32_stays_float32_and_unknown_engine_is_rejected():
    pytest.importorskip("jax", reason="the jax extra is not installed")
    cell = rnnlab.GRU(3, 4, engine="jax", dtype=np.float32)
    hs, cache = cell.forward(np.ones((3, 2, 3)))
    grads, dx, _ = cell.backward(np.ones_like(hs), cache)
    assert hs.dtype == np.float32 and dx.dtype == np.float32 and grads["W_h"].dtype == np.float32
    with pytest.raises(ValueError, match="engine: unknown engine 'torch'"):
        rnnlab.RNN(2, 3, engine="torch")
