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
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell, Option, recurrent_preactivation
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
