"""Update-gate RNN (Collins, Sohl-Dickstein & Sussillo 2017): the vanilla RNN plus exactly one gate.

    c  = tanh(x W_xc + b_c + h W_hc)                 candidate
    g  = σ(x W_xg + b_g + h W_hg + 1)                update gate (the +1 is tf.contrib's forget_bias)
    h' = g ⊙ h + (1 − g) ⊙ c

Backward, with dh the error arriving at h':

    dc_pre = dh ⊙ (1 − g) ⊙ (1 − c²);  dg_pre = dh ⊙ (h − c) ⊙ g(1 − g)
    dh_prev = dh ⊙ g + [dc_pre, dg_pre] W_hᵀ

The Numba engine runs its fused loops (below): one product h W_h a step, the rest one elementwise pass.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import backward_buffers, gated_step_back, initial_state_delta, inject
from rnnlab.cells.base import Cell, recurrent_preactivation
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import constant_in_dtype, kernel, kernel_sigmoid, kernel_tanh, one_of
from rnnlab.cells.registry import register_cell
from rnnlab.common import matrix_transpose, sigmoid

GATE_BIAS = 1.0


def ugrnn_step(p, xw, state, xp=np):
    (h,) = state
    H = h.shape[-1]
    a = recurrent_preactivation(p, xw, h)
    c = xp.tanh(a[..., :H])
    g = sigmoid(a[..., H:] + GATE_BIAS, xp)
    return (g * h + (1.0 - g) * c,), {"c": c, "g": g}


def ugrnn_step_backward(p, dstate, cache, prev, xp=np):
    (dh,) = dstate
    (h,) = prev
    c, g = cache["c"], cache["g"]
    da = xp.concatenate([dh * (1.0 - g) * (1.0 - c * c), dh * (h - c) * g * (1.0 - g)], axis=-1)
    return (dh * g + da @ matrix_transpose(p["W_h"]),), da, da


@register_cell("ugrnn")
class UGRNN(Cell):
    """UGRNN: ``W_x`` (input_size, 2*hidden), ``W_h`` (hidden, 2*hidden) in block order c, g; 2(nm + n² + n)
    parameters with one bias."""

    title = "UGRNN"
    gates = 2

    def step(self, p, xw, state, xp=np):
        return ugrnn_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return ugrnn_step_backward(p, dstate, cache, prev, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, c_steps, g_steps = (np.empty((T, B, H), dt) for _ in range(3))
        b_h = p["b_h"] if "b_h" in p else np.zeros(2 * H, dt)
        ugrnn_forward_loop(xw, np.ascontiguousarray(p["W_h"]), b_h, state0[0], mask, hs, c_steps, g_steps)
        return (hs,), {"c": c_steps, "g": g_steps}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [dc_pre, dg_pre] (= dhw)."""
        dh0 = ugrnn_backward_loop(dhs, np.ascontiguousarray(p["W_h"].T), np.ascontiguousarray(prev[0]),
                                  cache.steps["c"], cache.steps["g"], mask, back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) -------------------------------------------

gate_bias_of = constant_in_dtype(GATE_BIAS, "gate_bias_of", "the update gate's +1 without widening a float32 loop.")


@kernel
def ugrnn_forward_loop(xw, W_h, b_h, h0, mask, hs, c_steps, g_steps):
    """a = xw + h W_h + b_h;  c = tanh(a_c);  g = σ(a_g + 1);  h' = g ⊙ h + (1 − g) ⊙ c, a padded step keeping h."""
    T, B, H = hs.shape
    one, shift = one_of(hs), gate_bias_of(hs)
    h, hw = h0.copy(), np.empty((B, 2 * H), hs.dtype)
    for t in range(T):
        kernel_matmul(h, W_h, hw)
        for i in range(B):
            for j in range(H):
                c_steps[t, i, j] = kernel_tanh(xw[t, i, j] + hw[i, j] + b_h[j])
            for j in range(H):
                g_steps[t, i, j] = kernel_sigmoid(xw[t, i, H + j] + hw[i, H + j] + b_h[H + j] + shift)
            if mask[t, i] > 0.0:
                for j in range(H):
                    g = g_steps[t, i, j]
                    h[i, j] = g * h[i, j] + (one - g) * c_steps[t, i, j]
        hs[t] = h


@kernel
def ugrnn_backward_loop(dhs, W_hT, prev_h, c_steps, g_steps, mask, back_steps, da_sum, dh_out):
    """dc_pre = dh ⊙ (1 − g)(1 − c²);  dg_pre = dh ⊙ (h − c) g(1 − g);  dh_prev = dh ⊙ g + [dc_pre, dg_pre] W_hᵀ,
    for every age at once, padded steps passing their deltas through. Returns dh0; da_sum receives the deltas."""
    T, B, H = dhs.shape
    carry, da, dprev = backward_buffers(dhs, back_steps, 2 * H)
    A, one = carry.shape[0], one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                m = mask[t, i]
                c, g, h, d, out = c_steps[t, i], g_steps[t, i], prev_h[t, i], carry[s, i], da[s * B + i]
                for j in range(H):
                    out[j] = m * d[j] * (one - g[j]) * (one - c[j] * c[j])
                for j in range(H):
                    out[H + j] = m * d[j] * (h[j] - c[j]) * g[j] * (one - g[j])
        gated_step_back(carry, da, W_hT, g_steps[t], mask[t], dprev, da_sum[t], back_steps)
    return initial_state_delta(carry, back_steps)
