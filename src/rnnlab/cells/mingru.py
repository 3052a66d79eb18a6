"""minGRU (Feng et al. 2024, "Were RNNs all we needed?"): a GRU whose gate and candidate read only
x, so the recurrence is linear in h (and trainable as a parallel scan).

    z  = σ(x W_xz + b_z)
    h̃  = g(x W_xh + b_h̃),   g(a) = a + ½ for a ≥ 0, σ(a) otherwise (positive, continuous)
    h' = (1 − z) ⊙ h + z ⊙ h̃

Backward, with dh the error arriving at h':

    dz_pre = dh ⊙ (h̃ − h) ⊙ z(1 − z);  dh̃_pre = dh ⊙ z ⊙ g′(a),  g′ = 1 where h̃ ≥ ½, h̃(1 − h̃) below
    dh_prev = dh ⊙ (1 − z)

No recurrent weights: 2(nm + n) parameters. g′ jumps at a = 0 (from ¼ to 1): a kink. The Numba engine runs its
fused loops (below); the parallel scan is not built.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages
from rnnlab.cells.base import InputDrivenCell
from rnnlab.cells.kernel_math import kernel, kernel_sigmoid, one_of, zero_of
from rnnlab.cells.registry import register_cell
from rnnlab.common import sigmoid


def positive_activation(a, xp=np):
    """g(a) = a + ½ for a ≥ 0, σ(a) below: minGRU's candidate activation, always positive."""
    return xp.where(a >= 0, a + 0.5, sigmoid(xp.minimum(a, 0.0), xp))


def mingru_step(p, xw, state, xp=np):
    (h,) = state
    H = h.shape[-1]
    z = sigmoid(xw[..., :H], xp)
    cand = positive_activation(xw[..., H:], xp)
    return ((1.0 - z) * h + z * cand,), {"z": z, "cand": cand}


def mingru_step_backward(p, dstate, cache, prev, xp=np):
    (dh,) = dstate
    (h,) = prev
    z, cand = cache["z"], cache["cand"]
    slope = xp.where(cand >= 0.5, 1.0, cand * (1.0 - cand))
    dxw = xp.concatenate([dh * (cand - h) * z * (1.0 - z), dh * z * slope], axis=-1)
    return (dh * (1.0 - z),), dxw, dxw


@register_cell("mingru")
class MinGRU(InputDrivenCell):
    """minGRU: ``W_x`` (input_size, 2*hidden) in block order z, h̃, ``b`` (2*hidden,); no W_h."""

    title = "minGRU"
    linear_state = (0,)
    gates = 2

    def step(self, p, xw, state, xp=np):
        return mingru_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return mingru_step_backward(p, dstate, cache, prev, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        hs, z, cand = (np.empty((T, B, H), self.dtype) for _ in range(3))
        mingru_forward_loop(xw, state0[0], mask, hs, z, cand)
        return (hs,), {"z": z, "cand": cand}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [dz_pre, dh̃_pre] (= dhw)."""
        dh0 = mingru_backward_loop(dhs, np.ascontiguousarray(prev[0]), cache.steps["z"], cache.steps["cand"], mask,
                                   back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba): no recurrent product, so each step is one
# elementwise pass ---------------------------------------------------------------------------------------------

@kernel
def mingru_forward_loop(xw, h0, mask, hs, z_steps, cand_steps):
    """z = σ(xw_z);  h̃ = g(xw_h̃);  h' = (1 − z) ⊙ h + z ⊙ h̃, a padded step keeping h."""
    T, B, H = hs.shape
    one, zero, half = one_of(hs), zero_of(hs), one_of(hs) / 2
    h = h0.copy()
    for t in range(T):
        for r in range(B):
            for j in range(H):
                z_steps[t, r, j] = kernel_sigmoid(xw[t, r, j])
                a = xw[t, r, H + j]
                cand_steps[t, r, j] = a + half if a >= zero else kernel_sigmoid(a)
            if mask[t, r] > 0.0:
                for j in range(H):
                    z = z_steps[t, r, j]
                    h[r, j] = (one - z) * h[r, j] + z * cand_steps[t, r, j]
        hs[t] = h


@kernel
def mingru_backward_loop(dhs, prev_h, z_steps, cand_steps, mask, back_steps, da_sum, dh_out):
    """dz_pre = dh ⊙ (h̃ − h) ⊙ z(1 − z);  dh̃_pre = dh ⊙ z ⊙ g′;  dh_prev = dh ⊙ (1 − z); for every age at once,
    padded steps passing their deltas through. Returns dh0; da_sum receives [dz_pre, dh̃_pre]."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A * B, 2 * H), dhs.dtype)
    dprev = np.empty((A, B, H), dhs.dtype)
    one, half = one_of(dhs), one_of(dhs) / 2
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for r in range(B):
                m, row = mask[t, r], s * B + r
                for j in range(H):
                    d, z, cand = m * carry[s, r, j], z_steps[t, r, j], cand_steps[t, r, j]
                    da[row, j] = d * (cand - prev_h[t, r, j]) * z * (one - z)
                    da[row, H + j] = d * z * (one if cand >= half else cand * (one - cand))
                    dprev[s, r, j] = d * (one - z) + (one - m) * carry[s, r, j]
        sum_ages(da, B, da_sum[t])
        step_back(carry, dprev, back_steps)
    return initial_state_delta(carry, back_steps)
