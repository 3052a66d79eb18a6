"""Independently recurrent network (Li et al. 2018): each unit reads only its own past, through one
recurrent weight.

    h' = relu(x W_x + b + u ⊙ h)          u: (hidden,), a diagonal recurrent matrix

Backward, with dh the error arriving at h':

    da = dh ⊙ [h' > 0];  dh_prev = da ⊙ u;  du = Σ da ⊙ h

The recurrent weights start uniform in [0, 1] (the authors' code draws them from [0, 1] or up to
``recurrent_max`` = 2^(1/T)); the paper's constraint |u| ≤ 2^(1/T) after each update is not
applied (rnnlab's optimisers do not project).
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell
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
