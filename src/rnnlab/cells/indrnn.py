"""Independently recurrent network (Li et al. 2018): each unit reads only its own past, through one
recurrent weight.

    h' = relu(x W_x + b + u ⊙ h)          u: (hidden,), a diagonal recurrent matrix

Backward, with dh the error arriving at h':

    da = dh ⊙ [h' > 0];  dh_prev = da ⊙ u;  du = Σ da ⊙ h

The recurrent weights start uniform in [0, 1] (the authors' code draws them from [0, 1] or up to
``recurrent_max`` = 2^(1/T)); the paper's constraint |u| ≤ 2^(1/T) after each update is not
applied (rnnlab's optimisers do not project). The Numba engine runs its fused loops (below).
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages
from rnnlab.cells.base import Cell
from rnnlab.cells.kernel_math import kernel, one_of, zero_of
from rnnlab.cells.registry import register_cell


def indrnn_step(p, xw, state, xp=np):
    (h,) = state
    h_new = xp.maximum(xw + p["u"] * h, 0.0)
    return (h_new,), {"h": h_new}


def indrnn_step_backward(p, dstate, cache, prev, xp=np):
    (dh,) = dstate
    da = dh * (cache["h"] > 0)
    return (da * p["u"],), da, da


@register_cell("indrnn")
class IndRNN(Cell):
    """IndRNN: ``W_x`` (input_size, hidden), ``u`` (hidden,), ``b`` (hidden,); nm + 2n parameters."""

    title = "IndRNN"

    def param_shapes(self):
        shapes = super().param_shapes()
        del shapes["W_h"]
        shapes.pop("b_h", None)       # u ⊙ h has no second bias
        shapes["u"] = (self.hidden_size,)
        return shapes

    def initialize(self, rng):
        self.params["u"] = rng.uniform(0.0, 1.0, size=self.hidden_size).astype(self.dtype)

    def step(self, p, xw, state, xp=np):
        return indrnn_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return indrnn_step_backward(p, dstate, cache, prev, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        return {"u": (dhw * prev_h).sum(axis=0)}

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape
        hs, h_steps = np.empty((T, B, H), self.dtype), np.empty((T, B, H), self.dtype)
        indrnn_forward_loop(xw, p["u"], state0[0], mask, hs, h_steps)
        return (hs,), {"h": h_steps}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives da (= dhw)."""
        return dxw, dxw, (indrnn_backward_loop(dhs, p["u"], cache.steps["h"], mask, back_steps, dxw, dh_out),)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba): no recurrent product, so each step is one
# elementwise pass ---------------------------------------------------------------------------------------------

@kernel
def indrnn_forward_loop(xw, u, h0, mask, hs, h_steps):
    """h' = relu(xw + u ⊙ h), a padded step keeping h."""
    T, B, H = hs.shape
    zero = zero_of(hs)
    h = h0.copy()
    for t in range(T):
        for r in range(B):
            for j in range(H):
                a = xw[t, r, j] + u[j] * h[r, j]
                h_steps[t, r, j] = a if a > zero else zero
            if mask[t, r] > 0.0:
                h[r] = h_steps[t, r]
        hs[t] = h


@kernel
def indrnn_backward_loop(dhs, u, h_steps, mask, back_steps, da_sum, dh_out):
    """da = dh ⊙ [h' > 0];  dh_prev = da ⊙ u; for every age at once, padded steps passing their deltas through.
    Returns dh0; da_sum receives da."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A * B, H), dhs.dtype)
    dprev = np.empty((A, B, H), dhs.dtype)
    one, zero = one_of(dhs), zero_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for r in range(B):
                m = mask[t, r]
                for j in range(H):
                    d = m * carry[s, r, j]
                    da[s * B + r, j] = d if h_steps[t, r, j] > zero else zero
                    dprev[s, r, j] = da[s * B + r, j] * u[j] + (one - m) * carry[s, r, j]
        sum_ages(da, B, da_sum[t])
        step_back(carry, dprev, back_steps)
    return initial_state_delta(carry, back_steps)
