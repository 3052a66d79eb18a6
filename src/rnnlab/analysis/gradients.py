"""How gradients travel through time: per-step error norms, BPTT depth, coefficient distributions.

- ``gradient_flow``: ‖∂L/∂h_t‖ at every step t and layer (S5: early steps get orders of magnitude
  less, because every step back multiplies by W_hᵀ·diag(act′)).
- ``bptt_depth``: the recurrent-weight gradient norm with back_steps = 1..K (S4's figure 1), and
  what each extra step adds.
- ``gradient_distribution``: per-example full-BPTT gradients of every parameter, pooled; summary
  statistics and a log-binned histogram of |g| (S2's figure 9).
"""

from __future__ import annotations

import math

import numpy as np

from rnnlab.data.containers import Batch
from rnnlab.models import RecurrentModel
from rnnlab.optim import global_norm


def gradient_flow(model: RecurrentModel, batch: Batch) -> dict[str, np.ndarray]:
    """``norms`` (layers, T): mean over the batch of ‖∂L/∂h_t‖ (only sequences valid at t);
    ``relative`` = norms / norms[:, -1:] (the last step's norm as reference)."""
    T, B = batch.x.shape[:2]
    buffers = [np.zeros((T, B, layer.hidden_size), model.dtype) for layer in model.rnn.layers]
    model.loss_and_grads(batch, dh_out=buffers)
    mask = np.ones((T, B)) if batch.mask is None else np.asarray(batch.mask, float)
    norms = np.stack([(np.linalg.norm(b, axis=-1) * mask).sum(1) / np.maximum(mask.sum(1), 1) for b in buffers])
    last = np.where(norms[:, -1:] > 0, norms[:, -1:], 1.0)
    return {"norms": norms, "relative": norms / last}


def first_step_log10(model: RecurrentModel, batch: Batch) -> float:
    """log10 of the top layer's ‖∂L/∂h_1‖ over its ‖∂L/∂h_T‖ (``gradient_flow``'s ``relative``), at least log10 of the
    model dtype's smallest normal number: below it the fused engine flushes to 0 (and a gradient that vanished to
    exactly 0 has no logarithm), so the floor reads "this small or smaller"."""
    first = float(gradient_flow(model, batch)["relative"][-1][0])
    return math.log10(max(first, float(np.finfo(model.dtype).tiny)))


def bptt_depth(model: RecurrentModel, batch: Batch, max_steps: int = 20) -> dict[str, np.ndarray]:
    """For k = 1..K: ``norm[k-1]`` = ‖∂L/∂W_h‖ (all layers) with back_steps = k;
    ``increment[k-1]`` = ‖g_k − g_{k−1}‖ (g_0: back_steps = 0), what the k-th step back adds;
    ``full`` = the norm with full BPTT. K = max_steps, but at most the longest sequence's length − 2:
    the first step's recurrent input is the zero initial state, so beyond that no step is left to
    add anything to ∂L/∂W_h (the increment would be 0 to rounding, drawn as 1e-28)."""
    max_steps = max(1, min(max_steps, _longest(batch) - 2))
    previous = _recurrent_grads(model, batch, 0)
    norms, increments = [], []
    for k in range(1, max_steps + 1):
        current = _recurrent_grads(model, batch, k)
        norms.append(global_norm(current))
        increments.append(global_norm({n: current[n] - previous[n] for n in current}))
        previous = current
    return {"k": np.arange(1, max_steps + 1), "norm": np.array(norms), "increment": np.array(increments),
            "full": global_norm(_recurrent_grads(model, batch, None))}


def step_share(model: RecurrentModel, batch: Batch, k: int = 10) -> float:
    """What the k-th step back adds to ‖∂L/∂W_h‖ (``bptt_depth``'s increment, k capped the same way) as a
    fraction of the full-BPTT norm: three backward passes instead of k + 2."""
    k = max(1, min(k, _longest(batch) - 2))
    before, at = _recurrent_grads(model, batch, k - 1), _recurrent_grads(model, batch, k)
    return global_norm({n: at[n] - before[n] for n in at}) / global_norm(_recurrent_grads(model, batch, None))


def _longest(batch: Batch) -> int:
    return batch.x.shape[0] if batch.mask is None else int(np.asarray(batch.mask).sum(axis=0).max())


def _recurrent_grads(model: RecurrentModel, batch: Batch, back_steps: int | None) -> dict[str, np.ndarray]:
    """∂L/∂W_h of every layer with ``back_steps`` of truncated BPTT (None: full)."""
    grads = model.loss_and_grads(batch, back_steps=back_steps)[1]
    return {n: g for n, g in grads.items() if n.startswith("rnn.") and n.endswith("W_h")}


LOG_BINS = np.logspace(-12, 2, 57)


def gradient_distribution(model: RecurrentModel, data, max_examples: int | None = None) -> dict:
    """Pool |∂L_i/∂θ| over examples i (each its own full-BPTT backward) and all parameters θ.

    Returns ``values`` (the pooled absolute coefficients), ``hist`` counts over ``bins``
    (log-spaced 1e-12..1e2; smaller values, including exact zeros, counted in ``below``), and
    ``summary``: count, quantiles, mean of log10 |g| (non-zero), fraction below 1e-6, fraction zero.
    """
    n = len(data) if max_examples is None else min(max_examples, len(data))
    pooled = []
    for i in range(n):
        batch = data.batch(np.array([i]))
        _, grads, _, _ = model.loss_and_grads(batch)
        pooled.append(np.concatenate([np.abs(g).ravel() for g in grads.values()]))
    values = np.concatenate(pooled).astype(np.float64)
    hist, _ = np.histogram(values, bins=LOG_BINS)
    nonzero = values[values > 0]
    q = np.quantile(values, [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
    summary = {
        "count": int(values.size),
        **{f"q{int(p * 100):02d}": float(v) for p, v in zip([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99], q)},
        "mean_log10": float(np.log10(nonzero).mean()) if nonzero.size else float("-inf"),
        "fraction_below_1e-6": float((values < 1e-6).mean()),
        "fraction_zero": float((values == 0).mean()),
    }
    return {"values": values, "hist": hist, "bins": LOG_BINS, "below": int((values < LOG_BINS[0]).sum()),
            "summary": summary}
