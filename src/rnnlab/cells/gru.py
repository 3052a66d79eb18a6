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

Each equation set has its own step and adjoint, side by side, with no flag inside the math: ``gru_cudnn_step``
and ``gru_cho_step`` (and their fused Numba loops), and Dey & Salem's ladder (gates reading h only, x only,
or their bias only) composed from one gates part and one candidate part. ``GRU.equations`` maps the cell's
options to its set once, when first used; ``check-cell`` checks each set's adjoint against its own forward. The
ladder runs on the GRU's fused loops, as the GRU with the blocks its gates do not read fixed (``gru_input``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, partial
from typing import NamedTuple

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages, through_the_gate
from rnnlab.cells.base import Cell, Option
from rnnlab.cells.kernel_blas import kernel_matmul, projection_matmul
from rnnlab.cells.kernel_math import kernel, kernel_sigmoid, kernel_tanh, one_of
from rnnlab.cells.registry import register_cell
from rnnlab.common import matrix_transpose, sigmoid

VARIANTS = ("cudnn", "cho")
GATE_INPUTS = ("xh", "h", "h-nobias", "x", "bias")


# -- the GRU (gates read x and h): one step and its adjoint per form of the candidate ------------------

def _gates(xw, hw, xp):
    """r, z = σ(x W_xr + b_r + h W_hr), σ(x W_xz + b_z + h W_hz), both in one pass, (B, 2H)."""
    return sigmoid(xw + hw, xp)


def gru_cudnn_step(p, xw, state, xp=np):
    """n = tanh(x W_xn + b_n + r ⊙ (h W_hn + b_hn));  h' = (1 − z) ⊙ n + z ⊙ h. One product h W_h for all three
    blocks; the cache keeps hw_n = h W_hn + b_hn, which dr needs."""
    (h,) = state                                  # (B, H)
    H = h.shape[-1]
    hw = h @ p["W_h"]                             # (B, 3H)
    if "b_h" in p:
        hw = hw + p["b_h"]
    hw_n = hw[..., 2 * H:] + p["b_hn"] if "b_hn" in p else hw[..., 2 * H:]
    rz = _gates(xw[..., :2 * H], hw[..., :2 * H], xp)
    r, z = rz[..., :H], rz[..., H:]
    n = xp.tanh(xw[..., 2 * H:] + r * hw_n)
    return (n + z * (h - n),), {"rz": rz, "n": n, "hw_n": hw_n}


def gru_cudnn_step_backward(p, dstate, cache, prev, xp=np):
    """dn_pre = dh ⊙ (1 − z)(1 − n²);  dz_pre = dh ⊙ (h − n) z(1 − z);  dr_pre = dn_pre ⊙ hw_n ⊙ r(1 − r);
    the n block of dhw is dn_pre ⊙ r;  dh_prev = dh ⊙ z + dhw W_hᵀ."""
    (dh,) = dstate                                # (..., B, H)
    (h,) = prev
    H = h.shape[-1]
    rz, n = cache["rz"], cache["n"]
    r, z = rz[..., :H], rz[..., H:]
    dn_pre = dh * (1.0 - z) * (1.0 - n * n)
    dz_pre = dh * (h - n) * z * (1.0 - z)
    dr_pre = dn_pre * cache["hw_n"] * r * (1.0 - r)
    dhw = xp.concatenate([dr_pre, dz_pre, dn_pre * r], axis=-1)
    dh_prev = dh * z + dhw @ matrix_transpose(p["W_h"])
    return (dh_prev,), xp.concatenate([dr_pre, dz_pre, dn_pre], axis=-1), dhw


def gru_cho_step(p, xw, state, xp=np):
    """n = tanh(x W_xn + b_n + (r ⊙ h) W_hn);  h' = (1 − z) ⊙ n + z ⊙ h. The candidate's product waits for r;
    the cache keeps r ⊙ h, which W_hn's gradient reads."""
    (h,) = state
    H = h.shape[-1]
    W_h = p["W_h"]
    hw = h @ W_h[..., :2 * H]                     # (B, 2H)
    if "b_h" in p:
        hw = hw + p["b_h"][..., :2 * H]
    rz = _gates(xw[..., :2 * H], hw, xp)
    r, z = rz[..., :H], rz[..., H:]
    rh = r * h
    n_pre = xw[..., 2 * H:] + rh @ W_h[..., 2 * H:]
    if "b_h" in p:
        n_pre = n_pre + p["b_h"][..., 2 * H:]
    n = xp.tanh(n_pre)
    return (n + z * (h - n),), {"rz": rz, "n": n, "rh": rh}


def gru_cho_step_backward(p, dstate, cache, prev, xp=np):
    """d(r⊙h) = dn_pre W_hnᵀ;  dr_pre = d(r⊙h) ⊙ h ⊙ r(1 − r);
    dh_prev = dh ⊙ z + d(r⊙h) ⊙ r + [dr_pre, dz_pre] W_hrzᵀ."""
    (dh,) = dstate
    (h,) = prev
    H = h.shape[-1]
    rz, n = cache["rz"], cache["n"]
    r, z = rz[..., :H], rz[..., H:]
    W_h = p["W_h"]
    dn_pre = dh * (1.0 - z) * (1.0 - n * n)
    dz_pre = dh * (h - n) * z * (1.0 - z)
    drh = dn_pre @ matrix_transpose(W_h[..., 2 * H:])
    dr_pre = drh * h * r * (1.0 - r)
    dhw = xp.concatenate([dr_pre, dz_pre, dn_pre], axis=-1)
    dh_prev = dh * z + drh * r + dhw[..., :2 * H] @ matrix_transpose(W_h[..., :2 * H])
    return (dh_prev,), xp.concatenate([dr_pre, dz_pre, dn_pre], axis=-1), dhw


def gru_cudnn_recurrent_grads(p, prev_h, steps, dhw, xp=np):
    """W_h's gradient hᵀ dhw over all T·B rows (dhw's n block already carries r), and the recurrent biases'."""
    grads = {"W_h": projection_matmul(prev_h.T, dhw)}
    if "b_h" in p:
        grads["b_h"] = dhw.sum(axis=0)
    if "b_hn" in p:
        grads["b_hn"] = dhw[..., 2 * prev_h.shape[-1]:].sum(axis=0)
    return grads


def gru_cho_recurrent_grads(p, prev_h, steps, dhw, xp=np):
    """The candidate's recurrent input is r ⊙ h, not h: W_hn's gradient reads it from the cache."""
    H = prev_h.shape[-1]
    grads = {"W_h": xp.concatenate([prev_h.T @ dhw[..., :2 * H], steps["rh"].T @ dhw[..., 2 * H:]], axis=1)}
    if "b_h" in p:
        grads["b_h"] = dhw.sum(axis=0)
    return grads


# -- Dey & Salem's ladder: what the gates read, composed with the candidate's form -------------------
# A ladder cell is one gate reading (h only, x only, the bias only) and one candidate (cudnn, cho); each
# part is a pure pair of functions, chosen once when the cell is built (GRU.equations).

def _gates_read_h(p, xw, h, xp):
    """GRU1 and GRU2: r, z = σ(h W_hrz (+ b_g)); xw is the candidate's block alone; W_h = [W_hrz, W_hn]. A recurrent
    bias b_h reaches the gates only where it has their blocks (GRU1's 3H; GRU2's is the candidate's alone)."""
    H = h.shape[-1]
    b_h = p.get("b_h")
    gates_bias = b_h is not None and b_h.shape[-1] == 3 * H
    rz_pre = h @ p["W_h"][..., :2 * H] + (b_h[..., :2 * H] if gates_bias else 0.0)
    return rz_pre, p["W_h"][..., 2 * H:], b_h[..., 2 * H:] if gates_bias else b_h, xw


def _gates_read_h_backward(p, d_rz, dn_pre, dhw_n, dh_prev, h, xp):
    """The gates' path into h, and (dxw, dhw): the candidate's block in x; [dr, dz, candidate's] in h."""
    H = h.shape[-1]
    dh_prev = dh_prev + d_rz @ matrix_transpose(p["W_h"][..., :2 * H])
    return dh_prev, dn_pre, xp.concatenate([d_rz, dhw_n], axis=-1)


def _gates_read_x(p, xw, h, xp):
    """r, z = σ(x W_xrz + b_rz); W_h is the candidate's alone."""
    H = h.shape[-1]
    return xw[..., :2 * H], p["W_h"], p.get("b_h"), xw[..., 2 * H:]


def _gates_read_x_backward(p, d_rz, dn_pre, dhw_n, dh_prev, h, xp):
    return dh_prev, xp.concatenate([d_rz, dn_pre], axis=-1), dhw_n


def _gates_read_bias(p, xw, h, xp):
    """GRU3: r, z = σ(b_g): a leaky integrator with learned rates."""
    return 0.0 * xp.concatenate([h, h], axis=-1), p["W_h"], p.get("b_h"), xw


def _gates_read_bias_backward(p, d_rz, dn_pre, dhw_n, dh_prev, h, xp):
    return dh_prev, dn_pre, xp.concatenate([d_rz, dhw_n], axis=-1)


def _candidate_cudnn(p, xw_n, h, r, W_hn, b_hn_rec, xp):
    hw_n = h @ W_hn
    for extra in (b_hn_rec, p.get("b_hn")):
        if extra is not None:
            hw_n = hw_n + extra
    return xp.tanh(xw_n + r * hw_n), {"hw_n": hw_n}


def _candidate_cudnn_backward(dn_pre, h, r, cache, W_hn):
    """(dr_pre, the candidate's recurrent gradient, its path into h)."""
    dhw_n = dn_pre * r
    return dn_pre * cache["hw_n"] * r * (1.0 - r), dhw_n, dhw_n @ matrix_transpose(W_hn)


def _candidate_cho(p, xw_n, h, r, W_hn, b_hn_rec, xp):
    rh = r * h
    return xp.tanh(xw_n + rh @ W_hn + (0.0 if b_hn_rec is None else b_hn_rec)), {"rh": rh}


def _candidate_cho_backward(dn_pre, h, r, cache, W_hn):
    drh = dn_pre @ matrix_transpose(W_hn)
    return drh * h * r * (1.0 - r), dn_pre, drh * r


def _reads_h(prev_h, steps):
    return prev_h


def _reads_reset_h(prev_h, steps):
    return steps["rh"]


GRU_FORMS = {"cudnn": (gru_cudnn_step, gru_cudnn_step_backward, gru_cudnn_recurrent_grads),
             "cho": (gru_cho_step, gru_cho_step_backward, gru_cho_recurrent_grads)}


class GateRead(NamedTuple):
    """What a ladder cell's gates read: their forward part and its adjoint."""

    forward: Callable
    adjoint: Callable


class Candidate(NamedTuple):
    """The candidate's form: its forward, its adjoint, and what its recurrent product reads (h, or r ⊙ h)."""

    forward: Callable
    adjoint: Callable
    recurrent_input: Callable


# GRU1 and GRU2 have the same equations; they differ in which biases exist (GRU.param_shapes)
GATE_READS = {"h": GateRead(_gates_read_h, _gates_read_h_backward),
              "h-nobias": GateRead(_gates_read_h, _gates_read_h_backward),
              "x": GateRead(_gates_read_x, _gates_read_x_backward),
              "bias": GateRead(_gates_read_bias, _gates_read_bias_backward)}
CANDIDATES = {"cudnn": Candidate(_candidate_cudnn, _candidate_cudnn_backward, _reads_h),
              "cho": Candidate(_candidate_cho, _candidate_cho_backward, _reads_reset_h)}


def gru_ladder_step(p, xw, state, xp=np, *, gates, candidate):
    """A ladder GRU's step: the gates as ``gates`` reads them, the candidate of form ``candidate``, the GRU's
    update h' = (1 − z) ⊙ n + z ⊙ h. ``gates`` and ``candidate`` are entries of GATE_READS and CANDIDATES."""
    (h,) = state
    H = h.shape[-1]
    rz_pre, W_hn, b_hn_rec, xw_n = gates.forward(p, xw, h, xp)
    if "b_g" in p:
        rz_pre = rz_pre + p["b_g"]
    rz = sigmoid(rz_pre, xp)
    r, z = rz[..., :H], rz[..., H:]
    n, extra = candidate.forward(p, xw_n, h, r, W_hn, b_hn_rec, xp)
    return (n + z * (h - n),), {"rz": rz, "n": n, **extra}


def gru_ladder_step_backward(p, dstate, cache, prev, xp=np, *, gates, candidate):
    """Adjoint of ``gru_ladder_step``: dn_pre and dz_pre as the GRU's, dr_pre and the candidate's recurrent
    gradient from the candidate's adjoint, the gates' blocks where the gates read (their adjoint lays out dxw
    and dhw)."""
    (dh,) = dstate
    (h,) = prev
    H = h.shape[-1]
    rz, n = cache["rz"], cache["n"]
    r, z = rz[..., :H], rz[..., H:]
    W_hn = p["W_h"][..., -H:]                    # W_h's last block is the candidate's, whatever the gates read
    dn_pre = dh * (1.0 - z) * (1.0 - n * n)
    dz_pre = dh * (h - n) * z * (1.0 - z)
    dr_pre, dhw_n, into_h = candidate.adjoint(dn_pre, h, r, cache, W_hn)
    d_rz = xp.concatenate([dr_pre, dz_pre], axis=-1)
    dh_prev, dxw, dhw = gates.adjoint(p, d_rz, dn_pre, dhw_n, dh * z + into_h, h, xp)
    return (dh_prev,), dxw, dhw


def gru_ladder_recurrent_grads(p, prev_h, steps, dhw, xp=np, *, gates, candidate):
    """The candidate's recurrent gradient (its input, h or r ⊙ h, against dhw's candidate block), beside the gates'
    where W_h holds them (GRU1, GRU2); each bias summed over the blocks of dhw it covers."""
    H = prev_h.shape[-1]
    dhw_n = dhw[..., -H:]
    candidate_grad = candidate.recurrent_input(prev_h, steps).T @ dhw_n
    gates_in_w_h = p["W_h"].shape[-1] == 3 * H
    grads = {"W_h": xp.concatenate([prev_h.T @ dhw[..., :2 * H], candidate_grad], axis=1) if gates_in_w_h
             else candidate_grad}
    if "b_h" in p:
        grads["b_h"] = dhw[..., -p["b_h"].shape[-1]:].sum(axis=0)
    if "b_hn" in p:
        grads["b_hn"] = dhw_n.sum(axis=0)
    if "b_g" in p:
        grads["b_g"] = dhw[..., :2 * H].sum(axis=0)
    return grads


# -- a ladder cell as the GRU it restricts, for the GRU's fused kernels --------------------------------
# Where the gates do not read h, their blocks of W_h are zero; where they do not read x, their blocks of the input
# projection are their bias b_g (zero for GRU2). The GRU's equations with those blocks fixed are the ladder's, so
# the GRU's adjoint, kept to the ladder's own blocks, is the ladder's adjoint. Gates that read neither x nor h pay
# for a product with zero blocks; their cells are small next to what the NumPy loop costs per step.

def gru_input(p, xw, gate_inputs):
    """The GRU's input projection (T, B, 3H) for a ladder cell's ``xw``: b_g (or 0) in the gates' blocks where they do
    not read x."""
    if gate_inputs in ("xh", "x"):
        return xw
    H = xw.shape[-1]
    full = np.empty(xw.shape[:-1] + (3 * H,), xw.dtype)
    full[..., :2 * H] = p["b_g"] if "b_g" in p else 0.0
    full[..., 2 * H:] = xw
    return full


def gru_weights(p, gate_inputs, H):
    """The GRU's (W_h (H, 3H), b_h (3H,)) for a ladder cell: zero gate blocks of W_h where the gates do not read h,
    a candidate-only recurrent bias in the candidate's block."""
    W_h = p["W_h"]
    if W_h.shape[-1] != 3 * H:
        W_h = np.concatenate([np.zeros((H, 2 * H), W_h.dtype), W_h], axis=1)
    b_h = np.zeros(3 * H, W_h.dtype)
    if "b_h" in p:
        b_h[-p["b_h"].shape[-1]:] = p["b_h"]
    return W_h, b_h


def ladder_deltas(dxw, dhw, gate_inputs, H):
    """The ladder cell's (dxw, dhw) from the GRU's: the gates' blocks of dxw only where they read x, of dhw only where
    W_h or b_g holds them (the ladder's recurrent_grads read b_g's gradient from dhw)."""
    if gate_inputs == "xh":
        return dxw, dhw
    if gate_inputs == "x":
        return dxw, dhw[..., 2 * H:]
    return dxw[..., 2 * H:], dhw


@register_cell("gru")
class GRU(Cell):
    """GRU cell; see the module docstring for the equations of ``variant="cudnn"|"cho"``.

    Parameters: ``W_x`` (input_size, 3*hidden), ``W_h`` (hidden, 3*hidden) in gate order r, z, n;
    ``b`` (3*hidden,) if bias; for ``"cudnn"`` also ``b_hn`` (hidden,), the bias inside r ⊙ (...)
    that cannot be folded into ``b``; with ``recurrent_bias=True`` a full ``b_h`` (3*hidden,)
    replaces ``b_hn`` (PyTorch's ``bias_hh``).

    ``gate_inputs``: what the gates r and z read (Dey & Salem 2017's ladder; the candidate n is
    always the GRU's): ``"xh"`` x and h (the GRU); ``"h"`` h and a bias (GRU1): W_x and b keep only the
    candidate's block and the gates' bias is ``b_g`` (2*hidden,); ``"h-nobias"`` h alone (GRU2): no gate
    bias, a recurrent bias ``b_h`` is the candidate's (hidden,); ``"x"`` x only: W_h keeps only
    the candidate's block (hidden, hidden); ``"bias"`` neither (GRU3, a leaky integrator with
    learned rates): r, z = σ(b_g), which needs ``bias=True``. Every gate reading runs on the GRU's fused Numba
    kernels (``gru_input``, ``gru_weights``).
    """

    title = "GRU"
    gates = 3
    options = (
        Option("variant", "cudnn", str, "GRU variant: cudnn (PyTorch) or cho (reset before the matmul)", VARIANTS),
        Option("gate_inputs", "xh", str, "GRU: what the reset and update gates read: x and h (the GRU), h and a "
               "bias (GRU1), h alone (GRU2), x only, or their bias only (GRU3)", GATE_INPUTS),
    )

    def param_shapes(self):
        if self.gate_inputs == "bias" and not self.bias:
            raise ValueError("GRU: gate_inputs='bias' needs bias=True: gates that read only their bias would be "
                             "σ(0) = ½ for ever without one")
        I, H = self.input_size, self.hidden_size
        x_blocks = 3 if self.gate_inputs in ("xh", "x") else 1      # the gates' blocks of W_x and b
        h_blocks = 3 if self.gate_inputs in ("xh", "h", "h-nobias") else 1      # the gates' blocks of W_h
        shapes = {"W_x": (I, x_blocks * H), "W_h": (H, h_blocks * H)}
        if self.bias:
            shapes["b"] = (x_blocks * H,)
            if self.recurrent_bias:
                shapes["b_h"] = (H if self.gate_inputs == "h-nobias" else h_blocks * H,)
            if self.variant == "cudnn" and not self.recurrent_bias:
                shapes["b_hn"] = (H,)
            if x_blocks == 1 and self.gate_inputs != "h-nobias":
                shapes["b_g"] = (2 * H,)
        return shapes

    def has_kernels(self) -> bool:
        return True

    @cached_property
    def equations(self) -> tuple[Callable, Callable, Callable]:
        """(step, its adjoint, the recurrent parameters' gradients) of this cell's equation set, chosen once from
        its options: the two GRUs have a pair each; a ladder cell composes its gates' reading with its candidate."""
        if self.gate_inputs == "xh":
            return GRU_FORMS[self.variant]
        parts = {"gates": GATE_READS[self.gate_inputs], "candidate": CANDIDATES[self.variant]}
        return (partial(gru_ladder_step, **parts), partial(gru_ladder_step_backward, **parts),
                partial(gru_ladder_recurrent_grads, **parts))

    def step(self, p, xw, state, xp=np):
        return self.equations[0](p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return self.equations[1](p, dstate, cache, prev, xp)

    def fused_forward(self, p, xw, state0, mask):
        xw, (W_h, b_h) = gru_input(p, xw, self.gate_inputs), gru_weights(p, self.gate_inputs, self.hidden_size)
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, n_steps, aux = (np.empty((T, B, H), dt) for _ in range(3))
        rz = np.empty((T, B, 2 * H), dt)
        if self.variant == "cho":       # reads W_h in its two blocks
            gru_cho_forward_loop(xw, np.ascontiguousarray(W_h[:, :2 * H]), np.ascontiguousarray(W_h[:, 2 * H:]), b_h,
                                 state0[0], mask, hs, rz, n_steps, aux)
            return (hs,), {"rz": rz, "n": n_steps, "rh": aux}
        b_hn = p["b_hn"] if "b_hn" in p else np.zeros(H, dt)
        gru_cudnn_forward_loop(xw, np.ascontiguousarray(W_h), b_h, b_hn, state0[0], mask, hs, rz, n_steps, aux)
        return (hs,), {"rz": rz, "n": n_steps, "hw_n": aux}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop of this form; fills dxw and dhw (they differ in the candidate's block
        for cudnn). A ladder cell runs the GRU's loop into buffers of the GRU's width and keeps its own blocks."""
        H, steps = self.hidden_size, cache.steps
        W_h, _ = gru_weights(p, self.gate_inputs, H)
        if self.gate_inputs != "xh":
            dxw, dhw = np.empty(dhs.shape[:2] + (3 * H,), self.dtype), np.empty(dhs.shape[:2] + (3 * H,), self.dtype)
        prev_h = np.ascontiguousarray(prev[0])
        if self.variant == "cho":
            W_hrzT, W_hnT = np.ascontiguousarray(W_h[:, :2 * H].T), np.ascontiguousarray(W_h[:, 2 * H:].T)
            dh0 = gru_cho_backward_loop(dhs, W_hrzT, W_hnT, prev_h, steps["rz"], steps["n"], mask, back_steps, dxw, dhw,
                                        dh_out)
        else:
            dh0 = gru_cudnn_backward_loop(dhs, np.ascontiguousarray(W_h.T), prev_h, steps["rz"], steps["n"],
                                          steps["hw_n"], mask, back_steps, dxw, dhw, dh_out)
        return (*ladder_deltas(dxw, dhw, self.gate_inputs, H), (dh0,))

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        return self.equations[2](p, prev_h, steps, dhw, xp)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) -------------------------------
# Each form's step and adjoint over all T steps in one compiled loop, the recurrent matmuls in BLAS, the gates
# as short loops in passes over all of a step's rows, the cache indexed directly (no row views): row by row,
# short loops ran mostly as scalar remainders (at hidden 10: 41 → 18 µs, the same bits). The passes the two
# forms share are kernels of their own.

@kernel
def _gates_pass(h, W, xw_t, b_h, hw, rz_t):
    """hw = h W (W: W_h whole, or its gates' blocks); rz_t = σ(xw_t[:, :2H] + hw[:, :2H] + b_h[:2H]), the sigmoid
    over the whole (B, 2H) block."""
    kernel_matmul(h, W, hw)
    B, H2 = rz_t.shape
    for i in range(B):
        for j in range(H2):
            rz_t[i, j] = xw_t[i, j] + hw[i, j] + b_h[j]
    rz_flat = rz_t.reshape(-1)
    for k in range(rz_flat.size):
        rz_flat[k] = kernel_sigmoid(rz_flat[k])


@kernel
def _candidate_and_update_pass(n_pre, rz_t, mask_t, n_t, h):
    """n_t = tanh(n_pre) over the whole block; h' = n + z ⊙ (h − n) where the step is not masked."""
    B, H = h.shape
    n_flat, pre_flat = n_t.reshape(-1), n_pre.reshape(-1)
    for k in range(n_flat.size):
        n_flat[k] = kernel_tanh(pre_flat[k])
    for i in range(B):
        if mask_t[i] > 0.0:
            for j in range(H):
                h[i, j] = n_t[i, j] + rz_t[i, H + j] * (h[i, j] - n_t[i, j])


@kernel
def gru_cudnn_forward_loop(xw, W_h, b_h, b_hn, h0, mask, hs, rz_steps, n_steps, hw_n_steps):
    """gru_cudnn_step over T steps: r, z = σ(xw_rz + h W_hrz + b_hrz);  hw_n = h W_hn + b_hn;
    n = tanh(xw_n + r ⊙ hw_n);  h' = n + z ⊙ (h − n). One product h W_h a step."""
    T, B, H = hs.shape
    h, hw, n_pre = h0.copy(), np.empty((B, 3 * H), hs.dtype), np.empty((B, H), hs.dtype)
    for t in range(T):
        _gates_pass(h, W_h, xw[t], b_h, hw, rz_steps[t])
        for i in range(B):
            for j in range(H):
                hw_n_steps[t, i, j] = hw[i, 2 * H + j] + b_h[2 * H + j] + b_hn[j]
            for j in range(H):
                n_pre[i, j] = xw[t, i, 2 * H + j] + rz_steps[t, i, j] * hw_n_steps[t, i, j]
        _candidate_and_update_pass(n_pre, rz_steps[t], mask[t], n_steps[t], h)
        hs[t] = h


@kernel
def gru_cho_forward_loop(xw, W_hrz, W_hn, b_h, h0, mask, hs, rz_steps, n_steps, rh_steps):
    """gru_cho_step over T steps: r, z = σ(xw_rz + h W_hrz + b_hrz);  n = tanh(xw_n + (r ⊙ h) W_hn + b_hn);
    h' = n + z ⊙ (h − n). W_hrz and W_hn come in as contiguous blocks of W_h."""
    T, B, H = hs.shape
    h, hw, n_pre = h0.copy(), np.empty((B, 2 * H), hs.dtype), np.empty((B, H), hs.dtype)
    for t in range(T):
        _gates_pass(h, W_hrz, xw[t], b_h, hw, rz_steps[t])
        for i in range(B):
            for j in range(H):
                rh_steps[t, i, j] = rz_steps[t, i, j] * h[i, j]
        kernel_matmul(rh_steps[t], W_hn, n_pre)
        for i in range(B):
            for j in range(H):
                n_pre[i, j] = xw[t, i, 2 * H + j] + n_pre[i, j] + b_h[2 * H + j]
        _candidate_and_update_pass(n_pre, rz_steps[t], mask[t], n_steps[t], h)
        hs[t] = h


@kernel
def _update_and_candidate_deltas(carry, rz_t, n_t, prev_h_t, mask_t, dpre):
    """For every age and row: dn_pre = m dh ⊙ (1 − z)(1 − n²) and dz_pre = m dh ⊙ (h − n) z(1 − z), into the
    n and z blocks of dpre."""
    A, B, H = carry.shape
    one = one_of(carry)
    for s in range(A):
        for i in range(B):
            m = mask_t[i]
            z, n, h = rz_t[i, H:], n_t[i], prev_h_t[i]
            d, dp = carry[s, i], dpre[s * B + i]
            for j in range(H):
                dp[2 * H + j] = m * d[j] * (one - z[j]) * (one - n[j] * n[j])
            for j in range(H):
                dp[H + j] = m * d[j] * (h[j] - n[j]) * z[j] * (one - z[j])


@kernel
def gru_cudnn_backward_loop(dhs, W_hT, prev_h, rz_steps, n_steps, hw_n_steps, mask, back_steps, dxw, dhw, dh_out):
    """gru_cudnn_step_backward over T steps, for every age at once: dr_pre = dn_pre ⊙ hw_n ⊙ r(1 − r);
    dh_prev = dh ⊙ z + [dr, dz, dn ⊙ r] W_hᵀ. Masked steps pass their delta through. Returns dh0."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    dpre = np.empty((A * B, 3 * H), dhs.dtype)     # [dr_pre, dz_pre, dn_pre] of each age (the dxw blocks)
    dhw_ages = np.empty((A * B, 3 * H), dhs.dtype)
    dprev = np.empty((A * B, H), dhs.dtype)
    one = one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        _update_and_candidate_deltas(carry, rz_steps[t], n_steps[t], prev_h[t], mask[t], dpre)
        for s in range(A):
            for i in range(B):
                r, aux, dp = rz_steps[t, i, :H], hw_n_steps[t, i], dpre[s * B + i]
                for j in range(H):
                    dp[j] = dp[2 * H + j] * aux[j] * r[j] * (one - r[j])
        dhw_ages[:] = dpre
        for s in range(A):
            for i in range(B):
                r, dh_n = rz_steps[t, i, :H], dhw_ages[s * B + i, 2 * H:]
                for j in range(H):
                    dh_n[j] *= r[j]                 # the n block of dhw is dn_pre ⊙ r
        kernel_matmul(dhw_ages, W_hT, dprev)
        sum_ages(dpre, B, dxw[t])
        sum_ages(dhw_ages, B, dhw[t])
        through_the_gate(carry, rz_steps[t, :, H:], mask[t], dprev)
        step_back(carry, dprev.reshape(A, B, H), back_steps)
    return initial_state_delta(carry, back_steps)


@kernel
def gru_cho_backward_loop(dhs, W_hrzT, W_hnT, prev_h, rz_steps, n_steps, mask, back_steps, dxw, dhw, dh_out):
    """gru_cho_step_backward over T steps, for every age at once: d(r⊙h) = dn_pre W_hnᵀ;
    dr_pre = d(r⊙h) ⊙ h ⊙ r(1 − r); dh_prev = dh ⊙ z + d(r⊙h) ⊙ r + [dr, dz] W_hrzᵀ. Returns dh0."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    dpre = np.empty((A * B, 3 * H), dhs.dtype)     # [dr_pre, dz_pre, dn_pre] of each age (dxw's and dhw's blocks)
    drh = np.zeros((A * B, H), dhs.dtype)
    dprev = np.empty((A * B, H), dhs.dtype)
    one = one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        _update_and_candidate_deltas(carry, rz_steps[t], n_steps[t], prev_h[t], mask[t], dpre)
        kernel_matmul(np.ascontiguousarray(dpre[:, 2 * H:]), W_hnT, drh)
        for s in range(A):
            for i in range(B):
                r, h, dp, dr = rz_steps[t, i, :H], prev_h[t, i], dpre[s * B + i], drh[s * B + i]
                for j in range(H):
                    dp[j] = dr[j] * h[j] * r[j] * (one - r[j])
        kernel_matmul(np.ascontiguousarray(dpre[:, :2 * H]), W_hrzT, dprev)
        sum_ages(dpre, B, dxw[t])
        sum_ages(dpre, B, dhw[t])
        through_the_gate(carry, rz_steps[t, :, H:], mask[t], dprev)
        for s in range(A):
            for i in range(B):
                r, dr, out = rz_steps[t, i, :H], drh[s * B + i], dprev[s * B + i]
                for j in range(H):
                    out[j] += dr[j] * r[j]
        step_back(carry, dprev.reshape(A, B, H), back_steps)
    return initial_state_delta(carry, back_steps)
