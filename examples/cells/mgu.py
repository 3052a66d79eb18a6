"""The minimal gated unit (Zhou, Wu, Zhang & Zhou 2016), written as a user of rnnlab writes a cell.

One gate does the work of the GRU's two: f both forgets and resets.

    f  = σ(x W_xf + b_f + h W_hf)                     the forget gate
    n  = tanh(x W_xn + b_n + (f ⊙ h) W_hn)            the candidate reads the gated state
    h' = (1 − f) ⊙ h + f ⊙ n

The adjoint, with dh the error arriving at h' (derivation in docs/cells.md):

    dn_pre  = dh ⊙ f ⊙ (1 − n²)
    d(f⊙h)  = dn_pre W_hnᵀ
    df_pre  = (dh ⊙ (n − h) + d(f⊙h) ⊙ h) ⊙ f(1 − f)
    dh_prev = dh ⊙ (1 − f) + d(f⊙h) ⊙ f + df_pre W_hfᵀ

Check it, train it, benchmark it, without installing anything:

    rnnlab check-cell examples/cells/mgu.py:MGU
    rnnlab train --task adding --cell examples/cells/mgu.py:MGU --hidden 24
    rnnlab bench-cells rnn gru --cell examples/cells/mgu.py:MGU
"""

from __future__ import annotations

import numpy as np

from rnnlab import Cell
from rnnlab.common import matrix_transpose, sigmoid


def mgu_step(p, xw, state, xp=np):
    """One step. xw (B, 2H) is x W_x + b in block order f, n; returns the new state and what the
    adjoint needs."""
    (h,) = state
    H = h.shape[-1]
    W_h = p["W_h"]                                          # (H, 2H): W_hf, W_hn
    b_h = p.get("b_h", xp.zeros(2 * H))                     # PyTorch's second bias, when asked for
    f = sigmoid(xw[..., :H] + h @ W_h[..., :H] + b_h[:H], xp)
    fh = f * h
    n = xp.tanh(xw[..., H:] + fh @ W_h[..., H:] + b_h[H:])
    return ((1.0 - f) * h + f * n,), {"f": f, "n": n, "fh": fh}


def mgu_step_backward(p, dstate, cache, prev, xp=np):
    """Adjoint of ``mgu_step``: (dstate_prev, dxw, dhw). Leading axes of dh (BPTT's ages) broadcast."""
    (dh,) = dstate
    (h,) = prev
    H = h.shape[-1]
    W_h = p["W_h"]
    f, n = cache["f"], cache["n"]
    dn_pre = dh * f * (1.0 - n * n)
    dfh = dn_pre @ matrix_transpose(W_h[..., H:])
    df_pre = (dh * (n - h) + dfh * h) * f * (1.0 - f)
    dh_prev = dh * (1.0 - f) + dfh * f + df_pre @ matrix_transpose(W_h[..., :H])
    d_pre = xp.concatenate([df_pre, dn_pre], axis=-1)     # the gradient of both pre-activations
    return (dh_prev,), d_pre, d_pre


class MGU(Cell):
    """MGU: ``W_x`` (input_size, 2H), ``W_h`` (H, 2H), ``b`` (2H,) in block order f, n: 2(nm + n² + n)
    parameters, as the base class's shapes for two gates."""

    title = "MGU"
    gates = 2

    def step(self, p, xw, state, xp=np):
        return mgu_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return mgu_step_backward(p, dstate, cache, prev, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        """The gate's block of W_h reads h; the candidate's reads f ⊙ h."""
        H = prev_h.shape[-1]
        grads = {"W_h": xp.concatenate([prev_h.T @ dhw[..., :H], steps["fh"].T @ dhw[..., H:]], axis=1)}
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0)
        return grads
