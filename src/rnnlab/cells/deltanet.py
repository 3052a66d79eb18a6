"""DeltaNet and Gated DeltaNet: the delta rule on a matrix state (Schlag et al. 2021; Yang et al. 2024, 2025).

Per head, with the state S stored k-major (d_k × d_v, flash-linear-attention's layout):

    k ← k / ‖k‖,  q ← q / (‖q‖ √d)                       unit-norm keys; queries normalised and scaled
    S̄ = α S                                              α = 1 (DeltaNet), exp(−e^{A_log} softplus(x W_α + dt_bias))
    S' = S̄ + β k (v − S̄ᵀ k)ᵀ = (I − β k kᵀ) S̄ + β k vᵀ   (gated)
    o  = S'ᵀ q

β = σ(x W_β + b_β) ∈ (0, 1), or 2σ(·) ∈ (0, 2) with ``eigenvalues="signed"`` (fla's allow_neg_eigval): the
transition I − β k kᵀ then has the eigenvalue 1 − β ∈ (−1, 1).

Backward, with G = dS' + q do ᵀ everything reaching S' and e = v − S̄ᵀ k:

    dq = S' do,   dβ = kᵀ G e,   dk = β G e + S̄ dr,   dv = de = β Gᵀ k,   dr = −de
    dS̄ = G + k drᵀ,   dS = α dS̄,   dα = ⟨dS̄, S⟩

then through the normalisations (d(k/‖k‖) = (dk̂ − k̂ (k̂·dk̂)) / ‖k‖) and the gates.

The short convolutions, the output norm and gate of fla's layer belong to the block around the cell.
"""

from __future__ import annotations

import math

import numpy as np

from rnnlab.cells import chunks
from rnnlab.cells.ages import age_in_place, initial_state_delta, inject, new_carry, sum_ages
from rnnlab.cells.base import Cell, Option
from rnnlab.cells.chunks import transposed
from rnnlab.cells.kernel_math import kernel, zero_of
from rnnlab.cells.registry import register_cell
from rnnlab.cells.xlstm import _check_heads, _flat, _heads, _heads_option
from rnnlab.common import sigmoid, softplus

NORM_EPS = 1e-6       # inside the square root of the L2 norms, as fla's l2norm


def _normalise(a, xp):
    norm = xp.sqrt((a * a).sum(axis=-1, keepdims=True) + NORM_EPS)
    return a / norm, norm


def _normalise_backward(d_unit, unit, norm):
    return (d_unit - unit * (unit * d_unit).sum(axis=-1, keepdims=True)) / norm


def delta_step(p, xw, state, NH, gated=False, signed=False, xp=np):
    _, S = state                                        # S (B, NH, d, d), k-major
    H = S.shape[-3] * S.shape[-1]
    d = S.shape[-1]
    q_hat, q_norm = _normalise(_heads(xw[..., :H], NH), xp)
    k, k_norm = _normalise(_heads(xw[..., H:2 * H], NH), xp)
    v = _heads(xw[..., 2 * H:3 * H], NH)
    s_beta = sigmoid(xw[..., 3 * H:3 * H + NH], xp)
    beta = 2.0 * s_beta if signed else s_beta
    cache = {"q_hat": q_hat, "q_norm": q_norm, "k": k, "k_norm": k_norm, "v": v, "s_beta": s_beta}
    if gated:
        g_pre = xw[..., 3 * H + NH:] + p["dt_bias"]
        alpha = xp.exp(-xp.exp(p["A_log"]) * softplus(g_pre, xp))
        S = alpha[..., None, None] * S
        cache["g_pre"] = g_pre
    retrieved = (S * k[..., :, None]).sum(axis=-2)                 # S̄ᵀ k  (…, NH, d_v)
    S_new = S + beta[..., None, None] * k[..., :, None] * (v - retrieved)[..., None, :]
    o = (S_new * q_hat[..., :, None]).sum(axis=-2) / math.sqrt(d)   # a Python float keeps float32
    return (_flat(o), S_new), cache


def delta_step_backward(p, dstate, cache, prev, NH, gated=False, signed=False, xp=np):
    dy, dS = dstate
    _, S = prev
    q_hat, q_norm, k, k_norm, v, s_beta = (cache[n] for n in ("q_hat", "q_norm", "k", "k_norm", "v", "s_beta"))
    d = k.shape[-1]
    beta = 2.0 * s_beta if signed else s_beta
    if gated:
        g_pre = cache["g_pre"]
        A = xp.exp(p["A_log"])
        log_alpha = -A * softplus(g_pre, xp)
        alpha = xp.exp(log_alpha)
        S_bar = alpha[..., None, None] * S
    else:
        S_bar = S
    retrieved = (S_bar * k[..., :, None]).sum(axis=-2)
    e = v - retrieved
    S_new = S_bar + beta[..., None, None] * k[..., :, None] * e[..., None, :]
    do = _heads(dy, NH) / math.sqrt(d)
    G = dS + q_hat[..., :, None] * do[..., None, :]
    dq_hat = (S_new * do[..., None, :]).sum(axis=-1)
    Ge = (G * e[..., None, :]).sum(axis=-1)                       # G e  (…, NH, d_k)
    d_beta = (k * Ge).sum(axis=-1)
    de = beta[..., None] * (G * k[..., :, None]).sum(axis=-2)     # β Gᵀ k
    dk = beta[..., None] * Ge - (S_bar * de[..., None, :]).sum(axis=-1)
    dS_bar = G - k[..., :, None] * de[..., None, :]
    dq = _normalise_backward(dq_hat, q_hat, q_norm)
    dk_raw = _normalise_backward(dk, k, k_norm)
    d_beta_pre = d_beta * s_beta * (1.0 - s_beta) * (2.0 if signed else 1.0)
    parts = [_flat(dq), _flat(dk_raw), _flat(de), d_beta_pre]
    if gated:
        d_alpha = (dS_bar * S).sum(axis=(-1, -2))
        d_log_alpha = d_alpha * alpha
        d_g = d_log_alpha * -A * sigmoid(g_pre, xp)
        parts.append(d_g)
        dhw = xp.concatenate([d_log_alpha * log_alpha, d_g], axis=-1)     # per row: ∂A_log, ∂dt_bias
        dS_prev = alpha[..., None, None] * dS_bar
    else:
        dS_prev = dS_bar
    dxw = xp.concatenate(parts, axis=-1)
    return (0.0 * dy, dS_prev), dxw, dhw if gated else dxw


class _Delta(Cell):
    gates = 3
    state_size = 2
    gated = False
    options = (_heads_option(),
               Option("eigenvalues", "nonnegative", str, "range of the delta rule's 1 - beta: nonnegative (beta in "
                      "[0, 1]) or signed (beta in [0, 2], fla's allow_neg_eigval)", ("nonnegative", "signed")))

    def _configure(self, *args, **kwargs):
        super()._configure(*args, **kwargs)
        _check_heads(self)

    def state_shapes(self):
        H, NH = self.hidden_size, self.heads
        return ((H,), (NH, H // NH, H // NH))

    def _width(self) -> int:
        return 3 * self.hidden_size + self.heads * (2 if self.gated else 1)

    def param_shapes(self):
        shapes = {"W_x": (self.input_size, self._width())}
        if self.bias:
            shapes["b"] = (self._width(),)
        if self.gated:
            shapes["A_log"] = (self.heads,)
            shapes["dt_bias"] = (self.heads,)
        return shapes

    def step(self, p, xw, state, xp=np):
        return delta_step(p, xw, state, self.heads, self.gated, self.eigenvalues == "signed", xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return delta_step_backward(p, dstate, cache, prev, self.heads, self.gated, self.eigenvalues == "signed", xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        if not self.gated:
            return {}
        total = dhw.sum(axis=0)
        return {"A_log": total[:self.heads], "dt_bias": total[self.heads:]}

    def _inputs(self, p, xw):
        """The step's inputs that depend on x only, for all T·B rows at once, as ``delta_step`` computes them:
        q̂, ‖q‖, k̂, ‖k‖, v (T, B, heads, d or 1), σ(β̃) and the gate's pre-activation (T, B, heads)."""
        H, NH = self.hidden_size, self.heads
        q_hat, q_norm = _normalise(_heads(xw[..., :H], NH), np)
        k, k_norm = _normalise(_heads(xw[..., H:2 * H], NH), np)
        steps = {"q_hat": q_hat, "q_norm": q_norm, "k": k, "k_norm": k_norm,
                 "v": np.ascontiguousarray(_heads(xw[..., 2 * H:3 * H], NH)),
                 "s_beta": sigmoid(xw[..., 3 * H:3 * H + NH], np)}
        if self.gated:
            steps["g_pre"] = xw[..., 3 * H + NH:] + p["dt_bias"]
        return steps

    def _scale(self):
        """1/√d, the readout's scale, in the cell's dtype (a float64 argument would widen a float32 kernel)."""
        return self.dtype.type(1.0 / np.sqrt(self.hidden_size // self.heads))

    def _beta_alpha(self, p, steps):
        """β and α (T, B, heads) from the stored steps (α = 1 ungated), and log α (None ungated)."""
        beta = 2.0 * steps["s_beta"] if self.eigenvalues == "signed" else steps["s_beta"]
        if not self.gated:
            return np.ascontiguousarray(beta), np.ones_like(beta), None
        log_alpha = -np.exp(p["A_log"]) * softplus(steps["g_pre"], np)
        return np.ascontiguousarray(beta), np.exp(log_alpha), log_alpha

    def fused_forward(self, p, xw, state0, mask):
        steps = self._inputs(p, xw)
        beta, alpha, _ = self._beta_alpha(p, steps)
        T, B = xw.shape[:2]
        ys, Ss = np.empty((T, B, self.hidden_size), self.dtype), np.empty((T,) + state0[1].shape, self.dtype)
        delta_forward_loop(steps["q_hat"], steps["k"], steps["v"], beta, alpha, self._scale(), *state0, mask, ys, Ss)
        return (ys, Ss), steps

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop: it writes [dq̂, dk̂, dv, dβ, (dα)] into dxw; the normalisations' and
        the gates' derivatives are applied here, over all rows at once. Gated, the returned dhw is one row, the
        gradients of A_log and dt_bias summed over every step and sequence."""
        H, NH = self.hidden_size, self.heads
        st = cache.steps
        beta, alpha, log_alpha = self._beta_alpha(p, st)
        dy0, dS0 = delta_backward_loop(dhs, np.ascontiguousarray(cache.state0[1]), cache.states[1], st["q_hat"],
                                       st["k"], st["v"], beta, alpha, self._scale(), mask, back_steps, dxw, dh_out)
        self._input_slopes(st, dxw)
        if not self.gated:
            return dxw, dxw, (dy0, dS0)
        dxw, sums = self._gate_slopes(p, st, dxw, dxw[..., 3 * H + NH:] * alpha, log_alpha)
        return dxw, sums, (dy0, dS0)

    def chunked_pays(self) -> bool:
        return self.hidden_size // self.heads >= CHUNKED_FROM_HEAD_DIM

    def chunked_forward(self, p, xw, state0, mask):
        """The chunked engine's forward (``delta_chunk_forward`` chunk after chunk): the same states and cache as
        ``fused_forward``. mask (T, B)."""
        steps = self._inputs(p, xw)
        T, B, NH, d = steps["k"].shape
        beta, alpha, log_alpha = self._chunk_gates(p, steps, mask)
        q, k, v, beta_c, lg = chunks.chunked(steps["q_hat"], steps["k"], steps["v"], beta, log_alpha)
        lg = np.cumsum(lg, axis=-1)                           # within each chunk
        S = np.ascontiguousarray(state0[1]).reshape(B * NH, d, d)
        O, U = np.zeros_like(q), np.zeros_like(q)
        for c in range(q.shape[1]):
            O[:, c], U[:, c], S = delta_chunk_forward(q[:, c], k[:, c], v[:, c], beta_c[:, c], lg[:, c],
                                                      self._scale(), S)
        ys, Ss = np.empty((T, B, self.hidden_size), self.dtype), np.empty((T,) + state0[1].shape, self.dtype)
        delta_chunk_states(alpha, steps["k"], chunks.unchunked(U, T, B), _flat(chunks.unchunked(O, T, B)), mask,
                           np.ascontiguousarray(state0[0]), np.ascontiguousarray(state0[1]), ys, Ss)
        return (ys, Ss), steps

    def chunked_backward(self, p, dhs, cache, mask):
        """The chunked engine's full BPTT (``delta_chunk_backward`` from the last chunk back): → (dxw, dhw, dstate0,
        the total error reaching each y_t). mask (T, B)."""
        st = cache.steps
        T, B, NH, d = st["k"].shape
        beta, _, log_alpha = self._chunk_gates(p, st, mask)
        errors, dy0 = chunks.readout_errors(dhs, mask)
        q, k, v, beta_c, lg = chunks.chunked(st["q_hat"], st["k"], st["v"], beta, log_alpha)
        lg = np.cumsum(lg, axis=-1)
        dO = chunks.chunked(_heads(errors * mask[..., None], NH))[0]
        starts = chunks.chunk_starts(cache.state0[1], cache.states[1], q.shape[1])
        grads = [np.zeros_like(q) for _ in range(3)] + [np.zeros_like(lg) for _ in range(2)]
        dS = np.zeros((B * NH, d, d), self.dtype)
        for c in range(q.shape[1] - 1, -1, -1):
            S0 = starts[c].reshape(B * NH, d, d)
            _, U, _ = delta_chunk_forward(q[:, c], k[:, c], v[:, c], beta_c[:, c], lg[:, c], self._scale(), S0)
            *chunk_grads, dS = delta_chunk_backward(dO[:, c], dS, q[:, c], k[:, c], v[:, c], beta_c[:, c], lg[:, c],
                                                    self._scale(), S0, U)
            for g, value in zip(grads, chunk_grads):
                g[:, c] = value
        return self._chunk_gradients(p, st, grads, mask, log_alpha), (dy0, dS.reshape(cache.state0[1].shape)), errors

    def _chunk_gates(self, p, steps, mask):
        """β and α (T, B, heads) with a padded step's β = 0 and α = 1, and log α (zeros ungated)."""
        beta, alpha, log_alpha = self._beta_alpha(p, steps)
        m = mask[..., None]
        log_alpha = np.zeros_like(beta) if log_alpha is None else log_alpha * m
        return beta * m, np.where(m > 0, alpha, 1.0).astype(self.dtype), log_alpha

    def _chunk_gradients(self, p, st, grads, mask, log_alpha):
        """(dxw, dhw) from the chunks' dq̂, dk̂, dv, dβ, d log α, as ``fused_backward`` returns them."""
        T, B = mask.shape
        dq, dk, dv = (_flat(chunks.unchunked(g, T, B)) for g in grads[:3])
        m = mask[..., None]
        d_beta, d_log_alpha = (chunks.unchunked(g[..., None], T, B)[..., 0] * m for g in grads[3:])
        parts = [dq, dk, dv, d_beta] + ([d_log_alpha] if self.gated else [])
        dxw = np.concatenate(parts, axis=-1).astype(self.dtype, copy=False)
        self._input_slopes(st, dxw)
        if not self.gated:
            return dxw, dxw
        return self._gate_slopes(p, st, dxw, d_log_alpha, self._beta_alpha(p, st)[2])

    def _input_slopes(self, st, dxw):
        """dxw's q, k and β blocks from the errors of q̂, k̂ and β, in place: the normalisations' and σ's slopes."""
        H, NH = self.hidden_size, self.heads
        dxw[..., :H] = _flat(_normalise_backward(_heads(dxw[..., :H], NH), st["q_hat"], st["q_norm"]))
        dxw[..., H:2 * H] = _flat(_normalise_backward(_heads(dxw[..., H:2 * H], NH), st["k"], st["k_norm"]))
        dxw[..., 3 * H:3 * H + NH] *= st["s_beta"] * (1.0 - st["s_beta"]) * (2.0 if self.eigenvalues == "signed"
                                                                              else 1.0)

    def _gate_slopes(self, p, st, dxw, d_log_alpha, log_alpha):
        """Gated: dxw's α block from d log α, and the one row of A_log's and dt_bias's gradients summed."""
        H, NH = self.hidden_size, self.heads
        dxw[..., 3 * H + NH:] = d_log_alpha * -np.exp(p["A_log"]) * sigmoid(st["g_pre"], np)
        sums = np.concatenate([(d_log_alpha * log_alpha).sum(axis=(0, 1)), dxw[..., 3 * H + NH:].sum(axis=(0, 1))])
        return dxw, sums[None]


@register_cell("deltanet")
class DeltaNet(_Delta):
    """DeltaNet, the delta rule with unit-norm keys (equations in the module docstring; fla's
    ``delta_rule/naive.py``). State (y, S): y (B, hidden), the output (the step never reads it); S (B, heads, d, d),
    d = hidden/heads. ``W_x`` (input_size, 3*hidden + heads) in block order q, k, v, β; ``b`` likewise:
    (nm + n)·3 + heads (m + 1) parameters."""

    title = "DeltaNet"


@register_cell("gated-deltanet")
class GatedDeltaNet(_Delta):
    """Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025; fla's ``gated_delta_rule/naive.py``: decay first, then the
    delta update), equations in the module docstring. ``W_x`` (input_size, 3*hidden + 2*heads) in block order q, k,
    v, β, α; ``b`` likewise; ``A_log`` (heads,) = log U(0, 16); ``dt_bias`` (heads,) = softplus⁻¹(dt), dt
    log-uniform in [1e-3, 0.1] (the official init)."""

    title = "Gated DeltaNet"
    gated = True

    def initialize(self, rng):
        NH = self.heads
        self.params["A_log"] = np.log(rng.uniform(1e-3, 16.0, size=NH)).astype(self.dtype)
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), size=NH)).clip(min=1e-4)
        self.params["dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(self.dtype)


# the fused time loops of the Numba engine: per row and head, the retrieval S̄ᵀk, then one pass over S for the update
# and the readout forward; backward, one pass for the readout and G = dS' + q̂ doᵀ, one for the update, the error of
# S updated in place

@kernel
def delta_forward_loop(q_hat, k, v, beta, alpha, scale, y0, S0, mask, ys, Ss):
    """delta_step over T steps from the inputs that depend on x only (``_Delta._inputs``); a padded step keeps
    (y, S). scale: 1/√d in the cell's dtype."""
    T, B, NH, d = q_hat.shape
    zero = zero_of(ys)
    y, S = y0.copy(), S0.copy()
    error, out = np.empty(d, ys.dtype), np.empty(d, ys.dtype)
    for t in range(T):
        for r in range(B):
            if mask[t, r] == 0.0:
                continue
            for head in range(NH):
                Sh, qh, kh, vh = S[r, head], q_hat[t, r, head], k[t, r, head], v[t, r, head]
                al, be = alpha[t, r, head], beta[t, r, head]
                error[:] = zero
                for a in range(d):
                    ka = kh[a]
                    for b in range(d):
                        Sh[a, b] = al * Sh[a, b]
                        error[b] += Sh[a, b] * ka
                for b in range(d):
                    error[b] = vh[b] - error[b]
                out[:] = zero
                for a in range(d):
                    bk, qa = be * kh[a], qh[a]
                    for b in range(d):
                        Sh[a, b] = Sh[a, b] + bk * error[b]
                        out[b] += Sh[a, b] * qa
                for b in range(d):
                    y[r, head * d + b] = out[b] * scale
        ys[t], Ss[t] = y, S


@kernel
def _delta_head_backward(dy, dS, S_old, S_new, q, k, v, alpha, beta, scale, out, gates, work):
    """One row and head of delta_step_backward. dy (d,): the output's error; dS (d·d,): the error of S', overwritten
    with what reaches S. out (3, d) receives dq̂, dk̂, dv; gates (2,) dβ and dα."""
    d = q.shape[0]
    zero = zero_of(dy)
    do, error, de, Ge = work[0], work[1], work[2], work[3]
    error[:] = zero
    for a in range(d):
        ka = k[a]
        for b in range(d):
            error[b] += (alpha * S_old[a, b]) * ka
    for b in range(d):
        error[b] = v[b] - error[b]
        do[b] = dy[b] * scale
    de[:] = zero
    for a in range(d):                   # G = dS' + q̂ doᵀ: dq̂ = S' do, G e, Gᵀ k
        qa, ka, acc_q, acc_e = q[a], k[a], zero, zero
        for b in range(d):
            G = dS[a * d + b] + qa * do[b]
            acc_q += S_new[a, b] * do[b]
            acc_e += G * error[b]
            de[b] += G * ka
        out[0, a], Ge[a] = acc_q, acc_e
    d_beta = zero
    for a in range(d):
        d_beta += k[a] * Ge[a]
    for b in range(d):
        de[b] = beta * de[b]
        out[2, b] = de[b]
    d_alpha = zero
    for a in range(d):                   # dS̄ = G − k deᵀ; dk = β G e − S̄ de; dS = α dS̄
        qa, ka, acc = q[a], k[a], zero
        for b in range(d):
            dS_bar = dS[a * d + b] + qa * do[b] - ka * de[b]
            acc += (alpha * S_old[a, b]) * de[b]
            d_alpha += dS_bar * S_old[a, b]
            dS[a * d + b] = alpha * dS_bar
        out[1, a] = beta * Ge[a] - acc
    gates[0], gates[1] = d_beta, d_alpha


@kernel
def delta_backward_loop(dhs, S0, Ss, q_hat, k, v, beta, alpha, scale, mask, back_steps, da_sum, dh_out):
    """delta_step_backward for every age at once, padded steps passing their deltas through. Returns (dy0, dS0);
    da_sum receives [dq̂, dk̂, dv, dβ, (dα)] (the normalisations' and gates' slopes applied after). scale: 1/√d in
    the cell's dtype."""
    T, B, NH, d = q_hat.shape
    H = NH * d
    zero = zero_of(dhs)
    gated = da_sum.shape[2] > 3 * H + NH
    carry_y, carry_S = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H * d, dhs)
    A = carry_y.shape[0]
    da = np.empty((A * B, da_sum.shape[2]), dhs.dtype)
    out, gates, work = np.empty((3, d), dhs.dtype), np.empty(2, dhs.dtype), np.empty((4, d), dhs.dtype)
    for t in range(T - 1, -1, -1):
        inject(carry_y, dhs[t], dh_out[t])
        S_prev = Ss[t - 1] if t > 0 else S0
        for s in range(A):
            for r in range(B):
                row = s * B + r
                if mask[t, r] == 0.0:
                    da[row] = zero
                    continue
                for head in range(NH):
                    _delta_head_backward(
                        carry_y[s, r, head * d:(head + 1) * d], carry_S[s, r, head * d * d:(head + 1) * d * d],
                        S_prev[r, head], Ss[t, r, head], q_hat[t, r, head], k[t, r, head], v[t, r, head],
                        alpha[t, r, head], beta[t, r, head], scale, out, gates, work)
                    for g in range(3):
                        da[row, g * H + head * d:g * H + (head + 1) * d] = out[g]
                    da[row, 3 * H + head] = gates[0]
                    if gated:
                        da[row, 3 * H + NH + head] = gates[1]
                carry_y[s, r] = zero                  # the step never reads y
        sum_ages(da, B, da_sum[t])
        age_in_place(carry_y, back_steps)
        age_in_place(carry_S, back_steps)
    return initial_state_delta(carry_y, back_steps), initial_state_delta(carry_S, back_steps).reshape(S0.shape)


# -- the chunked form (flash-linear-attention's chunk_delta_rule, the WY/UT form): per chunk of L steps and head,
# with γ_j = α_1 ⋯ α_j and D_js = γ_j / γ_s (s ≤ j), the pseudo-values u_j = β_j (v_j − S̄_{j−1}ᵀ k_j) solve
#
#     (I + A) U = diag(β) (V − diag(γ) K S0),    A_js = β_j D_js k_jᵀ k_s (s < j)
#     O = scale (diag(γ) Q S0 + (Q Kᵀ ⊙ D) U),   S_L = γ_L S0 + Kᵀ diag(D_Ls) U
#
# since S_j = α_j S_{j−1} + k_j u_jᵀ. Matmuls of L × d blocks instead of T rank-one steps; the same function as the
# loop, so the same gradients (tests/test_modern_kernels.py). A padded step has β = 0 and α = 1: u = 0, S kept.

CHUNKED_FROM_HEAD_DIM = 128   # auto runs the chunked form from this head size d: 1.1–1.7× the fused loop at 128 and
                              # 256, 0.84–0.92× at 64 (docs/engines.md)


def _decays(lg):
    """D (…, L, L): exp(lg_j − lg_s) for s ≤ j, else 0, from the cumulative log decay lg (…, L)."""
    L = lg.shape[-1]
    lower = np.tril(np.ones((L, L), bool))
    return np.exp(np.where(lower, lg[..., :, None] - lg[..., None, :], -np.inf))


def delta_chunk_forward(q, k, v, beta, lg, scale, S0):
    """One chunk, every (row, head) at once: q, k, v (N, L, d); β, lg (N, L); S0 (N, d, d) → O, U (N, L, d), S_L."""
    L = q.shape[-2]
    D = _decays(lg)
    gamma = np.exp(lg)
    A = beta[..., :, None] * (k @ transposed(k)) * np.tril(D, -1)
    U = np.linalg.solve(np.eye(L, dtype=q.dtype) + A, beta[..., None] * (v - gamma[..., None] * (k @ S0)))
    O = scale * (gamma[..., None] * (q @ S0) + ((q @ transposed(k)) * D) @ U)
    S_L = gamma[..., -1, None, None] * S0 + transposed(k) @ (D[..., -1, :, None] * U)
    return O, U, S_L


def delta_chunk_backward(dO, dS_L, q, k, v, beta, lg, scale, S0, U):
    """The adjoint of ``delta_chunk_forward``, each line the reverse of one above: → dq, dk, dv, dβ, d log α
    (per step), dS0."""
    L = q.shape[-2]
    D = _decays(lg)
    strict = np.tril(D, -1)
    gamma = np.exp(lg)
    KK, QK, KS0 = k @ transposed(k), q @ transposed(k), k @ S0
    A = beta[..., :, None] * KK * strict
    w = D[..., -1, :]                                                       # S_L = γ_L S0 + Kᵀ diag(w) U
    KdS = k @ dS_L
    dS0 = gamma[..., -1, None, None] * dS_L
    dU = w[..., None] * KdS
    dk = w[..., None] * (U @ transposed(dS_L))
    dD = np.zeros_like(D)
    dD[..., -1, :] = (KdS * U).sum(-1)
    dlg = np.zeros_like(lg)
    dlg[..., -1] = gamma[..., -1] * (S0 * dS_L).sum((-1, -2))
    dOs = scale * dO                                                        # O = scale (diag(γ) Q S0 + (QKᵀ ⊙ D) U)
    dgamma = ((q @ S0) * dOs).sum(-1)
    dq = gamma[..., None] * (dOs @ transposed(S0))
    dS0 += transposed(q) @ (gamma[..., None] * dOs)
    dM = dOs @ transposed(U)
    dU += transposed(QK * D) @ dOs
    dD += dM * QK
    dq += (dM * D) @ k
    dk += transposed(dM * D) @ q
    dR = np.linalg.solve(transposed(np.eye(L, dtype=q.dtype) + A), dU)      # U = (I + A)⁻¹ diag(β) Vt
    dA = np.tril(-(dR @ transposed(U)), -1)
    Vt = v - gamma[..., None] * KS0
    dVt = beta[..., None] * dR
    dgamma -= (KS0 * dVt).sum(-1)
    dk -= gamma[..., None] * (dVt @ transposed(S0))
    dS0 -= transposed(k) @ (gamma[..., None] * dVt)
    dbeta = (dR * Vt).sum(-1) + (dA * KK * strict).sum(-1)                 # A = diag(β) (KKᵀ ⊙ strict)
    dKK = beta[..., :, None] * dA * strict
    dD += beta[..., :, None] * dA * KK
    dk += (dKK + transposed(dKK)) @ k
    dDD = dD * D                                                            # D_js = exp(lg_j − lg_s)
    dlg += dDD.sum(-1) - dDD.sum(-2) + dgamma * gamma
    dlog_alpha = np.flip(np.cumsum(np.flip(dlg, -1), -1), -1)               # lg = cumsum(log α)
    return dq, dk, dVt, dbeta, dlog_alpha, dS0


@kernel
def delta_chunk_states(alpha, k, u, O, mask, y0, S0, ys, Ss):
    """The per-step states the cache keeps, from the chunks' pseudo-values: S_t = α_t S_{t−1} + k_t u_tᵀ, y_t = O_t
    (a padded step keeps y; its u = 0 and α = 1 keep S). alpha (T, B, NH); k, u (T, B, NH, d); O (T, B, H)."""
    T, B, NH, d = k.shape
    y, S = y0.copy(), S0.copy()
    for t in range(T):
        for r in range(B):
            if mask[t, r] != 0.0:
                y[r] = O[t, r]
            for head in range(NH):
                Sh, kh, uh, al = S[r, head], k[t, r, head], u[t, r, head], alpha[t, r, head]
                for a in range(d):
                    ka = kh[a]
                    for b in range(d):
                        Sh[a, b] = al * Sh[a, b] + ka * uh[b]
        ys[t], Ss[t] = y, S
