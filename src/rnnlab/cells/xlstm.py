"""xLSTM's cells (Beck et al. 2024): sLSTM (scalar memory, exponential gating, head-wise recurrence) and mLSTM
(matrix memory). Both carry a stabiliser m that keeps exp(ĩ) from overflowing: the stabilised step gives the same
outputs as the plain one (MODERN.md §1.6–1.7), and the adjoints here differentiate the stabilised step as computed,
m included, so they are its exact derivative (the paper's "m gets no gradient" is the same numbers up to rounding:
the paths through m cancel).

Heads: hidden = heads × d. ``heads`` defaults to 1; the papers use 4.
"""

from __future__ import annotations

import math

import numpy as np

from rnnlab.cells import chunks
from rnnlab.cells.ages import age_in_place, initial_state_delta, inject, new_carry, sum_ages
from rnnlab.cells.base import Cell, Option
from rnnlab.cells.chunks import transposed
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import (
    constant_in_dtype,
    kernel,
    kernel_exp,
    kernel_log1p_unit,
    kernel_sigmoid,
    kernel_tanh,
    one_of,
    zero_of,
)
from rnnlab.cells.registry import register_cell
from rnnlab.common import sigmoid, softplus

FORGET_GATES = ("sigmoid", "exp")
MLSTM_EPS = 1e-6          # added to the normaliser's denominator, as xLSTM's recurrent_step_stabilized_simple
mlstm_eps_of = constant_in_dtype(MLSTM_EPS, "mlstm_eps_of", "the mLSTM kernels' normaliser floor.")


def _heads_option() -> Option:
    return Option("heads", 1, int, "heads: hidden is split into this many independent blocks (xLSTM, DeltaNet: 4)")


def _forget_option() -> Option:
    return Option("forget_gate", "sigmoid", str, "xLSTM's forget gate: sigmoid (log f = log sigma(f~)) or exp "
                  "(log f = f~)", FORGET_GATES)


def _check_heads(cell) -> None:
    if cell.heads < 1 or cell.hidden_size % cell.heads:
        raise ValueError(f"{type(cell).__name__}: heads must divide hidden_size ({cell.hidden_size}), got "
                         f"{cell.heads}")


def _log_forget(f_pre, kind, xp):
    """log f and d log f / d f̃."""
    if kind == "exp":
        return f_pre, 1.0
    return -softplus(-f_pre, xp), sigmoid(-f_pre, xp)


def _heads(a, NH):
    """(…, NH·d) → (…, NH, d)."""
    return a.reshape(a.shape[:-1] + (NH, a.shape[-1] // NH))


def _flat(a):
    """(…, NH, d) → (…, NH·d)."""
    return a.reshape(a.shape[:-2] + (a.shape[-2] * a.shape[-1],))


# -- sLSTM -------------------------------------------------------------------------------------------------------

def _recurrent(p, h, NH):
    """h R, head by head: (…, H) → (…, 4H) in the gate-major layout of xw (i, f, z, o; each H wide)."""
    d = h.shape[-1] // NH
    rec = (_heads(h, NH)[..., :, :, None] * p["R"]).sum(axis=-2)          # (…, NH, 4d)
    rec = rec.reshape(rec.shape[:-1] + (4, d))                             # (…, NH, 4, d)
    rec = rec.swapaxes(-3, -2)                                             # (…, 4, NH, d)
    return rec.reshape(rec.shape[:-3] + (4 * NH * d,))


def _recurrent_transposed(p, da, NH):
    """da R_headᵀ: (…, 4H) gate-major → (…, H)."""
    H = da.shape[-1] // 4
    d = H // NH
    g = da.reshape(da.shape[:-1] + (4, NH, d)).swapaxes(-3, -2)            # (…, NH, 4, d)
    g = g.reshape(g.shape[:-2] + (4 * d,))                                  # (…, NH, 4d)
    return _flat((p["R"] * g[..., :, None, :]).sum(axis=-1))


def slstm_step(p, xw, state, NH, forget="sigmoid", xp=np):
    h, c, n, m = state
    H = h.shape[-1]
    a = xw + _recurrent(p, h, NH)
    i_pre, f_pre, z_pre, o_pre = a[..., :H], a[..., H:2 * H], a[..., 2 * H:3 * H], a[..., 3 * H:]
    log_f, _ = _log_forget(f_pre, forget, xp)
    m_new = xp.maximum(log_f + m, i_pre)
    i, f = xp.exp(i_pre - m_new), xp.exp(log_f + m - m_new)
    z, o = xp.tanh(z_pre), sigmoid(o_pre, xp)
    c_new = f * c + i * z
    n_new = f * n + i
    return (o * c_new / n_new, c_new, n_new, m_new), {"a": a, "m_new": m_new}


def slstm_step_backward(p, dstate, cache, prev, NH, forget="sigmoid", xp=np):
    dh, dc, dn, dm = dstate
    _, c, n, m = prev
    a, m_new = cache["a"], cache["m_new"]
    H = dh.shape[-1]
    i_pre, f_pre, z_pre, o_pre = a[..., :H], a[..., H:2 * H], a[..., 2 * H:3 * H], a[..., 3 * H:]
    log_f, dlog_f = _log_forget(f_pre, forget, xp)
    i, f = xp.exp(i_pre - m_new), xp.exp(log_f + m - m_new)
    z, o = xp.tanh(z_pre), sigmoid(o_pre, xp)
    c_new, n_new = f * c + i * z, f * n + i
    ratio = c_new / n_new
    do_pre = dh * ratio * o * (1.0 - o)
    dc_t = dc + dh * o / n_new
    dn_t = dn - dh * o * ratio / n_new
    df, di = dc_t * c + dn_t * n, dc_t * z + dn_t
    dz_pre = dc_t * i * (1.0 - z * z)
    dm_t = dm - df * f - di * i                    # everything reaching m' (f and i divide by exp(m'))
    d_sum = df * f                                  # reaching log f + m
    di_pre = di * i
    takes_sum = (log_f + m) >= i_pre                # m' = max(log f + m, ĩ): the branch it took
    d_sum = d_sum + xp.where(takes_sum, dm_t, 0.0)
    di_pre = di_pre + xp.where(takes_sum, 0.0, dm_t)
    da = xp.concatenate([di_pre, d_sum * dlog_f, dz_pre, do_pre], axis=-1)
    dh_prev = _recurrent_transposed(p, da, NH)
    return (dh_prev, dc_t * f, dn_t * f, d_sum), da, da


def _powerlaw_forget_bias(H: int, NH: int) -> np.ndarray:
    """xLSTM's "powerlaw_blockdependent" forget bias: from +5 down to −7 across each head, steeper in later heads."""
    d = H // NH
    out = np.empty(H)
    for head in range(NH):
        r = head / (NH - 1) if NH > 1 else 0.0
        j = np.arange(d) / (d - 1) if d > 1 else np.zeros(1)
        out[head * d:(head + 1) * d] = -(-5.0 + 12.0 * j ** (0.3 + 1.3 * r))
    return out


@register_cell("slstm")
class SLSTM(Cell):
    """xLSTM's sLSTM, stabilised (official ``slstm/src/vanilla/slstm.py``):

        (ĩ, f̃, z̃, õ) = x W_x + b + h R                R head-wise block-diagonal
        m' = max(log f + m, ĩ),  log f = log σ(f̃) (or f̃ with forget_gate="exp")
        i = exp(ĩ − m'),  f = exp(log f + m − m')
        c' = f c + i tanh(z̃),  n' = f n + i,  h' = σ(õ) ⊙ c' / n'

    State (h, c, n, m), each (B, hidden). Parameters: ``W_x`` (input_size, 4*hidden) in gate order i, f, z, o;
    ``b`` (4*hidden,), its f block xLSTM's power-law init; ``R`` (heads, d, 4d), d = hidden/heads, its columns in
    gate order i, f, z, o: 4(nm + n) + 4n²/heads parameters. ``r_init``: R starts at zeros (xLSTM's default) or
    U(±1/√d). Named differences: xLSTM's input maps are head-wise (block-diagonal) and bias-free (here a full
    ``W_x`` and one bias); its backward clips the recurrent error at 10, rnnlab's does not.

    Not linear in its state (R h feeds the gates): BPTT only, no scan.
    """

    title = "sLSTM"
    gates = 4
    state_size = 4
    options = (_heads_option(), _forget_option(),
               Option("r_init", "zeros", str, "sLSTM's recurrent matrices at init: zeros (xLSTM) or uniform",
                      ("zeros", "uniform")))

    def _configure(self, *args, **kwargs):
        super()._configure(*args, **kwargs)
        _check_heads(self)

    def param_shapes(self):
        I, H, NH = self.input_size, self.hidden_size, self.heads
        d = H // NH
        shapes = {"W_x": (I, 4 * H)}
        if self.bias:
            shapes["b"] = (4 * H,)
        shapes["R"] = (NH, d, 4 * d)
        return shapes

    def init_param(self, name, shape, rng):
        if name == "R":
            d = self.hidden_size // self.heads
            if self.r_init == "zeros":
                return np.zeros(shape, self.dtype)
            return rng.uniform(-1 / np.sqrt(d), 1 / np.sqrt(d), size=shape).astype(self.dtype)
        return super().init_param(name, shape, rng)

    def initialize(self, rng):
        H = self.hidden_size
        if "b" in self.params and self.init == "uniform":
            b = np.zeros(4 * H)
            b[H:2 * H] = _powerlaw_forget_bias(H, self.heads)
            self.params["b"] = b.astype(self.dtype)

    def random_state(self, rng, B):
        H = self.hidden_size
        return (rng.normal(scale=0.5, size=(B, H)), rng.normal(scale=0.5, size=(B, H)),
                rng.uniform(0.5, 1.5, size=(B, H)), rng.normal(scale=0.5, size=(B, H)))

    def step(self, p, xw, state, xp=np):
        return slstm_step(p, xw, state, self.heads, self.forget_gate, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return slstm_step_backward(p, dstate, cache, prev, self.heads, self.forget_gate, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        NH = self.heads
        H = self.hidden_size
        d = H // NH
        # per head and gate, h_headᵀ · dĝ_head: strided column blocks, which BLAS reads in place (no copies)
        blocks = [[prev_h[:, k * d:(k + 1) * d].T @ dhw[:, g * H + k * d:g * H + (k + 1) * d] for g in range(4)]
                  for k in range(NH)]
        return {"R": xp.stack([xp.concatenate(row, axis=1) for row in blocks])}

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        hs, cs, ns, ms, m_new = (np.empty((T, B, H), self.dtype) for _ in range(5))
        a = np.empty((T, B, 4 * H), self.dtype)
        slstm_forward_loop(xw, *state0, mask, np.ascontiguousarray(p["R"]), self.forget_gate == "exp", hs, cs, ns,
                           ms, a, m_new)
        return (hs, cs, ns, ms), {"a": a, "m_new": m_new}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives the pre-activation gradients (= dhw, R's rows)."""
        R_T = np.ascontiguousarray(p["R"].swapaxes(1, 2))
        states0 = tuple(np.ascontiguousarray(s) for s in cache.state0)
        dstate0 = slstm_backward_loop(dhs, *states0, *cache.states[1:], cache.steps["a"], cache.steps["m_new"],
                                      mask, R_T, self.forget_gate == "exp", back_steps, dxw, dh_out)
        return dxw, dxw, dstate0


# the fused time loops of the Numba engine (rnnlab.engines.numba): per head, the recurrent product (B, d)·(d, 4d) in
# BLAS on a copy of that head's slice of h, then the gates elementwise

@kernel
def _slstm_gates(a, m_old, exp_forget, m_new, gates):
    """One row's gates, each its own loop over the hidden units (so that LLVM vectorises each): gates receives
    (log f, d log f / d f̃, i, f, tanh z̃, σ(õ)); m_new receives m' = max(log f + m, ĩ). a: the row's (4H,)
    pre-activations, gate-major.

    Four exponentials per unit, not six: log σ(f̃) and σ(−f̃) share u = e^−|f̃|, and of i = exp(ĩ − m') and
    f = exp(log f + m − m') the branch the max took is exp(0) = 1, the other exp(−|log f + m − ĩ|): the same
    floating-point differences, so the same numbers as the step's."""
    H = m_old.shape[0]
    one, zero = one_of(a), zero_of(a)
    log_f, dlog_f, i, f, z, o = gates[0], gates[1], gates[2], gates[3], gates[4], gates[5]
    if exp_forget:
        for j in range(H):
            log_f[j], dlog_f[j] = a[H + j], one
    else:                                   # log σ(f̃) = −softplus(−f̃); its slope σ(−f̃)
        for j in range(H):
            u = kernel_exp(-abs(a[H + j]))
            log_f[j] = -(max(-a[H + j], zero) + kernel_log1p_unit(u))
            dlog_f[j] = (u if a[H + j] >= zero else one) / (one + u)
    for j in range(H):
        total = log_f[j] + m_old[j]
        m_new[j] = max(total, a[j])
        e = kernel_exp(-abs(total - a[j]))
        takes_sum = total >= a[j]
        i[j] = e if takes_sum else one
        f[j] = one if takes_sum else e
    for j in range(H):
        z[j] = kernel_tanh(a[2 * H + j])
    for j in range(H):
        o[j] = kernel_sigmoid(a[3 * H + j])


@kernel
def slstm_forward_loop(xw, h0, c0, n0, m0, mask, R, exp_forget, hs, cs, ns, ms, a_steps, m_steps):
    """slstm_step over T steps: a = xw + h R (head-wise), the stabilised exponential gates; a padded step keeps
    (h, c, n, m). a_steps and m_steps receive the step's a and m' (every row, as the NumPy loop computes them)."""
    T, B, H = hs.shape
    NH, d = R.shape[0], R.shape[1]
    h, c, n, m = h0.copy(), c0.copy(), n0.copy(), m0.copy()
    h_head, rec = np.empty((B, d), hs.dtype), np.empty((B, 4 * d), hs.dtype)
    gates = np.empty((6, H), hs.dtype)
    i, f, z, o = gates[2], gates[3], gates[4], gates[5]
    for t in range(T):
        a = a_steps[t]
        for head in range(NH):
            for r in range(B):
                h_head[r] = h[r, head * d:(head + 1) * d]
            kernel_matmul(h_head, R[head], rec)
            for r in range(B):
                for g in range(4):
                    for j in range(d):
                        col = g * H + head * d + j
                        a[r, col] = xw[t, r, col] + rec[r, g * d + j]
        for r in range(B):
            _slstm_gates(a[r], m[r], exp_forget, m_steps[t, r], gates)
            if mask[t, r] > 0.0:
                for j in range(H):
                    c[r, j] = f[j] * c[r, j] + i[j] * z[j]
                    n[r, j] = f[j] * n[r, j] + i[j]
                    h[r, j] = o[j] * c[r, j] / n[r, j]
                    m[r, j] = m_steps[t, r, j]
        hs[t], cs[t], ns[t], ms[t] = h, c, n, m


@kernel
def _recurrent_error(da, R_T, mask_t, carry_h, da_head, d_head):
    """What reaches h from the gates, da R_headᵀ head by head (in BLAS, on a copy of each head's columns of da),
    written over carry_h (A, B, H), plus what a padded row passes through."""
    A, B, H = carry_h.shape
    NH, d = R_T.shape[0], R_T.shape[2]
    one = one_of(da)
    for head in range(NH):
        for row in range(A * B):
            for g in range(4):
                da_head[row, g * d:(g + 1) * d] = da[row, g * H + head * d:g * H + (head + 1) * d]
        kernel_matmul(da_head, R_T[head], d_head)
        for s in range(A):
            for r in range(B):
                keep = one - mask_t[r]
                for j in range(d):
                    col = head * d + j
                    carry_h[s, r, col] = d_head[s * B + r, j] + keep * carry_h[s, r, col]


@kernel
def slstm_backward_loop(dhs, h0, c0, n0, m0, cs, ns, ms, a_steps, m_steps, mask, R_T, exp_forget, back_steps,
                        da_sum, dh_out):
    """slstm_step_backward for every age at once, padded steps passing their deltas through; dh_prev = da R_headᵀ per
    head in BLAS. Returns (dh0, dc0, dn0, dm0); da_sum receives [dĩ, df̃, dz̃, dõ]."""
    T, B, H = dhs.shape
    d = R_T.shape[2]
    one, zero = one_of(dhs), zero_of(dhs)
    carry_h, carry_c = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H, dhs)
    carry_n, carry_m = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H, dhs)
    A = carry_h.shape[0]
    per_age = np.empty((A * B, 4 * H), dhs.dtype)
    da_head, d_head = np.empty((A * B, 4 * d), dhs.dtype), np.empty((A * B, d), dhs.dtype)
    gates, m_new = np.empty((6, H), dhs.dtype), np.empty(H, dhs.dtype)
    log_f, dlog_f, i, f, z, o = gates[0], gates[1], gates[2], gates[3], gates[4], gates[5]
    for t in range(T - 1, -1, -1):
        inject(carry_h, dhs[t], dh_out[t])
        c_prev = cs[t - 1] if t > 0 else c0
        n_prev = ns[t - 1] if t > 0 else n0
        m_prev = ms[t - 1] if t > 0 else m0
        a = a_steps[t]
        da = da_sum[t] if A == 1 else per_age     # one age: written in place, nothing to sum
        for r in range(B):
            if mask[t, r] == 0.0:
                for s in range(A):
                    da[s * B + r] = zero              # and every delta passes through unchanged
                continue
            _slstm_gates(a[r], m_prev[r], exp_forget, m_new, gates)
            for s in range(A):
                row = s * B + r
                for j in range(H):
                    c_new = f[j] * c_prev[r, j] + i[j] * z[j]
                    n_new = f[j] * n_prev[r, j] + i[j]
                    dh = carry_h[s, r, j]
                    inv_n = one / n_new
                    ratio = c_new * inv_n
                    dc_t = carry_c[s, r, j] + dh * o[j] * inv_n
                    dn_t = carry_n[s, r, j] - dh * o[j] * ratio * inv_n
                    df, di = dc_t * c_prev[r, j] + dn_t * n_prev[r, j], dc_t * z[j] + dn_t
                    dm_t = carry_m[s, r, j] - df * f[j] - di * i[j]
                    takes_sum = log_f[j] + m_prev[r, j] >= a[r, j]       # the branch m' = max(…) took
                    d_sum = df * f[j] + (dm_t if takes_sum else zero)
                    da[row, j] = di * i[j] + (zero if takes_sum else dm_t)
                    da[row, H + j] = d_sum * dlog_f[j]
                    da[row, 2 * H + j] = dc_t * i[j] * (one - z[j] * z[j])
                    da[row, 3 * H + j] = dh * ratio * o[j] * (one - o[j])
                    carry_c[s, r, j], carry_n[s, r, j], carry_m[s, r, j] = dc_t * f[j], dn_t * f[j], d_sum
        _recurrent_error(da, R_T, mask[t], carry_h, da_head, d_head)
        if A > 1:
            sum_ages(da, B, da_sum[t])
        age_in_place(carry_h, back_steps)          # the deltas reaching the previous step, written over the carry
        age_in_place(carry_c, back_steps)
        age_in_place(carry_n, back_steps)
        age_in_place(carry_m, back_steps)
    return (initial_state_delta(carry_h, back_steps), initial_state_delta(carry_c, back_steps),
            initial_state_delta(carry_n, back_steps), initial_state_delta(carry_m, back_steps))


# -- mLSTM -------------------------------------------------------------------------------------------------------

def mlstm_step(p, xw, state, NH, forget="sigmoid", xp=np):
    _, C, n, m = state                         # C (B, NH, d, d) stored k-major (d_k × d_v); n (B, NH, d); m (B, NH)
    H = C.shape[-3] * C.shape[-1]
    q, k, v = _heads(xw[..., :H], NH), _heads(xw[..., H:2 * H], NH), _heads(xw[..., 2 * H:3 * H], NH)
    i_pre, f_pre = xw[..., 3 * H:3 * H + NH], xw[..., 3 * H + NH:3 * H + 2 * NH]
    o = sigmoid(xw[..., 3 * H + 2 * NH:], xp)
    d = k.shape[-1]
    k = k / math.sqrt(d)        # a Python float: a float32 cell stays float32
    log_f, _ = _log_forget(f_pre, forget, xp)
    m_new = xp.maximum(log_f + m, i_pre)
    f, i = xp.exp(log_f + m - m_new), xp.exp(i_pre - m_new)
    C_new = f[..., None, None] * C + i[..., None, None] * k[..., :, None] * v[..., None, :]
    n_new = f[..., None] * n + i[..., None] * k
    qn = (q * n_new).sum(axis=-1)
    den = xp.maximum(xp.abs(qn), xp.exp(-m_new)) + MLSTM_EPS
    num = (q[..., :, None] * C_new).sum(axis=-2)            # qᵀ C'
    h = o * _flat(num / den[..., None])
    return (h, C_new, n_new, m_new), {"q": q, "k": k, "v": v, "i_pre": i_pre, "f_pre": f_pre, "o": o,
                                      "m_new": m_new}


def mlstm_step_backward(p, dstate, cache, prev, NH, forget="sigmoid", xp=np):
    dh, dC, dn, dm = dstate
    _, C, n, m = prev
    q, k, v, i_pre, f_pre, o, m_new = (cache[name] for name in ("q", "k", "v", "i_pre", "f_pre", "o", "m_new"))
    d = k.shape[-1]
    log_f, dlog_f = _log_forget(f_pre, forget, xp)
    f, i = xp.exp(log_f + m - m_new), xp.exp(i_pre - m_new)
    C_new = f[..., None, None] * C + i[..., None, None] * k[..., :, None] * v[..., None, :]
    n_new = f[..., None] * n + i[..., None] * k
    qn = (q * n_new).sum(axis=-1)
    floor = xp.exp(-m_new)
    on_qn = xp.abs(qn) >= floor
    den = xp.where(on_qn, xp.abs(qn), floor) + MLSTM_EPS
    num = (q[..., :, None] * C_new).sum(axis=-2)
    h_tilde = num / den[..., None]
    do_pre = dh * _flat(h_tilde) * o * (1.0 - o)
    dh_tilde = _heads(dh * o, NH)
    dnum = dh_tilde / den[..., None]
    dden = -(dh_tilde * h_tilde).sum(axis=-1) / den
    dqn = xp.where(on_qn, dden * xp.sign(qn), 0.0)
    dm_t = dm + xp.where(on_qn, 0.0, -dden * floor)
    dC_t = dC + q[..., :, None] * dnum[..., None, :]
    dn_t = dn + dqn[..., None] * q
    dq = (C_new * dnum[..., None, :]).sum(axis=-1) + dqn[..., None] * n_new
    df = (dC_t * C).sum(axis=(-1, -2)) + (dn_t * n).sum(axis=-1)
    dC_v = (dC_t * v[..., None, :]).sum(axis=-1)            # dC' v
    di = (k * dC_v).sum(axis=-1) + (dn_t * k).sum(axis=-1)
    dk = i[..., None] * (dC_v + dn_t) / math.sqrt(d)
    dv = i[..., None] * (dC_t * k[..., :, None]).sum(axis=-2)
    dm_t = dm_t - df * f - di * i
    d_sum = df * f
    di_pre = di * i
    takes_sum = (log_f + m) >= i_pre
    d_sum = d_sum + xp.where(takes_sum, dm_t, 0.0)
    di_pre = di_pre + xp.where(takes_sum, 0.0, dm_t)
    dxw = xp.concatenate([_flat(dq), _flat(dk), _flat(dv), di_pre, d_sum * dlog_f, do_pre], axis=-1)
    return (0.0 * dh, f[..., None, None] * dC_t, f[..., None] * dn_t, d_sum), dxw, dxw


@register_cell("mlstm")
class MLSTM(Cell):
    """xLSTM's mLSTM, stabilised (official ``backends.py`` ``recurrent_step_stabilized_simple``), per head:

        q, k, v = x W_q, x W_k / √d, x W_v (+ biases);  ĩ, f̃ scalars per head;  o = σ(x W_o + b_o)
        m' = max(log f + m, ĩ),  f = exp(log f + m − m'),  i = exp(ĩ − m')
        C' = f C + i k vᵀ,  n' = f n + i k,   h' = o ⊙ (qᵀ C') / (max(|qᵀ n'|, exp(−m')) + 10⁻⁶)

    State (h, C, n, m): h (B, hidden), the output (the step never reads it); C (B, heads, d, d), stored d_k × d_v as
    the official code; n (B, heads, d); m (B, heads). ``W_x`` (input_size, 4*hidden + 2*heads) in block order q, k,
    v, ĩ, f̃, o; ``b`` likewise, the f̃ block linspace(3, 6) over heads (xLSTM's init), the ĩ block N(0, 0.1²):
    4(nm + n) + 2 heads (m + 1) parameters. The output gate is the paper's σ(W_o x) (eq. 27); the xLSTM block
    replaces it with silu(z) outside the cell.

    Linear in the state (C, n); m is a (max, +) recurrence. The chunked engine solves it chunk by chunk as gated
    linear attention (``chunked_forward``, ``mlstm_chunk_readout``), the stabiliser from the loop's own recurrence.
    """

    title = "mLSTM"
    gates = 4
    state_size = 4
    options = (_heads_option(), _forget_option())

    def _configure(self, *args, **kwargs):
        super()._configure(*args, **kwargs)
        _check_heads(self)

    def state_shapes(self):
        H, NH = self.hidden_size, self.heads
        d = H // NH
        return ((H,), (NH, d, d), (NH, d), (NH,))

    def _width(self) -> int:
        return 4 * self.hidden_size + 2 * self.heads

    def param_shapes(self):
        shapes = {"W_x": (self.input_size, self._width())}
        if self.bias:
            shapes["b"] = (self._width(),)
        return shapes

    def initialize(self, rng):
        H, NH = self.hidden_size, self.heads
        if "b" in self.params and self.init == "uniform":
            b = np.zeros(self._width())
            b[3 * H:3 * H + NH] = rng.normal(0.0, 0.1, size=NH)
            b[3 * H + NH:3 * H + 2 * NH] = np.linspace(3.0, 6.0, NH)
            self.params["b"] = b.astype(self.dtype)
            self.params["W_x"][:, 3 * H:3 * H + 2 * NH] = 0.0        # the gates' weights start at zero

    def step(self, p, xw, state, xp=np):
        return mlstm_step(p, xw, state, self.heads, self.forget_gate, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return mlstm_step_backward(p, dstate, cache, prev, self.heads, self.forget_gate, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        return {}

    def _inputs(self, xw):
        """The step's inputs that depend on x only, for all T·B rows at once: q, k/√d, v (T, B, heads, d), ĩ, f̃,
        log f (T, B, heads), o (T, B, hidden)."""
        H, NH = self.hidden_size, self.heads
        T, B = xw.shape[:2]
        d = H // NH

        def part(lo, hi, shape):
            return np.ascontiguousarray(xw[..., lo:hi].reshape((T, B) + shape))
        q, k, v = part(0, H, (NH, d)), part(H, 2 * H, (NH, d)) / math.sqrt(d), part(2 * H, 3 * H, (NH, d))
        i_pre, f_pre = part(3 * H, 3 * H + NH, (NH,)), part(3 * H + NH, 3 * H + 2 * NH, (NH,))
        log_f, _ = _log_forget(f_pre, self.forget_gate, np)
        return q, k, v, i_pre, f_pre, np.ascontiguousarray(log_f), sigmoid(xw[..., 3 * H + 2 * NH:], np)

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        q, k, v, i_pre, f_pre, log_f, o = self._inputs(xw)
        hs = np.empty((T, B, H), self.dtype)
        Cs, ns, ms = (np.empty((T,) + s.shape, self.dtype) for s in state0[1:])
        m_new = np.empty_like(ms)
        mlstm_forward_loop(q, k, v, i_pre, log_f, o, *state0, mask, hs, Cs, ns, ms, m_new)
        return (hs, Cs, ns, ms), {"q": q, "k": k, "v": v, "i_pre": i_pre, "f_pre": f_pre, "o": o, "m_new": m_new}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop: it writes [dq, d(k/√d), dv, dĩ, d(log f), dh ⊙ h̃] into dxw; the
        gates' slopes (1/√d, d log f / d f̃, σ′(o)) are applied here, over all rows at once."""
        st = cache.steps
        log_f, dlog_f = _log_forget(st["f_pre"], self.forget_gate, np)
        states0 = tuple(np.ascontiguousarray(s) for s in cache.state0)
        dstate0 = mlstm_backward_loop(dhs, *states0[1:], *cache.states[1:], st["q"], st["k"], st["v"], st["i_pre"],
                                      np.ascontiguousarray(log_f), st["o"], st["m_new"], mask, back_steps, dxw, dh_out)
        self._gate_slopes(st, dlog_f, dxw)
        return dxw, dxw, tuple(d.reshape(s.shape) for d, s in zip(dstate0, states0))

    def _gate_slopes(self, st, dlog_f, dxw):
        """dxw from [dq, d(k/√d), dv, dĩ, d(log f), dh ⊙ h̃], in place: the slopes of 1/√d, log f and σ(o)."""
        H, NH = self.hidden_size, self.heads
        dxw[..., H:2 * H] /= math.sqrt(H // NH)
        dxw[..., 3 * H + NH:3 * H + 2 * NH] *= dlog_f
        dxw[..., 3 * H + 2 * NH:] *= st["o"] * (1.0 - st["o"])

    def chunked_pays(self) -> bool:
        return self.hidden_size // self.heads >= MLSTM_CHUNKED_FROM_HEAD_DIM

    def chunked_forward(self, p, xw, state0, mask):
        """The chunked engine's forward: the stabilisers and the per-step states from the loop's update pass
        (``mlstm_forward_loop`` without its readouts), the readouts of every chunk at once as matmuls
        (``mlstm_chunk_readout``): the same states and cache as ``fused_forward``. mask (T, B)."""
        T, B, H = xw.shape[0], xw.shape[1], self.hidden_size
        q, k, v, i_pre, f_pre, log_f, o = self._inputs(xw)
        hs = np.empty((T, B, H), self.dtype)
        Cs, ns, ms = (np.empty((T,) + s.shape, self.dtype) for s in state0[1:])
        m_new = np.empty_like(ms)
        mlstm_forward_loop(q, k, v, i_pre, log_f, o, *state0, mask, hs, Cs, ns, ms, m_new, False)
        qc, kc, vc, ic, lg, kept, mc = self._chunks(q, k, v, i_pre, log_f, ms, mask)
        C0s, n0s, m0s = (_chunk_starts(s0, s, qc.shape[1]) for s0, s in zip(state0[1:], (Cs, ns, ms)))
        h_tilde = chunks.unchunked(mlstm_chunk_readout(qc, kc, vc, ic, lg, mc, m0s, kept, C0s, n0s), T, B)
        hs = chunks.repeated_over_padding(o * _flat(h_tilde), mask, state0[0]).astype(self.dtype, copy=False)
        return (hs, Cs, ns, ms), {"q": q, "k": k, "v": v, "i_pre": i_pre, "f_pre": f_pre, "o": o, "m_new": m_new}

    def chunked_backward(self, p, dhs, cache, mask):
        """The chunked engine's full BPTT (``mlstm_chunk_backward`` from the last chunk back, then the stabilisers'
        error through their recurrence): → (dxw, dhw), dstate0, the total error reaching each h_t. mask (T, B)."""
        st, (_, Cs, ns, ms) = cache.steps, cache.states
        T, B, NH, d = st["q"].shape
        log_f, dlog_f = _log_forget(st["f_pre"], self.forget_gate, np)
        log_f = np.ascontiguousarray(log_f)
        errors, dh0 = chunks.readout_errors(dhs, mask)
        qc, kc, vc, ic, lg, kept, mc = self._chunks(st["q"], st["k"], st["v"], st["i_pre"], log_f, ms, mask)
        n = qc.shape[1]
        C0s, n0s, m0s = (_chunk_starts(s0, s, n) for s0, s in zip(cache.state0[1:], (Cs, ns, ms)))
        dH = chunks.chunked(_heads(errors * mask[..., None] * st["o"], NH))[0]
        outputs = [np.zeros_like(qc) for _ in range(4)] + [np.zeros_like(lg) for _ in range(3)] + [np.zeros_like(m0s)]
        dC, dn = np.zeros_like(C0s[:, 0]), np.zeros_like(n0s[:, 0])
        for c in range(n - 1, -1, -1):
            *local, dC, dn = mlstm_chunk_backward(dH[:, c], dC, dn, qc[:, c], kc[:, c], vc[:, c], ic[:, c], lg[:, c],
                                                  mc[:, c], m0s[:, c], kept[:, c], C0s[:, c], n0s[:, c])
            for out, value in zip(outputs, local):
                out[:, c] = value
        h_tilde, dq, dk, dv, d_i, dlg, dm, dm_starts = outputs
        d_log_f = np.flip(np.cumsum(np.flip(dlg, -1), -1), -1)                 # lg = cumsum(log f)
        keep = mask[..., None]
        d_i, d_log_f = (chunks.unchunked(a, T, B) * keep for a in (d_i, d_log_f))
        dm_all = np.zeros((T + 1, B, NH), self.dtype)                         # before step 0, then after each step
        dm_all[1:] = chunks.unchunked(dm, T, B)
        dm_all[np.arange(n) * chunks.CHUNK_LENGTH] += np.moveaxis(dm_starts.reshape(B, NH, n), 2, 0)
        dm0 = mlstm_stabiliser_backward(dm_all, log_f, st["i_pre"], mask, np.ascontiguousarray(cache.state0[3]),
                                        ms, d_log_f, d_i)
        dxw = np.concatenate([_flat(chunks.unchunked(a, T, B)) for a in (dq, dk, dv)]
                             + [d_i, d_log_f, errors * keep * _flat(chunks.unchunked(h_tilde, T, B))], axis=-1)
        self._gate_slopes(st, dlog_f, dxw)
        dstate0 = (dh0, dC.reshape(cache.state0[1].shape), dn.reshape(cache.state0[2].shape), dm0)
        return (dxw, dxw), dstate0, errors

    def _chunks(self, q, k, v, i_pre, log_f, ms, mask):
        """The chunked form's inputs as chunks (``chunks.chunked``, (B·heads, chunks, L, …)): q, k, v, ĩ, lg (the
        cumulative log f within each chunk, log f = 0 at a padded step), keep (1, or 0 at a padded step and after
        T), m (the stabiliser after each step; the steps after T keep the last)."""
        keep = np.broadcast_to(mask[..., None], ms.shape).astype(self.dtype)
        qc, kc, vc, ic, lf, kept = chunks.chunked(q, k, v, i_pre, log_f * keep, keep)
        return qc, kc, vc, ic, np.cumsum(lf, axis=-1), kept, chunks.chunked(ms, edge=True)[0]


# the fused time loops of the Numba engine: per row and head, one pass over C for the update and the readout forward,
# two passes backward (the readout's, then the update's), the error of C updated in place

@kernel
def mlstm_forward_loop(q, k, v, i_pre, log_f, o, h0, C0, n0, m0, mask, hs, Cs, ns, ms, m_steps, readout=True):
    """mlstm_step over T steps from the inputs that depend on x only (``MLSTM._inputs``); a padded step keeps
    (h, C, n, m). m_steps receives m' for every row, as the NumPy loop computes it. Without ``readout`` (the chunked
    form's pass, whose readouts are matmuls) it updates (C, n, m) only and leaves h at h0."""
    T, B, NH, d = q.shape
    one, zero = one_of(hs), zero_of(hs)
    eps = mlstm_eps_of(hs)
    h, C, n, m = h0.copy(), C0.copy(), n0.copy(), m0.copy()
    num = np.empty(d, hs.dtype)
    for t in range(T):
        for r in range(B):
            keep = mask[t, r] > 0.0
            for head in range(NH):
                total, i_tilde = log_f[t, r, head] + m[r, head], i_pre[t, r, head]
                m_new = max(total, i_tilde)
                m_steps[t, r, head] = m_new
                if not keep:
                    continue
                e = kernel_exp(-abs(total - i_tilde))       # of exp(ĩ − m') and exp(log f + m − m'), one is 1
                ig, fg = (e, one) if total >= i_tilde else (one, e)
                Ch, nh, qh, kh, vh = C[r, head], n[r, head], q[t, r, head], k[t, r, head], v[t, r, head]
                m[r, head] = m_new
                if not readout:
                    for a in range(d):
                        ik = ig * kh[a]
                        nh[a] = fg * nh[a] + ik
                        for b in range(d):
                            Ch[a, b] = fg * Ch[a, b] + ik * vh[b]
                    continue
                num[:] = zero
                qn = zero
                for a in range(d):
                    ik = ig * kh[a]
                    nh[a] = fg * nh[a] + ik
                    qn += qh[a] * nh[a]
                    for b in range(d):
                        Ch[a, b] = fg * Ch[a, b] + ik * vh[b]
                        num[b] += qh[a] * Ch[a, b]
                den = max(abs(qn), kernel_exp(-m_new)) + eps
                for b in range(d):
                    h[r, head * d + b] = o[t, r, head * d + b] * (num[b] / den)
        hs[t], Cs[t], ns[t], ms[t] = h, C, n, m


@kernel
def _mlstm_head_backward(dh, o, dC, dn, C_new, n_new, C_old, n_old, q, k, v, i_gate, f_gate, m_new, eps, out, gates,
                         work):
    """One row and head of mlstm_step_backward, the stabiliser's branch left to the caller. dh, o: the head's error
    and output gate (d,); dC (d·d,) and dn (d,): the errors of C' and n', overwritten with what reaches C and n.
    out (4, d) receives dq, d(k/√d), dv, dh ⊙ h̃; gates (3,) d f, d i and the error reaching m' through the floor."""
    d = q.shape[0]
    zero = zero_of(dh)
    num, dnum, dq_C, dC_v, dv = work[0], work[1], work[2], work[3], work[4]
    qn = zero
    for a in range(d):
        qn += q[a] * n_new[a]
    floor = kernel_exp(-m_new)
    on_qn = abs(qn) >= floor
    den = (abs(qn) if on_qn else floor) + eps
    for b in range(d):
        dnum[b] = dh[b] * o[b] / den
    num[:] = zero
    for a in range(d):                   # the readout: num = qᵀ C', dq_C = C' dnum
        qa, acc = q[a], zero
        for b in range(d):
            num[b] += qa * C_new[a, b]
            acc += C_new[a, b] * dnum[b]
        dq_C[a] = acc
    dden = zero
    for b in range(d):
        h_tilde = num[b] / den
        dden -= dh[b] * o[b] * h_tilde
        out[3, b] = dh[b] * h_tilde
    dden /= den
    dqn = (dden if qn >= zero else -dden) if on_qn else zero
    df = zero
    dv[:] = zero
    for a in range(d):                   # the update: dC_t = dC + q dnumᵀ reaches C' and, × f, C
        qa, ka, acc = q[a], k[a], zero
        for b in range(d):
            dct = dC[a * d + b] + qa * dnum[b]
            df += dct * C_old[a, b]
            acc += dct * v[b]
            dv[b] += dct * ka
            dC[a * d + b] = f_gate * dct
        dC_v[a] = acc
    di = zero
    for a in range(d):
        dn_t = dn[a] + dqn * q[a]
        df += dn_t * n_old[a]
        di += k[a] * (dC_v[a] + dn_t)
        out[0, a] = dq_C[a] + dqn * n_new[a]
        out[1, a] = i_gate * (dC_v[a] + dn_t)
        dn[a] = f_gate * dn_t
    for b in range(d):
        out[2, b] = i_gate * dv[b]
    gates[0], gates[1], gates[2] = df, di, (zero if on_qn else -dden * floor)


@kernel
def mlstm_backward_loop(dhs, C0, n0, m0, Cs, ns, ms, q, k, v, i_pre, log_f, o, m_steps, mask, back_steps, da_sum,
                        dh_out):
    """mlstm_step_backward for every age at once, padded steps passing their deltas through. Returns (dh0, dC0, dn0,
    dm0); da_sum receives [dq, d(k/√d), dv, dĩ, d(log f), dh ⊙ h̃] (the slopes of the gates applied after)."""
    T, B, NH, d = q.shape
    H = NH * d
    one, zero = one_of(dhs), zero_of(dhs)
    eps = mlstm_eps_of(dhs)
    carry_h, carry_C = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H * d, dhs)
    carry_n, carry_m = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, NH, dhs)
    A = carry_h.shape[0]
    da = np.empty((A * B, 4 * H + 2 * NH), dhs.dtype)
    out, gates, work = np.empty((4, d), dhs.dtype), np.empty(3, dhs.dtype), np.empty((5, d), dhs.dtype)
    for t in range(T - 1, -1, -1):
        inject(carry_h, dhs[t], dh_out[t])
        C_prev = Cs[t - 1] if t > 0 else C0
        n_prev = ns[t - 1] if t > 0 else n0
        m_prev = ms[t - 1] if t > 0 else m0
        for s in range(A):
            for r in range(B):
                row = s * B + r
                if mask[t, r] == 0.0:            # padding: nothing enters the step, every delta passes through
                    da[row] = zero
                    continue
                for head in range(NH):
                    total, i_tilde = log_f[t, r, head] + m_prev[r, head], i_pre[t, r, head]
                    e = kernel_exp(-abs(total - i_tilde))
                    takes_sum = total >= i_tilde
                    ig, fg = (e, one) if takes_sum else (one, e)
                    cols = slice(head * d, (head + 1) * d)
                    _mlstm_head_backward(
                        carry_h[s, r, cols], o[t, r, cols], carry_C[s, r, head * d * d:(head + 1) * d * d],
                        carry_n[s, r, cols], Cs[t, r, head], ns[t, r, head], C_prev[r, head], n_prev[r, head],
                        q[t, r, head], k[t, r, head], v[t, r, head], ig, fg, m_steps[t, r, head], eps, out, gates,
                        work)
                    df, di, dm_floor = gates[0], gates[1], gates[2]
                    for g in range(3):
                        da[row, g * H + head * d:g * H + (head + 1) * d] = out[g]
                    da[row, 3 * H + 2 * NH + head * d:3 * H + 2 * NH + (head + 1) * d] = out[3]
                    dm_t = carry_m[s, r, head] + dm_floor - df * fg - di * ig
                    d_sum = df * fg + (dm_t if takes_sum else zero)
                    da[row, 3 * H + head] = di * ig + (zero if takes_sum else dm_t)
                    da[row, 3 * H + NH + head] = d_sum
                    carry_m[s, r, head] = d_sum
                carry_h[s, r] = zero                  # the step never reads h
        sum_ages(da, B, da_sum[t])
        age_in_place(carry_h, back_steps)
        age_in_place(carry_C, back_steps)
        age_in_place(carry_n, back_steps)
        age_in_place(carry_m, back_steps)
    return (initial_state_delta(carry_h, back_steps), initial_state_delta(carry_C, back_steps),
            initial_state_delta(carry_n, back_steps), initial_state_delta(carry_m, back_steps))


# -- the chunked form (gated linear attention: xLSTM's chunkwise kernels, flash-linear-attention's chunk_gla). The
# stabilised state is C_t = e^{−m_t} Ĉ_t with Ĉ_t = f_t Ĉ_{t−1} + e^{ĩ_t} k_t v_tᵀ linear, so per chunk of L steps
# from (C0, n0, m0), with lg_j = Σ_{s≤j} log f_s (log f = 0 at a padded step):
#
#     g_j = exp(lg_j + m0 − m_j),   D_js = exp(lg_j − lg_s + ĩ_s − m_j)   (s ≤ j, s kept; else 0)
#     qᵀC_j = g_j q_jᵀ C0 + Σ_s D_js (q_j·k_s) v_sᵀ,   q·n_j = g_j q_j·n0 + Σ_s D_js q_j·k_s
#     C_L = g_L C0 + Kᵀ diag(D_L·) V,                  n_L = g_L n0 + Kᵀ D_L·
#
# m is the loop's own (max, +) recurrence m_j = max(log f_j + m_{j−1}, ĩ_j), so m_j ≥ lg_j + m0 and m_j ≥ lg_j − lg_s
# + ĩ_s: every exponent is ≤ 0 and nothing overflows. Its error goes back through that recurrence, branch by branch
# as the loop's backward takes it (``mlstm_stabiliser_backward``).

MLSTM_CHUNKED_FROM_HEAD_DIM = 64   # auto runs the chunked form from this head size d: 1.5–2.7× the fused loop at 64
                                   # to 256, 0.9–1.0× at 32, 0.7–0.8× at 16 (Intel; docs/engines.md)


def _chunk_starts(state0, states, n):
    """The state part each of n chunks starts from, as (B·heads, n, …)."""
    starts = np.stack(chunks.chunk_starts(state0, states, n), axis=2)       # (B, heads, n, …)
    return np.ascontiguousarray(starts.reshape((-1, n) + starts.shape[3:]))


def _mlstm_chunk_decays(lg, i_pre, m, m0, keep):
    """g (…, L) and D (…, L, L) of a chunk from lg, ĩ, m, keep (…, L) and m0 (…)."""
    L = lg.shape[-1]
    valid = np.tril(np.ones((L, L), bool)) & (keep[..., None, :] > 0)
    exponent = lg[..., :, None] - lg[..., None, :] + i_pre[..., None, :] - m[..., :, None]
    return np.exp(lg + m0[..., None] - m), np.exp(np.where(valid, exponent, -np.inf))


def mlstm_chunk_readout(q, k, v, i_pre, lg, m, m0, keep, C0, n0):
    """h̃ of a chunk (or of many at once: any leading axes), every (row, head) at once: q, k, v (…, L, d); ĩ, lg, m,
    keep (…, L); m0 (…); C0 (…, d, d); n0 (…, d) → h̃ = qᵀC / (max(|q·n|, e^{−m}) + ε) (…, L, d)."""
    g, D = _mlstm_chunk_decays(lg, i_pre, m, m0, keep)
    P = (q @ transposed(k)) * D
    num = g[..., None] * (q @ C0) + P @ v
    qn = g * (q @ n0[..., None])[..., 0] + P.sum(-1)
    return num / (np.maximum(np.abs(qn), np.exp(-m)) + MLSTM_EPS)[..., None]


def mlstm_chunk_backward(dh_tilde, dC, dn, q, k, v, i_pre, lg, m, m0, keep, C0, n0):
    """The adjoint of ``mlstm_chunk_readout`` and of the chunk's end state (C_L, n_L), whose errors are dC, dn, each
    line the reverse of one forward line: → h̃, dq, dk, dv, dĩ, d lg, dm (…, L, …), dm0, dC0, dn0."""
    g, D = _mlstm_chunk_decays(lg, i_pre, m, m0, keep)
    QK = q @ transposed(k)
    P = QK * D
    QC0, Qn0 = q @ C0, (q @ n0[..., None])[..., 0]
    num, qn = g[..., None] * QC0 + P @ v, g * Qn0 + P.sum(-1)
    floor = np.exp(-m)
    on_qn = np.abs(qn) >= floor
    den = np.where(on_qn, np.abs(qn), floor) + MLSTM_EPS
    h_tilde = num / den[..., None]
    dnum = dh_tilde / den[..., None]                                    # h̃ = num / den
    dden = -(dh_tilde * h_tilde).sum(-1) / den
    dqn = np.where(on_qn, dden * np.sign(qn), 0.0)
    dm = np.where(on_qn, 0.0, -dden * floor)
    dg = (dnum * QC0).sum(-1) + dqn * Qn0                             # num = g QC0 + P V, qn = g Qn0 + P 1
    dq = (g[..., None] * dnum) @ transposed(C0) + (g * dqn)[..., None] * n0[..., None, :]
    dC0 = transposed(q) @ (g[..., None] * dnum)
    dn0 = (transposed(q) @ (g * dqn)[..., None])[..., 0]
    dP = dnum @ transposed(v) + dqn[..., None]
    dv = transposed(P) @ dnum
    w = D[..., -1, :]                                                   # C_L = g_L C0 + Kᵀ diag(w) V, n_L = …
    KdC = k @ dC
    dg[..., -1] += (C0 * dC).sum((-1, -2)) + (n0 * dn).sum(-1)
    dC0 += g[..., -1, None, None] * dC
    dn0 += g[..., -1, None] * dn
    dk = w[..., None] * (v @ transposed(dC) + dn[..., None, :])
    dv += w[..., None] * KdC
    dD = dP * QK
    dD[..., -1, :] += (KdC * v).sum(-1) + (k @ dn[..., None])[..., 0]
    dQK = dP * D                                                        # P = QKᵀ ⊙ D
    dq += dQK @ k
    dk += transposed(dQK) @ q
    dE = dD * D                                                         # D_js = exp(lg_j − lg_s + ĩ_s − m_j)
    dlg = dE.sum(-1) - dE.sum(-2)
    d_i = dE.sum(-2)
    dm -= dE.sum(-1)
    dG = dg * g                                                         # g_j = exp(lg_j + m0 − m_j)
    dlg += dG
    dm -= dG
    return h_tilde, dq, dk, dv, d_i, dlg, dm, dG.sum(-1), dC0, dn0


@kernel
def mlstm_stabiliser_backward(dm, log_f, i_pre, mask, m0, ms, d_log_f, d_i):
    """The stabilisers' errors through their recurrence m' = max(log f + m, ĩ), each step's branch as the loop's
    backward takes it (a padded step keeps m and passes its error on): dm (T + 1, B, heads), the errors reaching m
    directly, before the first step (index 0) and after each step t (index t + 1). Adds into d_log_f and d_i (T, B,
    heads); → the error of m0."""
    T, B, NH = log_f.shape
    zero = zero_of(dm)
    carry = dm[T].copy()
    for t in range(T - 1, -1, -1):
        for r in range(B):
            if mask[t, r] == 0.0:
                continue
            for head in range(NH):
                m_prev = ms[t - 1, r, head] if t > 0 else m0[r, head]
                if log_f[t, r, head] + m_prev >= i_pre[t, r, head]:
                    d_log_f[t, r, head] += carry[r, head]
                else:
                    d_i[t, r, head] += carry[r, head]
                    carry[r, head] = zero
        carry += dm[t]
    return carry
