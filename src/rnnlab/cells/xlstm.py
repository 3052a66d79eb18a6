"""xLSTM's cells (Beck et al. 2024): sLSTM (scalar memory, exponential gating, head-wise recurrence) and mLSTM
(matrix memory). Both carry a stabiliser m that keeps exp(ĩ) from overflowing: the stabilised step gives the same
outputs as the plain one (MODERN.md §1.6–1.7), and the adjoints here differentiate the stabilised step as computed,
m included, so they are its exact derivative (the paper's "m gets no gradient" is the same numbers up to rounding:
the paths through m cancel).

Heads: hidden = heads × d. ``heads`` defaults to 1; the papers use 4.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell, Option
from rnnlab.cells.registry import register_cell
from rnnlab.common import sigmoid, softplus

FORGET_GATES = ("sigmoid", "exp")
MLSTM_EPS = 1e-6          # added to the normaliser's denominator, as xLSTM's recurrent_step_stabilized_simple


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
        rows = dhw.shape[0]
        g = dhw.reshape(rows, 4, NH, d).swapaxes(1, 2).reshape(rows, NH, 4 * d)
        h = prev_h.reshape(rows, NH, d)
        return {"R": xp.einsum("rhd,rhk->hdk", h, g)}


# -- mLSTM -------------------------------------------------------------------------------------------------------

def mlstm_step(p, xw, state, NH, forget="sigmoid", xp=np):
    _, C, n, m = state                         # C (B, NH, d, d) stored k-major (d_k × d_v); n (B, NH, d); m (B, NH)
    H = C.shape[-3] * C.shape[-1]
    q, k, v = _heads(xw[..., :H], NH), _heads(xw[..., H:2 * H], NH), _heads(xw[..., 2 * H:3 * H], NH)
    i_pre, f_pre = xw[..., 3 * H:3 * H + NH], xw[..., 3 * H + NH:3 * H + 2 * NH]
    o = sigmoid(xw[..., 3 * H + 2 * NH:], xp)
    d = k.shape[-1]
    k = k / np.sqrt(d)
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
    dk = i[..., None] * (dC_v + dn_t) / np.sqrt(d)
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

    Linear in the state (C, n); m is a (max, +) recurrence. A chunked scan computes it (``rnnlab.engines.scan``).
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
