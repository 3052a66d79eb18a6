"""Long short-term memory (Hochreiter & Schmidhuber 1997, with forget gate). Gate order: i, f, g, o.

    [i, f, g, o] = x W_x + b + h W_h (+ b_h),  then σ, σ, tanh, σ
    c' = f ⊙ c + i ⊙ g
    h' = o ⊙ tanh(c')

Backward, with (dh, dc) the errors arriving at (h', c'):

    dc_total = dc + dh ⊙ o ⊙ (1 − tanh²(c'))
    di = dc_total ⊙ g;  df = dc_total ⊙ c;  dg = dc_total ⊙ i;  do = dh ⊙ tanh(c')
    dc_prev = dc_total ⊙ f;  dh_prev = [di·σ', df·σ', dg·(1 − g²), do·σ'] W_hᵀ
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell
from rnnlab.common import matrix_transpose, sigmoid


def lstm_step(p, xw, state, xp=np):
    h, c = state                                  # (B, H) each
    H = h.shape[-1]
    a = xw + h @ p["W_h"]                         # (B, 4H)
    if "b_h" in p:
        a = a + p["b_h"]
    s = sigmoid(a, xp)                            # one pass over all gates; the g block is unused
    i, f, o = s[..., :H], s[..., H:2 * H], s[..., 3 * H:]
    g = xp.tanh(a[..., 2 * H:3 * H])
    c_new = f * c + i * g
    tc = xp.tanh(c_new)
    h_new = o * tc
    return (h_new, c_new), {"s": s, "g": g, "tc": tc}


def lstm_step_backward(p, dstate, cache, prev, xp=np):
    dh, dc = dstate                               # (..., B, H) each
    _, c = prev
    s, g, tc = cache["s"], cache["g"], cache["tc"]
    H = g.shape[-1]
    i, f, o = s[..., :H], s[..., H:2 * H], s[..., 3 * H:]
    dc_total = dc + dh * o * (1.0 - tc * tc)
    da = xp.concatenate(
        [
            dc_total * g * i * (1.0 - i),
            dc_total * c * f * (1.0 - f),
            dc_total * i * (1.0 - g * g),
            dh * tc * o * (1.0 - o),
        ],
        axis=-1,
    )                                             # (..., B, 4H)
    return (da @ matrix_transpose(p["W_h"]), dc_total * f), da, da


class LSTM(Cell):
    """LSTM cell; states and h0/dh0 are (h, c) pairs.

    Parameters: ``W_x`` (input_size, 4*hidden), ``W_h`` (hidden, 4*hidden) in gate order i, f, g, o;
    ``b`` (4*hidden,) if bias; ``b_h`` (4*hidden,) if recurrent_bias. The forget block of ``b``
    starts at ``forget_bias`` (None keeps what the initialiser drew).
    """

    gates = 4
    state_size = 2

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float | None = 1.0, **kwargs) -> None:
        super().__init__(input_size, hidden_size, **kwargs)
        self.forget_bias = forget_bias
        if self.bias and forget_bias is not None:
            H = self.hidden_size
            self.params["b"][H:2 * H] = forget_bias

    def step(self, p, xw, state, xp=np):
        return lstm_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return lstm_step_backward(p, dstate, cache, prev, xp)
