"""Weight initialisers, applied per gate block.

A fused weight matrix of a cell with G gates has shape (fan_in, G * hidden). Each (fan_in, hidden)
block is one gate's matrix, so every scheme below is applied block by block: fan_out is `hidden`.

Schemes (`init=` on every cell, and `recurrent_init=` for the recurrent matrices only):

- ``"uniform"``: U(-1/sqrt(hidden), +1/sqrt(hidden)), PyTorch's default for weights *and* biases;
  with a ``scale``, U(-scale, +scale) for both (Zaremba et al. 2014 and TensorFlow's PTB model: 0.1).
- ``"normal"``: N(0, scale**2); ``scale`` defaults to 0.1 (S2 uses 1.0, S4 uses sqrt(0.1)).
- ``"gaussian"``: ``"normal"`` for every parameter, biases and peepholes included (Greff et al. 2017: "all
  weights" from N(0, 0.1²), PyLSTM's Gaussian initialiser).
- ``"xavier"``: Glorot normal, N(0, 2 / (fan_in + fan_out)).
- ``"lecun"``: N(0, 1 / fan_in) (what Stérin et al. 2017 call "Xavier").
- ``"orthogonal"``: each square block is a random orthogonal matrix times ``scale`` (default 1);
  meant for recurrent matrices, falls back to a semi-orthogonal matrix when the block is not square.

Biases are zero except under ``"uniform"``, where they follow PyTorch, and ``"gaussian"``.
"""

from __future__ import annotations

import numpy as np

INIT_SCHEMES = ("uniform", "normal", "gaussian", "xavier", "lecun", "orthogonal")


def check_scheme(name: str, argument: str) -> str:
    if name not in INIT_SCHEMES:
        raise ValueError(f"{argument}: unknown initialiser {name!r}; expected one of {INIT_SCHEMES}")
    return name


def _uniform_bound(hidden: int, scale: float | None) -> float:
    return 1.0 / np.sqrt(hidden) if scale is None else scale


def _check_scale(scale: float | None) -> None:
    if scale is not None and not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"init_scale: expected a positive number, got {scale!r}")


def _block(rng: np.random.Generator, fan_in: int, hidden: int, scheme: str, scale: float | None) -> np.ndarray:
    if scheme == "uniform":
        bound = _uniform_bound(hidden, scale)
        return rng.uniform(-bound, bound, size=(fan_in, hidden))
    if scheme in ("normal", "gaussian"):
        return rng.normal(0.0, 0.1 if scale is None else scale, size=(fan_in, hidden))
    if scheme == "xavier":
        return rng.normal(0.0, np.sqrt(2.0 / (fan_in + hidden)), size=(fan_in, hidden))
    if scheme == "lecun":
        return rng.normal(0.0, np.sqrt(1.0 / fan_in), size=(fan_in, hidden))
    # orthogonal: QR of a Gaussian matrix, with the sign fix that makes the distribution uniform
    a = rng.normal(size=(max(fan_in, hidden), min(fan_in, hidden)))
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    q = q if fan_in >= hidden else q.T
    return (1.0 if scale is None else scale) * q


def init_weight(
    rng: np.random.Generator, fan_in: int, hidden: int, gates: int, scheme: str, scale: float | None, dtype
) -> np.ndarray:
    """A fused weight of shape (fan_in, gates * hidden), initialised gate block by gate block."""
    _check_scale(scale)
    blocks = [_block(rng, fan_in, hidden, scheme, scale) for _ in range(gates)]
    return np.concatenate(blocks, axis=1).astype(dtype)


def init_bias(rng: np.random.Generator, hidden: int, width: int, scheme: str, scale: float | None,
              dtype) -> np.ndarray:
    """A bias of shape (width,): like the weights under ``"uniform"`` and ``"gaussian"``, zeros otherwise."""
    _check_scale(scale)
    if scheme == "uniform":
        bound = _uniform_bound(hidden, scale)
        return rng.uniform(-bound, bound, size=width).astype(dtype)
    if scheme == "gaussian":
        return rng.normal(0.0, 0.1 if scale is None else scale, size=width).astype(dtype)
    return np.zeros(width, dtype=dtype)
