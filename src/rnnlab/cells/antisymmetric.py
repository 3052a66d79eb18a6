"""Antisymmetric RNNs (Chang, Chen, Haber & Chi 2019): stability by construction instead of gates.
The recurrent matrix M = W_h − W_hᵀ − γI has eigenvalues −γ + iω, so the forward Euler step of
the ODE dh/dt = tanh(h M + x V + b) neither explodes nor vanishes for small ε.

    plain:  h' = h + ε tanh(h M + x W_x + b)
    gated:  z  = σ(h M + x W_xz + b_z);  h' = h + ε z ⊙ tanh(h M + x W_xu + b_u)

(row vectors as everywhere in rnnlab: h M). Backward, with dh the error arriving at h':

    plain:  da = ε dh ⊙ (1 − u²);                       dh_prev = dh + da Mᵀ
    gated:  dz_pre = ε dh ⊙ u ⊙ z(1 − z);  du_pre = ε dh ⊙ z ⊙ (1 − u²);  dh_prev = dh + (dz_pre + du_pre) Mᵀ
    dM = Σ h_prevᵀ (dz_pre + du_pre);  dW_h = dM − dMᵀ

The Numba engine runs the fused loops below, one pair per form, with M built once per call.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import backward_buffers, initial_state_delta, inject, step_back, sum_ages
from rnnlab.cells.base import Cell, Option
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import kernel, kernel_sigmoid, kernel_tanh, one_of
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

    def _with_recurrent_bias(self, p, xw, xp=np):
        """xw + b_h, the recurrent bias added to each block (both share M, so both read it)."""
        if "b_h" not in p:
            return xw
        return xw + (xp.concatenate([p["b_h"], p["b_h"]]) if self.gated else p["b_h"])

    def step(self, p, xw, state, xp=np):
        xw = self._with_recurrent_bias(p, xw, xp)
        return antisymmetric_step(p, xw, state, self.euler_step, self.diffusion, self.gated, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return antisymmetric_step_backward(p, dstate, cache, prev, self.euler_step, self.diffusion, self.gated, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        xw = self._with_recurrent_bias(p, xw)
        M = np.ascontiguousarray(antisymmetric_matrix(p["W_h"], self.diffusion))
        eps = np.dtype(dt).type(self.euler_step)
        hs, u_steps = np.empty((T, B, H), dt), np.empty((T, B, H), dt)
        if not self.gated:
            antisymmetric_forward_loop(xw, M, eps, state0[0], mask, hs, u_steps)
            return (hs,), {"u": u_steps}
        z_steps = np.empty((T, B, H), dt)
        gated_antisymmetric_forward_loop(xw, M, eps, state0[0], mask, hs, z_steps, u_steps)
        return (hs,), {"z": z_steps, "u": u_steps}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop of this form; the gated form's dhw (T, B, H) is its own (dxw has both
        blocks)."""
        M_T = np.ascontiguousarray(antisymmetric_matrix(p["W_h"], self.diffusion).T)
        eps, steps = np.dtype(self.dtype).type(self.euler_step), cache.steps
        if not self.gated:
            dh0 = antisymmetric_backward_loop(dhs, M_T, eps, steps["u"], mask, back_steps, dxw, dh_out)
            return dxw, dxw, (dh0,)
        dhw = np.empty(dhs.shape, self.dtype)
        dh0 = gated_antisymmetric_backward_loop(dhs, M_T, eps, steps["z"], steps["u"], mask, back_steps, dxw, dhw,
                                                dh_out)
        return dxw, dhw, (dh0,)

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


# -- the fused time loops of the Numba engine (rnnlab.engines.numba): the state always carries its whole delta back
# (h' = h + ε …), so a padded step needs no branch: its deltas are zero -----------------------------------------

@kernel
def antisymmetric_forward_loop(xw, M, eps, h0, mask, hs, u_steps):
    """u = tanh(h M + xw);  h' = h + ε u, a padded step keeping h."""
    T, B, H = hs.shape
    h, hm = h0.copy(), np.empty((B, H), hs.dtype)
    for t in range(T):
        kernel_matmul(h, M, hm)
        for i in range(B):
            step = eps * mask[t, i]
            for j in range(H):
                u = kernel_tanh(hm[i, j] + xw[t, i, j])
                u_steps[t, i, j] = u
                h[i, j] += step * u
        hs[t] = h


@kernel
def gated_antisymmetric_forward_loop(xw, M, eps, h0, mask, hs, z_steps, u_steps):
    """z = σ(h M + xw_z);  u = tanh(h M + xw_u);  h' = h + ε z ⊙ u, a padded step keeping h."""
    T, B, H = hs.shape
    h, hm = h0.copy(), np.empty((B, H), hs.dtype)
    for t in range(T):
        kernel_matmul(h, M, hm)
        for i in range(B):
            for j in range(H):
                z_steps[t, i, j] = kernel_sigmoid(hm[i, j] + xw[t, i, j])
            for j in range(H):
                u_steps[t, i, j] = kernel_tanh(hm[i, j] + xw[t, i, H + j])
            if mask[t, i] > 0.0:
                for j in range(H):
                    h[i, j] += eps * z_steps[t, i, j] * u_steps[t, i, j]
        hs[t] = h


@kernel
def antisymmetric_backward_loop(dhs, M_T, eps, u_steps, mask, back_steps, da_sum, dh_out):
    """da = ε dh ⊙ (1 − u²);  dh_prev = dh + da Mᵀ, for every age at once. Returns dh0; da_sum receives da."""
    T, B, H = dhs.shape
    carry, da, dprev = backward_buffers(dhs, back_steps, H)
    A, one = carry.shape[0], one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                scale, u, d, out = eps * mask[t, i], u_steps[t, i], carry[s, i], da[s * B + i]
                for j in range(H):
                    out[j] = scale * d[j] * (one - u[j] * u[j])
        sum_ages(da, B, da_sum[t])
        kernel_matmul(da, M_T, dprev)
        dprev += carry.reshape(A * B, H)
        step_back(carry, dprev.reshape(A, B, H), back_steps)
    return initial_state_delta(carry, back_steps)


@kernel
def gated_antisymmetric_backward_loop(dhs, M_T, eps, z_steps, u_steps, mask, back_steps, dxw, dhw, dh_out):
    """dz_pre = ε dh ⊙ u ⊙ z(1 − z);  du_pre = ε dh ⊙ z ⊙ (1 − u²);  dh_prev = dh + (dz_pre + du_pre) Mᵀ, for every
    age at once. Returns dh0; dxw receives [dz_pre, du_pre], dhw their sum."""
    T, B, H = dhs.shape
    carry, dpre, dprev = backward_buffers(dhs, back_steps, 2 * H)
    A, one = carry.shape[0], one_of(dhs)
    dsum = np.empty((A * B, H), dhs.dtype)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                scale, z, u, d = eps * mask[t, i], z_steps[t, i], u_steps[t, i], carry[s, i]
                out, total = dpre[s * B + i], dsum[s * B + i]
                for j in range(H):
                    out[j] = scale * d[j] * u[j] * z[j] * (one - z[j])
                for j in range(H):
                    out[H + j] = scale * d[j] * z[j] * (one - u[j] * u[j])
                for j in range(H):
                    total[j] = out[j] + out[H + j]
        sum_ages(dpre, B, dxw[t])
        sum_ages(dsum, B, dhw[t])
        kernel_matmul(dsum, M_T, dprev)
        dprev += carry.reshape(A * B, H)
        step_back(carry, dprev.reshape(A, B, H), back_steps)
    return initial_state_delta(carry, back_steps)
