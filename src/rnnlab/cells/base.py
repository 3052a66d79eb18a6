"""What every recurrent cell shares: parameters, input checks, and the time loops of BPTT.

A cell supplies two pure functions, ``step`` (one time step of the equations) and
``step_backward`` (its adjoint), and the formula for its recurrent-weight gradients. This module
runs them over time:

- the input projection ``x W_x + b`` is one matmul for all T steps before the loop;
- the forward loop stores each step's intermediates in (T, ...) buffers;
- the backward loop walks time in reverse and stores the gradients of the pre-activations;
- the parameter gradients are then one matmul each over all T * B rows, after the loop.

Truncated BPTT (``back_steps=k``) follows the stop-gradient definition: the error injected at
step t (``dhs[t]``) reaches the computations of steps t, t-1, ..., t-k, and the state
h_{t-k-1} is treated as a constant. Errors injected at different steps expire at different
steps, so the loop carries k+1 deltas at once, one per age, as an extra leading axis of size
k+1: the step adjoint is linear, so one batched call serves all of them, and the parameter
gradients only need their sum.

Masks (T, B) mark valid steps with 1 and padding with 0. A padded step leaves the state as it
was (h_t = h_{t-1}), contributes no parameter gradient, and passes its error through unchanged.
Padded steps count as steps for ``back_steps``.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np

from rnnlab.cells import numba_engine
from rnnlab.cells.cache import Cache, State
from rnnlab.common import check_back_steps, check_dtype, check_positive_int
from rnnlab.init import check_scheme, init_bias, init_weight

Array = np.ndarray
ENGINES = ("numpy", "numba", "jax")


def check_mask(mask: Any, T: int, B: int, dtype) -> Array | None:
    """Mask (T, B) of 0/1 → (T, B, 1) in the cell's dtype, or None."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.shape != (T, B):
        raise ValueError(f"mask: expected shape (T, B) = ({T}, {B}), got {m.shape}")
    if not np.all((m == 0) | (m == 1)):
        raise ValueError("mask: expected only 0/1 (or False/True) entries")
    return m.astype(dtype)[:, :, None]


class ParamView(MutableMapping):
    """A live view of several modules' parameters under the names ``"{prefix}.{name}"``.

    Reading or writing ``view["0.W_h"]`` reads or writes ``children["0"].params["W_h"]``, so a
    composite (a Stack, a model) exposes one flat dict without copying anything.
    """

    def __init__(self, children: dict) -> None:
        self._children = children

    def _split(self, key: str):
        for prefix, child in self._children.items():
            if key.startswith(prefix + ".") and key[len(prefix) + 1:] in child.params:
                return child.params, key[len(prefix) + 1:]
        raise KeyError(key)

    def __getitem__(self, key: str) -> Array:
        params, name = self._split(key)
        return params[name]

    def __setitem__(self, key: str, value: Array) -> None:
        params, name = self._split(key)
        params[name] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("parameters cannot be removed from a module")

    def __iter__(self) -> Iterator[str]:
        for prefix, child in self._children.items():
            for name in child.params:
                yield f"{prefix}.{name}"

    def __len__(self) -> int:
        return sum(len(child.params) for child in self._children.values())


class Cell:
    """Base class of RNN, GRU and LSTM; see those for the equations and parameter names.

    Parameters common to all cells: ``W_x`` (input_size, G*hidden), ``W_h`` (hidden, G*hidden),
    ``b`` (G*hidden,) when ``bias``; ``b_h`` (G*hidden,) when ``recurrent_bias`` (a second bias
    on the recurrent side, as PyTorch's ``bias_hh``; redundant for the math but it changes
    parameter counts, e.g. the 13,314 of S5). G is the number of gates, fused in one matrix in
    PyTorch's gate order.
    """

    gates: int = 1
    state_size: int = 1  # number of state components (2 for LSTM)

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        recurrent_bias: bool = False,
        init: str = "uniform",
        init_scale: float | None = None,
        recurrent_init: str | None = None,
        seed: int | None = None,
        dtype: Any = np.float64,
        engine: str = "numpy",
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine: unknown engine {engine!r}; expected one of {ENGINES}")
        self.engine = engine
        self._compiled = None
        self.input_size = check_positive_int(input_size, "input_size")
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        if not isinstance(bias, (bool, np.bool_)):
            raise ValueError(f"bias: expected True or False, got {bias!r}")
        if not isinstance(recurrent_bias, (bool, np.bool_)):
            raise ValueError(f"recurrent_bias: expected True or False, got {recurrent_bias!r}")
        self.bias = bool(bias)
        self.recurrent_bias = bool(recurrent_bias) and self.bias
        self.init = check_scheme(init, "init")
        self.recurrent_init = check_scheme(recurrent_init or init, "recurrent_init")
        self.init_scale = init_scale
        self.dtype = check_dtype(dtype)
        rng = np.random.default_rng(seed)
        I, H, G = self.input_size, self.hidden_size, self.gates
        self.params: dict[str, Array] = {
            "W_x": init_weight(rng, I, H, G, self.init, init_scale, self.dtype),
            "W_h": init_weight(rng, H, H, G, self.recurrent_init, init_scale, self.dtype),
        }
        if self.bias:
            self.params["b"] = init_bias(rng, H, G * H, self.init, self.dtype)
            if self.recurrent_bias:
                self.params["b_h"] = init_bias(rng, H, G * H, self.init, self.dtype)
        self.params.update(self.extra_params(rng))

    def extra_params(self, rng: np.random.Generator) -> dict[str, Array]:
        """Parameters beyond W_x, W_h, b, b_h that a cell's equations need."""
        return {}

    # -- the cell's math, supplied by subclasses ---------------------------------------------
    def step(self, p: dict[str, Array], xw: Array, state: State, xp=np) -> tuple[State, dict[str, Array]]:
        """One step: xw (B, G*H) is the projected input x_t W_x + b; returns (new state, cache).
        ``xp`` is the array namespace (NumPy, or jax.numpy for the compiled engine)."""
        raise NotImplementedError

    def step_backward(
        self, p: dict[str, Array], dstate: State, cache: dict[str, Array], prev: State, xp=np
    ) -> tuple[State, Array, Array]:
        """Adjoint of ``step``; leading axes of dstate broadcast (they carry BPTT ages).

        Returns (dstate_prev, dxw, dhw): dxw is the gradient of the input pre-activation
        ``x W_x + b`` and dhw that of the recurrent pre-activation ``h W_h + b_h``.
        """
        raise NotImplementedError

    def recurrent_grads(self, p: dict[str, Array], prev_h: Array, steps: dict[str, Array], dhw: Array,
                        xp=np) -> dict:
        """Gradients of the recurrent parameters from dhw (T*B, G*H) and prev_h (T*B, H)."""
        grads = {"W_h": prev_h.T @ dhw}
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0)
        return grads

    # -- the public interface -----------------------------------------------------------------
    def num_params(self) -> int:
        return int(sum(v.size for v in self.params.values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size}, params={self.num_params()})"

    def _initial_state(self, h0: Any, B: int) -> State:
        H = self.hidden_size
        if h0 is None:
            return tuple(np.zeros((B, H), self.dtype) for _ in range(self.state_size))
        parts = (h0,) if self.state_size == 1 else tuple(h0)
        if len(parts) != self.state_size:
            raise ValueError(f"h0: expected an (h, c) pair for {type(self).__name__}, got {len(parts)} arrays")
        out = []
        for part in parts:
            a = np.asarray(part, dtype=self.dtype)
            if a.shape != (B, H):
                raise ValueError(f"h0: expected shape (B, hidden_size) = ({B}, {H}), got {a.shape}")
            out.append(a)
        return tuple(out)

    def _check_input(self, x: Any) -> Array:
        x = np.asarray(x)
        if x.ndim != 3 or x.shape[2] != self.input_size or x.shape[0] < 1:
            raise ValueError(
                f"x: expected shape (T, B, input_size={self.input_size}) with T >= 1, got {x.shape}"
            )
        return x.astype(self.dtype, copy=False)

    def forward(self, x: Any, h0: Any = None, mask: Any = None) -> tuple[Array, Cache]:
        """Run the cell over a sequence.

        x: (T, B, input_size); h0: (B, hidden) or, for LSTM, an (h, c) pair; None means zeros;
        mask: (T, B) of 0/1 or None. Returns hs (T, B, hidden) and the cache for ``backward``.
        """
        x = self._check_input(x)
        T, B, _ = x.shape
        state = self._initial_state(h0, B)
        m = check_mask(mask, T, B, self.dtype)
        if self.engine == "jax":
            return self.compiled().forward(x, state, m)
        if self.engine == "numba":
            return numba_engine.forward(self, x, state, m)
        p = self.params
        xw = (x.reshape(T * B, -1) @ p["W_x"]).reshape(T, B, -1)  # (T, B, G*H)
        if "b" in p:
            xw += p["b"]
        cache = Cache(x, m, state, tuple(np.empty((T, B, self.hidden_size), self.dtype) for _ in state))
        for t in range(T):
            new, step_cache = self.step(p, xw[t], state)
            if m is not None:
                new = tuple(np.where(m[t] > 0, n, s) for n, s in zip(new, state))
            for name, value in step_cache.items():
                if name not in cache.steps:
                    cache.steps[name] = np.empty((T,) + value.shape, value.dtype)
                cache.steps[name][t] = value
            for buf, value in zip(cache.states, new):
                buf[t] = value
            state = new
        return cache.states[0], cache

    def backward(self, dhs: Any, cache: Cache, back_steps: int | None = None, dh_out: Array | None = None):
        """Backpropagation through time.

        dhs: (T, B, hidden), the error injected at each step (dL/dh_t from outside the cell).
        back_steps: None for full BPTT; k >= 0 truncates (see the module docstring).
        dh_out: optional (T, B, hidden) array that receives the total error reaching each h_t
        (its injection plus everything flowing back from later steps): the gradient-flow analyses
        read ‖∂L/∂h_t‖ from it.
        Returns (grads keyed like ``params``, dx (T, B, input_size), dh0), with dh0 shaped like h0.
        """
        k = check_back_steps(back_steps)
        T, B, _ = cache.x.shape
        H = self.hidden_size
        dhs = np.asarray(dhs, dtype=self.dtype)
        if dhs.shape != (T, B, H):
            raise ValueError(f"dhs: expected shape (T, B, hidden) = ({T}, {B}, {H}), got {dhs.shape}")
        if self.engine == "jax":
            return self.compiled().backward(dhs, cache, k, dh_out)
        if self.engine == "numba":
            return numba_engine.backward(self, dhs, cache, k, dh_out)
        p, m = self.params, cache.mask
        prev = cache.prev_states()
        # carried deltas, one per state component; with truncation a leading axis holds the ages
        shape = (B, H) if k is None else (k + 1, B, H)
        carry = [np.zeros(shape, self.dtype) for _ in range(self.state_size)]
        dxw = np.empty((T, B, self.gates * H), self.dtype)
        dhw = np.empty((T, B, self.gates * H), self.dtype)
        for t in range(T - 1, -1, -1):
            d = list(carry)
            if k is None:
                d[0] = d[0] + dhs[t]
            else:
                d[0] = d[0].copy()
                d[0][0] += dhs[t]  # a new error enters at age 0
            if dh_out is not None:
                dh_out[t] = d[0] if k is None else d[0].sum(axis=0)
            step_cache = {name: v[t] for name, v in cache.steps.items()}
            if m is None:
                dprev, dxw_t, dhw_t = self.step_backward(p, tuple(d), step_cache, tuple(s[t] for s in prev))
            else:
                dcand = tuple(m[t] * di for di in d)
                dprev, dxw_t, dhw_t = self.step_backward(p, dcand, step_cache, tuple(s[t] for s in prev))
                dprev = tuple(dp + (1.0 - m[t]) * di for dp, di in zip(dprev, d))
            if k is None:
                dxw[t], dhw[t] = dxw_t, dhw_t
                carry = list(dprev)
            else:
                dxw[t], dhw[t] = dxw_t.sum(axis=0), dhw_t.sum(axis=0)
                # ages 0..k-1 move one step back and become ages 1..k; age k expires here
                carry = [np.concatenate([np.zeros((1, B, H), self.dtype), dp[:-1]]) for dp in dprev]
        if k is None:
            dstate0 = carry
        else:
            dstate0 = [c[1:].sum(axis=0) for c in carry]
        grads = self._param_grads(cache, prev, dxw, dhw)
        dx = (dxw.reshape(T * B, -1) @ p["W_x"].T).reshape(T, B, -1)
        dh0 = dstate0[0] if self.state_size == 1 else tuple(dstate0)
        return grads, dx, dh0

    def _param_grads(self, cache: Cache, prev: State, dxw: Array, dhw: Array) -> dict[str, Array]:
        return self.param_grads(self.params, cache.x, prev[0], cache.steps, dxw, dhw)

    def param_grads(self, p, x, prev_h, steps, dxw, dhw, xp=np) -> dict[str, Array]:
        """All parameter gradients as matmuls over the T*B rows, from the pre-activation gradients."""
        T, B, _ = x.shape
        rows = T * B
        dxw2, dhw2 = dxw.reshape(rows, -1), dhw.reshape(rows, -1)
        grads = {"W_x": x.reshape(rows, -1).T @ dxw2}
        flat = {name: v.reshape((rows,) + v.shape[2:]) for name, v in steps.items()}
        grads.update(self.recurrent_grads(p, prev_h.reshape(rows, -1), flat, dhw2, xp))
        if "b" in p:
            grads["b"] = dxw2.sum(axis=0)
        return {name: grads[name] for name in p}

    def compiled(self):
        """The compiled (JAX) engine of this cell, built on first use."""
        if self._compiled is None:
            from rnnlab.cells.jax_engine import CompiledCell

            self._compiled = CompiledCell(self)
        return self._compiled
