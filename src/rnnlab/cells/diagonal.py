"""The real diagonal linear recurrences: minLSTM, a diagonal linear RNN, Griffin's RG-LRU and Mamba's S6.

Each is h' = a(x) ⊙ h + b(x): the transition depends on the input only, never on h, so the recurrence is linear in
its state (and a scan can run it, ``rnnlab.engines.scan``). Every adjoint is the diagonal template
(``../shared/reference/MODERN.md`` §1.2): with δ the error reaching h',

    dh_prev = a ⊙ δ,   ∂a = δ ⊙ h,   ∂b = δ,

chained through each cell's own a(x) and b(x). None has recurrent weights: whatever parameters the step reads besides
the input projection (RG-LRU's Λ, S6's A_log and D) get their gradient from the per-row contributions the adjoint
returns as ``dhw``, summed over all T·B rows in ``recurrent_grads``.

Their eigenvalues (the values of a) lie in [0, 1], or in [−1, 1] with ``eigenvalues="signed"`` (Grazzi et al. 2024's
change, which lets one layer count parity).
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages
from rnnlab.cells.base import InputDrivenCell, Option
from rnnlab.cells.kernel_math import kernel, kernel_sigmoid, kernel_softplus, one_of, zero_of
from rnnlab.cells.mingru import positive_activation
from rnnlab.cells.registry import register_cell
from rnnlab.common import sigmoid, softplus
from rnnlab.compile import inline

EIGENVALUES = ("nonnegative", "signed")


def _eigenvalues_option(what: str) -> Option:
    return Option("eigenvalues", "nonnegative", str, f"range of {what}: nonnegative ([0, 1], as published) or signed "
                  "([-1, 1], Grazzi et al. 2024)", EIGENVALUES)


def _positive_slope(cand, xp):
    """g′ from g's value: 1 where h̃ ≥ ½ (the linear side), h̃(1 − h̃) below (the sigmoid side)."""
    return xp.where(cand >= 0.5, 1.0, cand * (1.0 - cand))


# -- minLSTM ---------------------------------------------------------------------------------------------------

def minlstm_step(p, xw, state, coeff_norm=True, xp=np):
    (h,) = state
    H = h.shape[-1]
    cand = positive_activation(xw[..., :H], xp)
    f, i = sigmoid(xw[..., H:2 * H], xp), sigmoid(xw[..., 2 * H:], xp)
    if coeff_norm:
        total = f + i
        fp, ip = f / total, i / total
    else:
        fp, ip = f, i
    return (fp * h + ip * cand,), {"cand": cand, "f": f, "i": i}


def minlstm_step_backward(p, dstate, cache, prev, coeff_norm=True, xp=np):
    (dh,) = dstate
    (h,) = prev
    cand, f, i = cache["cand"], cache["f"], cache["i"]
    if coeff_norm:
        total = f + i
        fp, ip = f / total, i / total
        dfp, dip = dh * h, dh * cand
        df = (dfp - dip) * i / (total * total)
        di = (dip - dfp) * f / (total * total)
    else:
        fp, ip = f, i
        df, di = dh * h, dh * cand
    dxw = xp.concatenate([dh * ip * _positive_slope(cand, xp), df * f * (1.0 - f), di * i * (1.0 - i)], axis=-1)
    return (dh * fp,), dxw, dxw


@register_cell("minlstm")
class MinLSTM(InputDrivenCell):
    """minLSTM (Feng et al. 2024, "Were RNNs all we needed?"): an LSTM whose gates and candidate read only x.

        h̃ = g(x W_xh + b_h),  f = σ(x W_xf + b_f),  i = σ(x W_xi + b_i)
        f′ = f / (f + i),  i′ = i / (f + i)          (``coeff_norm``; without it f′ = f, i′ = i)
        h' = f′ ⊙ h + i′ ⊙ h̃,                         g(a) = a + ½ (a ≥ 0), σ(a) below

    Shapes: x (B, input_size), h (B, hidden). ``W_x`` (input_size, 3*hidden) in block order h̃, f, i (the official
    code's split), ``b`` (3*hidden,); no W_h: 3(nm + n) parameters.
    """

    title = "minLSTM"
    linear_state = (0,)
    gates = 3
    options = (Option("coeff_norm", True, bool, "normalise f and i by their sum (the paper's f/(f+i); "
                      "the official code's use_coeff_norm)"),)

    def step(self, p, xw, state, xp=np):
        return minlstm_step(p, xw, state, self.coeff_norm, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return minlstm_step_backward(p, dstate, cache, prev, self.coeff_norm, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        hs, cand, f, i = (np.empty((T, B, H), self.dtype) for _ in range(4))
        minlstm_forward_loop(xw, state0[0], mask, self.coeff_norm, hs, cand, f, i)
        return (hs,), {"cand": cand, "f": f, "i": i}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [dh̃_pre, df_pre, di_pre] (= dhw)."""
        steps = cache.steps
        dh0 = minlstm_backward_loop(dhs, np.ascontiguousarray(prev[0]), steps["cand"], steps["f"], steps["i"], mask,
                                    self.coeff_norm, back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


# the fused time loops of the Numba engine (rnnlab.engines.numba), as minGRU's: no recurrent product, so each step
# is one elementwise pass over the batch

@kernel
def minlstm_forward_loop(xw, h0, mask, coeff_norm, hs, cand_steps, f_steps, i_steps):
    """h̃ = g(xw_h̃), f = σ(xw_f), i = σ(xw_i); h' = f′ ⊙ h + i′ ⊙ h̃, a padded step keeping h."""
    T, B, H = hs.shape
    zero, half = zero_of(hs), one_of(hs) / 2
    h = h0.copy()
    for t in range(T):
        for r in range(B):
            for j in range(H):
                a = xw[t, r, j]
                cand_steps[t, r, j] = a + half if a >= zero else kernel_sigmoid(a)
                f_steps[t, r, j] = kernel_sigmoid(xw[t, r, H + j])
                i_steps[t, r, j] = kernel_sigmoid(xw[t, r, 2 * H + j])
            if mask[t, r] > 0.0:
                for j in range(H):
                    f, i = f_steps[t, r, j], i_steps[t, r, j]
                    if coeff_norm:
                        total = f + i
                        f, i = f / total, i / total
                    h[r, j] = f * h[r, j] + i * cand_steps[t, r, j]
        hs[t] = h


@kernel
def minlstm_backward_loop(dhs, prev_h, cand_steps, f_steps, i_steps, mask, coeff_norm, back_steps, da_sum, dh_out):
    """minlstm_step_backward for every age at once, padded steps passing their deltas through. Returns dh0;
    da_sum receives [dh̃_pre, df_pre, di_pre]."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A * B, 3 * H), dhs.dtype)
    dprev = np.empty((A, B, H), dhs.dtype)
    one, half = one_of(dhs), one_of(dhs) / 2
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for r in range(B):
                m, row = mask[t, r], s * B + r
                for j in range(H):
                    d, cand, f, i = m * carry[s, r, j], cand_steps[t, r, j], f_steps[t, r, j], i_steps[t, r, j]
                    if coeff_norm:
                        total = f + i
                        fp, ip = f / total, i / total
                        dfp, dip = d * prev_h[t, r, j], d * cand
                        df = (dfp - dip) * i / (total * total)
                        di = (dip - dfp) * f / (total * total)
                    else:
                        fp, ip = f, i
                        df, di = d * prev_h[t, r, j], d * cand
                    da[row, j] = d * ip * (one if cand >= half else cand * (one - cand))
                    da[row, H + j] = df * f * (one - f)
                    da[row, 2 * H + j] = di * i * (one - i)
                    dprev[s, r, j] = d * fp + (one - m) * carry[s, r, j]
        sum_ages(da, B, da_sum[t])
        step_back(carry, dprev, back_steps)
    return initial_state_delta(carry, back_steps)


# -- a diagonal linear RNN ------------------------------------------------------------------------------------

INPUT_SCALINGS = ("none", "complement", "sqrt")


def _scale(a, kind: str, xp):
    """s(a) multiplying the input term, and s′(a): 1; 1 − |a|; √(1 − a²) (RG-LRU's)."""
    if kind == "complement":
        return 1.0 - xp.abs(a), -xp.sign(a)
    if kind == "sqrt":
        root = xp.sqrt(1.0 - a * a)
        return root, -a / root
    return 1.0, 0.0


def diag_linear_step(p, xw, state, eigenvalues="nonnegative", input_scaling="none", xp=np):
    (h,) = state
    H = h.shape[-1]
    s = sigmoid(xw[..., :H], xp)
    a = 2.0 * s - 1.0 if eigenvalues == "signed" else s
    b = xw[..., H:]
    scale, _ = _scale(a, input_scaling, xp)
    return (a * h + scale * b,), {"s": s, "b": b}


def diag_linear_step_backward(p, dstate, cache, prev, eigenvalues="nonnegative", input_scaling="none", xp=np):
    (dh,) = dstate
    (h,) = prev
    s, b = cache["s"], cache["b"]
    signed = eigenvalues == "signed"
    a = 2.0 * s - 1.0 if signed else s
    scale, slope = _scale(a, input_scaling, xp)
    da = dh * (h + slope * b)
    da_pre = da * s * (1.0 - s) * (2.0 if signed else 1.0)
    dxw = xp.concatenate([da_pre, dh * scale], axis=-1)
    return (dh * a,), dxw, dxw


@register_cell("diag-linear")
class DiagonalLinear(InputDrivenCell):
    """A real diagonal linear RNN, the baseline of Grazzi et al. 2024 (rnnlab's form, MODERN.md §1.2):

        a = σ(x W_xa + b_a)            (eigenvalues="nonnegative": a ∈ (0, 1))
        a = 2σ(x W_xa + b_a) − 1       (eigenvalues="signed": a ∈ (−1, 1))
        h' = a ⊙ h + s(a) ⊙ (x W_xb + b_b),   s = 1, 1 − |a| or √(1 − a²) (``input_scaling``)

    Grazzi's own layer multiplies the input term by x (which needs input_size = hidden) and scales the gate's argument
    by 10; rnnlab's reads b from a projection, as every other cell here does. Shapes: h (B, hidden); ``W_x``
    (input_size, 2*hidden) in block order a, b; ``b`` (2*hidden,): 2(nm + n) parameters.
    """

    title = "diag-linear"
    linear_state = (0,)
    gates = 2
    options = (_eigenvalues_option("a"),
               Option("input_scaling", "none", str, "what multiplies the input term: none, complement (1 - |a|) or "
                      "sqrt (sqrt(1 - a^2), as RG-LRU)", INPUT_SCALINGS))

    def step(self, p, xw, state, xp=np):
        return diag_linear_step(p, xw, state, self.eigenvalues, self.input_scaling, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return diag_linear_step_backward(p, dstate, cache, prev, self.eigenvalues, self.input_scaling, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        hs, s, b = (np.empty((T, B, H), self.dtype) for _ in range(3))
        diag_linear_forward_loop(xw, state0[0], mask, self.eigenvalues == "signed",
                                 INPUT_SCALINGS.index(self.input_scaling), hs, s, b)
        return (hs,), {"s": s, "b": b}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [da_pre, db] (= dhw)."""
        dh0 = diag_linear_backward_loop(dhs, np.ascontiguousarray(prev[0]), cache.steps["s"], cache.steps["b"], mask,
                                        self.eigenvalues == "signed", INPUT_SCALINGS.index(self.input_scaling),
                                        back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


@inline
def _kernel_scale(a, kind, one, zero):
    """_scale in a kernel: (s(a), s′(a)) for kind 0 (none), 1 (complement), 2 (sqrt); one and zero of a's type."""
    if kind == 1:
        return one - abs(a), -one if a > zero else (one if a < zero else zero)
    if kind == 2:
        root = np.sqrt(one - a * a)
        return root, -a / root
    return one, zero


@kernel
def diag_linear_forward_loop(xw, h0, mask, signed, scaling, hs, s_steps, b_steps):
    """a = σ(xw_a) (or 2σ − 1); h' = a ⊙ h + s(a) ⊙ xw_b, a padded step keeping h."""
    T, B, H = hs.shape
    one, zero = one_of(hs), zero_of(hs)
    h = h0.copy()
    for t in range(T):
        for r in range(B):
            for j in range(H):
                s_steps[t, r, j] = kernel_sigmoid(xw[t, r, j])
                b_steps[t, r, j] = xw[t, r, H + j]
            if mask[t, r] > 0.0:
                for j in range(H):
                    a = (one + one) * s_steps[t, r, j] - one if signed else s_steps[t, r, j]
                    scale, _ = _kernel_scale(a, scaling, one, zero)
                    h[r, j] = a * h[r, j] + scale * b_steps[t, r, j]
        hs[t] = h


@kernel
def diag_linear_backward_loop(dhs, prev_h, s_steps, b_steps, mask, signed, scaling, back_steps, da_sum, dh_out):
    """diag_linear_step_backward for every age at once, padded steps passing their deltas through. Returns dh0;
    da_sum receives [da_pre, db]."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A * B, 2 * H), dhs.dtype)
    dprev = np.empty((A, B, H), dhs.dtype)
    one, zero = one_of(dhs), zero_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for k in range(A):
            for r in range(B):
                m, row = mask[t, r], k * B + r
                for j in range(H):
                    d, s = m * carry[k, r, j], s_steps[t, r, j]
                    a = (one + one) * s - one if signed else s
                    scale, slope = _kernel_scale(a, scaling, one, zero)
                    da[row, j] = d * (prev_h[t, r, j] + slope * b_steps[t, r, j]) * s * (one - s) * (
                        one + one if signed else one)
                    da[row, H + j] = d * scale
                    dprev[k, r, j] = d * a + (one - m) * carry[k, r, j]
        sum_ages(da, B, da_sum[t])
        step_back(carry, dprev, back_steps)
    return initial_state_delta(carry, back_steps)


# -- RG-LRU ---------------------------------------------------------------------------------------------------

RGLRU_C = 8.0      # Griffin's fixed exponent c in a = σ(−Λ)^(c r)


def rglru_step(p, xw, state, xp=np):
    (h,) = state
    H = h.shape[-1]
    u, r, i = xw[..., :H], sigmoid(xw[..., H:2 * H], xp), sigmoid(xw[..., 2 * H:], xp)
    log_a = -RGLRU_C * r * softplus(p["Lambda"], xp)
    a = xp.exp(log_a)
    root = xp.sqrt(1.0 - a * a)
    return (a * h + root * (i * u),), {"u": u, "r": r, "i": i, "a": a}


def rglru_step_backward(p, dstate, cache, prev, xp=np):
    (dh,) = dstate
    (h,) = prev
    u, r, i, a = cache["u"], cache["r"], cache["i"], cache["a"]
    root = xp.sqrt(1.0 - a * a)
    dlog_a = dh * (h - a / root * i * u) * a
    d_lambda = dlog_a * (-RGLRU_C * r) * sigmoid(p["Lambda"], xp)
    dr = dlog_a * (-RGLRU_C * softplus(p["Lambda"], xp)) * r * (1.0 - r)
    dxw = xp.concatenate([dh * root * i, dr, dh * root * u * i * (1.0 - i)], axis=-1)
    return (dh * a,), dxw, d_lambda


@register_cell("rglru")
class RGLRU(InputDrivenCell):
    """Griffin's real-gated linear recurrent unit (De et al. 2024; recurrentgemma's ``RGLRU``):

        u = x W_xu + b_u,  r = σ(x W_xr + b_r),  i = σ(x W_xi + b_i)
        log a = −c r ⊙ softplus(Λ),  c = 8
        h' = a ⊙ h + √(1 − a²) ⊙ (i ⊙ u)

    Shapes: h (B, hidden); ``W_x`` (input_size, 3*hidden) in block order u, r, i; ``b`` (3*hidden,); ``Lambda``
    (hidden,), initialised so that the base a = σ(−Λ) has a² ~ U(0.81, 0.998) (recurrentgemma's ``rnn_param_init``):
    3(nm + n) + n parameters. Two named differences from recurrentgemma: its gate maps are block-diagonal over heads
    (here full, as the input map u is), and it clips d√x/dx at 1000 in the backward pass, which rnnlab does not
    (every adjoint here is the exact derivative).
    """

    title = "RG-LRU"
    linear_state = (0,)
    gates = 3

    def param_shapes(self):
        shapes = super().param_shapes()
        shapes["Lambda"] = (self.hidden_size,)
        return shapes

    def initialize(self, rng):
        a = np.sqrt(rng.uniform(0.81, 0.998, size=self.hidden_size))
        self.params["Lambda"] = np.log(1.0 / a - 1.0).astype(self.dtype)     # softplus(Λ) = −log a

    def step(self, p, xw, state, xp=np):
        return rglru_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return rglru_step_backward(p, dstate, cache, prev, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        return {"Lambda": dhw.sum(axis=0)}

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        hs, u, r, i, a = (np.empty((T, B, H), self.dtype) for _ in range(5))
        rate = (RGLRU_C * softplus(p["Lambda"])).astype(self.dtype)
        rglru_forward_loop(xw, state0[0], mask, rate, hs, u, r, i, a)
        return (hs,), {"u": u, "r": r, "i": i, "a": a}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [du, dr_pre, di_pre], dhw (its first H columns) each
        row's gradient of Λ."""
        steps = cache.steps
        dlambda = dhw[..., :self.hidden_size]
        dh0 = rglru_backward_loop(dhs, np.ascontiguousarray(prev[0]), steps["u"], steps["r"], steps["i"], steps["a"],
                                  mask, (RGLRU_C * softplus(p["Lambda"])).astype(self.dtype),
                                  (RGLRU_C * sigmoid(p["Lambda"])).astype(self.dtype), back_steps, dxw, dlambda,
                                  dh_out)
        return dxw, dlambda, (dh0,)


@kernel
def rglru_forward_loop(xw, h0, mask, rate, hs, u_steps, r_steps, i_steps, a_steps):
    """a = exp(−c softplus(Λ) r); h' = a ⊙ h + √(1 − a²) ⊙ (i ⊙ u), a padded step keeping h; rate = c softplus(Λ)."""
    T, B, H = hs.shape
    one = one_of(hs)
    h = h0.copy()
    for t in range(T):
        for r in range(B):
            for j in range(H):
                u_steps[t, r, j] = xw[t, r, j]
                r_steps[t, r, j] = kernel_sigmoid(xw[t, r, H + j])
                i_steps[t, r, j] = kernel_sigmoid(xw[t, r, 2 * H + j])
                a_steps[t, r, j] = np.exp(-rate[j] * r_steps[t, r, j])
            if mask[t, r] > 0.0:
                for j in range(H):
                    a = a_steps[t, r, j]
                    h[r, j] = a * h[r, j] + np.sqrt(one - a * a) * (i_steps[t, r, j] * u_steps[t, r, j])
        hs[t] = h


@kernel
def rglru_backward_loop(dhs, prev_h, u_steps, r_steps, i_steps, a_steps, mask, rate, lambda_rate, back_steps, da_sum,
                        dlambda_sum, dh_out):
    """rglru_step_backward for every age at once, padded steps passing their deltas through; rate = c softplus(Λ),
    lambda_rate = c σ(Λ). Returns dh0; da_sum receives [du, dr_pre, di_pre], dlambda_sum each row's dΛ."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A * B, 3 * H), dhs.dtype)
    dl = np.empty((A * B, H), dhs.dtype)
    dprev = np.empty((A, B, H), dhs.dtype)
    one = one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for k in range(A):
            for r in range(B):
                m, row = mask[t, r], k * B + r
                for j in range(H):
                    d, a = m * carry[k, r, j], a_steps[t, r, j]
                    u, g, i = u_steps[t, r, j], r_steps[t, r, j], i_steps[t, r, j]
                    root = np.sqrt(one - a * a)
                    dlog_a = d * (prev_h[t, r, j] - a / root * i * u) * a
                    dl[row, j] = -dlog_a * lambda_rate[j] * g
                    da[row, j] = d * root * i
                    da[row, H + j] = -dlog_a * rate[j] * g * (one - g)
                    da[row, 2 * H + j] = d * root * u * i * (one - i)
                    dprev[k, r, j] = d * a + (one - m) * carry[k, r, j]
        sum_ages(da, B, da_sum[t])
        sum_ages(dl, B, dlambda_sum[t])
        step_back(carry, dprev, back_steps)
    return initial_state_delta(carry, back_steps)


# -- S6 --------------------------------------------------------------------------------------------------------

def s6_step(p, xw, state, d_state, eigenvalues="nonnegative", xp=np):
    y, S = state                                     # y (B, H); S (B, H, N)
    H, N = S.shape[-2], d_state
    u, dt_pre = xw[..., :H], xw[..., H:2 * H]
    B_t, C_t = xw[..., 2 * H:2 * H + N], xw[..., 2 * H + N:]
    delta = softplus(dt_pre, xp)
    P = xp.exp(delta[..., None] * -xp.exp(p["A_log"]))
    a = 2.0 * P - 1.0 if eigenvalues == "signed" else P
    S_new = a * S + (delta * u)[..., None] * B_t[..., None, :]
    y_new = (S_new * C_t[..., None, :]).sum(axis=-1) + p["D"] * u
    return (y_new, S_new), {"u": u, "dt_pre": dt_pre, "B": B_t, "C": C_t}


def s6_step_backward(p, dstate, cache, prev, eigenvalues="nonnegative", xp=np):
    dy, dS = dstate
    _, S = prev
    u, dt_pre, B_t, C_t = cache["u"], cache["dt_pre"], cache["B"], cache["C"]
    A = -xp.exp(p["A_log"])
    delta = softplus(dt_pre, xp)
    P = xp.exp(delta[..., None] * A)
    signed = eigenvalues == "signed"
    a = 2.0 * P - 1.0 if signed else P
    w = delta * u
    S_new = a * S + w[..., None] * B_t[..., None, :]
    G = dS + dy[..., None] * C_t[..., None, :]       # everything reaching S'
    dP_times_P = G * S * P * (2.0 if signed else 1.0)
    dw = (G * B_t[..., None, :]).sum(axis=-1)
    d_delta = (dP_times_P * A).sum(axis=-1) + dw * u
    du = dw * delta + p["D"] * dy
    dB = (G * w[..., None]).sum(axis=-2)
    dC = (dy[..., None] * S_new).sum(axis=-2)
    dxw = xp.concatenate([du, d_delta * sigmoid(dt_pre, xp), dB, dC], axis=-1)
    dA_log = dP_times_P * delta[..., None] * A        # ∂A ⊙ A, per row
    dhw = xp.concatenate([dA_log.reshape(dA_log.shape[:-2] + (-1,)), dy * u], axis=-1)
    return (0.0 * dy, G * a), dxw, dhw


@register_cell("s6")
class S6(InputDrivenCell):
    """Mamba's selective state space recurrence (Gu & Dao 2023; ``selective_scan_ref``), one layer's cell:

        u = x W_xu + b_u,  Δ = softplus(x W_xΔ + b_Δ)          (B, E), E = hidden channels
        B_t = x W_xB + b_B,  C_t = x W_xC + b_C                 (B, N), shared by every channel
        A = −exp(A_log)                                         (E, N)
        S'[e, n] = ā[e, n] S[e, n] + Δ[e] B_t[n] u[e],   ā = exp(Δ[e] A[e, n])  (or 2 exp(ΔA) − 1, ``signed``)
        y[e] = Σ_n C_t[n] S'[e, n] + D[e] u[e]

    The state is (y, S): y (B, hidden) is the output; S (B, hidden, d_state) the per-channel memory (y is carried so
    that a padded step repeats its output; the step never reads it). ``W_x`` (input_size, 2*hidden + 2*d_state) in
    block order u, Δ, B, C; ``b`` likewise; ``A_log`` (hidden, d_state) = log(1, …, N) per channel (S4D real);
    ``D`` (hidden,) = 1; the Δ bias is softplus⁻¹ of dt ~ log-uniform [1e-3, 0.1] (mamba's dt_proj init).

    Named differences from ``mamba_simple.Mamba``: Δ, B and C are read from the cell's input x through full maps
    (Mamba reads them from u through x_proj, with Δ through a rank-⌈D/16⌉ bottleneck), and u is a projection of x
    (in the Mamba block, the in_proj → conv → silu before it is the block's). The input term is Euler's Δ B u, as the
    official code has it.
    """

    title = "S6"
    linear_state = (1,)          # S; y is its readout
    gates = 2
    state_size = 2
    options = (Option("d_state", 16, int, "state size N per channel (Mamba's d_state)"),
               _eigenvalues_option("exp(Delta A)"))

    def state_shapes(self):
        return ((self.hidden_size,), (self.hidden_size, self.d_state))

    def _configure(self, *args, **kwargs):
        super()._configure(*args, **kwargs)
        if self.d_state < 1:
            raise ValueError(f"S6: d_state must be a positive integer, got {self.d_state}")

    def param_shapes(self):
        I, H, N = self.input_size, self.hidden_size, self.d_state
        shapes = {"W_x": (I, 2 * H + 2 * N)}
        if self.bias:
            shapes["b"] = (2 * H + 2 * N,)
        shapes["A_log"] = (H, N)
        shapes["D"] = (H,)
        return shapes

    def initialize(self, rng):
        H, N = self.hidden_size, self.d_state
        self.params["A_log"] = np.log(np.tile(np.arange(1, N + 1, dtype=np.float64), (H, 1))).astype(self.dtype)
        self.params["D"] = np.ones(H, self.dtype)
        if "b" in self.params:
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), size=H)).clip(min=1e-4)
            self.params["b"][H:2 * H] = dt + np.log(-np.expm1(-dt))        # softplus⁻¹(dt)

    def step(self, p, xw, state, xp=np):
        return s6_step(p, xw, state, self.d_state, self.eigenvalues, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return s6_step_backward(p, dstate, cache, prev, self.eigenvalues, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        H, N = self.hidden_size, self.d_state
        total = dhw.sum(axis=0)
        return {"A_log": total[:H * N].reshape(H, N), "D": total[H * N:]}

    def fused_forward(self, p, xw, state0, mask):
        T, B, H, N = xw.shape[0], xw.shape[1], self.hidden_size, self.d_state
        ys, S = np.empty((T, B, H), self.dtype), np.empty((T, B, H, N), self.dtype)
        A = (-np.exp(p["A_log"])).astype(self.dtype)
        s6_forward_loop(xw, state0[0], state0[1], mask, A, p["D"], self.eigenvalues == "signed", ys, S)
        steps = {"u": xw[..., :H].copy(), "dt_pre": xw[..., H:2 * H].copy(), "B": xw[..., 2 * H:2 * H + N].copy(),
                 "C": xw[..., 2 * H + N:].copy()}
        return (ys, S), steps

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives [du, dΔ_pre, dB, dC]; the returned dhw is one row, the
        gradients of A_log (as ∂A ⊙ A) and D summed over every step and sequence."""
        H, N = self.hidden_size, self.d_state
        sums = np.zeros((1, H * N + H), self.dtype)
        A = (-np.exp(p["A_log"])).astype(self.dtype)
        dy0, dS0 = s6_backward_loop(dhs, np.ascontiguousarray(cache.state0[1]), cache.states[1], cache.steps["dt_pre"],
                                    mask, A, p["D"], self.eigenvalues == "signed", back_steps,
                                    np.ascontiguousarray(_xw_of(cache.steps)), dxw, sums, dh_out)
        return dxw, sums, (dy0, dS0)


def _xw_of(steps: dict) -> np.ndarray:
    """S6's projected input [u, Δ_pre, B, C] again, from the step's stored parts."""
    return np.concatenate([steps["u"], steps["dt_pre"], steps["B"], steps["C"]], axis=-1)


@kernel
def s6_forward_loop(xw, y0, S0, mask, A, D, signed, ys, S_steps):
    """Δ = softplus(xw_Δ); S'[e, n] = ā S[e, n] + Δ[e] B[n] u[e]; y[e] = Σ_n C[n] S'[e, n] + D[e] u[e]; a padded
    step keeps (y, S)."""
    T, B, H = ys.shape
    N = S0.shape[2]
    one = one_of(ys)
    y, S = y0.copy(), S0.copy()
    for t in range(T):
        for r in range(B):
            if mask[t, r] > 0.0:
                for j in range(H):
                    u, pre = xw[t, r, j], xw[t, r, H + j]
                    delta = kernel_softplus(pre)
                    total = D[j] * u
                    for n in range(N):
                        P = np.exp(delta * A[j, n])
                        a = (one + one) * P - one if signed else P
                        S[r, j, n] = a * S[r, j, n] + delta * u * xw[t, r, 2 * H + n]
                        total += xw[t, r, 2 * H + N + n] * S[r, j, n]
                    y[r, j] = total
        ys[t] = y
        S_steps[t] = S


@kernel
def s6_backward_loop(dhs, S0, S_steps, dt_steps, mask, A, D, signed, back_steps, xw, da_sum, sums, dh_out):
    """s6_step_backward for every age at once, padded steps passing their deltas through. Returns (dy0, dS0);
    da_sum receives [du, dΔ_pre, dB, dC]; sums gains ∂A ⊙ A and ∂D over every row."""
    T, B, H = dhs.shape
    N = S0.shape[2]
    carry_y = new_carry(back_steps, B, H, dhs)
    carry_S = new_carry(back_steps, B, H * N, dhs)
    A_ages = carry_y.shape[0]
    width = 2 * H + 2 * N
    da = np.zeros((A_ages * B, width), dhs.dtype)
    dprev_y = np.zeros((A_ages, B, H), dhs.dtype)
    dprev_S = np.empty((A_ages, B, H * N), dhs.dtype)
    one, zero = one_of(dhs), zero_of(dhs)
    gain = one + one if signed else one
    for t in range(T - 1, -1, -1):
        inject(carry_y, dhs[t], dh_out[t])
        prev_S = S_steps[t - 1] if t > 0 else S0
        for k in range(A_ages):
            for r in range(B):
                m, row = mask[t, r], k * B + r
                da[row, :] = zero
                for j in range(H):
                    dy, u, pre = m * carry_y[k, r, j], xw[t, r, j], dt_steps[t, r, j]
                    delta = kernel_softplus(pre)
                    w, dw, d_delta = delta * u, zero, zero
                    for n in range(N):
                        G = m * carry_S[k, r, j * N + n] + dy * xw[t, r, 2 * H + N + n]
                        P = np.exp(delta * A[j, n])
                        a = (one + one) * P - one if signed else P
                        dPP = G * prev_S[r, j, n] * P * gain
                        dw += G * xw[t, r, 2 * H + n]
                        d_delta += dPP * A[j, n]
                        da[row, 2 * H + n] += G * w
                        da[row, 2 * H + N + n] += dy * S_steps[t, r, j, n]
                        sums[0, j * N + n] += dPP * delta * A[j, n]
                        dprev_S[k, r, j * N + n] = G * a + (one - m) * carry_S[k, r, j * N + n]
                    d_delta += dw * u
                    da[row, j] = dw * delta + D[j] * dy
                    da[row, H + j] = d_delta * kernel_sigmoid(pre)
                    sums[0, H * N + j] += dy * u
                    dprev_y[k, r, j] = (one - m) * carry_y[k, r, j]
        sum_ages(da, B, da_sum[t])
        step_back(carry_y, dprev_y, back_steps)
        step_back(carry_S, dprev_S, back_steps)
    return initial_state_delta(carry_y, back_steps), initial_state_delta(carry_S, back_steps).reshape(B, H, N)
