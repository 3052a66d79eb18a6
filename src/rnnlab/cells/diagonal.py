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

from rnnlab.cells.base import InputDrivenCell, Option
from rnnlab.cells.mingru import positive_activation
from rnnlab.cells.registry import register_cell
from rnnlab.common import sigmoid, softplus

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
