"""The fused engine (``engine="numba"``): each cell's forward and backward time loops compiled with
Numba, beside the cell's equations (``rnn_forward_loop`` and ``rnn_backward_loop`` in ``rnn.py``,
likewise in ``gru.py`` and ``lstm.py``), with the recurrent matmul in BLAS and the gates as short
loops. Everything around the loop is the NumPy engine's: the input projection ``x W_x + b`` as one
matmul before it, and the parameter gradients and ``dx`` as matmuls over all T·B rows after it
(``Cell.param_grads``). The contract is the NumPy engine's: same arguments, same ``Cache`` (the
same per-step intermediates, so a cache from one engine can be read by the other), masks,
truncation ages, ``dh_out``; float32 and float64. Kernels are compiled on first use and cached on
disk (``cache=True``), so a new process loads them instead of compiling.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.cache import Cache


def _mask2d(mask: np.ndarray | None, T: int, B: int, dtype) -> np.ndarray:
    if mask is None:
        return np.ones((T, B), dtype)
    return np.ascontiguousarray(mask[:, :, 0], dtype=dtype)


def forward(cell, x: np.ndarray, state0: tuple, mask: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    p = cell.params
    T, B, _ = x.shape
    xw = (x.reshape(T * B, -1) @ p["W_x"]).reshape(T, B, -1)
    if "b" in p:
        xw += p["b"]
    states, steps = cell.fused_forward(p, xw, tuple(np.ascontiguousarray(s) for s in state0),
                                       _mask2d(mask, T, B, cell.dtype))
    cache = Cache(x, mask, state0, states, steps)
    return cache.states[0], cache


def backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None):
    p = cell.params
    T, B, _ = cache.x.shape
    prev = cache.prev_states()
    totals = np.empty_like(dhs) if dh_out is None else dh_out
    dxw, dhw, dstate0 = cell.fused_backward(p, np.ascontiguousarray(dhs), cache, prev,
                                            _mask2d(cache.mask, T, B, cell.dtype), -1 if k is None else k, totals)
    grads = cell.param_grads(p, cache.x, prev[0], cache.steps, dxw, dhw)
    dx = (dxw.reshape(T * B, -1) @ p["W_x"].T).reshape(T, B, -1)
    return grads, dx, dstate0[0] if cell.state_size == 1 else tuple(dstate0)


