"""Long short-term memory (Hochreiter & Schmidhuber 1997, with forget gate). Gate order: i, f, g, o.

    [i, f, g, o] = x W_x + b + h W_h (+ b_h),  then σ, σ, tanh, σ
    c' = f ⊙ c + i ⊙ g
    h' = o ⊙ tanh(c')

Backward, with (dh, dc) the errors arriving at (h', c'):

    dc_total = dc + dh ⊙ o ⊙ (1 − tanh²(c'))
    di = dc_total ⊙ g;  df = dc_total ⊙ c;  dg = dc_total ⊙ i;  do = dh ⊙ tanh(c')
    dc_prev = dc_total ⊙ f;  dh_prev = [di·σ', df·σ', dg·(1 − g²), do·σ'] W_hᵀ
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages
from rnnlab.cells.base import Cell
from rnnlab.cells.kernel_math import kernel, kernel_sigmoid, kernel_tanh
from rnnlab.common import matrix_transpose, sigmoid


def lstm_step(p, xw, state, xp=np):
    h, c = state                                  # (B, H) each
    H = h.shape[-1]
    a = xw + h @ p["W_h"]                         # (B, 4H)
    if "b_h" in p:
        a = a + p["b_h"]
    s = sigmoid(a, xp)                            # one pass over all gates; the g block is unused
    i, f, o = s[..., :H], s[..., H:2 * H], s[..., 3 * H:]
    g = xp.tanh(a[..., 2 * H:3 * H])
    c_new = f * c + i * g
    tc = xp.tanh(c_new)
    h_new = o * tc
    return (h_new, c_new), {"s": s, "g": g, "tc": tc}


def lstm_step_backward(p, dstate, cache, prev, xp=np):
    dh, dc = dstate                               # (..., B, H) each
    _, c = prev
    s, g, tc = cache["s"], cache["g"], cache["tc"]
    H = g.shape[-1]
    i, f, o = s[..., :H], s[..., H:2 * H], s[..., 3 * H:]
    dc_total = dc + dh * o * (1.0 - tc * tc)
    da = xp.concatenate(
        [
            dc_total * g * i * (1.0 - i),
            dc_total * c * f * (1.0 - f),
            dc_total * i * (1.0 - g * g),
            dh * tc * o * (1.0 - o),
        ],
        axis=-1,
    )                                             # (..., B, 4H)
    return (da @ matrix_transpose(p["W_h"]), dc_total * f), da, da


class LSTM(Cell):
    """LSTM cell; states and h0/dh0 are (h, c) pairs.

    Parameters: ``W_x`` (input_size, 4*hidden), ``W_h`` (hidden, 4*hidden) in gate order i, f, g, o;
    ``b`` (4*hidden,) if bias; ``b_h`` (4*hidden,) if recurrent_bias. The forget block of ``b``
    starts at ``forget_bias`` (None keeps what the initialiser drew).
    """

    gates = 4
    state_size = 2

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float | None = 1.0, **kwargs) -> None:
        super().__init__(input_size, hidden_size, **kwargs)
        self.forget_bias = forget_bias
        if self.bias and forget_bias is not None:
            H = self.hidden_size
            self.params["b"][H:2 * H] = forget_bias

    def step(self, p, xw, state, xp=np):
        return lstm_step(p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return lstm_step_backward(p, dstate, cache, prev, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, cs, g, tc = (np.empty((T, B, H), dt) for _ in range(4))
        s = np.empty((T, B, 4 * H), dt)
        b_h = p["b_h"] if "b_h" in p else np.zeros(4 * H, dt)
        lstm_forward_loop(xw, np.ascontiguousarray(p["W_h"]), b_h, state0[0], state0[1], mask, hs, cs, s, g, tc)
        return (hs, cs), {"s": s, "g": g, "tc": tc}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives da (for an LSTM dxw = dhw, so dhw is unused)."""
        dh0, dc0 = lstm_backward_loop(dhs, np.ascontiguousarray(p["W_h"].T), np.ascontiguousarray(prev[1]),
                                      cache.steps["s"], cache.steps["g"], cache.steps["tc"], mask, back_steps, dxw,
                                      dh_out)
        return dxw, dxw, (dh0, dc0)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) ---------------------------
# lstm_step / lstm_step_backward over all T steps in one compiled loop: the recurrent matmul in
# BLAS, the gates as short loops.

@kernel
def lstm_forward_loop(xw, W_h, b_h, h0, c0, mask, hs, cs, s_steps, g_steps, tc_steps):
    """[i, f, g, o] = xw + h W_h + b_h → σ, σ, tanh, σ;  c' = f ⊙ c + i ⊙ g;  h' = o ⊙ tanh(c')."""
    T, B, H = hs.shape
    h, c = h0.copy(), c0.copy()
    a = np.empty((B, 4 * H), hs.dtype)
    for t in range(T):
        np.dot(h, W_h, a)
        for i in range(B):
            pre, s, g, tc = a[i], s_steps[t, i], g_steps[t, i], tc_steps[t, i]
            for j in range(4 * H):
                pre[j] += xw[t, i, j] + b_h[j]
            for j in range(4 * H):
                s[j] = kernel_sigmoid(pre[j])
            for j in range(H):
                g[j] = kernel_tanh(pre[2 * H + j])
            if mask[t, i] > 0.0:
                for j in range(H):
                    c[i, j] = s[H + j] * c[i, j] + s[j] * g[j]
                for j in range(H):
                    tc[j] = kernel_tanh(c[i, j])
                for j in range(H):
                    h[i, j] = s[3 * H + j] * tc[j]
            else:
                for j in range(H):
                    tc[j] = kernel_tanh(s[H + j] * c[i, j] + s[j] * g[j])
        hs[t], cs[t] = h, c


@kernel
def lstm_backward_loop(dhs, W_hT, prev_c, s_steps, g_steps, tc_steps, mask, back_steps, da_sum, dh_out):
    """dc_total = dc + dh ⊙ o(1 − tanh²c');  da = [dc_total g i(1−i), dc_total c f(1−f),
    dc_total i (1 − g²), dh tanh(c') o(1−o)];  dh_prev = da W_hᵀ, dc_prev = dc_total ⊙ f; for every
    age at once, masked steps passing their deltas through. Returns (dh0, dc0); da_sum (= dxw = dhw)."""
    T, B, H = dhs.shape
    carry_h, carry_c = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H, dhs)
    A = carry_h.shape[0]
    da = np.empty((A * B, 4 * H), dhs.dtype)
    dc_total = np.empty(H, dhs.dtype)
    dc_prev = np.empty((A, B, H), dhs.dtype)
    dh_prev = np.empty((A * B, H), dhs.dtype)
    for t in range(T - 1, -1, -1):
        inject(carry_h, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                m = mask[t, i]
                ig, f, g, o = s_steps[t, i, :H], s_steps[t, i, H:2 * H], g_steps[t, i], s_steps[t, i, 3 * H:]
                tc, c, dh, dc, d = tc_steps[t, i], prev_c[t, i], carry_h[s, i], carry_c[s, i], da[s * B + i]
                for j in range(H):
                    dc_total[j] = m * (dc[j] + dh[j] * o[j] * (1.0 - tc[j] * tc[j]))
                for j in range(H):
                    d[j] = dc_total[j] * g[j] * ig[j] * (1.0 - ig[j])
                for j in range(H):
                    d[H + j] = dc_total[j] * c[j] * f[j] * (1.0 - f[j])
                for j in range(H):
                    d[2 * H + j] = dc_total[j] * ig[j] * (1.0 - g[j] * g[j])
                for j in range(H):
                    d[3 * H + j] = m * dh[j] * tc[j] * o[j] * (1.0 - o[j])
                for j in range(H):
                    dc_prev[s, i, j] = dc_total[j] * f[j] + (1.0 - m) * dc[j]
        sum_ages(da, B, da_sum[t])
        np.dot(da, W_hT, dh_prev)
        for s in range(A):
            for i in range(B):
                keep = 1.0 - mask[t, i]
                if keep > 0.0:
                    for j in range(H):
                        dh_prev[s * B + i, j] += keep * carry_h[s, i, j]
        step_back(carry_h, dh_prev.reshape(A, B, H), back_steps)
        step_back(carry_c, dc_prev, back_steps)
    return initial_state_delta(carry_h, back_steps), initial_state_delta(carry_c, back_steps)
