"""The fused engine (``engine="numba"``): each cell's forward and backward time loops compiled with
Numba, beside the cell's equations (``rnn_forward_loop``/``rnn_backward_loop`` in ``rnnlab/cells/rnn.py``,
likewise in ``gru.py`` and ``lstm.py``), with the recurrent matmul in BLAS and the gates as short
vectorised loops.

Around the loop everything is the NumPy engine's: the input projection ``x W_x + b`` as one matmul
before it, the parameter gradients and ``dx`` as matmuls over all T·B rows after it
(``cell.param_grads``). The contract is the NumPy engine's too: same arguments, same ``Cache`` (the
same per-step intermediates, so a cache from one engine can be read by the other), masks,
truncation ages, ``dh_out``; float32 and float64. Kernels are compiled on first use and cached on
disk (``cache=True``), so a new process loads them instead of compiling.

Temporaries that do not outlive a call (the projected input, the pre-activation gradients) live in
a per-thread workspace reused between calls of the same shape: fresh ~10–30 MB buffers each step cost
page faults (about 10% of a training step at T=100, B=64, hidden 256). What a call returns or
stores in its ``Cache`` is always fresh.

On x86-64 the engine's forward and backward run with the processor's flush-to-zero and denormals-are-zero bits set
on the calling thread (``kernel_math.flush_subnormals``), put back as they were when the call returns, as
TensorFlow's ``ScopedFlushDenormal`` does around its kernels: a number below the dtype's smallest normal (float32
1.2e-38, float64 2.2e-308) is 0 there. BPTT through a vanishing gradient makes such numbers, and x86 processors take
them ~100× slower: a vanilla RNN's backward (T = 400, batch 32, hidden 64, float32, W_h scaled by 0.3, the error
injected at the last step; 2% of the deltas reaching h_t subnormal) took 15.9 ms against 7.6 with them flushed
(Intel Xeon, 1 thread, 2026-11-29). The NumPy engine keeps IEEE 754's gradual underflow; with and without the flush
this engine's numbers agree to within a hundred smallest normals, and its states and weight gradients bit for bit
(tested). OpenBLAS's own threads (at more than one BLAS thread) keep their own control words.
"""

from __future__ import annotations

import threading

import numpy as np

from rnnlab.cells.cache import Cache, PreviousStates
from rnnlab.cells.kernel_blas import projection_matmul
from rnnlab.cells.kernel_math import flush_subnormals, restore_float_control
from rnnlab.engines import loops

_local = threading.local()


def workspace(name: str, shape: tuple, dtype) -> np.ndarray:
    """A buffer that lives as long as the thread, reallocated only when its shape or dtype changes."""
    buffers = _local.__dict__.setdefault("buffers", {})
    buf = buffers.get(name)
    if buf is None or buf.shape != shape or buf.dtype != dtype:
        buf = buffers[name] = np.empty(shape, dtype)
    return buf


def _mask2d(mask: np.ndarray | None, T: int, B: int, dtype) -> np.ndarray:
    if mask is None:
        return np.ones((T, B), dtype)
    return np.ascontiguousarray(mask[:, :, 0], dtype=dtype)


def forward(cell, x: np.ndarray, state0: tuple, mask: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    control = flush_subnormals()
    try:
        return _forward(cell, x, state0, mask)
    finally:
        restore_float_control(control)


def backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None,
             need_dx: bool = True):
    control = flush_subnormals()
    try:
        return _backward(cell, dhs, cache, k, dh_out, need_dx)
    finally:
        restore_float_control(control)


def _forward(cell, x: np.ndarray, state0: tuple, mask: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    p = cell.params
    T, B = x.shape[:2]
    xw = workspace("xw", (T, B, p["W_x"].shape[1]), cell.dtype)
    if x.ndim == 2:      # token ids for one-hot rows: the projection is a row lookup
        np.take(p["W_x"], x.reshape(-1), axis=0, out=xw.reshape(T * B, -1))
    else:
        projection_matmul(x.reshape(T * B, -1), p["W_x"], out=xw.reshape(T * B, -1))
    if "b" in p and not cell.fused_adds_bias():
        xw += p["b"]
    states, steps = cell.fused_forward(p, xw, tuple(np.ascontiguousarray(s) for s in state0),
                                       _mask2d(mask, T, B, cell.dtype))
    cache = Cache(x, mask, state0, states, steps)
    return cache.states[0], cache


def _backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None,
              need_dx: bool = True):
    p = cell.params
    T, B = cache.x.shape[:2]
    prev = PreviousStates(cache)        # each component built only if a kernel or the parameter gradients ask
    totals = workspace("dh_out", dhs.shape, cell.dtype) if dh_out is None else dh_out
    shape = (T, B, p["W_x"].shape[1])
    dxw, dhw = workspace("dxw", shape, cell.dtype), workspace("dhw", shape, cell.dtype)
    dxw, dhw, dstate0 = cell.fused_backward(p, np.ascontiguousarray(dhs), cache, prev,
                                            _mask2d(cache.mask, T, B, cell.dtype), -1 if k is None else k, totals,
                                            dxw, dhw)
    grads = cell.param_grads(p, cache.x, prev[0], cache.steps, dxw, dhw)
    return grads, loops.input_gradient(p, dxw, cache.x) if need_dx else None, loops.shaped_like_h0(dstate0)
