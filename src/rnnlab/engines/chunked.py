"""The chunked engine (``engine="chunked"``): a matrix-state cell linear in its state (DeltaNet, Gated DeltaNet,
mLSTM) run chunk by chunk in the form the GPU libraries use (flash-linear-attention's ``chunk_delta_rule`` and
``chunk_gla``, xLSTM's chunkwise kernels): within a chunk of L steps the recurrence is solved as matmuls of L × d
blocks (for the delta rule a unit-triangular solve for its pseudo-values), and only the state between chunks is
carried. The cell holds the math (``chunked_forward``, ``chunked_backward``, beside its step, loop over the chunks
included; the chunks' layout is ``rnnlab.cells.chunks``); this module is the engine around it: the input
projection, the cache, the parameter gradients, and the hand-over to the fused loop for truncated BPTT.

The contract is the Numba engine's: the same ``Cache`` (the per-step states too, written from the chunks'
pseudo-values by a rank-one pass), masks, ``dh_out``, float32 and float64. Full BPTT is the chunked form's own
backward, chunk after chunk from the last; truncated BPTT (``back_steps``) is the Numba engine's fused loop on the
same cache, since the stop-gradient at a fixed depth cuts through the middle of a chunk. Both are proven equal to
the step loop (``tests/test_modern_kernels.py``).
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.cache import Cache, PreviousStates
from rnnlab.cells.kernel_math import flush_subnormals, restore_float_control
from rnnlab.engines import loops
from rnnlab.engines import numba as fused


def forward(cell, x: np.ndarray, state0: tuple, mask: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    control = flush_subnormals()       # the per-step states are written by a Numba kernel, as the fused engine's
    try:
        T, B = x.shape[:2]
        xw = loops.project_input(cell.params, x, np)
        states, steps = cell.chunked_forward(cell.params, xw, tuple(np.ascontiguousarray(s) for s in state0),
                                             fused._mask2d(mask, T, B, cell.dtype))
    finally:
        restore_float_control(control)
    cache = Cache(x, mask, state0, states, steps)
    return cache.states[0], cache


def backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None,
             need_dx: bool = True):
    if k is not None:
        return fused.backward(cell, dhs, cache, k, dh_out, need_dx)
    p = cell.params
    T, B = cache.x.shape[:2]
    (dxw, dhw), dstate0, reaching = cell.chunked_backward(p, np.ascontiguousarray(dhs), cache,
                                                          fused._mask2d(cache.mask, T, B, cell.dtype))
    if dh_out is not None:
        dh_out[...] = reaching
    grads = cell.param_grads(p, cache.x, PreviousStates(cache)[0], cache.steps, dxw, dhw)
    return grads, loops.input_gradient(p, dxw, cache.x) if need_dx else None, loops.shaped_like_h0(dstate0)
