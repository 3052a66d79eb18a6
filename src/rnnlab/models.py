"""Models: input → stacked recurrent layers (or residual blocks around them) → linear readout → loss.

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
(T, B, K) 0/1 for "multilabel". A batch is anything with ``x``, ``y`` and ``mask`` (``rnnlab.data.Batch``).

The pieces around the recurrent stack (inputs, head, readout, loss) are pure functions over an
array namespace ``xp`` at the bottom of this module: ``RecurrentModel`` runs them with NumPy, and
the compiled replica trainer (``rnnlab.replicas``) runs the very same functions under ``jax.numpy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnlab.blocks import BLOCKS, ResidualBlocks
from rnnlab.cells import ParamView, Stack
from rnnlab.common import RowGradient, check_dtype, scatter_add
from rnnlab.layers import Embedding, Linear, linear, linear_backward, select_last, select_last_backward
from rnnlab.losses import (
    check_class_targets,
    one_hot,
    sigmoid_binary_cross_entropy_terms,
    sigmoid_cross_entropy_fused,
    softmax_cross_entropy_fused,
    softmax_cross_entropy_terms,
    squared_error_terms,
)

HEADS = ("last", "mean", "steps", "multilabel")
STEP_HEADS = ("steps", "multilabel")     # the heads that read out (and take a loss) at every step


@dataclass
class Stats:
    """Sums over a batch: loss_sum / count is the mean loss; correct / count the accuracy."""

    loss_sum: float
    count: int
    correct: int | None


class RecurrentModel:
    """[embedding | one-hot] → Stack of cells (``block="none"``) or ``ResidualBlocks`` → Linear readout → loss.

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
        block: str = "none",
        block_norm: str = "rms",
        block_expansion: int | None = None,
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
            # under "uniform" with a scale every parameter is U(±scale), the table too (Zaremba et al. 2014)
            uniform_scale = cell_kwargs.get("init") == "uniform" and cell_kwargs.get("init_scale") is not None
            table_init = {"init": "uniform", "init_scale": cell_kwargs["init_scale"]} if uniform_scale else {}
            self.embedding = Embedding(vocab_size, input_size, seed=int(seeds[0]), dtype=dtype, **table_init)
            children["emb"] = self.embedding
        if block not in BLOCKS:
            raise ValueError(f"block: expected one of {BLOCKS}, got {block!r}")
        self.block = block
        if block == "none":
            self.rnn = Stack.build(cell, input_size, hidden_size, num_layers, seed=int(seeds[1]), dtype=dtype,
                                   **cell_kwargs)
        else:     # the stream is hidden wide: inputs enter through a map, unless an embedding already is
            project = not (self.embedding is not None and input_size == hidden_size)
            self.rnn = ResidualBlocks.build(cell, input_size, hidden_size, num_layers, block=block, norm=block_norm,
                                            expansion=block_expansion, project_input=project, seed=int(seeds[1]),
                                            dtype=dtype, **cell_kwargs)
        # the readout follows the cells' bias and initialiser settings (a study's "no bias anywhere",
        # "every matrix randn·√0.1"); under "uniform" it is PyTorch's nn.Linear
        self.readout = Linear(hidden_size, output_size, bias=cell_kwargs.get("bias", True),
                              init=cell_kwargs.get("init", "uniform"), init_scale=cell_kwargs.get("init_scale"),
                              seed=int(seeds[2]), dtype=dtype)
        children.update({"rnn": self.rnn, "out": self.readout})
        self.params = ParamView(children)
        self.input_size, self.hidden_size, self.output_size = input_size, hidden_size, output_size

    def num_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def __repr__(self) -> str:
        block = "" if self.block == "none" else f", block={self.block}"
        return (f"RecurrentModel({self.cell}{block}, hidden={self.hidden_size}, layers={len(self.rnn.layers)}, "
                f"head={self.head}, params={self.num_params()})")

    # -- public -------------------------------------------------------------------------------
    def _inputs(self, x: Any) -> np.ndarray:
        if self.embedding is not None:
            return self.embedding.forward(x)[0]
        if self.one_hot:
            ids = np.asarray(x)
            if ids.min() < 0 or ids.max() >= self.input_size:
                raise ValueError(f"x: expected token ids in [0, {self.input_size}), got [{ids.min()}, {ids.max()}]")
            return ids      # the first layer reads the one-hot rows as row lookups of its input weights
        return model_inputs(self, self.params, np.asarray(x))

    def _check_targets(self, outputs_shape: tuple, y: Any) -> np.ndarray:
        y = np.asarray(y)
        if self.loss_name == "cross_entropy" or (self.loss_name == "squared_error" and
                                                 np.issubdtype(y.dtype, np.integer)):
            return check_class_targets(y, outputs_shape)
        if y.shape != outputs_shape:
            raise ValueError(f"targets: expected shape {outputs_shape} (like the outputs), got {y.shape}")
        return y.astype(self.dtype, copy=False)

    def forward(self, batch, h0: list | None = None):
        """Outputs (logits or linear outputs) and the final recurrent state per layer."""
        hs, cache = self.rnn.forward(self._inputs(batch.x), h0, batch.mask)
        y, _ = self.readout.forward(head_features(self.head, hs, batch.mask))
        return y, self.rnn.final_state(cache), hs

    def evaluate(self, batch, h0: list | None = None) -> tuple[Stats, list]:
        hs, cache = self.rnn.forward(self._inputs(batch.x), h0, batch.mask)
        _, stats, _ = self._head_loss(hs, batch)
        return stats, self.rnn.final_state(cache)

    def _head_loss(self, hs: np.ndarray, batch, normalization: str = "token"):
        positions = hs.shape[:2] if self.head in STEP_HEADS else hs.shape[1:2]
        y = self._check_targets(positions + (self.output_size,), batch.y)
        loss, (loss_sum, count, correct), saved = head_loss(self, self.readout.params, hs, y, batch.mask,
                                                            normalization=normalization)
        return float(loss), Stats(float(loss_sum), int(count), None if correct is None else int(correct)), saved

    def loss_and_grads(self, batch, h0: list | None = None, back_steps: int | None = None,
                       dh_out: list | None = None, normalization: str = "token", row_gradients: bool = False):
        """Training loss of the batch (the mean over its positions, or with ``normalization=
        "sequence"`` the per-sequence sums averaged over sequences), gradients keyed like
        ``params``, Stats, and the final state per layer (to carry into the next chunk of a
        stream). ``dh_out`` (one (T, B, hidden) array per layer) receives ∂L/∂h_t of every layer
        (gradient-flow analyses). ``row_gradients``: the embedding's gradient as a ``RowGradient``
        (the rows the batch read), for optimizers that update only those rows."""
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization: expected one of {NORMALIZATIONS}, got {normalization!r}")
        x = self._inputs(batch.x)
        hs, cache = self.rnn.forward(x, h0, batch.mask)
        loss, stats, saved = self._head_loss(hs, batch, normalization)
        out_grads, dhs = head_loss_backward(self, self.readout.params, hs.shape, batch.mask, saved)
        grads = {f"out.{k}": g for k, g in out_grads.items()}
        rnn_grads, dx, _ = self.rnn.backward(dhs, cache, back_steps, dh_out, need_dx=self.embedding is not None)
        grads.update({f"rnn.{k}": g for k, g in rnn_grads.items()})
        grads.update(model_inputs_backward(self, self.params, np.asarray(batch.x), dx, rows=row_gradients))
        return loss, {k: grads[k] for k in self.params}, stats, self.rnn.final_state(cache)


# -- the pure pieces (NumPy or jax.numpy) ---------------------------------------------------------


def model_inputs(model: RecurrentModel, params, x, xp=np):
    """Token ids through the embedding or as one-hot rows; dense inputs in the model's dtype."""
    if model.embedding is not None:
        return params["emb.W"][x]
    if model.one_hot:
        return xp.eye(model.input_size, dtype=model.dtype)[x]
    return x.astype(model.dtype)


def model_inputs_backward(model: RecurrentModel, params, x, dinputs, xp=np, rows: bool = False) -> dict:
    """The embedding's gradient from the error reaching the inputs (nothing for other inputs):
    dense, or with ``rows`` (NumPy) only the rows the batch read."""
    if model.embedding is None:
        return {}
    W = params["emb.W"]
    if rows:
        return {"emb.W": RowGradient.scatter(x.reshape(-1), dinputs.reshape(-1, W.shape[1]), W.shape)}
    return {"emb.W": scatter_add(xp.zeros_like(W), x.reshape(-1), dinputs.reshape(-1, W.shape[1]), xp)}


def head_features(head: str, hs, mask, xp=np):
    """hs (T, B, H) → what the readout reads: the last valid state, the mean state, or every state."""
    if head == "last":
        return select_last(hs, mask, xp)
    if head == "mean":
        m = _mask(hs.shape[:2], mask, hs.dtype, xp)
        return (hs * m[..., None]).sum(axis=0) / xp.maximum(m.sum(axis=0), 1)[:, None]
    return hs


def head_features_backward(head: str, dfeatures, hs_shape: tuple, mask, xp=np):
    """Adjoint of ``head_features``: → dL/dhs (T, B, H)."""
    if head == "last":
        return select_last_backward(dfeatures, hs_shape, mask, xp)
    if head == "mean":
        m = _mask(hs_shape[:2], mask, dfeatures.dtype, xp)
        return m[..., None] * (dfeatures / xp.maximum(m.sum(axis=0), 1)[:, None])[None]
    return dfeatures


def _mask(shape: tuple, mask, dtype, xp):
    return xp.ones(shape, dtype) if mask is None else xp.asarray(mask).astype(dtype)


def output_loss(model: RecurrentModel, outputs, y, w, xp=np, per=None):
    """The model's loss over positions weighted by w (divided by Σw, or by ``per``) → (loss,
    doutputs, correct or None); ``correct`` counts argmax hits where outputs are classes."""
    if model.loss_name == "binary_cross_entropy":   # compiled in one pass under NumPy
        fused = xp is np and outputs.dtype in (np.float32, np.float64)
        return (*(sigmoid_cross_entropy_fused(outputs, y, w, per) if fused else
                  sigmoid_binary_cross_entropy_terms(outputs, y, w, xp, per)), None)
    classes = xp.issubdtype(y.dtype, xp.integer)
    if model.loss_name == "cross_entropy" and xp is np:   # one compiled pass: loss, gradient and accuracy
        return softmax_cross_entropy_fused(outputs, y, w, per)
    if model.loss_name == "squared_error":
        targets = one_hot(y, outputs.shape[-1], outputs.dtype, xp) if classes else y
        loss, doutputs = squared_error_terms(outputs, targets, w, xp, per)
    else:
        loss, doutputs = softmax_cross_entropy_terms(outputs, y, w, xp, per)
    correct = ((outputs.argmax(axis=-1) == y) * w).sum() if classes else None
    return loss, doutputs, correct


NORMALIZATIONS = ("token", "sequence")


def head_loss(model: RecurrentModel, readout: dict, hs, y, mask, weight=None, xp=np, normalization: str = "token"):
    """Head, readout and loss of one batch: hs (T, B, H) → (training loss, (loss sum, count,
    correct), what ``head_loss_backward`` needs). Positions are weighted by the mask (per-step
    heads) or by ``weight`` (B,) (per-sequence heads; the replica trainer's padding sequences weigh
    0). The training loss is the mean over positions (``normalization="token"``), or the sum over
    each sequence's positions averaged over the sequences (``"sequence"``, S4's); the sums are the
    same either way and make the reported per-position metrics."""
    features = head_features(model.head, hs, mask, xp)
    outputs = linear(readout, features)
    if model.head in STEP_HEADS:
        w = _mask(outputs.shape[:-1], mask, outputs.dtype, xp)
        sequences = (w.sum(axis=0) > 0).sum()
    else:
        w = xp.ones(outputs.shape[:-1], outputs.dtype) if weight is None else weight
        sequences = None
    per = sequences if normalization == "sequence" and sequences is not None else None
    loss, doutputs, correct = output_loss(model, outputs, y, w, xp, per)
    count = w.sum()
    loss_sum = loss * (count if per is None else per)
    return loss, (loss_sum, count, correct), (features, doutputs)


def head_loss_backward(model: RecurrentModel, readout: dict, hs_shape: tuple, mask, saved, xp=np):
    """Adjoint of ``head_loss``: → (readout gradients, dL/dhs)."""
    features, doutputs = saved
    grads, dfeatures = linear_backward(readout, features, doutputs)
    return grads, head_features_backward(model.head, dfeatures, hs_shape, mask, xp)
