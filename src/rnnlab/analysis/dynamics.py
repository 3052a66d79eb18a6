"""Hidden dynamics: states and outputs along inputs, unit classes, recurrent Jacobians, Lyapunov.

``classify_units`` rule (documented so results can be checked): for each unit, with trajectories
X (inputs × T) of that unit,

1. *oscillating* if, averaged over inputs, one frequency k ≥ 2 of the power spectrum of
   x_t − mean(x) holds at least 40 % of the power (a periodic component, period ≤ T/2);
2. otherwise *accumulating* if the spread across inputs grows: std over inputs in the last third
   of the steps ≥ 1.5 × the std in the first third (the unit integrates its inputs, as a unit that
   sums evidence for the sign of a mean must);
3. otherwise *transient* (its value follows recent inputs and forgets them, or decays).

The recurrent Jacobian J_t = ∂s_t/∂s_{t−1} of the full state s (h, and c for an LSTM) is built
from the cell's own ``step_backward`` applied to the basis vectors, so it is exact for every cell
without a second derivative code. Its eigenvalue moduli and singular values say whether errors
shrink (vanishing gradients) or grow as they travel back; the largest Lyapunov exponent
λ = lim (1/T) Σ log ‖J_t v_{t−1}‖ (v renormalised each step) is their average rate along the
trajectory: λ < 0 means nearby trajectories converge and the gradient through time vanishes.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell
from rnnlab.data.containers import Batch
from rnnlab.models import RecurrentModel

UNIT_CLASSES = ("transient", "accumulating", "oscillating")


def states_and_outputs(model: RecurrentModel, x: np.ndarray) -> dict[str, np.ndarray]:
    """One input sequence (T,) ids or (T, input_size) → top-layer states (T, hidden) and outputs
    (T, outputs): softmax probabilities, sigmoids for a multi-label head, raw for squared error."""
    x = np.asarray(x)[:, None]
    y, _, hs = model.forward(Batch(x, np.zeros(x.shape[:2], np.int64)))
    y = y[:, 0] if y.ndim == 3 else y
    if model.loss_name == "cross_entropy":
        e = np.exp(y - y.max(axis=-1, keepdims=True))
        y = e / e.sum(axis=-1, keepdims=True)
    elif model.loss_name == "binary_cross_entropy":
        y = 1.0 / (1.0 + np.exp(-y))
    return {"states": hs[:, 0], "outputs": y}


def classify_units(trajectories: np.ndarray, power_share: float = 0.4, growth: float = 1.5) -> dict:
    """trajectories (inputs, T, units) → ``labels`` (units,), ``counts`` per class and the two
    statistics behind the rule (see the module docstring): ``peak_share`` and ``spread_growth``."""
    X = np.asarray(trajectories, dtype=np.float64)
    if X.ndim != 3 or X.shape[1] < 6:
        raise ValueError(f"trajectories: expected (inputs, T >= 6, units), got shape {X.shape}")
    n, T, units = X.shape
    centred = X - X.mean(axis=1, keepdims=True)
    power = (np.abs(np.fft.rfft(centred, axis=1)) ** 2)[:, 1:]          # (inputs, freqs, units), no DC
    share = power / np.maximum(power.sum(axis=1, keepdims=True), 1e-300)
    mean_share = share.mean(axis=0)                                     # (freqs, units)
    peak_share = mean_share[1:].max(axis=0) if mean_share.shape[0] > 1 else np.zeros(units)  # k >= 2
    third = max(T // 3, 1)
    early = X[:, :third].std(axis=0).mean(axis=0)
    late = X[:, -third:].std(axis=0).mean(axis=0)
    spread_growth = late / np.maximum(early, 1e-12)
    labels = np.where(peak_share >= power_share, "oscillating",
                      np.where(spread_growth >= growth, "accumulating", "transient"))
    counts = {c: int((labels == c).sum()) for c in UNIT_CLASSES}
    return {"labels": labels, "counts": counts, "peak_share": peak_share, "spread_growth": spread_growth}


def jacobians(cell: Cell, x: np.ndarray, h0=None) -> np.ndarray:
    """J_t = ∂s_t/∂s_{t−1} along the trajectory of x (T, B, input): (T, B, S, S), S = state size, the state's
    components (``cell.state_shapes()``: a matrix memory too) flattened and laid end to end."""
    _, cache = cell.forward(x, h0)
    T, B = cache.x.shape[:2]
    shapes = cell.state_shapes()
    sizes = [int(np.prod(shape)) for shape in shapes]
    S = sum(sizes)
    ends = np.cumsum(sizes)
    prev = cache.prev_states()
    eye = np.eye(S, dtype=cell.dtype)
    basis = tuple(np.broadcast_to(eye[:, None, end - size:end].reshape((S, 1) + shape), (S, B) + shape)
                  for shape, size, end in zip(shapes, sizes, ends))                 # (S, B, component)
    out = np.empty((T, B, S, S), cell.dtype)
    for t in range(T):
        step_cache = {name: v[t] for name, v in cache.steps.items()}
        dprev, _, _ = cell.step_backward(cell.params, basis, step_cache, tuple(s[t] for s in prev))
        # row i of J is the vector-Jacobian product of the i-th basis vector
        out[t] = np.concatenate([np.reshape(d, (S, B, -1)) for d in dprev], axis=-1).transpose(1, 0, 2)
    return out


def jacobian_spectrum(cell: Cell, x: np.ndarray, h0=None) -> dict[str, np.ndarray]:
    """Eigenvalue moduli and singular values of every J_t, each sorted descending: (T, B, S)."""
    J = jacobians(cell, x, h0)
    eig = np.sort(np.abs(np.linalg.eigvals(J)), axis=-1)[..., ::-1]
    sv = np.linalg.svd(J, compute_uv=False)
    return {"eigenvalue_moduli": eig, "singular_values": sv}


def lyapunov_exponent(cell: Cell, x: np.ndarray, h0=None, seed: int = 0) -> dict[str, np.ndarray]:
    """Largest Lyapunov exponent along each trajectory of x (T, B, input): per sequence (B,) and
    the running estimate (T, B), by renormalised products of J_t with a random start vector."""
    J = jacobians(cell, x, h0)
    T, B, S, _ = J.shape
    v = np.random.default_rng(seed).normal(size=(B, S))
    v /= np.linalg.norm(v, axis=-1, keepdims=True)
    logs = np.empty((T, B))
    for t in range(T):
        v = np.einsum("bij,bj->bi", J[t], v)
        norm = np.maximum(np.linalg.norm(v, axis=-1), 1e-300)
        logs[t] = np.log(norm)
        v = v / norm[:, None]
    running = np.cumsum(logs, axis=0) / np.arange(1, T + 1)[:, None]
    return {"exponent": running[-1], "running": running}
