"""The reference engine: a Python loop over the cell's ``step`` and ``step_backward`` in NumPy.

- the input projection ``x W_x + b`` is one matmul for all T steps before the loop;
- the forward loop stores each step's intermediates in (T, ...) buffers;
- the backward loop walks time in reverse, carrying deltas (with ages under truncation, see
  ``rnnlab.engines.loops``) and storing the gradients of the pre-activations;
- the parameter gradients are then one matmul each over all T·B rows, after the loop
  (``cell.param_grads``).
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.cache import Cache
from rnnlab.engines import loops


def forward(cell, x: np.ndarray, state: tuple, m: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    p = cell.params
    T, B = x.shape[:2]
    xw = loops.project_input(p, x, np)                       # (T, B, G·H)
    cache = Cache(x, m, state, tuple(np.empty((T,) + s.shape, cell.dtype) for s in state))
    for t in range(T):
        new, step_cache = cell.step(p, xw[t], state)
        if m is not None:
            new = loops.keep_padded(new, state, m[t], np)
        for name, value in step_cache.items():
            if name not in cache.steps:
                cache.steps[name] = np.empty((T,) + value.shape, value.dtype)
            cache.steps[name][t] = value
        for buf, value in zip(cache.states, new):
            buf[t] = value
        state = new
    return cache.states[0], cache


def backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None,
             need_dx: bool = True):
    p, m = cell.params, cache.mask
    T, B = cache.x.shape[:2]
    prev = cache.prev_states()
    shapes = tuple(s.shape for s in cache.state0)
    carry = loops.new_carry(shapes, k, cell.dtype, np)
    dxw = dhw = None     # (T, B, ·): their widths are the cell's (xw's, and whatever its recurrent gradients read)
    for t in range(T - 1, -1, -1):
        m_t = None if m is None else m[t]
        d = loops.inject(carry, dhs[t], k, np)
        if dh_out is not None:
            dh_out[t] = loops.total_error(d[0], k)
        step_cache = {name: v[t] for name, v in cache.steps.items()}
        dprev, dxw_t, dhw_t = cell.step_backward(p, loops.masked_deltas(d, m_t, shapes), step_cache,
                                                 tuple(s[t] for s in prev))
        dxw_t, dhw_t = loops.sum_ages(dxw_t, k), loops.sum_ages(dhw_t, k)
        if dxw is None:
            dxw, dhw = np.empty((T,) + dxw_t.shape, cell.dtype), np.empty((T,) + dhw_t.shape, cell.dtype)
        dxw[t], dhw[t] = dxw_t, dhw_t
        carry = loops.step_back(loops.pass_padding(dprev, d, m_t, shapes), k, np)
    grads = cell.param_grads(p, cache.x, prev[0], cache.steps, dxw, dhw)
    dx = loops.input_gradient(p, dxw, cache.x) if need_dx else None
    return grads, dx, loops.shaped_like_h0(loops.initial_state_delta(carry, k))
