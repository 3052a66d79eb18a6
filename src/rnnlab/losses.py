"""Losses and their gradients. Each returns ``(loss, doutputs)``.

Positions are every index but the last axis: (T, B) for per-step losses, (B,) for last-step ones.
``mask`` (same shape as the positions, 0/1) drops padded positions; the loss is the mean over
valid positions of the per-position loss, so ``doutputs`` already carries the 1/N.

- ``softmax_cross_entropy``: −log softmax(logits)[target]  (classification, language models)
- ``sigmoid_binary_cross_entropy``: Σ_k −[t log σ(l) + (1 − t) log(1 − σ(l))] over the last axis
  (88 independent notes: the "NLL per time step" of S3)
- ``squared_error``: ½ Σ_k (y − t)² over the last axis (the original Reber setting of S2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnlab.cells.base import sigmoid


def _positions_weight(shape: tuple, mask: Any, dtype) -> tuple[np.ndarray, float]:
    if mask is None:
        w = np.ones(shape, dtype)
    else:
        w = np.asarray(mask).astype(dtype)
        if w.shape != shape:
            raise ValueError(f"mask: expected shape {shape} (the positions), got {w.shape}")
    n = float(w.sum())
    if n == 0:
        raise ValueError("mask: no valid position; the loss would be undefined")
    return w, n


def _float(a: Any, argument: str) -> np.ndarray:
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    if a.ndim < 1:
        raise ValueError(f"{argument}: expected at least one axis, got a scalar")
    return a


def softmax_cross_entropy(logits: Any, targets: Any, mask: Any = None) -> tuple[float, np.ndarray]:
    """logits (..., C), integer targets (...) in [0, C) → mean cross-entropy, dlogits (..., C)."""
    logits = _float(logits, "logits")
    targets = np.asarray(targets)
    C = logits.shape[-1]
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets: expected shape {logits.shape[:-1]} (logits without the class axis), got {targets.shape}"
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(f"targets: expected integer class ids, got dtype {targets.dtype}")
    if targets.size and (targets.min() < 0 or targets.max() >= C):
        raise ValueError(f"targets: expected class ids in [0, {C}), got range [{targets.min()}, {targets.max()}]")
    w, n = _positions_weight(targets.shape, mask, logits.dtype)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_p = shifted - log_z
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
    loss = -float((w * picked).sum()) / n
    d = np.exp(log_p)
    np.put_along_axis(d, targets[..., None], np.take_along_axis(d, targets[..., None], axis=-1) - 1.0, axis=-1)
    return loss, d * (w / n)[..., None]


def _paired(outputs: Any, targets: Any, mask: Any, argument: str):
    """Outputs and same-shaped float targets, with the position weights and their count."""
    outputs = _float(outputs, argument)
    targets = np.asarray(targets, dtype=outputs.dtype)
    if targets.shape != outputs.shape:
        raise ValueError(f"targets: expected shape {outputs.shape} (like {argument}), got {targets.shape}")
    w, n = _positions_weight(outputs.shape[:-1], mask, outputs.dtype)
    return outputs, targets, w, n


def sigmoid_binary_cross_entropy(logits: Any, targets: Any, mask: Any = None) -> tuple[float, np.ndarray]:
    """logits (..., K), targets (..., K) in [0, 1] → mean over positions of the summed BCE, dlogits."""
    logits, targets, w, n = _paired(logits, targets, mask, "logits")
    # −[t log σ(l) + (1 − t) log(1 − σ(l))] = softplus(l) − t·l, written so it cannot overflow
    per = np.logaddexp(0.0, logits) - targets * logits
    loss = float((w * per.sum(axis=-1)).sum()) / n
    return loss, (sigmoid(logits) - targets) * (w / n)[..., None]


def squared_error(outputs: Any, targets: Any, mask: Any = None) -> tuple[float, np.ndarray]:
    """outputs, targets (..., K) → mean over positions of ½‖y − t‖², doutputs."""
    outputs, targets, w, n = _paired(outputs, targets, mask, "outputs")
    diff = outputs - targets
    loss = 0.5 * float((w * (diff * diff).sum(axis=-1)).sum()) / n
    return loss, diff * (w / n)[..., None]

