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

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages
from rnnlab.cells.base import Cell, Option
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import kernel, kernel_sigmoid, kernel_tanh, one_of
from rnnlab.cells.registry import register_cell
from rnnlab.common import matrix_transpose, sigmoid

VARIANTS = ("cudnn", "cho")
GATE_INPUTS = ("xh", "h", "x", "bias")


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


def gru_ladder_step(p, xw, state, variant: str, gate_inputs: str, xp=np):
    """The GRU whose gates read only h, only x, or only their bias (``GRU.gate_inputs``); the
    candidate and the update are the GRU's. xw holds the candidate's block, after the gates' blocks
    when the gates read x."""
    (h,) = state
    H = h.shape[-1]
    W_h, b_h = p["W_h"], p.get("b_h")
    if gate_inputs == "h":
        rz_pre = h @ W_h[..., :2 * H] + (0.0 if b_h is None else b_h[..., :2 * H])
        W_hn, b_hn_rec, xw_n = W_h[..., 2 * H:], (None if b_h is None else b_h[..., 2 * H:]), xw
    elif gate_inputs == "x":
        rz_pre, W_hn, b_hn_rec, xw_n = xw[..., :2 * H], W_h, b_h, xw[..., 2 * H:]
    else:                                           # "bias": the gates see neither x nor h
        rz_pre, W_hn, b_hn_rec, xw_n = 0.0 * xp.concatenate([h, h], axis=-1), W_h, b_h, xw
    if "b_g" in p:
        rz_pre = rz_pre + p["b_g"]
    rz = sigmoid(rz_pre, xp)
    r, z = rz[..., :H], rz[..., H:]
    if variant == "cudnn":
        hw_n = h @ W_hn
        for extra in (b_hn_rec, p.get("b_hn")):
            if extra is not None:
                hw_n = hw_n + extra
        n = xp.tanh(xw_n + r * hw_n)
        cache = {"rz": rz, "n": n, "hw_n": hw_n}
    else:
        rh = r * h
        n = xp.tanh(xw_n + rh @ W_hn + (0.0 if b_hn_rec is None else b_hn_rec))
        cache = {"rz": rz, "n": n, "rh": rh}
    return (n + z * (h - n),), cache


def gru_ladder_step_backward(p, dstate, cache, prev, variant: str, gate_inputs: str, xp=np):
    """Adjoint of ``gru_ladder_step``. dxw covers the blocks of xw; dhw is [dr_pre, dz_pre, the
    candidate's recurrent gradient] when the gates do not read x (their bias and, for "h", W_h's
    gate blocks take it), else the candidate's block alone."""
    (dh,) = dstate
    (h,) = prev
    H = h.shape[-1]
    rz, n = cache["rz"], cache["n"]
    r, z = rz[..., :H], rz[..., H:]
    W_hn = p["W_h"][..., 2 * H:] if gate_inputs == "h" else p["W_h"]
    dn_pre = dh * (1.0 - z) * (1.0 - n * n)
    dz_pre = dh * (h - n) * z * (1.0 - z)
    dh_prev = dh * z
    if variant == "cudnn":
        dr_pre = dn_pre * cache["hw_n"] * r * (1.0 - r)
        dhw_n = dn_pre * r
        dh_prev = dh_prev + dhw_n @ matrix_transpose(W_hn)
    else:
        drh = dn_pre @ matrix_transpose(W_hn)
        dr_pre = drh * h * r * (1.0 - r)
        dhw_n = dn_pre
        dh_prev = dh_prev + drh * r
    if gate_inputs == "h":
        dh_prev = dh_prev + xp.concatenate([dr_pre, dz_pre], axis=-1) @ matrix_transpose(p["W_h"][..., :2 * H])
    if gate_inputs == "x":
        return (dh_prev,), xp.concatenate([dr_pre, dz_pre, dn_pre], axis=-1), dhw_n
    return (dh_prev,), dn_pre, xp.concatenate([dr_pre, dz_pre, dhw_n], axis=-1)


@register_cell("gru")
class GRU(Cell):
    """GRU cell; see the module docstring for the equations of ``variant="cudnn"|"cho"``.

    Parameters: ``W_x`` (input_size, 3*hidden), ``W_h`` (hidden, 3*hidden) in gate order r, z, n;
    ``b`` (3*hidden,) if bias; for ``"cudnn"`` also ``b_hn`` (hidden,), the bias inside r ⊙ (...)
    that cannot be folded into ``b``; with ``recurrent_bias=True`` a full ``b_h`` (3*hidden,)
    replaces ``b_hn`` (PyTorch's ``bias_hh``).

    ``gate_inputs``: what the gates r and z read (Dey & Salem 2017's ladder; the candidate n is
    always the GRU's): ``"xh"`` x and h (the GRU); ``"h"`` h only (GRU1): W_x and b keep only the
    candidate's block and the gates' bias is ``b_g`` (2*hidden,); ``"x"`` x only: W_h keeps only
    the candidate's block (hidden, hidden); ``"bias"`` neither (GRU3, a leaky integrator with
    learned rates): r, z = σ(b_g). Only ``"xh"`` has fused Numba kernels.
    """

    title = "GRU"
    gates = 3
    options = (
        Option("variant", "cudnn", str, "GRU variant: cudnn (PyTorch) or cho (reset before the matmul)", VARIANTS),
        Option("gate_inputs", "xh", str, "GRU: what the reset and update gates read: x and h (the GRU), h only "
               "(GRU1), x only, or their bias only (GRU3)", GATE_INPUTS),
    )

    def param_shapes(self):
        I, H = self.input_size, self.hidden_size
        x_blocks = 3 if self.gate_inputs in ("xh", "x") else 1      # the gates' blocks of W_x and b
        h_blocks = 3 if self.gate_inputs in ("xh", "h") else 1      # the gates' blocks of W_h
        shapes = {"W_x": (I, x_blocks * H), "W_h": (H, h_blocks * H)}
        if self.bias:
            shapes["b"] = (x_blocks * H,)
            if self.recurrent_bias:
                shapes["b_h"] = (h_blocks * H,)
            if self.variant == "cudnn" and not self.recurrent_bias:
                shapes["b_hn"] = (H,)
            if x_blocks == 1:
                shapes["b_g"] = (2 * H,)
        return shapes

    def has_kernels(self) -> bool:
        return self.gate_inputs == "xh"

    def step(self, p, xw, state, xp=np):
        if self.gate_inputs != "xh":
            return gru_ladder_step(p, xw, state, self.variant, self.gate_inputs, xp)
        return gru_step(p, xw, state, self.variant, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        if self.gate_inputs != "xh":
            return gru_ladder_step_backward(p, dstate, cache, prev, self.variant, self.gate_inputs, xp)
        return gru_step_backward(p, dstate, cache, prev, self.variant, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, n_steps, aux = (np.empty((T, B, H), dt) for _ in range(3))
        rz = np.empty((T, B, 2 * H), dt)
        W_h = p["W_h"]
        b_h = p["b_h"] if "b_h" in p else np.zeros(3 * H, dt)
        b_hn = p["b_hn"] if "b_hn" in p else np.zeros(H, dt)
        cho = self.variant == "cho"
        unused = np.empty((0, 0), dt)   # cudnn reads W_h whole, cho in its two blocks: no copies of the others
        W_h, W_hrz, W_hn = (unused, np.ascontiguousarray(W_h[:, :2 * H]), np.ascontiguousarray(W_h[:, 2 * H:])) \
            if cho else (np.ascontiguousarray(W_h), unused, unused)
        gru_forward_loop(xw, W_h, W_hrz, W_hn, b_h, b_hn, state0[0], mask, cho, hs, rz, n_steps, aux)
        return (hs,), {"rz": rz, "n": n_steps, ("rh" if cho else "hw_n"): aux}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; fills dxw and dhw (they differ in the candidate's block)."""
        H = self.hidden_size
        W_h = p["W_h"]
        cho = self.variant == "cho"
        unused = np.empty((0, 0), self.dtype)
        W_hT, W_hrzT, W_hnT = (unused, np.ascontiguousarray(W_h[:, :2 * H].T), np.ascontiguousarray(W_h[:, 2 * H:].T)) \
            if cho else (np.ascontiguousarray(W_h.T), unused, unused)
        dh0 = gru_backward_loop(dhs, W_hT, W_hrzT, W_hnT, np.ascontiguousarray(prev[0]),
                                cache.steps["rz"], cache.steps["n"], cache.steps["rh" if cho else "hw_n"], mask, cho,
                                back_steps, dxw, dhw, dh_out)
        return dxw, dhw, (dh0,)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        H = prev_h.shape[-1]
        if self.gate_inputs != "xh":
            return self._ladder_recurrent_grads(p, prev_h, steps, dhw, xp)
        if self.variant == "cudnn":
            grads = {"W_h": prev_h.T @ dhw}
        else:  # the candidate's recurrent input is r ⊙ h, not h
            grads = {"W_h": xp.concatenate([prev_h.T @ dhw[..., :2 * H], steps["rh"].T @ dhw[..., 2 * H:]], axis=1)}
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0)
        if "b_hn" in p:
            grads["b_hn"] = dhw[..., 2 * H:].sum(axis=0)
        return grads

    def _ladder_recurrent_grads(self, p, prev_h, steps, dhw, xp):
        H = prev_h.shape[-1]
        dhw_n = dhw[..., -H:]                        # the candidate's recurrent pre-activation gradient
        reads = prev_h if self.variant == "cudnn" else steps["rh"]
        grads = {"W_h": reads.T @ dhw_n}
        if self.gate_inputs == "h":
            grads["W_h"] = xp.concatenate([prev_h.T @ dhw[..., :2 * H], grads["W_h"]], axis=1)
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0) if self.gate_inputs == "h" else dhw_n.sum(axis=0)
        if "b_hn" in p:
            grads["b_hn"] = dhw_n.sum(axis=0)
        if "b_g" in p:
            grads["b_g"] = dhw[..., :2 * H].sum(axis=0)
        return grads


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) -------------------------------
# gru_step / gru_step_backward over all T steps in one compiled loop: the recurrent matmuls in BLAS,
# the gates as short loops. ``cho``: the candidate reads (r ⊙ h) W_hn; else r ⊙ (h W_hn + b_hn).
# W_hrz = W_h[:, :2H] and W_hn = W_h[:, 2H:] come in as contiguous copies (and their transposes) for
# cho, which reads only them; cudnn reads only W_h (the others are then empty).

@kernel
def gru_forward_loop(xw, W_h, W_hrz, W_hn, b_h, b_hn, h0, mask, cho, hs, rz_steps, n_steps, aux_steps):
    """r, z = σ(xw_rz + h W_hrz);  n = tanh(xw_n + r ⊙ (h W_hn + b_hn)) [cudnn] or
    tanh(xw_n + (r ⊙ h) W_hn) [cho];  h' = n + z ⊙ (h − n). aux: hw_n (cudnn) or r ⊙ h (cho)."""
    T, B, H = hs.shape
    h = h0.copy()
    hw = np.empty((B, 2 * H if cho else 3 * H), hs.dtype)
    n_pre = np.empty((B, H), hs.dtype)
    for t in range(T):
        kernel_matmul(h, W_hrz if cho else W_h, hw)
        # passes over all rows, the sigmoid and tanh over whole (B, 2H) and (B, H) blocks, the cache
        # indexed directly (no row views): row by row, short loops ran mostly as scalar remainders
        # (at hidden 10: 41 → 18 µs, the same bits)
        for i in range(B):
            for j in range(2 * H):
                rz_steps[t, i, j] = xw[t, i, j] + hw[i, j] + b_h[j]
        rz_flat = rz_steps[t].reshape(-1)
        for k in range(rz_flat.size):
            rz_flat[k] = kernel_sigmoid(rz_flat[k])
        if cho:
            for i in range(B):
                for j in range(H):
                    aux_steps[t, i, j] = rz_steps[t, i, j] * h[i, j]
            kernel_matmul(aux_steps[t], W_hn, n_pre)
            for i in range(B):
                for j in range(H):
                    n_pre[i, j] = xw[t, i, 2 * H + j] + n_pre[i, j] + b_h[2 * H + j]
        else:
            for i in range(B):
                for j in range(H):
                    aux_steps[t, i, j] = hw[i, 2 * H + j] + b_h[2 * H + j] + b_hn[j]
                for j in range(H):
                    n_pre[i, j] = xw[t, i, 2 * H + j] + rz_steps[t, i, j] * aux_steps[t, i, j]
        n_flat, pre_flat = n_steps[t].reshape(-1), n_pre.reshape(-1)
        for k in range(n_flat.size):
            n_flat[k] = kernel_tanh(pre_flat[k])
        for i in range(B):
            if mask[t, i] > 0.0:
                for j in range(H):
                    h[i, j] = n_steps[t, i, j] + rz_steps[t, i, H + j] * (h[i, j] - n_steps[t, i, j])
        hs[t] = h


@kernel
def gru_backward_loop(dhs, W_hT, W_hrzT, W_hnT, prev_h, rz_steps, n_steps, aux_steps, mask, cho, back_steps,
                      dxw, dhw, dh_out):
    """dn_pre = dh ⊙ (1 − z)(1 − n²);  dz_pre = dh ⊙ (h − n) z(1 − z);  dh_prev = dh ⊙ z + ...:
    cudnn: dr_pre = dn_pre ⊙ hw_n ⊙ r(1 − r); dh_prev += [dr, dz, dn ⊙ r] W_hᵀ.
    cho:   d(r⊙h) = dn_pre W_hnᵀ; dr_pre = d(r⊙h) ⊙ h ⊙ r(1 − r); dh_prev += d(r⊙h) ⊙ r + [dr, dz] W_hrzᵀ.
    For every age at once; masked steps pass their delta through. Returns dh0."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    dpre = np.empty((A * B, 3 * H), dhs.dtype)     # [dr_pre, dz_pre, dn_pre] of each age (the dxw blocks)
    dhw_ages = np.empty((A * B, 3 * H), dhs.dtype)
    drh = np.zeros((A * B, H), dhs.dtype)
    dprev = np.empty((A * B, H), dhs.dtype)
    one = one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                m = mask[t, i]
                r, z, n, h = rz_steps[t, i, :H], rz_steps[t, i, H:], n_steps[t, i], prev_h[t, i]
                d, dp = carry[s, i], dpre[s * B + i]
                for j in range(H):
                    dp[2 * H + j] = m * d[j] * (one - z[j]) * (one - n[j] * n[j])
                for j in range(H):
                    dp[H + j] = m * d[j] * (h[j] - n[j]) * z[j] * (one - z[j])
                if not cho:
                    aux = aux_steps[t, i]
                    for j in range(H):
                        dp[j] = dp[2 * H + j] * aux[j] * r[j] * (one - r[j])
        if cho:
            kernel_matmul(np.ascontiguousarray(dpre[:, 2 * H:]), W_hnT, drh)
            for s in range(A):
                for i in range(B):
                    r, h, dp, dr = rz_steps[t, i, :H], prev_h[t, i], dpre[s * B + i], drh[s * B + i]
                    for j in range(H):
                        dp[j] = dr[j] * h[j] * r[j] * (one - r[j])
            kernel_matmul(np.ascontiguousarray(dpre[:, :2 * H]), W_hrzT, dprev)
            dhw_ages[:] = dpre
        else:
            dhw_ages[:] = dpre
            for s in range(A):
                for i in range(B):
                    r, dh_n = rz_steps[t, i, :H], dhw_ages[s * B + i, 2 * H:]
                    for j in range(H):
                        dh_n[j] *= r[j]                 # the n block of dhw is dn_pre ⊙ r
            kernel_matmul(dhw_ages, W_hT, dprev)
        sum_ages(dpre, B, dxw[t])
        sum_ages(dhw_ages, B, dhw[t])
        for s in range(A):
            for i in range(B):
                m = mask[t, i]
                z, d, out = rz_steps[t, i, H:], carry[s, i], dprev[s * B + i]
                for j in range(H):
                    out[j] += m * d[j] * z[j] + (one - m) * d[j]
                if cho:
                    r, dr = rz_steps[t, i, :H], drh[s * B + i]
                    for j in range(H):
                        out[j] += dr[j] * r[j]
        step_back(carry, dprev.reshape(A, B, H), back_steps)
    return initial_state_delta(carry, back_steps)
