"""What training reads: batches, and the two kinds of data set they are drawn from.

- ``SequenceData``: sequences of different lengths, each with a target (a class, or one per step);
  batches are padded, with a (T, B) mask.
- ``StreamData``: one long token stream (PTB) read in chunks, the state carried between them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Batch:
    """x: (T, B, input_size) floats or (T, B) ids; y: targets ((B,) class ids, (T, B) ids or (T, B, K)
    rows, as ``rnnlab.models`` reads them); mask: (T, B)
    0/1 or None; carry: True when this batch continues the previous one's sequences (streams)."""

    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray | None = None
    carry: bool = False

    @property
    def size(self) -> int:
        return self.x.shape[1]


def pad(arrays: list[np.ndarray], dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad sequences (T_i, ...) into (T, B, ...) and return it with the (T, B) 0/1 mask."""
    T = max(len(a) for a in arrays)
    first = np.asarray(arrays[0])
    out = np.zeros((T, len(arrays)) + first.shape[1:], dtype or first.dtype)
    mask = np.zeros((T, len(arrays)), np.float64)
    for j, a in enumerate(arrays):
        out[: len(a), j] = a
        mask[: len(a), j] = 1
    return out, mask


class SequenceData:
    """Sequences of different lengths with a target each (``per_step=False``: a class id) or a
    target per step (``per_step=True``: (T_i,) ids or (T_i, K) 0/1 rows).

    Training batches are length-bucketed: a shuffled pool of 50 batches is sorted by length, cut
    into batches, and the batches are shuffled, so padding stays small and the order random.
    """

    def __init__(self, inputs: list[np.ndarray], targets: Any, per_step: bool = False) -> None:
        if len(inputs) == 0:
            raise ValueError("inputs: expected at least one sequence")
        if len(inputs) != len(targets):
            raise ValueError(f"targets: expected one per sequence ({len(inputs)}), got {len(targets)}")
        self.inputs = [np.asarray(x) for x in inputs]
        self.targets = list(targets) if per_step else np.asarray(targets)
        self.per_step = per_step
        self.lengths = np.array([len(x) for x in self.inputs])
        if self.lengths.min() < 1:
            raise ValueError("inputs: every sequence needs at least one step")

    def __len__(self) -> int:
        return len(self.inputs)

    def num_batches(self, batch_size: int) -> int:
        return math.ceil(len(self) / batch_size)

    def batch(self, index: np.ndarray) -> Batch:
        x, mask = pad([self.inputs[i] for i in index])
        if self.per_step:
            y, _ = pad([self.targets[i] for i in index])
        else:
            y = self.targets[index]
        full = bool(mask.all())
        return Batch(x, y, None if full else mask)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None,
                by_length: bool = False, bucket: bool = True) -> Iterator[Batch]:
        """All sequences once: shuffled when ``rng`` is given (training) and, with ``bucket``,
        length-bucketed; else in order, or grouped by length with ``by_length`` (evaluation: sums
        need no order, and sequences of one length pad nothing)."""
        for index in self.batch_indices(batch_size, rng, by_length, bucket):
            yield self.batch(index)

    def batch_indices(self, batch_size: int, rng: np.random.Generator | None = None,
                      by_length: bool = False, bucket: bool = True) -> list[np.ndarray]:
        """The sequence indices of each batch of ``batches`` (same draws from ``rng``). Without
        ``bucket``, a plain shuffle: each batch a random draw of sequences, as S4's course code does."""
        n = len(self)
        if rng is None:
            order = np.argsort(self.lengths, kind="stable") if by_length else np.arange(n)
            return [order[i:i + batch_size] for i in range(0, n, batch_size)]
        order = rng.permutation(n)
        if not bucket:
            return [order[i:i + batch_size] for i in range(0, n, batch_size)]
        pool = batch_size * 50
        groups = []
        for start in range(0, n, pool):
            chunk = order[start:start + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            groups += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        return [groups[i] for i in rng.permutation(len(groups))]


class StreamData:
    """One long token stream (PTB style) cut into ``batch_size`` parallel streams and read in
    chunks of ``bptt`` steps; the state is carried from chunk to chunk (``Batch.carry``)."""

    def __init__(self, tokens: np.ndarray, bptt: int) -> None:
        self.tokens = np.asarray(tokens)
        self.bptt = bptt
        if len(self.tokens) < 2:
            raise ValueError("tokens: a stream needs at least two tokens")

    def __len__(self) -> int:
        return len(self.tokens) - 1

    def _layout(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        width = (len(self.tokens) - 1) // batch_size
        if width < 1:
            raise ValueError(f"batch_size: {len(self.tokens)} tokens are too few for {batch_size} streams")
        x = self.tokens[: width * batch_size].reshape(batch_size, width).T          # (width, B)
        y = self.tokens[1: width * batch_size + 1].reshape(batch_size, width).T
        return x, y

    def num_batches(self, batch_size: int) -> int:
        return math.ceil(((len(self.tokens) - 1) // batch_size) / self.bptt)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None,
                by_length: bool = False, bucket: bool = True) -> Iterator[Batch]:
        """The chunks in stream order, always: the state carries from one to the next."""
        x, y = self._layout(batch_size)
        for i, start in enumerate(range(0, x.shape[0], self.bptt)):
            stop = start + self.bptt
            yield Batch(x[start:stop], y[start:stop], None, carry=i > 0)
