"""Elman (vanilla) RNN.

    a_t = x_t W_x + b + h_{t-1} W_h (+ b_h)
    h_t = act(a_t),   act in {tanh, sigmoid, relu}

Backward, with dh the error arriving at h_t:

    da      = dh * act'(a_t)       (act' written through the output: 1 - h², h(1 - h), [h > 0])
    dh_prev = da W_hᵀ
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, step_back, sum_ages
from rnnlab.cells.base import Cell, Option, recurrent_preactivation
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import inline, kernel, kernel_sigmoid, kernel_tanh, one_of, zero_of
from rnnlab.cells.registry import register_cell
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
    a = recurrent_preactivation(p, xw, h)
    h_new = activate(a, activation, xp)
    return (h_new,), {"h": h_new}


def rnn_step_backward(p, dstate, cache, prev, activation: str, xp=np):
    (dh,) = dstate                                  # (..., B, H)
    da = dh * activation_grad(cache["h"], activation, xp)
    return (da @ matrix_transpose(p["W_h"]),), da, da


@register_cell("rnn")
class RNN(Cell):
    """Elman RNN: h' = act(x W_x + h W_h + b).

    Parameters: ``W_x`` (input_size, hidden), ``W_h`` (hidden, hidden), ``b`` (hidden,) if bias,
    ``b_h`` (hidden,) if recurrent_bias (PyTorch's second bias).

    >>> cell = RNN(3, 4, activation="sigmoid", seed=0)
    >>> hs, cache = cell.forward(np.zeros((5, 2, 3)))
    >>> hs.shape
    (5, 2, 4)
    """

    title = "vanilla"
    gates = 1
    options = (Option("activation", "tanh", str, "vanilla RNN activation", ACTIVATIONS),)

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

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives da (dxw = dhw here, so dhw is unused)."""
        dh0 = rnn_backward_loop(dhs, np.ascontiguousarray(p["W_h"].T), cache.steps["h"], mask,
                                ACTIVATIONS.index(self.activation), back_steps, dxw, dh_out)
        return dxw, dxw, (dh0,)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) -------------------------------
# The same equations as rnn_step / rnn_step_backward, over all T steps in one compiled loop. The
# recurrent matmul goes to BLAS (np.dot); the rest is short elementwise loops. ``act``: 0 tanh,
# 1 sigmoid, 2 relu. ``mask`` (T, B) is all ones when there is none. ``back_steps`` < 0 is full BPTT;
# k >= 0 carries k + 1 ages of deltas (see rnnlab.engines.loops).

@inline
def _activate_row(a, out, act):
    """out = act(a) over a row or a flattened block; the branch outside the loop so that each loop
    vectorises."""
    if act == 0:
        for j in range(a.size):
            out[j] = kernel_tanh(a[j])
    elif act == 1:
        for j in range(a.size):
            out[j] = kernel_sigmoid(a[j])
    else:
        for j in range(a.size):
            out[j] = max(a[j], 0.0)


@inline
def _scale_by_activation_grad(d, h, out, act):
    """out = d ⊙ act′, act′ written through h = act(a): 1 − h², h(1 − h), [h > 0]."""
    if act == 0:
        for j in range(d.size):
            out[j] = d[j] * (one_of(h) - h[j] * h[j])
    elif act == 1:
        for j in range(d.size):
            out[j] = d[j] * h[j] * (one_of(h) - h[j])
    else:
        for j in range(d.size):
            out[j] = d[j] if h[j] > 0.0 else zero_of(d)


@kernel
def rnn_forward_loop(xw, W_h, b_h, h0, mask, act, hs, h_steps):
    """a_t = xw_t + h_{t−1} W_h + b_h;  h_t = act(a_t) (kept as h_{t−1} where mask is 0)."""
    T, B, H = hs.shape
    h = h0.copy()
    a = np.empty((B, H), hs.dtype)
    for t in range(T):
        kernel_matmul(h, W_h, a)
        for i in range(B):
            for j in range(H):
                a[i, j] += xw[t, i, j] + b_h[j]
        # the activation over the step's whole (B, H) block: row by row, rows of H ≲ 40 ran mostly
        # as scalar loop remainders (at hidden 10: 18 → 9 µs, the same bits)
        _activate_row(a.reshape(-1), h_steps[t].reshape(-1), act)
        for i in range(B):
            if mask[t, i] > 0.0:
                for j in range(H):
                    h[i, j] = h_steps[t, i, j]
        hs[t] = h


@kernel
def rnn_backward_loop(dhs, W_hT, h_steps, mask, act, back_steps, dxw, dh_out):
    """da = dh ⊙ act′ (through h);  dh_{t−1} = da W_hᵀ, for every age of the carried deltas at once;
    masked steps pass their delta through. Returns dh0; dxw (= dhw) and dh_out are filled."""
    T, B, H = dhs.shape
    carry = new_carry(back_steps, B, H, dhs)
    A = carry.shape[0]
    da = np.empty((A * B, H), dhs.dtype)
    dprev = np.empty((A * B, H), dhs.dtype)
    for t in range(T - 1, -1, -1):
        inject(carry, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):
                if mask[t, i] > 0.0:
                    _scale_by_activation_grad(carry[s, i], h_steps[t, i], da[s * B + i], act)
                else:
                    da[s * B + i] = 0.0
        sum_ages(da, B, dxw[t])
        kernel_matmul(da, W_hT, dprev)
        for s in range(A):
            for i in range(B):
                if mask[t, i] == 0.0:   # a padded step passes its delta through
                    dprev[s * B + i] += carry[s, i]
        step_back(carry, dprev.reshape(A, B, H), back_steps)
    return initial_state_delta(carry, back_steps)


@register_cell("irnn")
class IRNN(RNN):
    """IRNN (Le, Jaitly & Hinton 2015): the ReLU RNN with ``W_h`` = I and zero biases at the start,
    so that at initialisation the state is carried unchanged and the error flows back undamped.

    The equations, kernels and adjoint are RNN's (``activation="relu"``); only the start differs.
    """

    title = "IRNN"
    options = ()
    activation = "relu"

    def initialize(self, rng: np.random.Generator) -> None:
        self.params["W_h"] = np.eye(self.hidden_size, dtype=self.dtype)
        for name in ("b", "b_h"):
            if name in self.params:
                self.params[name] = np.zeros_like(self.params[name])
