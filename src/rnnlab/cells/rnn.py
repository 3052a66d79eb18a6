"""Elman (vanilla) RNN.

    a_t = x_t W_x + b + h_{t-1} W_h (+ b_h)
    h_t = act(a_t),   act in {tanh, sigmoid, relu}

Backward, with dh the error arriving at h_t:

    da      = dh * act'(a_t)       (act' written through the output: 1 - h², h(1 - h), [h > 0])
    dh_prev = da W_hᵀ
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rnnlab.cells.ages import initial_state_delta, new_carry, step_back
from rnnlab.cells.base import Cell
from rnnlab.common import matrix_transpose, sigmoid

ACTIVATIONS = ("tanh", "sigmoid", "relu")


def activate(a, name: str, xp=np):
    if name == "tanh":
        return xp.tanh(a)
    if name == "sigmoid":
        return sigmoid(a, xp)
    return xp.maximum(a, 0.0)


def activation_grad(h, name: str, xp=np):
    """act'(a) expressed through h = act(a)."""
    if name == "tanh":
        return 1.0 - h * h
    if name == "sigmoid":
        return h * (1.0 - h)
    return (h > 0).astype(h.dtype)


def rnn_step(p, xw, state, activation: str, xp=np):
    (h,) = state                       # (B, H)
    a = xw + h @ p["W_h"]              # (B, H)
    if "b_h" in p:
        a = a + p["b_h"]
    h_new = activate(a, activation, xp)
    return (h_new,), {"h": h_new}


def rnn_step_backward(p, dstate, cache, prev, activation: str, xp=np):
    (dh,) = dstate                                  # (..., B, H)
    da = dh * activation_grad(cache["h"], activation, xp)
    return (da @ matrix_transpose(p["W_h"]),), da, da


class RNN(Cell):
    """Elman RNN: h' = act(x W_x + h W_h + b).

    Parameters: ``W_x`` (input_size, hidden), ``W_h`` (hidden, hidden), ``b`` (hidden,) if bias,
    ``b_h`` (hidden,) if recurrent_bias (PyTorch's second bias).

    >>> cell = RNN(3, 4, activation="sigmoid", seed=0)
    >>> hs, cache = cell.forward(np.zeros((5, 2, 3)))
    >>> hs.shape
    (5, 2, 4)
    """

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, activation: str = "tanh", **kwargs) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: unknown activation {activation!r}; expected one of {ACTIVATIONS}")
        self.activation = activation
        super().__init__(input_size, hidden_size, **kwargs)

    def step(self, p, xw, state, xp=np):
        return rnn_step(p, xw, state, self.activation, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return rnn_step_backward(p, dstate, cache, prev, self.activation, xp)

    def fused_forward(self, p, xw, state0, mask):
        T, B, H = xw.shape
        hs, h_steps = np.empty((T, B, H), self.dtype), np.empty((T, B, H), self.dtype)
        b_h = p["b_h"] if "b_h" in p else np.zeros(H, self.dtype)
        rnn_forward_loop(xw, np.ascontiguousarray(p["W_h"]), b_h, state0[0], mask, ACTIVATIONS.index(self.activation),
                         hs, h_steps)
        return (hs,), {"h": h_steps}

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out):
        dxw = np.empty_like(dhs)
        dh0 = rnn_backward_loop(dhs, np.ascontiguousarray(p["W_h"].T), cache.steps["h"], mask,
                                ACTIVATIONS.index(self.activation), back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


# -- the fused time loops of the Numba engine (rnnlab.cells.numba_engine) ---------------------------
# The same equations as rnn_step / rnn_step_backward, over all T steps in one compiled loop. The
# recurrent matmul goes to BLAS (np.dot); the rest is short elementwise loops. ``act``: 0 tanh,
# 1 sigmoid, 2 relu. ``mask`` (T, B) is all ones when there is none. ``back_steps`` < 0 is full BPTT;
# k >= 0 carries k + 1 ages of deltas (see rnnlab.cells.base).

@njit(cache=True)
def _act(a, act):
    if act == 0:
        return math.tanh(a)
    if act == 1:
        return 0.5 * (1.0 + math.tanh(0.5 * a))
    return a if a > 0.0 else 0.0


@njit(cache=True)
def _act_grad(h, act):
    if act == 0:
        return 1.0 - h * h
    if act == 1:
        return h * (1.0 - h)
    return 1.0 if h > 0.0 else 0.0


@njit(cache=True)
def rnn_forward_loop(xw, W_h, b_h, h0, mask, act, hs, h_steps):
    """a_t = xw_t + h_{t−1} W_h + b_h;  h_t = act(a_t) (kept as h_{t−1} where mask is 0)."""
    T, B, H = hs.shape
    h = h0.copy()
    for t in range(T):
        a = np.dot(h, W_h)
        for i in range(B):
            for j in range(H):
                h_new = _act(xw[t, i, j] + a[i, j] + b_h[j], act)
                h_steps[t, i, j] = h_new
                if mask[t, i] > 0.0:
                    h[i, j] = h_new
        hs[t] = h


@njit(cache=True)
def rnn_backward_loop(dhs, W_hT, h_steps, mask, act, back_steps, dxw, dh_out):
    """da = dh ⊙ act′ (through h);  dh_{t−1} = da W_hᵀ, for every age of the carried deltas at once;
    masked steps pass their delta through. Returns dh0; dxw (= dhw) and dh_out are filled."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A, B, H), dhs.dtype)
    for t in range(T - 1, -1, -1):
        carry[0] += dhs[t]
        for i in range(B):
            m = mask[t, i]
            for j in range(H):
                g = _act_grad(h_steps[t, i, j], act)
                total = 0.0
                for s in range(A):
                    da[s, i, j] = m * carry[s, i, j] * g
                    total += carry[s, i, j]
                    dh_out[t, i, j] = total
                dxw[t, i, j] = 0.0
                for s in range(A):
                    dxw[t, i, j] += da[s, i, j]
        dprev = np.dot(da.reshape(A * B, H), W_hT).reshape(A, B, H)
        for i in range(B):
            keep = 1.0 - mask[t, i]
            for s in range(A):
                for j in range(H):
                    dprev[s, i, j] += keep * carry[s, i, j]
        step_back(carry, dprev, back_steps)
    return initial_state_delta(carry, back_steps)
