"""minGRU (Feng et al. 2024, "Were RNNs all we needed?"): a GRU whose gate and candidate read only
x, so the recurrence is linear in h (and trainable as a parallel scan).

    z  = σ(x W_xz + b_z)
    h̃  = g(x W_xh + b_h̃),   g(a) = a + ½ for a ≥ 0, σ(a) otherwise (positive, continuous)
    h' = (1 − z) ⊙ h + z ⊙ h̃

Backward, with dh the error arriving at h':

    dz_pre = dh ⊙ (h̃ − h) ⊙ z(1 − z);  dh̃_pre = dh ⊙ z ⊙ g′(a),  g′ = 1 where h̃ ≥ ½, h̃(1 − h̃) below
    dh_prev = dh ⊙ (1 − z)

No recurrent weights: 2(nm + n) parameters. g′ jumps at a = 0 (from ¼ to 1): a kink.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell
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
class MinGRU(Cell):
    """minGRU: ``W_x`` (input_size, 2*hidden) in block order z, h̃, ``b`` (2*hidden,); no W_h."""

    title = "minGRU"
    gates = 2

    def param_shapes(self):
        shapes = super().param_shapes()
        del shapes["W_h"]
        shapes.pop("b_h", None)
        return shapes

    def step(self, p, xw, state, xp=np):
        return mingru_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return mingru_step_backward(p, dstate, cache, prev, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        return {}
