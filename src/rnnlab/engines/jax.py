"""The compiled engine: the cells' own step functions under ``jax.jit``, with ``lax.scan`` as the
time loop (optional extra ``rnnlab[jax]``).

Nothing here restates the equations: the forward scan calls ``cell.step(..., xp=jax.numpy)`` and the
backward scan ``cell.step_backward(..., xp=jax.numpy)``, the same functions the NumPy engine loops
over, with the same ages-and-masks body (``rnnlab.engines.loops``); the parameter gradients come from
the same ``cell.param_grads``. One compiled program per kind of cell (its declared static
configuration, ``Cell.config``: its class and options), mask use and back_steps; sizes only change the shapes JAX
compiles for.

``forward`` and ``backward`` keep the NumPy contract: NumPy arrays in, NumPy arrays and a ``Cache``
out, so a cell built with ``engine="jax"`` drops in anywhere. Float64 cells run with 64-bit types
enabled for the duration of the call (``jax.enable_x64``), not for the whole process.
"""

from __future__ import annotations

from functools import partial

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("engine='jax' needs JAX: pip install 'rnnlab[jax]'") from err

from rnnlab.cells.cache import Cache
from rnnlab.engines import loops


def forward_scan(cell, masked: bool, p, x, state0, mask):
    xw = loops.project_input(p, x, jnp)

    def body(state, inputs):
        xw_t, m_t = inputs
        new, step_cache = cell.step(p, xw_t, state, xp=jnp)
        if masked:
            new = loops.keep_padded(new, state, m_t, jnp)
        return new, (new, step_cache)

    _, (states, steps) = jax.lax.scan(body, state0, (xw, mask))
    return states, steps


def backward_scan(cell, masked: bool, k, p, x, mask, state0, states, steps, dhs):
    prev = tuple(jnp.concatenate([s0[None], s[:-1]], axis=0) for s0, s in zip(state0, states))
    shapes = tuple(s.shape for s in state0)
    carry0 = loops.new_carry(shapes, k, state0[0].dtype, jnp)

    def body(carry, inputs):
        dh_t, step_t, prev_t, m_t = inputs
        m_t = m_t if masked else None
        d = loops.inject(carry, dh_t, k, jnp)
        dprev, dxw_t, dhw_t = cell.step_backward(p, loops.masked_deltas(d, m_t, shapes), step_t, prev_t, xp=jnp)
        carry = loops.step_back(loops.pass_padding(dprev, d, m_t, shapes), k, jnp)
        return carry, (loops.sum_ages(dxw_t, k), loops.sum_ages(dhw_t, k), loops.total_error(d[0], k))

    final, (dxw, dhw, totals) = jax.lax.scan(body, carry0, (dhs, steps, prev, mask), reverse=True)
    grads = cell.param_grads(p, x, prev[0], steps, dxw, dhw, xp=jnp)
    return grads, loops.input_gradient(p, dxw, x), loops.initial_state_delta(final, k), totals


_PROGRAMS: dict = {}


def _program(kind: str, cell, masked: bool, k=None):
    """One jitted function per kind of program, cell configuration, mask use and back_steps."""
    key = (kind, cell.config, masked, k)
    if key not in _PROGRAMS:
        if kind == "forward":
            fn = partial(forward_scan, cell, masked)
        elif kind == "backward":
            fn = partial(backward_scan, cell, masked, k)
        else:
            fn = partial(_forward_backward, cell, k)
        _PROGRAMS[key] = jax.jit(fn)
    return _PROGRAMS[key]


def _x64(dtype) -> object:
    return jax.enable_x64(np.dtype(dtype) == np.float64)


def _params(cell):
    return {name: jnp.asarray(v) for name, v in cell.params.items()}


PAD_TO = 8   # masked (variable-length) batches are padded to a multiple of this many steps


def _pad(a: np.ndarray, T_pad: int, zeros: bool = False) -> np.ndarray:
    """``a`` (T, ...) extended to T_pad steps: with zeros, or by repeating its last step (values a
    cell's step has seen, so that a padded step's adjoint, multiplied by a zero delta, stays zero)."""
    extra = [(0, T_pad - a.shape[0])] + [(0, 0)] * (a.ndim - 1)
    return np.pad(a, extra) if zeros else np.pad(a, extra, mode="edge")


def _padded_length(T: int, masked: bool) -> int:
    """Variable-length batches come with a mask; padding them to a multiple of ``PAD_TO`` steps (the
    extra steps masked out: they keep the state and pass no error) bounds the programs JAX compiles to
    a few lengths instead of one per batch length. Exact: a masked step adds zeros."""
    return -(-T // PAD_TO) * PAD_TO if masked else T


def forward(cell, x: np.ndarray, state0: tuple, mask: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    T, B = x.shape[:2]
    masked = mask is not None
    T_pad = _padded_length(T, masked)
    with _x64(cell.dtype):
        m = jnp.asarray(_pad(mask, T_pad, zeros=True)) if masked else jnp.ones((T, B, 1), cell.dtype)
        states, steps = _program("forward", cell, masked)(_params(cell), jnp.asarray(_pad(x, T_pad)),
                                                           tuple(map(jnp.asarray, state0)), m)
        cache = Cache(x, mask, state0, tuple(np.asarray(s)[:T] for s in states),
                      {name: np.asarray(v)[:T] for name, v in steps.items()})
    return cache.states[0], cache


def backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None,
             need_dx: bool = True):
    masked = cache.mask is not None
    T, B = cache.x.shape[:2]
    T_pad = _padded_length(T, masked)
    with _x64(cell.dtype):
        m = jnp.asarray(_pad(cache.mask, T_pad, zeros=True)) if masked else jnp.ones((T, B, 1), cell.dtype)
        grads, dx, dstate0, totals = _program("backward", cell, masked, k)(
            _params(cell), jnp.asarray(_pad(cache.x, T_pad)), m, tuple(map(jnp.asarray, cache.state0)),
            tuple(jnp.asarray(_pad(s, T_pad)) for s in cache.states),
            {n: jnp.asarray(_pad(v, T_pad)) for n, v in cache.steps.items()}, jnp.asarray(_pad(dhs, T_pad, True)))
        dx = dx[:T] if dx is not None and need_dx else None
        if dh_out is not None:
            dh_out[...] = np.asarray(totals)[:T]
        grads = {name: np.asarray(g) for name, g in grads.items()}
        dstate0 = tuple(np.asarray(d) for d in dstate0)
        dx = None if dx is None else np.asarray(dx)
    return grads, dx, loops.shaped_like_h0(dstate0)


def _forward_backward(cell, k, p, x, state0, dhs):
    T, B, _ = x.shape
    mask = jnp.ones((T, B, 1), x.dtype)
    states, steps = forward_scan(cell, False, p, x, state0, mask)
    grads, dx, dstate0, _ = backward_scan(cell, False, k, p, x, mask, state0, states, steps, dhs)
    return states[0], grads, dx


def fused_step(cell, back_steps: int | None = None):
    """One compiled program for forward + backward with zero initial state and no mask:
    ``f(params, x, dhs) -> (hs, grads, dx)`` on JAX arrays, with no trip through NumPy between the
    two passes. Training loops written in JAX (and the benchmarks) call this; float64 callers wrap
    it in ``jax.enable_x64(True)``."""
    program = _program("fused", cell, False, back_steps)

    def run(p, x, dhs):
        B = x.shape[1]
        state0 = tuple(jnp.zeros((B,) + shape, x.dtype) for shape in cell.state_shapes())
        return program(p, x, state0, dhs)
    return run
