"""The truncation ages of BPTT, for the Numba engine's backward loops (see ``rnnlab.engines.loops``):
with ``back_steps`` = k ≥ 0 a loop carries k + 1 deltas, one per age; full BPTT (k < 0) carries one.
Each step moves every age one step back; the oldest expires."""

from __future__ import annotations

import numpy as np

from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import one_of
from rnnlab.compile import kernel


@kernel
def new_carry(back_steps, B, H, dtype_like):
    return np.zeros((1 if back_steps < 0 else back_steps + 1, B, H), dtype_like.dtype)


@kernel
def backward_buffers(dhs, back_steps, width):
    """What a backward loop with one recurrent product carries: the deltas of every age (A, B, H), the
    pre-activation deltas of every age (A·B, width), and what reaches the previous state (A·B, H)."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    return carry, np.empty((A * B, width), dhs.dtype), np.empty((A * B, H), dhs.dtype)


@kernel
def step_back(carry, dprev, back_steps):
    """The deltas that reach the previous step: all of dprev (full BPTT), or ages 0..k−1 of it as
    ages 1..k with nothing at age 0 (truncated: age k expires here)."""
    if back_steps < 0:
        carry[0] = dprev[0]
    else:
        carry[1:] = dprev[:-1]
        carry[0] = 0.0


@kernel
def age_in_place(carry, back_steps):
    """``step_back`` for a loop that wrote the deltas reaching the previous step into ``carry`` itself (a matrix
    state's, too large to copy every step): under truncation every age moves one older, age k expiring."""
    if back_steps >= 0:
        for s in range(carry.shape[0] - 1, 0, -1):
            carry[s] = carry[s - 1]
        carry[0] = 0.0


@kernel
def initial_state_delta(carry, back_steps):
    """What reaches the initial state: the carried delta, or the sum of its surviving ages."""
    if back_steps < 0:
        return carry[0].copy()
    return carry[1:].sum(axis=0)


@kernel
def inject(carry, dh_t, total):
    """The error injected at this step joins the delta of age 0; ``total`` receives everything that
    reaches h_t (the sum over ages)."""
    carry[0] += dh_t
    total[:] = carry[0]
    for s in range(1, carry.shape[0]):
        total += carry[s]


@kernel
def sum_ages(per_age, B, out):
    """out = the sum over ages of ``per_age`` (A·B, n), whose rows are age-major (age s at s·B...)."""
    out[:] = per_age[:B]
    for s in range(1, per_age.shape[0] // B):
        out += per_age[s * B:(s + 1) * B]


@kernel
def pass_padding(dprev, carry, mask_t):
    """A padded step passes its deltas through: dprev (A·B, n), age-major rows, gains (1 − m) ⊙ carry (A, B, n)."""
    A, B, n = carry.shape
    one = one_of(carry)
    for s in range(A):
        for r in range(B):
            keep = one - mask_t[r]
            if keep > 0.0:
                for j in range(n):
                    dprev[s * B + r, j] += keep * carry[s, r, j]


@kernel
def through_the_gate(carry, gate_t, mask_t, dprev):
    """dh_prev += dh ⊙ g for a state carried through a gate, h' = g ⊙ h + …, on a step that ran; all of dh on a
    padded one. dprev (A·B, H), age-major rows; gate_t (B, H)."""
    A, B, H = carry.shape
    one = one_of(carry)
    for s in range(A):
        for i in range(B):
            m = mask_t[i]
            g, d, out = gate_t[i], carry[s, i], dprev[s * B + i]
            for j in range(H):
                out[j] += m * d[j] * g[j] + (one - m) * d[j]


@kernel
def gated_step_back(carry, da, W_hT, gate_t, mask_t, dprev, da_sum_t, back_steps):
    """The end of a backward step of h' = g ⊙ h + … whose blocks all read h: da's ages summed into da_sum_t,
    dh_prev = da W_hᵀ + dh ⊙ g (``through_the_gate``), and every age moved one step back."""
    A, B, H = carry.shape
    sum_ages(da, B, da_sum_t)
    kernel_matmul(da, W_hT, dprev)
    through_the_gate(carry, gate_t, mask_t, dprev)
    step_back(carry, dprev.reshape(A, B, H), back_steps)
