"""Elman (vanilla) RNN.

    a_t = x_t W_x + b + h_{t-1} W_h (+ b_h)
    h_t = act(a_t),   act in {tanh, sigmoid, relu}

Backward, with dh the error arriving at h_t:

    da      = dh * act'(a_t)       (act' written through the output: 1 - h², h(1 - h), [h > 0])
    dh_prev = da W_hᵀ
"""

from __future__ import annotations

import numpy as np

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
