"""Stacked recurrent layers with the same interface as one cell."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnlab.cells.base import Cache, Cell, ParamView
from rnnlab.cells.registry import make_cell
from rnnlab.common import check_positive_int


class Stack:
    """Recurrent layers where layer l+1 reads the hidden states of layer l.

    ``params`` names each parameter ``"{layer}.{name}"`` (``"0.W_x"``, ``"1.W_h"``, ...); h0 and
    dh0 are lists with one entry per layer (each shaped as for that cell). With ``back_steps=k``
    each layer's recurrence is truncated after k steps; the error a lower layer receives at step s
    from the layer above is an injection at s.

    >>> stack = Stack.build("rnn", input_size=10, hidden_size=64, num_layers=2, recurrent_bias=True)
    >>> stack.num_params()
    13184
    """

    def __init__(self, layers: list[Cell]) -> None:
        if not layers:
            raise ValueError("layers: expected at least one cell")
        for i in range(1, len(layers)):
            if layers[i].input_size != layers[i - 1].hidden_size:
                raise ValueError(
                    f"layers: layer {i} expects input_size {layers[i].input_size} but layer {i - 1} "
                    f"has hidden_size {layers[i - 1].hidden_size}"
                )
        self.layers = list(layers)
        self.params = ParamView({str(i): layer for i, layer in enumerate(self.layers)})

    @classmethod
    def build(
        cls, cell: str, input_size: int, hidden_size: int, num_layers: int = 1, seed: int | None = None, **kwargs: Any
    ) -> Stack:
        """``num_layers`` cells of one kind; layer l is seeded from ``seed`` and l."""
        num_layers = check_positive_int(num_layers, "num_layers")
        seeds = np.random.SeedSequence(seed).spawn(num_layers)
        layers = [
            make_cell(cell, input_size if i == 0 else hidden_size, hidden_size,
                      seed=np.random.default_rng(seeds[i]).integers(2**63), **kwargs)
            for i in range(num_layers)
        ]
        return cls(layers)

    @property
    def input_size(self) -> int:
        return self.layers[0].input_size

    @property
    def hidden_size(self) -> int:
        return self.layers[-1].hidden_size

    @property
    def dtype(self) -> np.dtype:
        return self.layers[0].dtype

    def num_params(self) -> int:
        return sum(layer.num_params() for layer in self.layers)

    def __repr__(self) -> str:
        return f"Stack({self.layers!r}, params={self.num_params()})"

    def forward(self, x: Any, h0: list | None = None, mask: Any = None) -> tuple[np.ndarray, list[Cache]]:
        """x (T, B, input_size) → hs of the top layer (T, B, hidden) and the per-layer caches."""
        if h0 is not None and len(h0) != len(self.layers):
            raise ValueError(f"h0: expected a list of {len(self.layers)} initial states, got {len(h0)}")
        caches = []
        for i, layer in enumerate(self.layers):
            x, cache = layer.forward(x, None if h0 is None else h0[i], mask)
            caches.append(cache)
        return x, caches

    def backward(self, dhs: Any, cache: list[Cache], back_steps: int | None = None, dh_out: list | None = None,
                 need_dx: bool = True):
        """Returns (grads keyed like ``params``, dx (T, B, input_size), dh0 as a list per layer).
        ``dh_out``: optional list of (T, B, hidden) arrays, one per layer (see ``Cell.backward``);
        ``need_dx=False``: the bottom layer skips the gradient of the stack's inputs (dx is None)."""
        grads: dict[str, np.ndarray] = {}
        dh0s = [None] * len(self.layers)
        d = dhs
        for i in range(len(self.layers) - 1, -1, -1):
            out = None if dh_out is None else dh_out[i]
            layer_grads, d, dh0s[i] = self.layers[i].backward(d, cache[i], back_steps, out, need_dx or i > 0)
            grads.update({f"{i}.{name}": g for name, g in layer_grads.items()})
        return {name: grads[name] for name in self.params}, d, dh0s

    @staticmethod
    def final_state(cache: list[Cache]) -> list:
        """Per layer, the state after the last step (carry it into the next chunk of a stream)."""
        return [c.final_state for c in cache]
