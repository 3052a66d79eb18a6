"""Antisymmetric RNNs (Chang, Chen, Haber & Chi 2019): stability by construction instead of gates.
The recurrent matrix M = W_h − W_hᵀ − γI has eigenvalues −γ + iω, so the forward Euler step of
the ODE dh/dt = tanh(h M + x V + b) neither explodes nor vanishes for small ε.

    plain:  h' = h + ε tanh(h M + x W_x + b)
    gated:  z  = σ(h M + x W_xz + b_z);  h' = h + ε z ⊙ tanh(h M + x W_xu + b_u)

(row vectors as everywhere in rnnlab: h M). Backward, with dh the error arriving at h':

    plain:  da = ε dh ⊙ (1 − u²);                       dh_prev = dh + da Mᵀ
    gated:  dz_pre = ε dh ⊙ u ⊙ z(1 − z);  du_pre = ε dh ⊙ z ⊙ (1 − u²);  dh_prev = dh + (dz_pre + du_pre) Mᵀ
    dM = Σ h_prevᵀ (dz_pre + du_pre);  dW_h = dM − dMᵀ
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell, Option
from rnnlab.cells.registry import register_cell
from rnnlab.common import matrix_transpose, sigmoid


def antisymmetric_matrix(W_h, gamma: float, xp=np):
    """M = W_h − W_hᵀ − γI."""
    return W_h - matrix_transpose(W_h) - gamma * xp.eye(W_h.shape[-1], dtype=W_h.dtype)


def antisymmetric_step(p, xw, state, eps: float, gamma: float, gated: bool, xp=np):
    (h,) = state
    H = h.shape[-1]
    hm = h @ antisymmetric_matrix(p["W_h"], gamma, xp)
    if not gated:
        u = xp.tanh(hm + xw)
        return (h + eps * u,), {"u": u}
    z = sigmoid(hm + xw[..., :H], xp)
    u = xp.tanh(hm + xw[..., H:])
    return (h + eps * z * u,), {"z": z, "u": u}


def antisymmetric_step_backward(p, dstate, cache, prev, eps: float, gamma: float, gated: bool, xp=np):
    (dh,) = dstate
    u = cache["u"]
    if gated:
        z = cache["z"]
        dz_pre, du_pre = eps * dh * u * z * (1.0 - z), eps * dh * z * (1.0 - u * u)
        dxw, dhw = xp.concatenate([dz_pre, du_pre], axis=-1), dz_pre + du_pre
    else:
        dxw = dhw = eps * dh * (1.0 - u * u)
    M_T = matrix_transpose(antisymmetric_matrix(p["W_h"], gamma, xp))
    return (dh + dhw @ M_T,), dxw, dhw


@register_cell("antisymmetric")
class AntisymmetricRNN(Cell):
    """AntisymmetricRNN: ``W_x`` (input_size, hidden), ``W_h`` (hidden, hidden) (only W_h − W_hᵀ
    acts), ``b``. ``euler_step`` (ε) and ``diffusion`` (γ) as in the paper, which tunes both over
    {1, 0.1, 0.01, 0.001}; the defaults are ours."""

    title = "antisymmetric"
    gated = False
    options = (
        Option("euler_step", 0.1, float, "antisymmetric RNN: the Euler step size ε"),
        Option("diffusion", 0.01, float, "antisymmetric RNN: the diffusion γ that keeps M = W − Wᵀ − γI stable"),
    )

    @property
    def gates(self) -> int:
        return 2 if self.gated else 1

    def param_shapes(self):
        shapes = super().param_shapes()
        H = self.hidden_size
        shapes["W_h"] = (H, H)
        if "b_h" in shapes:
            shapes["b_h"] = (H,)
        return shapes

    def step(self, p, xw, state, xp=np):
        if "b_h" in p:
            xw = xw + (xp.concatenate([p["b_h"], p["b_h"]]) if self.gated else p["b_h"])
        return antisymmetric_step(p, xw, state, self.euler_step, self.diffusion, self.gated, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return antisymmetric_step_backward(p, dstate, cache, prev, self.euler_step, self.diffusion, self.gated, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        dM = prev_h.T @ dhw
        grads = {"W_h": dM - dM.T}
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0)
        return grads


@register_cell("gated-antisymmetric")
class GatedAntisymmetricRNN(AntisymmetricRNN):
    """The gated AntisymmetricRNN: ``W_x`` (input_size, 2*hidden) in block order z, u; the gate and
    the update share M."""

    title = "gated antisymmetric"
    gated = True
