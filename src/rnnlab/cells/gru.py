"""Gated recurrent unit, in both published forms. Gate order in fused matrices: r, z, n.

    r  = σ(x W_xr + b_r + h W_hr)                 reset gate
    z  = σ(x W_xz + b_z + h W_hz)                 update gate
    "cho"   (Cho et al. 2014; the studies):  n = tanh(x W_xn + b_n + (r ⊙ h) W_hn)
    "cudnn" (PyTorch, cuDNN):                n = tanh(x W_xn + b_n + r ⊙ (h W_hn + b_hn))
    h' = (1 − z) ⊙ n + z ⊙ h

Convention: **z weights the old state** (as PyTorch and Cho 2014 do). Reports that write
h' = (1 − z) ⊙ h + z ⊙ h~ (S1) describe the same model with z ↔ 1 − z.

Backward, with dh the error arriving at h':

    dn = dh ⊙ (1 − z);  dz = dh ⊙ (h − n);  dh_prev = dh ⊙ z + (recurrent paths below)
    dn_pre = dn ⊙ (1 − n²);  dz_pre = dz ⊙ z(1 − z)
    cudnn:  dr = dn_pre ⊙ (h W_hn + b_hn);   the n block of dhw is dn_pre ⊙ r
    cho:    d(r⊙h) = dn_pre W_hnᵀ;  dr = d(r⊙h) ⊙ h;  dh_prev += d(r⊙h) ⊙ r
    dr_pre = dr ⊙ r(1 − r);  dh_prev += dhw W_hᵀ (only the r, z blocks for cho)
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell
from rnnlab.common import matrix_transpose, sigmoid
from rnnlab.init import init_bias

VARIANTS = ("cudnn", "cho")


def gru_step(p, xw, state, variant: str, xp=np):
    (h,) = state                                  # (B, H)
    H = h.shape[-1]
    W_h = p["W_h"]                                # (H, 3H)
    if variant == "cudnn":
        hw = h @ W_h                              # (B, 3H)
        if "b_h" in p:
            hw = hw + p["b_h"]
        hw_n = hw[..., 2 * H:]                    # (B, H)
        if "b_hn" in p:
            hw_n = hw_n + p["b_hn"]
        rz = sigmoid(xw[..., :2 * H] + hw[..., :2 * H], xp)   # both gates in one pass, (B, 2H)
        r, z = rz[..., :H], rz[..., H:]
        n = xp.tanh(xw[..., 2 * H:] + r * hw_n)
        cache = {"rz": rz, "n": n, "hw_n": hw_n}
    else:
        hw = h @ W_h[..., :2 * H]                 # (B, 2H)
        if "b_h" in p:
            hw = hw + p["b_h"][..., :2 * H]
        rz = sigmoid(xw[..., :2 * H] + hw, xp)
        r, z = rz[..., :H], rz[..., H:]
        rh = r * h
        n_pre = xw[..., 2 * H:] + rh @ W_h[..., 2 * H:]
        if "b_h" in p:
            n_pre = n_pre + p["b_h"][..., 2 * H:]
        n = xp.tanh(n_pre)
        cache = {"rz": rz, "n": n, "rh": rh}
    h_new = n + z * (h - n)                       # = (1 − z) ⊙ n + z ⊙ h
    return (h_new,), cache


def gru_step_backward(p, dstate, cache, prev, variant: str, xp=np):
    (dh,) = dstate                                # (..., B, H)
    (h,) = prev
    H = h.shape[-1]
    rz, n = cache["rz"], cache["n"]
    r, z = rz[..., :H], rz[..., H:]
    W_h = p["W_h"]
    dn_pre = dh * (1.0 - z) * (1.0 - n * n)
    dz_pre = dh * (h - n) * z * (1.0 - z)
    dh_prev = dh * z
    if variant == "cudnn":
        dr_pre = dn_pre * cache["hw_n"] * r * (1.0 - r)
        dhw = xp.concatenate([dr_pre, dz_pre, dn_pre * r], axis=-1)
        dh_prev = dh_prev + dhw @ matrix_transpose(W_h)
    else:
        drh = dn_pre @ matrix_transpose(W_h[..., 2 * H:])
        dr_pre = drh * h * r * (1.0 - r)
        dhw = xp.concatenate([dr_pre, dz_pre, dn_pre], axis=-1)
        dh_prev = dh_prev + drh * r + dhw[..., :2 * H] @ matrix_transpose(W_h[..., :2 * H])
    dxw = xp.concatenate([dr_pre, dz_pre, dn_pre], axis=-1)
    return (dh_prev,), dxw, dhw


class GRU(Cell):
    """GRU cell; see the module docstring for the equations of ``variant="cudnn"|"cho"``.

    Parameters: ``W_x`` (input_size, 3*hidden), ``W_h`` (hidden, 3*hidden) in gate order r, z, n;
    ``b`` (3*hidden,) if bias; for ``"cudnn"`` also ``b_hn`` (hidden,), the bias inside r ⊙ (...)
    that cannot be folded into ``b``; with ``recurrent_bias=True`` a full ``b_h`` (3*hidden,)
    replaces ``b_hn`` (PyTorch's ``bias_hh``).
    """

    gates = 3

    def __init__(self, input_size: int, hidden_size: int, variant: str = "cudnn", **kwargs) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"variant: unknown GRU variant {variant!r}; expected one of {VARIANTS}")
        self.variant = variant
        super().__init__(input_size, hidden_size, **kwargs)

    def extra_params(self, rng):
        if self.variant == "cudnn" and self.bias and not self.recurrent_bias:
            return {"b_hn": init_bias(rng, self.hidden_size, self.hidden_size, self.init, self.dtype)}
        return {}

    def step(self, p, xw, state, xp=np):
        return gru_step(p, xw, state, self.variant, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return gru_step_backward(p, dstate, cache, prev, self.variant, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        H = prev_h.shape[-1]
        if self.variant == "cudnn":
            grads = {"W_h": prev_h.T @ dhw}
        else:  # the candidate's recurrent input is r ⊙ h, not h
            grads = {"W_h": xp.concatenate([prev_h.T @ dhw[..., :2 * H], steps["rh"].T @ dhw[..., 2 * H:]], axis=1)}
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0)
        if "b_hn" in p:
            grads["b_hn"] = dhw[..., 2 * H:].sum(axis=0)
        return grads
