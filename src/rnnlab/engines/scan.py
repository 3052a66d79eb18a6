"""The scan engine: a cell whose step is linear in its state runs its recurrence as one linear recurrence over
all T steps, solved at once, instead of T calls of its step.

A cell declares it with ``linear_state``, the indices of the state components its step updates as

    s_t = a_t ⊙ s_{t−1} + b_t            a_t, b_t functions of x_t only (real, elementwise)

or, with ``complex_state``, the two components that are the real and imaginary parts of one complex diagonal
state (the LRU's λ). The remaining components are readouts the step writes but never reads (S6's y = C S + D u).
The engine never asks the cell for its coefficients; it reads them off the step it already has:

- b_t = step(x_t, s = 0), all T·B rows in one call;
- a_t = the step's adjoint at s = 0 with a unit error on s: dprev = a_t ⊙ 1, exact (for a complex state the
  adjoint multiplies by conj(λ), so a unit real error returns (Re λ, −Im λ));
- then the recurrence is solved (``solve``), and one more call of the step over all rows, at the solved previous
  states, gives the readouts and the intermediates the backward reads.

The backward of a linear recurrence is the same recurrence run backwards (MODERN.md §3): with G_t the error
reaching s_t, G_t = a_{t+1} ⊙ G_{t+1} + e_t, where e_t is the error injected into s_t (dL/dh_t when s is the
output h itself; else what step t+1's adjoint sends to s_t from its readout's error). One call of the step's
adjoint over all rows at those errors gives every pre-activation gradient. A padded step (mask 0) has a = 1,
b = 0 (it keeps the state) and passes its errors through, as in the loops (``rnnlab.engines.loops``).

Two solvers, proven equal to the loop (``tests/test_scan.py``): ``"sequential"``, a compiled loop over t
(O(T) work, one pass over the data), and ``"associative"``, the doubling scan of Hillis and Steele over the
pairs (a, b) • (a′, b′) = (a′a, a′b + b′) in ⌈log₂ T⌉ vectorised passes (O(T log T) work, the parallel form the
GPU libraries use). ``SOLVER`` is the one ``forward`` uses, chosen by the crossover measured in
``docs/engines.md``. The engine scans only where that measured faster than the step loop (``scans``: a small
state per batch); elsewhere, and for truncated BPTT (``back_steps``), it runs the loop (``rnnlab.engines.numpy``),
whose cache is the same. Long sequences are solved in chunks of steps (``chunk_steps``), so that each chunk's
arrays stay in cache.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.cache import Cache
from rnnlab.compile import kernel
from rnnlab.engines import loops
from rnnlab.engines import numpy as loop_engine

SOLVERS = ("sequential", "associative")
SOLVER = "sequential"      # faster at 17 of the 23 sizes measured (docs/engines.md); the associative form won only
                           # at the shortest sequences with one batch row, by at most 20%, and at B = 32 by 1.2–1.8×
                           # where the step loop beats both


# -- the linear recurrence s_t = a_t s_{t−1} + b_t, solved two ways ---------------------------------------------


@kernel
def _sequential(a, b, s0, out):
    """out[t] = a[t] * out[t−1] + b[t] for (T, n) arrays, out[−1] = s0 (real or complex)."""
    s = s0.copy()
    for t in range(a.shape[0]):
        for j in range(a.shape[1]):
            s[j] = a[t, j] * s[j] + b[t, j]
            out[t, j] = s[j]


def _associative(a, b, s0):
    """Hillis–Steele doubling over the pairs (a_t, b_t): after the pass of distance d, (A_t, B_t) compose the
    steps t−2d+1 … t; s0 folded into b_0 first."""
    A, S = a.copy(), b.copy()
    S[0] = S[0] + A[0] * s0
    d = 1
    while d < A.shape[0]:
        S[d:] = A[d:] * S[:-d] + S[d:]       # the right sides are evaluated before the assignment
        A[d:] = A[d:] * A[:-d]
        d *= 2
    return S


def solve(a: np.ndarray, b: np.ndarray, s0: np.ndarray, solver: str | None = None) -> np.ndarray:
    """s_t = a_t ⊙ s_{t−1} + b_t for t = 0 … T−1 from s_{−1} = s0: a, b (T, B, ...), s0 (B, ...) → s (T, B, ...).
    ``solver``: one of ``SOLVERS``; None: ``SOLVER``, read at the call."""
    solver = SOLVER if solver is None else solver
    if solver not in SOLVERS:
        raise ValueError(f"solver: expected one of {SOLVERS}, got {solver!r}")
    T = a.shape[0]
    if solver == "associative":
        return _associative(a, b, s0)
    flat = (T, int(np.prod(a.shape[1:], dtype=np.int64)))
    out = np.empty(flat, np.result_type(a, b, s0))
    _sequential(np.ascontiguousarray(a).reshape(flat), np.ascontiguousarray(b).reshape(flat),
                np.ascontiguousarray(s0).reshape(-1), out)
    return out.reshape(a.shape)


def solve_reverse(c: np.ndarray, e: np.ndarray, solver: str | None = None) -> np.ndarray:
    """X_t = c_t ⊙ X_{t+1} + e_t from X_T = 0: the backward of ``solve`` (the same recurrence, time reversed)."""
    return solve(c[::-1], e[::-1], np.zeros(e.shape[1:], e.dtype), solver)[::-1]


# -- the cell's coefficients, read off its step ------------------------------------------------------------------


def _shaped_mask(m, shape: tuple):
    """m (T, B, 1) against a (T, B, ...) array."""
    return m.reshape(m.shape[:2] + (1,) * (len(shape) - 2))


def _flat(arrays, rows: int):
    return tuple(v.reshape((rows,) + v.shape[2:]) for v in arrays)


def _unflat(arrays, T: int, B: int):
    return tuple(v.reshape((T, B) + v.shape[1:]) for v in arrays)


def _transition(cell, p, step_cache: dict, zero: tuple) -> np.ndarray | list:
    """The a_t of every row, exactly, from the step's adjoint at a unit error on the scanned state: one real array
    per scanned component, or one complex array λ for a complex state."""
    unit = [np.zeros_like(z) for z in zero]
    first = cell.linear_state[0]
    for j in (cell.linear_state[:1] if cell.complex_state else cell.linear_state):
        unit[j] = np.ones_like(zero[j])
    dprev = cell.step_backward(p, tuple(unit), step_cache, zero)[0]
    if cell.complex_state:
        return [dprev[first] - 1j * dprev[cell.linear_state[1]]]
    return [dprev[j] for j in cell.linear_state]


def _scanned(cell, parts: tuple) -> list:
    """The scanned components of a state (or of its errors) as the solver takes them: real ones as they are, a
    complex pair as one complex array."""
    if cell.complex_state:
        re, im = cell.linear_state
        return [parts[re] + 1j * parts[im]]
    return [parts[j] for j in cell.linear_state]


def _unscanned(cell, values: list, dtype) -> dict:
    """The inverse of ``_scanned``: component index → real array."""
    if cell.complex_state:
        re, im = cell.linear_state
        return {re: values[0].real.astype(dtype), im: values[0].imag.astype(dtype)}
    return dict(zip(cell.linear_state, values))


def _coefficients(cell, p, xw, shapes: tuple, T: int, B: int, m):
    """(a, b) per scanned group, (T, B, ...), with a padded step's a = 1 and b = 0."""
    zero = tuple(np.zeros((T * B,) + s, cell.dtype) for s in shapes)
    offsets, step_cache = cell.step(p, xw, zero)
    a = [v.reshape((T, B) + v.shape[1:]) for v in _transition(cell, p, step_cache, zero)]
    b = [v.reshape((T, B) + v.shape[1:]) for v in _scanned(cell, offsets)]
    if m is not None:
        a = [np.where(_shaped_mask(m, v.shape) > 0, v, 1.0) for v in a]
        b = [np.where(_shaped_mask(m, v.shape) > 0, v, 0.0) for v in b]
    return a, b


def _fill_padded(values: np.ndarray, first: np.ndarray, m) -> np.ndarray:
    """A readout on padded steps repeats the last valid step's (or the initial state's) value."""
    if m is None:
        return values
    T = values.shape[0]
    valid = m[..., 0] > 0                                                    # (T, B)
    last = np.maximum.accumulate(np.where(valid, np.arange(T)[:, None], -1), axis=0)
    padded = np.concatenate([first[None], values], axis=0)                   # index 0: the initial state
    return padded[last + 1, np.arange(values.shape[1])[None, :]]


def chunk_steps(B: int, width: int, shapes: tuple) -> int:
    """Steps solved per chunk: enough rows that Python's overhead per call is small, few enough that each
    chunk's arrays stay in the processor's caches (whole-sequence arrays made every elementwise pass memory-bound:
    2× slower than the step loop at (256, 32, ·, 256))."""
    per_row = max(width, *(int(np.prod(s, dtype=np.int64)) for s in shapes))
    return max(1, CHUNK_ELEMENTS // (B * per_row))


CHUNK_ELEMENTS = 2 ** 16        # per array of a chunk; measured best of 2^12 … 2^22 (docs/engines.md)


def _forward_chunk(cell, p, xw, state: tuple, m):
    """The scan over steps t0 … t1 − 1 from the state before t0: (states (Tc, B, ...), the step's intermediates)."""
    Tc, B = xw.shape[:2]
    shapes = tuple(s.shape[1:] for s in state)
    xw = xw.reshape(Tc * B, -1)
    a, b = _coefficients(cell, p, xw, shapes, Tc, B, m)
    solved = _unscanned(cell, [solve(ai, bi, s0) for ai, bi, s0 in zip(a, b, _scanned(cell, state))], cell.dtype)
    prev = tuple(np.concatenate([state[j][None], solved[j][:-1]]) if j in solved else
                 np.zeros((Tc,) + state[j].shape, cell.dtype) for j in range(len(state)))
    new, step_cache = cell.step(p, xw, _flat(prev, Tc * B))
    new = _unflat(new, Tc, B)
    states = tuple(solved[j].astype(cell.dtype, copy=False) if j in solved else _fill_padded(new[j], state[j], m)
                   for j in range(len(state)))
    return states, {name: v.reshape((Tc, B) + v.shape[1:]) for name, v in step_cache.items()}


SCAN_UP_TO = 1024   # batch × state elements per sequence: above it the step loop was faster (docs/engines.md)


def scans(B: int, shapes: tuple) -> bool:
    """The measured rule: solve the recurrence at once for a batch whose state is small (the loop's Python overhead
    per step dominates), else run the step loop, which touches each step's data while it is in cache and computes
    each step once (the scan reads its coefficients off two more calls of the step and its adjoint)."""
    return B * sum(int(np.prod(s, dtype=np.int64)) for s in shapes) <= SCAN_UP_TO


def forward(cell, x: np.ndarray, state: tuple, m: np.ndarray | None) -> tuple[np.ndarray, Cache]:
    p = cell.params
    T, B = x.shape[:2]
    if not scans(B, tuple(s.shape[1:] for s in state)):
        return loop_engine.forward(cell, x, state, m)
    xw = loops.project_input(p, x, np)
    chunk = chunk_steps(B, xw.shape[-1], tuple(s.shape[1:] for s in state))
    states = tuple(np.empty((T,) + s.shape, cell.dtype) for s in state)
    steps: dict[str, np.ndarray] = {}
    carry = state
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        chunk_states, chunk_steps_cache = _forward_chunk(cell, p, xw[t0:t1], carry, None if m is None else m[t0:t1])
        for buf, value in zip(states, chunk_states):
            buf[t0:t1] = value
        for name, value in chunk_steps_cache.items():
            if name not in steps:
                steps[name] = np.empty((T,) + value.shape[1:], value.dtype)
            steps[name][t0:t1] = value
        carry = tuple(s[-1] for s in chunk_states)
    return states[0], Cache(x, m, state, states, steps)


def _readout_errors(dhs: np.ndarray, m) -> np.ndarray:
    """The error reaching a readout y_t: its own, plus what the padded steps after it pass back (they repeat y)."""
    if m is None:
        return dhs
    passes = np.concatenate([1.0 - m[1:], np.zeros_like(m[:1])]).astype(dhs.dtype)    # c_t = 1 − m_{t+1}
    return solve_reverse(np.broadcast_to(passes, dhs.shape), dhs)


def _masked(deltas: tuple, m, shapes: tuple) -> tuple:
    return deltas if m is None else tuple(d * _shaped_mask(m, (0, 0) + s) for d, s in zip(deltas, shapes))


def _backward_chunk(cell, p, dhs, m, step_cache: dict, prev: tuple, later: tuple):
    """BPTT over steps t0 … t1 − 1, given ``later``, the error reaching the state after t1 − 1 from the steps after
    it: → (the error reaching the state before t0, dxw, dhw, the total error reaching each h_t)."""
    Tc, B = dhs.shape[:2]
    rows = Tc * B
    shapes = tuple(s.shape[2:] for s in prev)
    prev = _flat(prev, rows)
    step_cache = {name: v.reshape((rows,) + v.shape[2:]) for name, v in step_cache.items()}
    zero = tuple(np.zeros_like(v) for v in prev)
    a = [v.reshape((Tc, B) + v.shape[1:]) for v in _transition(cell, p, step_cache, zero)]
    if m is not None:
        a = [np.where(_shaped_mask(m, v.shape) > 0, v, 1.0) for v in a]
    dhs = dhs.copy()
    dhs[-1] += later[0]                        # h_{t1−1} is read by step t1 too (or repeated by its padding)
    errors = [np.zeros((Tc, B) + s, cell.dtype) for s in shapes]
    if 0 in cell.linear_state:                 # s is h: the injected error is dL/dh_t itself
        errors[0] = dhs
        injected = _scanned(cell, tuple(errors))
    else:                                      # what each step's readout sends back to the state before it
        errors[0] = _readout_errors(dhs, m)
        sent = cell.step_backward(p, _flat(_masked(tuple(errors), m, shapes), rows), step_cache, prev)[0]
        after = _scanned(cell, later)
        injected = [np.concatenate([v.reshape((Tc, B) + v.shape[1:])[1:], last[None]])
                    for v, last in zip(_scanned(cell, sent), after)]
    following = [np.concatenate([ai[1:], np.zeros_like(ai[:1])]) for ai in a]        # c_t = a_{t+1}
    if cell.complex_state:
        following = [np.conj(c) for c in following]
    reaching = _unscanned(cell, [solve_reverse(c, e) for c, e in zip(following, injected)], cell.dtype)
    deltas = tuple(reaching.get(j, errors[j]) for j in range(len(shapes)))
    dprev, dxw, dhw = cell.step_backward(p, _flat(_masked(deltas, m, shapes), rows), step_cache, prev)
    before = tuple(v[:B] for v in dprev)
    if m is not None:
        before = loops.pass_padding(before, tuple(d[0] for d in deltas), m[0], tuple((B,) + s for s in shapes))
    return before, dxw.reshape((Tc, B) + dxw.shape[1:]), dhw.reshape((Tc, B) + dhw.shape[1:]), deltas[0]


def backward(cell, dhs: np.ndarray, cache: Cache, k: int | None, dh_out: np.ndarray | None = None,
             need_dx: bool = True):
    if k is not None or not scans(cache.x.shape[1], tuple(s.shape[1:] for s in cache.state0)):
        return loop_engine.backward(cell, dhs, cache, k, dh_out, need_dx)     # the same cache either way
    p, m = cell.params, cache.mask
    T, B = cache.x.shape[:2]
    prev = cache.prev_states()
    chunk = chunk_steps(B, p["W_x"].shape[1], tuple(s.shape[1:] for s in cache.state0))     # as the forward
    later = tuple(np.zeros_like(s) for s in cache.state0)
    dxw = dhw = None
    for t1 in range(T, 0, -chunk):
        t0 = max(0, t1 - chunk)
        window = slice(t0, t1)
        later, dxw_c, dhw_c, reaching = _backward_chunk(
            cell, p, dhs[window], None if m is None else m[window], {n: v[window] for n, v in cache.steps.items()},
            tuple(s[window] for s in prev), later)
        if dxw is None:
            dxw, dhw = np.empty((T,) + dxw_c.shape[1:], cell.dtype), np.empty((T,) + dhw_c.shape[1:], cell.dtype)
        dxw[window], dhw[window] = dxw_c, dhw_c
        if dh_out is not None:
            dh_out[window] = reaching
    grads = cell.param_grads(p, cache.x, prev[0], cache.steps, dxw, dhw)
    dx = loops.input_gradient(p, dxw, cache.x) if need_dx else None
    return grads, dx, loops.shaped_like_h0(later)
