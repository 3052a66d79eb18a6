"""Models: input → stacked recurrent layers → linear readout → loss.

One class covers the studies' models through its ``head``:

- ``"last"``: classify each sequence from the state at its last valid step (S1, S4 agreement, S5);
  with ``loss="squared_error"`` and float targets (B, K) it regresses instead (adding problem)
- ``"mean"``: classify each sequence from the mean of its valid states
- ``"steps"``: predict at every step, softmax over symbols (language models, next Reber symbol);
  ``loss="squared_error"`` compares linear outputs with the one-hot target instead (S2's original)
- ``"multilabel"``: predict 88 independent notes per step with sigmoids (S3)

Inputs are dense vectors (T, B, input_size), or token ids (T, B) read through an ``Embedding``
(``vocab_size`` with ``embedding_dim``) or as one-hot vectors (``one_hot=True``: input_size is the
vocabulary, as in S2 and S4). Targets: (B,) class ids for "last"/"mean", (T, B) ids for "steps",
(T, B, K) 0/1 for "multilabel".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnlab.cells import ParamView, Stack
from rnnlab.cells.base import check_dtype
from rnnlab.layers import Embedding, Linear, select_last, select_last_backward
from rnnlab.losses import sigmoid_binary_cross_entropy, softmax_cross_entropy, squared_error

HEADS = ("last", "mean", "steps", "multilabel")


@dataclass
class Batch:
    """x: (T, B, input_size) floats or (T, B) ids; y: targets (see module docstring); mask: (T, B)
    0/1 or None; carry: True when this batch continues the previous one's sequences (streams)."""

    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray | None = None
    carry: bool = False

    @property
    def size(self) -> int:
        return self.x.shape[1]


@dataclass
class Stats:
    """Sums over a batch: loss_sum / count is the mean loss; correct / count the accuracy."""

    loss_sum: float
    count: int
    correct: int | None


class RecurrentModel:
    """[embedding | one-hot] → Stack of cells → Linear readout → loss.

    ``params`` is a live flat view: ``"emb.W"``, ``"rnn.0.W_x"``, ``"rnn.0.W_h"``, …, ``"out.W"``,
    ``"out.b"``. Extra keyword arguments go to every cell (variant, activation, bias, init, ...).
    """

    def __init__(
        self,
        cell: str,
        input_size: int,
        hidden_size: int,
        output_size: int,
        *,
        num_layers: int = 1,
        head: str = "last",
        loss: str | None = None,
        vocab_size: int | None = None,
        one_hot: bool = False,
        seed: int | None = None,
        dtype: Any = np.float64,
        **cell_kwargs: Any,
    ) -> None:
        if head not in HEADS:
            raise ValueError(f"head: unknown head {head!r}; expected one of {HEADS}")
        default_loss = "binary_cross_entropy" if head == "multilabel" else "cross_entropy"
        loss = loss or default_loss
        allowed = ("binary_cross_entropy",) if head == "multilabel" else ("cross_entropy", "squared_error")
        if loss not in allowed:
            raise ValueError(f"loss: {loss!r} does not fit head {head!r}; expected one of {allowed}")
        if one_hot and vocab_size is not None:
            raise ValueError("one_hot and vocab_size: choose one way to read token ids")
        self.cell, self.head, self.loss_name = cell, head, loss
        self.one_hot, self.dtype = one_hot, check_dtype(dtype)
        seeds = np.random.SeedSequence(seed).generate_state(3)
        children: dict[str, Any] = {}
        self.embedding = None
        if vocab_size is not None:
            self.embedding = Embedding(vocab_size, input_size, seed=int(seeds[0]), dtype=dtype)
            children["emb"] = self.embedding
        self.rnn = Stack.build(cell, input_size, hidden_size, num_layers, seed=int(seeds[1]), dtype=dtype,
                               **cell_kwargs)
        self.readout = Linear(hidden_size, output_size, seed=int(seeds[2]), dtype=dtype)
        children.update({"rnn": self.rnn, "out": self.readout})
        self.params = ParamView(children)
        self.input_size, self.hidden_size, self.output_size = input_size, hidden_size, output_size

    def num_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def __repr__(self) -> str:
        return (f"RecurrentModel({self.cell}, hidden={self.hidden_size}, layers={len(self.rnn.layers)}, "
                f"head={self.head}, params={self.num_params()})")

    # -- pieces -----------------------------------------------------------------------------
    def _inputs(self, x: np.ndarray) -> tuple[np.ndarray, Any]:
        if self.embedding is not None:
            return self.embedding.forward(x)
        if self.one_hot:
            ids = np.asarray(x)
            if ids.min() < 0 or ids.max() >= self.input_size:
                raise ValueError(f"x: expected token ids in [0, {self.input_size}), got [{ids.min()}, {ids.max()}]")
            return np.eye(self.input_size, dtype=self.dtype)[ids], None
        return np.asarray(x, dtype=self.dtype), None

    def _features(self, hs: np.ndarray, mask) -> np.ndarray:
        if self.head == "last":
            return select_last(hs, mask)
        if self.head == "mean":
            m = np.ones(hs.shape[:2], hs.dtype) if mask is None else np.asarray(mask, hs.dtype)
            return (hs * m[..., None]).sum(0) / m.sum(0)[:, None]
        return hs

    def _features_backward(self, d: np.ndarray, hs_shape: tuple, mask) -> np.ndarray:
        if self.head == "last":
            return select_last_backward(d, hs_shape, mask)
        if self.head == "mean":
            m = np.ones(hs_shape[:2], d.dtype) if mask is None else np.asarray(mask, d.dtype)
            return m[..., None] * (d / m.sum(0)[:, None])[None]
        return d

    def _loss(self, y: np.ndarray, batch: Batch) -> tuple[float, np.ndarray, Stats]:
        per_step = self.head in ("steps", "multilabel")
        mask = batch.mask if per_step else None
        if self.loss_name == "binary_cross_entropy":
            loss, dy = sigmoid_binary_cross_entropy(y, batch.y, mask)
            correct = None
        elif self.loss_name == "squared_error":
            targets = np.asarray(batch.y)
            if np.issubdtype(targets.dtype, np.integer):  # class ids: compare with their one-hot vectors
                loss, dy = squared_error(y, np.eye(self.output_size, dtype=y.dtype)[targets], mask)
                correct = self._correct(y, targets, mask)
            else:  # real-valued targets (regression, e.g. the adding problem)
                loss, dy = squared_error(y, targets, mask)
                correct = None
        else:
            loss, dy = softmax_cross_entropy(y, batch.y, mask)
            correct = self._correct(y, batch.y, mask)
        if per_step:
            count = int(y.shape[0] * y.shape[1] if mask is None else np.asarray(mask).sum())
        else:
            count = y.shape[0]
        return loss, dy, Stats(loss * count, count, correct)

    @staticmethod
    def _correct(y: np.ndarray, targets: np.ndarray, mask) -> int:
        hits = y.argmax(axis=-1) == targets
        return int(hits.sum() if mask is None else (hits * np.asarray(mask)).sum())

    # -- public -------------------------------------------------------------------------------
    def forward(self, batch: Batch, h0: list | None = None):
        """Outputs (logits or linear outputs) and the final recurrent state per layer."""
        x, _ = self._inputs(batch.x)
        hs, cache = self.rnn.forward(x, h0, batch.mask)
        y, _ = self.readout.forward(self._features(hs, batch.mask))
        return y, Stack.final_state(cache), hs

    def evaluate(self, batch: Batch, h0: list | None = None) -> tuple[Stats, list]:
        y, final, _ = self.forward(batch, h0)
        return self._loss(y, batch)[2], final

    def loss_and_grads(self, batch: Batch, h0: list | None = None, back_steps: int | None = None,
                       dh_out: list | None = None):
        """Mean loss over the batch's positions, gradients keyed like ``params``, Stats, and the
        final state per layer (to carry into the next chunk of a stream). ``dh_out`` (one (T, B,
        hidden) array per layer) receives ∂L/∂h_t of every layer (gradient-flow analyses)."""
        x, input_cache = self._inputs(batch.x)
        hs, cache = self.rnn.forward(x, h0, batch.mask)
        y, readout_cache = self.readout.forward(self._features(hs, batch.mask))
        loss, dy, stats = self._loss(y, batch)
        out_grads, dfeatures = self.readout.backward(dy, readout_cache)
        grads = {f"out.{k}": g for k, g in out_grads.items()}
        dhs = self._features_backward(dfeatures, hs.shape, batch.mask)
        rnn_grads, dx, _ = self.rnn.backward(dhs, cache, back_steps, dh_out)
        grads.update({f"rnn.{k}": g for k, g in rnn_grads.items()})
        if self.embedding is not None:
            grads.update({f"emb.{k}": g for k, g in self.embedding.backward(dx, input_cache)[0].items()})
        return loss, {k: grads[k] for k in self.params}, stats, Stack.final_state(cache)
