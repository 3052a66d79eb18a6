"""Losses and their gradients. Each returns ``(loss, doutputs)``.

Positions are every index but the last axis: (T, B) for per-step losses, (B,) for last-step ones.
``mask`` (same shape as the positions, 0/1) drops padded positions; the loss is the mean over
valid positions of the per-position loss, so ``doutputs`` already carries the 1/N.

- ``softmax_cross_entropy``: −log softmax(logits)[target]  (classification, language models)
- ``sigmoid_binary_cross_entropy``: Σ_k −[t log σ(l) + (1 − t) log(1 − σ(l))] over the last axis
  (88 independent notes: the "NLL per time step" of S3)
- ``squared_error``: ½ Σ_k (y − t)² over the last axis (the original Reber setting of S2)

The public functions check their arguments; the math is in the pure ``*_terms`` functions below
them, written over an array namespace ``xp`` (NumPy, or ``jax.numpy`` in the compiled replica
trainer) with position weights ``w`` instead of a mask: both trainers run the same lines. Their
loss is ``Σ w·ℓ / Σ w`` accumulated in float64 whatever the arrays' dtype, or ``Σ w·ℓ / per`` when
a divisor ``per`` is given (S4 sums a sentence's tokens and divides by the number of sentences).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rnnlab.cells.kernel_math import flushed, kernel_exp, smallest_normal_of, zero_of
from rnnlab.common import sigmoid
from rnnlab.compile import reduction_kernel
from rnnlab.engines.threads import split_rows


def one_hot(ids, classes: int, dtype, xp=np):
    """Integer ids (...) → (..., classes) rows of 0/1."""
    return (ids[..., None] == xp.arange(classes)).astype(dtype)


def _mean(weighted_sum, w, xp, per=None):
    return weighted_sum.astype(xp.float64) / (w.sum() if per is None else per).astype(xp.float64)


def _per_position_scale(w, per=None):
    """The 1/N each position's gradient carries, (..., 1), in the weights' dtype."""
    return (w / (w.sum() if per is None else per.astype(w.dtype)))[..., None]


def softmax_cross_entropy_terms(logits, targets, w, xp=np, per=None):
    """Pure: logits (..., C), int targets (...), weights w (...) → (mean loss, dlogits)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_p = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
    picked = xp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
    loss = -_mean((w * picked).sum(), w, xp, per)
    dlogits = (xp.exp(log_p) - one_hot(targets, logits.shape[-1], logits.dtype, xp)) * _per_position_scale(w, per)
    return loss, dlogits


# The fused losses' gradients hold no subnormal numbers: an entry below the dtype's smallest normal (float32: 1.2e-38;
# the softmax's e^{x − max} / Σ · 1/N for a far-off class) is 0. The products that read the gradient (the readout's
# dW and dh, then the recurrent layers') ran 100× slower over subnormal operands on the Intel Xeon (2026-11-29: dh of
# the NLU course's LM, (5,100 × 2,000)·(2,000 × 50), 1,642 ms with 78% of the entries subnormal, 17 ms with them at 0),
# and the NLU model's whole step took 99–781 ms (median 232; CPU time, 1 thread, ten blocks of five steps) as
# training spread its logits, against 93–153 ms (median 107) with them flushed here. Each entry moves by less than
# the smallest normal number, which no sum of normal numbers notices.


# the named exception to the compile policy (rnnlab.compile): no finite-math assumption, so NaN and Inf come out as
# NumPy gives them and the trainer names a diverged run
@reduction_kernel
def _softmax_cross_entropy_rows(logits, best, targets, w, scale, dlogits):   # pragma: no cover - compiled
    """One pass per row, given each row's argmax ``best``: the log-sum-exp, the weighted −log p[target] (summed in
    float64), the gradient (softmax − one-hot) · scale, subnormals flushed (the note above), and the weighted
    count of argmax hits."""
    total, correct = 0.0, 0.0
    tiny, zero = smallest_normal_of(dlogits), zero_of(dlogits)
    for i in range(logits.shape[0]):
        arg = best[i]
        top = logits[i, arg]
        s = 0.0
        for j in range(logits.shape[1]):   # each exponential once: kept in dlogits, then normalised
            e = kernel_exp(logits[i, j] - top)
            dlogits[i, j] = e
            s += e
        t = targets[i]
        total += w[i] * (math.log(s) - (logits[i, t] - top))
        if arg == t:
            correct += w[i]
        factor = scale[i] / s
        for j in range(logits.shape[1]):
            dlogits[i, j] = flushed(dlogits[i, j] * factor, tiny, zero)
        dlogits[i, t] = flushed(dlogits[i, t] - scale[i], tiny, zero)
    return total, correct


def softmax_cross_entropy_fused(logits: np.ndarray, targets: np.ndarray, w: np.ndarray, per=None):
    """``softmax_cross_entropy_terms`` (NumPy) in one compiled pass over the logits after NumPy's argmax, with the
    argmax accuracy: → (mean loss, dlogits, weighted count of right predictions). The same numbers as the pure
    function to rounding (tests/test_losses.py); only faster."""
    classes = logits.shape[-1]
    flat = np.ascontiguousarray(logits).reshape(-1, classes)
    weights = np.ascontiguousarray(w, dtype=logits.dtype).reshape(-1)
    scale = _per_position_scale(w, per).reshape(-1).astype(logits.dtype)
    dlogits = np.empty_like(flat)
    targets, scale = np.ascontiguousarray(targets).reshape(-1), np.ascontiguousarray(scale)
    # NumPy's argmax, not a running max in the kernel: LLVM left that loop scalar on the Intel Xeon (5.5 ms over
    # PTB's 400 × 10,000 float32 logits, and the index scan after it 1.5 ms more, against argmax's 0.6 ms; 2026-11-29).
    # Its first maximum is the tie rule, and a row with a NaN gets that NaN as its max, so its loss is NaN.
    parts = split_rows(flat.shape[0], lambda a, b: _softmax_cross_entropy_rows(
        flat[a:b], flat[a:b].argmax(axis=1), targets[a:b], weights[a:b], scale[a:b], dlogits[a:b]), row_size=classes)
    total, correct = sum(t for t, _ in parts), sum(c for _, c in parts)
    return _mean(np.float64(total), w, np, per), dlogits.reshape(logits.shape), correct


def sigmoid_binary_cross_entropy_terms(logits, targets, w, xp=np, per=None):
    """Pure: logits, targets (..., K) in [0, 1], weights w (...) → (mean summed BCE, dlogits)."""
    # −[t log σ(l) + (1 − t) log(1 − σ(l))] = softplus(l) − t·l, written so it cannot overflow
    terms = xp.logaddexp(0.0, logits) - targets * logits
    loss = _mean((w * terms.sum(axis=-1)).sum(), w, xp, per)
    return loss, (sigmoid(logits, xp) - targets) * _per_position_scale(w, per)


@reduction_kernel
def _sigmoid_cross_entropy_rows(logits, targets, w, scale, dlogits):   # pragma: no cover - compiled
    """One pass per row: the summed softplus(l) − t·l (in float64), weighted, and the gradient
    (σ(l) − t) · scale, subnormals flushed (the note before the softmax's), both from one exponential e^{−|l|}
    per logit."""
    total, n = 0.0, logits.shape[1]
    tiny, zero = smallest_normal_of(dlogits), zero_of(dlogits)
    for i in range(logits.shape[0]):
        row, log_terms = 0.0, 0.0
        for start in range(0, n, 512):       # Σ log(1 + e) as the log of a product of ≤ 512 factors ≤ 2 each
            product = 1.0
            for j in range(start, min(start + 512, n)):
                l, t = logits[i, j], targets[i, j]
                e = kernel_exp(-abs(l))      # in (0, 1]: neither softplus nor σ can overflow
                row += max(l, 0.0) - t * l
                product *= 1.0 + e
                r = 1.0 / (1.0 + e)
                dlogits[i, j] = flushed(((r if l >= 0 else e * r) - t) * scale[i], tiny, zero)
            log_terms += math.log(product)
        total += w[i] * (row + log_terms)
    return total


def sigmoid_cross_entropy_fused(logits: np.ndarray, targets: np.ndarray, w: np.ndarray, per=None):
    """``sigmoid_binary_cross_entropy_terms`` (NumPy) in one compiled pass over the logits → (mean
    loss, dlogits); the same numbers to rounding (tests/test_losses.py)."""
    K = logits.shape[-1]
    flat = np.ascontiguousarray(logits).reshape(-1, K)
    scale = _per_position_scale(w, per).reshape(-1).astype(logits.dtype)
    dlogits = np.empty_like(flat)
    targets = np.ascontiguousarray(targets, dtype=logits.dtype).reshape(-1, K)
    weights, scale = np.ascontiguousarray(w, dtype=np.float64).reshape(-1), np.ascontiguousarray(scale)
    total = sum(split_rows(flat.shape[0], lambda a, b: _sigmoid_cross_entropy_rows(
        flat[a:b], targets[a:b], weights[a:b], scale[a:b], dlogits[a:b]), row_size=K))
    return _mean(np.float64(total), w, np, per), dlogits.reshape(logits.shape)


def squared_error_terms(outputs, targets, w, xp=np, per=None):
    """Pure: outputs, targets (..., K), weights w (...) → (mean of ½‖y − t‖², doutputs)."""
    diff = outputs - targets
    loss = 0.5 * _mean((w * (diff * diff).sum(axis=-1)).sum(), w, xp, per)
    return loss, diff * _per_position_scale(w, per)


# -- checked entry points -------------------------------------------------------------------------


def _positions_weight(shape: tuple, mask: Any, dtype) -> np.ndarray:
    if mask is None:
        return np.ones(shape, dtype)
    w = np.asarray(mask).astype(dtype)
    if w.shape != shape:
        raise ValueError(f"mask: expected shape {shape} (the positions), got {w.shape}")
    if not w.sum() > 0:
        raise ValueError("mask: no valid position; the loss would be undefined")
    return w


def _float(a: Any, argument: str) -> np.ndarray:
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    if a.ndim < 1:
        raise ValueError(f"{argument}: expected at least one axis, got a scalar")
    return a


def check_class_targets(targets: Any, logits_shape: tuple) -> np.ndarray:
    targets = np.asarray(targets)
    C = logits_shape[-1]
    if targets.shape != logits_shape[:-1]:
        raise ValueError(
            f"targets: expected shape {logits_shape[:-1]} (logits without the class axis), got {targets.shape}"
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(f"targets: expected integer class ids, got dtype {targets.dtype}")
    if targets.size and (targets.min() < 0 or targets.max() >= C):
        raise ValueError(f"targets: expected class ids in [0, {C}), got range [{targets.min()}, {targets.max()}]")
    return targets


def _paired(outputs: Any, targets: Any, mask: Any, argument: str):
    """Outputs, same-shaped float targets and the position weights."""
    outputs = _float(outputs, argument)
    targets = np.asarray(targets, dtype=outputs.dtype)
    if targets.shape != outputs.shape:
        raise ValueError(f"targets: expected shape {outputs.shape} (like {argument}), got {targets.shape}")
    return outputs, targets, _positions_weight(outputs.shape[:-1], mask, outputs.dtype)


def softmax_cross_entropy(logits: Any, targets: Any, mask: Any = None) -> tuple[float, np.ndarray]:
    """logits (..., C), integer targets (...) in [0, C) → mean cross-entropy, dlogits (..., C)."""
    logits = _float(logits, "logits")
    targets = check_class_targets(targets, logits.shape)
    loss, d = softmax_cross_entropy_terms(logits, targets, _positions_weight(targets.shape, mask, logits.dtype))
    return float(loss), d


def sigmoid_binary_cross_entropy(logits: Any, targets: Any, mask: Any = None) -> tuple[float, np.ndarray]:
    """logits (..., K), targets (..., K) in [0, 1] → mean over positions of the summed BCE, dlogits."""
    loss, d = sigmoid_binary_cross_entropy_terms(*_paired(logits, targets, mask, "logits"))
    return float(loss), d


def squared_error(outputs: Any, targets: Any, mask: Any = None) -> tuple[float, np.ndarray]:
    """outputs, targets (..., K) → mean over positions of ½‖y − t‖², doutputs."""
    loss, d = squared_error_terms(*_paired(outputs, targets, mask, "outputs"))
    return float(loss), d
