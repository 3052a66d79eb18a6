"""Update-gate RNN (Collins, Sohl-Dickstein & Sussillo 2017): the vanilla RNN plus exactly one gate.

    c  = tanh(x W_xc + b_c + h W_hc)                 candidate
    g  = σ(x W_xg + b_g + h W_hg + 1)                update gate (the +1 is tf.contrib's forget_bias)
    h' = g ⊙ h + (1 − g) ⊙ c

Backward, with dh the error arriving at h':

    dc_pre = dh ⊙ (1 − g) ⊙ (1 − c²);  dg_pre = dh ⊙ (h − c) ⊙ g(1 − g)
    dh_prev = dh ⊙ g + [dc_pre, dg_pre] W_hᵀ
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell, recurrent_preactivation
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
