"""The chunks of the chunked form (``engine="chunked"``): a sequence cut into chunks of ``CHUNK_LENGTH`` steps, each
solved as matmuls of L × d blocks, the matrix state carried only between chunks. The helpers every chunked cell
shares (DeltaNet's WY/UT form, mLSTM's gated linear attention): the layout of the chunks, and the readouts over
padded steps, which repeat the last output.
"""

from __future__ import annotations

import numpy as np

CHUNK_LENGTH = 32       # steps per chunk: of 16, 32, 64 the best or within 10% at head sizes 128, 256 (docs/engines.md)


def transposed(a: np.ndarray) -> np.ndarray:
    """The last two axes swapped (a batch of matrices transposed)."""
    return a.swapaxes(-1, -2)


def chunked(*arrays: np.ndarray, edge: bool = False) -> list[np.ndarray]:
    """(T, B, NH, …) arrays as (B·NH, chunks, CHUNK_LENGTH, …). The steps after T are zeros (a zero step: q = k = v
    = 0, β = 0, log α = 0, which changes nothing), or with ``edge`` the last step repeated (a stabiliser, which a
    padded step keeps)."""
    out = []
    for a in arrays:
        T, B, NH = a.shape[:3]
        n = -(-T // CHUNK_LENGTH)
        padded = np.zeros((n * CHUNK_LENGTH, B, NH) + a.shape[3:], a.dtype)
        padded[:T] = a
        if edge:
            padded[T:] = a[-1]
        moved = np.moveaxis(padded, 0, 2).reshape((B * NH, n, CHUNK_LENGTH) + a.shape[3:])
        out.append(np.ascontiguousarray(moved))
    return out


def unchunked(a: np.ndarray, T: int, B: int) -> np.ndarray:
    """The inverse of ``chunked``: (B·NH, chunks, L, …) → (T, B, NH, …)."""
    N, n, L = a.shape[:3]
    return np.ascontiguousarray(np.moveaxis(a.reshape((B, N // B, n * L) + a.shape[3:]), 2, 0)[:T])


def chunk_starts(state0: np.ndarray, states: np.ndarray, chunks: int) -> list[np.ndarray]:
    """The state each chunk starts from: the initial state, then the state after each chunk's last step."""
    return [np.ascontiguousarray(state0)] + [states[c * CHUNK_LENGTH - 1] for c in range(1, chunks)]


def readout_errors(dhs: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The total error reaching each output y_t (its own, plus what the padded steps after it pass back: they repeat
    y), and what reaches y0 (through padded first steps). mask (T, B)."""
    errors = dhs.copy()
    for t in range(dhs.shape[0] - 2, -1, -1):
        errors[t] += (1.0 - mask[t + 1])[:, None] * errors[t + 1]
    return errors, (1.0 - mask[0])[:, None] * errors[0]


def repeated_over_padding(outputs: np.ndarray, mask: np.ndarray, y0: np.ndarray) -> np.ndarray:
    """y_t = outputs_t at a step that is kept, else y_{t−1} (y0 before the first): outputs (T, B, …), mask (T, B)."""
    T = mask.shape[0]
    last = np.maximum.accumulate(np.where(mask > 0, np.arange(T)[:, None], -1), axis=0)      # last kept step ≤ t
    rows = np.arange(mask.shape[1])[None, :]
    taken = outputs[np.maximum(last, 0), rows]
    return np.where((last >= 0).reshape(last.shape + (1,) * (outputs.ndim - 2)), taken, y0[None])
