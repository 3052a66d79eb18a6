"""The non-recurrent pieces around a cell: embedding, linear readout, last-valid-step selection.

Each layer has ``params``, ``num_params()``, ``forward(...) -> (out, cache)`` and
``backward(dout, cache) -> (grads, dinput)`` like the cells.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnlab.cells.kernel_blas import readout_matmul
from rnnlab.common import check_dtype, check_positive_int, scatter_add
from rnnlab.init import check_scheme, init_bias, init_weight


class Embedding:
    """Lookup table: ids (...) of ints in [0, num_embeddings) → vectors (..., dim). Parameter ``W``."""

    def __init__(
        self, num_embeddings: int, dim: int, *, init: str = "normal", init_scale: float | None = None,
        seed: int | None = None, dtype: Any = np.float64,
    ) -> None:
        self.num_embeddings = check_positive_int(num_embeddings, "num_embeddings")
        self.dim = check_positive_int(dim, "dim")
        self.dtype = check_dtype(dtype)
        rng = np.random.default_rng(seed)
        self.params = {"W": init_weight(rng, self.num_embeddings, self.dim, 1, check_scheme(init, "init"),
                                        init_scale, self.dtype)}

    def num_params(self) -> int:
        return self.params["W"].size

    def forward(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids)
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids: expected integer token ids, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            raise ValueError(f"ids: expected ids in [0, {self.num_embeddings}), got range [{ids.min()}, {ids.max()}]")
        return self.params["W"][ids], ids

    def backward(self, dout: np.ndarray, ids: np.ndarray) -> tuple[dict[str, np.ndarray], None]:
        return {"W": scatter_add(np.zeros_like(self.params["W"]), ids.reshape(-1), dout.reshape(-1, self.dim))}, None


class Linear:
    """Readout y = h W + b: h (..., in_features) → y (..., out_features). Parameters ``W``, ``b``."""

    def __init__(
        self, in_features: int, out_features: int, *, bias: bool = True, init: str = "uniform",
        init_scale: float | None = None, seed: int | None = None, dtype: Any = np.float64,
    ) -> None:
        self.in_features = check_positive_int(in_features, "in_features")
        self.out_features = check_positive_int(out_features, "out_features")
        self.dtype = check_dtype(dtype)
        rng = np.random.default_rng(seed)
        scheme = check_scheme(init, "init")
        if scheme == "uniform" and init_scale is None:  # PyTorch's nn.Linear: U(±1/sqrt(in_features)) for W and b
            bound = 1.0 / np.sqrt(self.in_features)
            W = rng.uniform(-bound, bound, size=(self.in_features, self.out_features)).astype(self.dtype)
        else:
            W = init_weight(rng, self.in_features, self.out_features, 1, scheme, init_scale, self.dtype)
        self.params = {"W": W}
        if bias:
            self.params["b"] = init_bias(rng, self.in_features, self.out_features, scheme, init_scale, self.dtype)

    def num_params(self) -> int:
        return int(sum(v.size for v in self.params.values()))

    def forward(self, h: Any) -> tuple[np.ndarray, np.ndarray]:
        h = np.asarray(h, dtype=self.dtype)
        if h.shape[-1] != self.in_features:
            raise ValueError(f"h: expected last axis of size in_features={self.in_features}, got shape {h.shape}")
        return linear(self.params, h), h

    def backward(self, dy: np.ndarray, h: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        return linear_backward(self.params, h, dy)


def linear(p: dict, h):
    """Pure: y = h W (+ b), for any leading axes; NumPy or JAX arrays."""
    # one (T·B, in) matrix product: NumPy runs a stacked (T, B, in) @ W as T small ones, up to 2× slower
    y = readout_matmul(h.reshape(-1, h.shape[-1]), p["W"]).reshape(*h.shape[:-1], p["W"].shape[1])
    if "b" in p and isinstance(y, np.ndarray):   # the product is ours: add in place, no second (T·B, out) array
        y += p["b"]
        return y
    return y + p["b"] if "b" in p else y


def linear_backward(p: dict, h, dy):
    """Adjoint of ``linear``: (grads of W and b, dh)."""
    rows_h, rows_dy = h.reshape(-1, h.shape[-1]), dy.reshape(-1, dy.shape[-1])
    grads = {"W": readout_matmul(rows_h.T, rows_dy)}
    if "b" in p:
        grads["b"] = rows_dy.sum(axis=0)
    return grads, readout_matmul(rows_dy, p["W"].T).reshape(h.shape)


def last_valid_index(mask: Any, T: int, B: int, xp=np):
    """Index of the last valid step of each sequence (B,); T-1 everywhere when mask is None."""
    if mask is None:
        return xp.full(B, T - 1)
    return T - 1 - xp.argmax(mask[::-1], axis=0)


def check_last_mask(mask: Any, T: int, B: int) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask).astype(bool)
    if m.shape != (T, B):
        raise ValueError(f"mask: expected shape (T, B) = ({T}, {B}), got {m.shape}")
    if not m.any(axis=0).all():
        raise ValueError("mask: every sequence needs at least one valid step")
    return m


def select_last(hs: np.ndarray, mask: Any = None, xp=np) -> np.ndarray:
    """hs (T, B, H) → the state at each sequence's last valid step, (B, H)."""
    T, B, _ = hs.shape
    if xp is np:
        mask = check_last_mask(mask, T, B)
    return hs[last_valid_index(mask, T, B, xp), xp.arange(B)]


def select_last_backward(dlast: np.ndarray, hs_shape: tuple, mask: Any = None, xp=np) -> np.ndarray:
    """Adjoint of ``select_last``: (B, H) → (T, B, H), zero except at the last valid steps."""
    T, B, _ = hs_shape
    if xp is np:
        mask = check_last_mask(mask, T, B)
    chosen = xp.arange(T)[:, None] == last_valid_index(mask, T, B, xp)[None, :]      # (T, B)
    return xp.where(chosen[..., None], dlast[None], xp.zeros((), dlast.dtype))
