"""JANET (van der Westhuizen & Lasenby 2018): the LSTM with only a forget gate, whose input gate is
tied to it with a shift β, and h = c.

    s  = x W_xf + b_f + h W_hf                       forget pre-activation
    n  = tanh(x W_xn + b_n + h W_hn)                 candidate
    h' = σ(s) ⊙ h + (1 − σ(s − β)) ⊙ n,   β = 1

Backward, with dh the error arriving at h' (f = σ(s), f₂ = σ(s − β)):

    ds     = dh ⊙ (h ⊙ f(1 − f) − n ⊙ f₂(1 − f₂))
    dn_pre = dh ⊙ (1 − f₂) ⊙ (1 − n²)
    dh_prev = dh ⊙ f + [ds, dn_pre] W_hᵀ

Chrono initialisation (Tallec & Ollivier 2018, as the authors' code): b_f = log U(1, T_max − 1)
and b_n = 0, so that the forget gate's time constants spread over the task's horizon T_max.

The Numba engine runs its fused loops (below): one product h W_h a step, the rest one elementwise pass.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import backward_buffers, gated_step_back, initial_state_delta, inject
from rnnlab.cells.base import Cell, Option, recurrent_preactivation
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import constant_in_dtype, kernel, kernel_sigmoid, kernel_tanh, one_of
from rnnlab.cells.registry import register_cell
from rnnlab.common import matrix_transpose, optional_float, sigmoid

BETA = 1.0


def janet_step(p, xw, state, xp=np):
    (h,) = state
    H = h.shape[-1]
    a = recurrent_preactivation(p, xw, h)
    f, f2 = sigmoid(a[..., :H], xp), sigmoid(a[..., :H] - BETA, xp)
    n = xp.tanh(a[..., H:])
    return (f * h + (1.0 - f2) * n,), {"f": f, "f2": f2, "n": n}


def janet_step_backward(p, dstate, cache, prev, xp=np):
    (dh,) = dstate
    (h,) = prev
    f, f2, n = cache["f"], cache["f2"], cache["n"]
    ds = dh * (h * f * (1.0 - f) - n * f2 * (1.0 - f2))
    da = xp.concatenate([ds, dh * (1.0 - f2) * (1.0 - n * n)], axis=-1)
    return (dh * f + da @ matrix_transpose(p["W_h"]),), da, da


@register_cell("janet")
class JANET(Cell):
    """JANET: ``W_x`` (input_size, 2*hidden), ``W_h`` (hidden, 2*hidden) in block order f, n.
    ``chrono``: T_max of the chrono initialisation (none: the initialiser's biases)."""

    title = "JANET"
    gates = 2
    options = (Option("chrono", None, optional_float, "JANET: T_max of the chrono initialisation of the forget "
                      "bias, b_f = log U(1, T_max - 1) (none: the initialiser's biases)"),)

    def initialize(self, rng):
        if self.bias and self.chrono is not None:
            if self.chrono <= 2:
                raise ValueError(f"chrono: expected T_max > 2, got {self.chrono}")
            H = self.hidden_size
            self.params["b"][:H] = np.log(rng.uniform(1.0, self.chrono - 1.0, size=H))
            self.params["b"][H:] = 0.0

    def step(self, p, xw, state, xp=np):
        return janet_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return janet_step_backward(p, dstate, cache, prev, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, f_steps, f2_steps, n_steps = (np.empty((T, B, H), dt) for _ in range(4))
        b_h = p["b_h"] if "b_h" in p else np.zeros(2 * H, dt)
        janet_forward_loop(xw, np.ascontiguousarray(p["W_h"]), b_h, state0[0], mask, hs, f_steps, f2_steps, n_steps)
        return (hs,), {"f": f_steps, "f2": f2_steps, "n": n_steps}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [ds, dn_pre] (= dhw)."""
        steps = cache.steps
        dh0 = janet_backward_loop(dhs, np.ascontiguousarray(p["W_h"].T), np.ascontiguousarray(prev[0]), steps["f"],
                                  steps["f2"], steps["n"], mask, back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) -------------------------------------------

beta_of = constant_in_dtype(BETA, "beta_of", "the input gate's shift β without widening a float32 loop.")


@kernel
def janet_forward_loop(xw, W_h, b_h, h0, mask, hs, f_steps, f2_steps, n_steps):
    """s = xw_f + h W_hf + b_hf;  f, f₂ = σ(s), σ(s − β);  n = tanh(xw_n + h W_hn + b_hn);
    h' = f ⊙ h + (1 − f₂) ⊙ n, a padded step keeping h."""
    T, B, H = hs.shape
    one, beta = one_of(hs), beta_of(hs)
    h, hw = h0.copy(), np.empty((B, 2 * H), hs.dtype)
    for t in range(T):
        kernel_matmul(h, W_h, hw)
        for i in range(B):
            for j in range(H):
                s = xw[t, i, j] + hw[i, j] + b_h[j]
                f_steps[t, i, j] = kernel_sigmoid(s)
                f2_steps[t, i, j] = kernel_sigmoid(s - beta)
            for j in range(H):
                n_steps[t, i, j] = kernel_tanh(xw[t, i, H + j] + hw[i, H + j] + b_h[H + j])
            if mask[t, i] > 0.0:
                for j in range(H):
                    h[i, j] = f_steps[t, i, j] * h[i, j] + (one - f2_steps[t, i, j]) * n_steps[t, i, j]
        hs[t] = h


@kernel
def janet_backward_loop(dhs, W_hT, prev_h, f_steps, f2_steps, n_steps, mask, back_steps, da_sum, dh_out):
    """ds = dh ⊙ (h ⊙ f(1 − f) − n ⊙ f₂(1 − f₂));  dn_pre = dh ⊙ (1 − f₂)(1 − n²);  dh_prev = dh ⊙ f + [ds, dn_pre]
    W_hᵀ, for every age at once, padded steps passing their deltas through. Returns dh0; da_sum receives the
    deltas."""
    T, B, H = dhs.shape
    carry, da, dprev = backward_buffers(dhs, back_steps, 2 * H)
    A, one = carry.shape[0], one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                m = mask[t, i]
                f, f2, n, h = f_steps[t, i], f2_steps[t, i], n_steps[t, i], prev_h[t, i]
                d, out = carry[s, i], da[s * B + i]
                for j in range(H):
                    out[j] = m * d[j] * (h[j] * f[j] * (one - f[j]) - n[j] * f2[j] * (one - f2[j]))
                for j in range(H):
                    out[H + j] = m * d[j] * (one - f2[j]) * (one - n[j] * n[j])
        gated_step_back(carry, da, W_hT, f_steps[t], mask[t], dprev, da_sum[t], back_steps)
    return initial_state_delta(carry, back_steps)
