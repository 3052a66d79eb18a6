"""The compiled engine: the cells' own step functions under ``jax.jit``, with ``lax.scan`` as the
time loop (optional extra ``rnnlab[jax]``).

Nothing here restates the equations: the forward scan calls ``cell.step(..., xp=jax.numpy)`` and the
backward scan ``cell.step_backward(..., xp=jax.numpy)``, the same functions the NumPy engine loops
over; the parameter gradients come from the same ``cell.param_grads``. What is specific to this
engine is the loop: ``lax.scan`` in both directions, the truncation ages carried as a leading axis
exactly as in the NumPy engine, and one compiled program per (shapes, mask or not, back_steps).

``CompiledCell.forward`` and ``.backward`` keep the NumPy contract: NumPy arrays in, NumPy arrays
and a ``Cache`` out, so a cell built with ``engine="jax"`` drops in anywhere.
"""

from __future__ import annotations

from functools import partial

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("engine='jax' needs JAX: pip install 'rnnlab[jax]'") from err

# float64 checks (gradcheck, parity) need 64-bit arrays; float32 arrays stay float32
jax.config.update("jax_enable_x64", True)

from rnnlab.cells.cache import Cache  # noqa: E402


def forward_scan(cell, masked: bool, p, x, state0, mask):
    T, B, _ = x.shape
    xw = (x.reshape(T * B, -1) @ p["W_x"]).reshape(T, B, -1)
    if "b" in p:
        xw = xw + p["b"]

    def body(state, inputs):
        xw_t, m_t = inputs
        new, step_cache = cell.step(p, xw_t, state, xp=jnp)
        if masked:
            new = tuple(jnp.where(m_t > 0, n, s) for n, s in zip(new, state))
        return new, (new, step_cache)

    _, (states, steps) = jax.lax.scan(body, state0, (xw, mask))
    return states, steps


def backward_scan(cell, masked: bool, k, p, x, mask, state0, states, steps, dhs):
    T, B, _ = x.shape
    H = state0[0].shape[-1]
    prev = tuple(jnp.concatenate([s0[None], s[:-1]], axis=0) for s0, s in zip(state0, states))
    shape = (B, H) if k is None else (k + 1, B, H)
    carry0 = tuple(jnp.zeros(shape, x.dtype) for _ in state0)

    def body(carry, inputs):
        dh_t, step_t, prev_t, m_t = inputs
        d = list(carry)
        d[0] = d[0] + dh_t if k is None else d[0].at[0].add(dh_t)
        total = d[0] if k is None else d[0].sum(axis=0)
        d_in = tuple(m_t * di for di in d) if masked else tuple(d)
        dprev, dxw_t, dhw_t = cell.step_backward(p, d_in, step_t, prev_t, xp=jnp)
        if masked:
            dprev = tuple(dp + (1.0 - m_t) * di for dp, di in zip(dprev, d))
        if k is None:
            return tuple(dprev), (dxw_t, dhw_t, total)
        zeros = jnp.zeros((1, B, H), x.dtype)
        shifted = tuple(jnp.concatenate([zeros, dp[:-1]], axis=0) for dp in dprev)
        return shifted, (dxw_t.sum(axis=0), dhw_t.sum(axis=0), total)

    final, (dxw, dhw, totals) = jax.lax.scan(body, carry0, (dhs, steps, prev, mask), reverse=True)
    dstate0 = final if k is None else tuple(c[1:].sum(axis=0) for c in final)
    grads = cell.param_grads(p, x, prev[0], steps, dxw, dhw, xp=jnp)
    dx = (dxw.reshape(T * B, -1) @ p["W_x"].T).reshape(T, B, -1)
    return grads, dx, dstate0, totals


_PROGRAMS: dict = {}


def _program(kind: str, cell, masked: bool, k=None):
    """One jitted function per kind of cell math (class, activation, variant), mask use and
    back_steps, shared by every cell of that kind: sizes only change the shapes JAX compiles for."""
    key = (kind, type(cell), getattr(cell, "activation", None), getattr(cell, "variant", None), masked, k)
    if key not in _PROGRAMS:
        if kind == "forward":
            fn = partial(forward_scan, cell, masked)
        elif kind == "backward":
            fn = partial(backward_scan, cell, masked, k)
        else:
            fn = partial(_forward_backward, cell, k)
        _PROGRAMS[key] = jax.jit(fn)
    return _PROGRAMS[key]


class CompiledCell:
    """Compiled forward and backward of one cell (its current parameters are read at each call)."""

    def __init__(self, cell) -> None:
        self.cell = cell

    def _params(self):
        return {name: jnp.asarray(v) for name, v in self.cell.params.items()}

    def forward(self, x: np.ndarray, state0: tuple, mask: np.ndarray | None):
        T, B, _ = x.shape
        masked = mask is not None
        m = jnp.asarray(mask) if masked else jnp.ones((T, B, 1), x.dtype)
        forward = _program("forward", self.cell, masked)
        states, steps = forward(self._params(), jnp.asarray(x), tuple(map(jnp.asarray, state0)), m)
        cache = Cache(x, mask, state0, tuple(np.asarray(s) for s in states),
                      {name: np.asarray(v) for name, v in steps.items()})
        return cache.states[0], cache

    def backward(self, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None):
        masked = cache.mask is not None
        T, B, _ = cache.x.shape
        m = jnp.asarray(cache.mask) if masked else jnp.ones((T, B, 1), cache.x.dtype)
        grads, dx, dstate0, totals = _program("backward", self.cell, masked, k)(
            self._params(), jnp.asarray(cache.x), m, tuple(map(jnp.asarray, cache.state0)),
            tuple(map(jnp.asarray, cache.states)), {n: jnp.asarray(v) for n, v in cache.steps.items()},
            jnp.asarray(dhs))
        if dh_out is not None:
            dh_out[...] = np.asarray(totals)
        grads = {name: np.asarray(g) for name, g in grads.items()}
        dstate0 = tuple(np.asarray(d) for d in dstate0)
        return grads, np.asarray(dx), dstate0[0] if self.cell.state_size == 1 else dstate0


def _forward_backward(cell, k, p, x, state0, dhs):
    T, B, _ = x.shape
    mask = jnp.ones((T, B, 1), x.dtype)
    states, steps = forward_scan(cell, False, p, x, state0, mask)
    grads, dx, dstate0, _ = backward_scan(cell, False, k, p, x, mask, state0, states, steps, dhs)
    return states[0], grads, dx


def fused_step(cell, back_steps: int | None = None):
    """One compiled program for forward + backward with zero initial state and no mask:
    ``f(params, x, dhs) -> (hs, grads, dx)`` on JAX arrays, with no trip through NumPy between the
    two passes. Training loops written in JAX (and the benchmarks) call this."""
    program = _program("fused", cell, False, back_steps)

    def run(p, x, dhs):
        B = x.shape[1]
        state0 = tuple(jnp.zeros((B, cell.hidden_size), x.dtype) for _ in range(cell.state_size))
        return program(p, x, state0, dhs)
    return run
