"""The residual block the modern recurrences are trained in, around any cell (classic or modern).

One layer of the stack, on a residual stream u of width d = hidden::

    u ← u + cell(Norm(u))                       the mixer: the recurrence, reading the normalised stream
    u ← u + FF(Norm(u))                         the feed-forward part, per position (absent with ff="none")

and after the last layer a final Norm, which is what the readout reads. Inputs enter the stream through a
linear map ``in`` (input_size → d), except an embedding that is already d wide. This is the block of
Griffin, of Feng et al.'s minRNN models and of flash-linear-attention's DeltaNet (pre-norm, two residuals);
MODERN.md §2 gives each paper's block and why one fixed block with only the mixer varied is the comparison
the state-tracking theory asks for. The short convolution and the output gates some papers add are not part
of it.

- ``Norm``: RMSNorm, y = x / √(mean(x²) + ε) ⊙ g (Zhang & Sennrich 2019; Griffin, Mamba, fla), or LayerNorm,
  y = (x − mean x) / √(var x + ε) ⊙ g + β (Ba et al. 2016; xLSTM's blocks); ε = 1e-6, g = 1, β = 0 at init.
- ``FF``: ``"mlp"``, W₂ gelu(W₁ u + b₁) + b₂ with width expansion·d (Feng et al.; expansion 4), or ``"glu"``,
  W_d (gelu(W_g u) ⊙ W_u u) (Griffin's gated MLP; expansion 3). gelu is the tanh form (GPT-2's,
  Griffin's ``approximate="tanh"``). Matrices are PyTorch's nn.Linear init, U(±1/√fan_in).

Each op's backward sits beside it; the whole block is checked by finite differences in float64 (tests).
``ResidualBlocks`` has the interface of ``rnnlab.cells.Stack`` (forward, backward, final_state, params,
layers), so a model, the trainer and the analyses take either. Masked (padded) positions run through the
per-position parts too; nothing reads them, so their error is zero, and the cells keep their state there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnlab.cells import ParamView, Stack
from rnnlab.common import check_positive_int, scatter_add
from rnnlab.layers import Linear, linear, linear_backward

BLOCKS = ("none", "mlp", "glu", "mixer")     # none: cells stacked directly (no block); mixer: the block without FF
NORMS = ("rms", "layer")
DEFAULT_EXPANSION = {"mlp": 4, "glu": 3, "mixer": 0}
NORM_EPS = 1e-6
_GELU_SCALE = np.sqrt(2.0 / np.pi)


# -- the per-position ops, each beside its backward ----------------------------------------------


def rms_norm(p: dict, x: np.ndarray, eps: float = NORM_EPS):
    """y = x / √(mean(x²) + ε) ⊙ g over the last axis; → (y, saved)."""
    r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    xhat = x * r
    return xhat * p["g"], (xhat, r)


def rms_norm_backward(p: dict, dy: np.ndarray, saved):
    """dg = Σ dy ⊙ x̂; dx = r (dx̂ − x̂ mean(dx̂ ⊙ x̂)) with dx̂ = dy ⊙ g."""
    xhat, r = saved
    dxhat = dy * p["g"]
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return {"g": (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)}, dx


def layer_norm(p: dict, x: np.ndarray, eps: float = NORM_EPS):
    """y = (x − μ) / √(σ² + ε) ⊙ g + β over the last axis; → (y, saved)."""
    centred = x - x.mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    xhat = centred * r
    return xhat * p["g"] + p["b"], (xhat, r)


def layer_norm_backward(p: dict, dy: np.ndarray, saved):
    """dg = Σ dy ⊙ x̂, dβ = Σ dy; dx = r (dx̂ − mean(dx̂) − x̂ mean(dx̂ ⊙ x̂))."""
    xhat, r = saved
    dxhat = dy * p["g"]
    dx = r * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    rows = (-1, xhat.shape[-1])
    return {"g": (dy * xhat).reshape(rows).sum(axis=0), "b": dy.reshape(rows).sum(axis=0)}, dx


def gelu(z: np.ndarray):
    """gelu in its tanh form, ½ z (1 + tanh(√(2/π)(z + 0.044715 z³))); → (value, saved)."""
    t = np.tanh(_GELU_SCALE * (z + 0.044715 * z ** 3))
    return 0.5 * z * (1.0 + t), (z, t)


def gelu_backward(dy: np.ndarray, saved):
    z, t = saved
    return dy * (0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _GELU_SCALE * (1.0 + 3 * 0.044715 * z * z))


def mlp(p: dict, x: np.ndarray):
    """W₂ gelu(W₁ x + b₁) + b₂; → (y, saved)."""
    a, g_saved = gelu(linear({"W": p["W1"], **({"b": p["b1"]} if "b1" in p else {})}, x))
    return linear({"W": p["W2"], **({"b": p["b2"]} if "b2" in p else {})}, a), (x, a, g_saved)


def mlp_backward(p: dict, dy: np.ndarray, saved):
    x, a, g_saved = saved
    second = {"W": p["W2"], **({"b": p["b2"]} if "b2" in p else {})}
    g2, da = linear_backward(second, a, dy)
    first = {"W": p["W1"], **({"b": p["b1"]} if "b1" in p else {})}
    g1, dx = linear_backward(first, x, gelu_backward(da, g_saved))
    grads = {"W1": g1["W"], "W2": g2["W"], **({"b1": g1["b"], "b2": g2["b"]} if "b1" in p else {})}
    return grads, dx


def glu(p: dict, x: np.ndarray):
    """W_d (gelu(W_g x) ⊙ W_u x) (no biases, as Griffin's MLPBlock); → (y, saved)."""
    gate, g_saved = gelu(linear({"W": p["W_g"]}, x))
    up = linear({"W": p["W_u"]}, x)
    a = gate * up
    return linear({"W": p["W_d"]}, a), (x, gate, up, a, g_saved)


def glu_backward(p: dict, dy: np.ndarray, saved):
    x, gate, up, a, g_saved = saved
    gd, da = linear_backward({"W": p["W_d"]}, a, dy)
    gu, dx_up = linear_backward({"W": p["W_u"]}, x, da * gate)
    gg, dx_gate = linear_backward({"W": p["W_g"]}, x, gelu_backward(da * up, g_saved))
    return {"W_g": gg["W"], "W_u": gu["W"], "W_d": gd["W"]}, dx_up + dx_gate


NORM_OPS = {"rms": (rms_norm, rms_norm_backward), "layer": (layer_norm, layer_norm_backward)}
FF_OPS = {"mlp": (mlp, mlp_backward), "glu": (glu, glu_backward)}


# -- the modules that hold their parameters -----------------------------------------------------------------


class Norm:
    """RMSNorm (parameter ``g``) or LayerNorm (``g``, ``b``) over the last axis of width ``dim``."""

    def __init__(self, kind: str, dim: int, dtype: Any = np.float64) -> None:
        if kind not in NORMS:
            raise ValueError(f"block_norm: expected one of {NORMS}, got {kind!r}")
        self.kind = kind
        self.params = {"g": np.ones(dim, dtype)}
        if kind == "layer":
            self.params["b"] = np.zeros(dim, dtype)


class FeedForward:
    """The block's per-position MLP (``W1``, ``b1``, ``W2``, ``b2``) or GLU (``W_g``, ``W_u``, ``W_d``)."""

    def __init__(self, kind: str, dim: int, expansion: int, bias: bool, rng: np.random.Generator,
                 dtype: Any = np.float64) -> None:
        self.kind = kind
        width = expansion * dim

        def uniform(fan_in: int, shape: tuple) -> np.ndarray:     # PyTorch's nn.Linear: U(±1/√fan_in)
            bound = 1.0 / np.sqrt(fan_in)
            return rng.uniform(-bound, bound, size=shape).astype(dtype)

        if kind == "mlp":
            self.params = {"W1": uniform(dim, (dim, width)), "W2": uniform(width, (width, dim))}
            if bias:
                self.params.update({"b1": uniform(dim, (width,)), "b2": uniform(width, (dim,))})
        else:
            self.params = {"W_g": uniform(dim, (dim, width)), "W_u": uniform(dim, (dim, width)),
                           "W_d": uniform(width, (width, dim))}


def block_param_count(block: str, hidden: int, input_size: int, expansion: int | None, norm: str, bias: bool,
                      project_input: bool, num_layers: int) -> int:
    """The parameters the block adds around its cells (the cells' own are counted from their shapes):
    per layer one or two norms and the FF part, once the input map and the final norm."""
    per_norm = hidden * (2 if norm == "layer" else 1)
    e = DEFAULT_EXPANSION[block] if expansion is None else expansion
    if block == "mlp":
        ff = 2 * hidden * e * hidden + ((e * hidden + hidden) if bias else 0)
    elif block == "glu":
        ff = 3 * hidden * e * hidden
    else:
        ff = 0
    layer = per_norm * (2 if block != "mixer" else 1) + ff
    entry = (input_size * hidden + (hidden if bias else 0)) if project_input else 0
    return num_layers * layer + per_norm + entry


@dataclass
class BlockCache:
    """What ``ResidualBlocks.backward`` needs: the input map's input, per layer the cell's Cache and the
    saved values of its norms and FF part, and the final norm's."""

    x: Any
    cells: list
    saved: list
    final: Any


class ResidualBlocks:
    """``num_layers`` residual blocks around cells of one kind (see the module docstring).

    ``params`` names: ``"in.W"``, ``"in.b"``; per layer l the cell's as in a Stack (``"l.W_x"``, …) beside
    ``"l.norm.g"``, ``"l.ff_norm.g"`` and ``"l.ff.W1"``, …; the final ``"norm.g"``.

    >>> blocks = ResidualBlocks.build("lstm", 10, 16, 2, block="glu", seed=0)
    >>> blocks.num_params()
    9088
    """

    def __init__(self, cells: list, norms: list, ff_norms: list, ffs: list, final_norm: Norm,
                 input_map: Linear | None, block: str) -> None:
        self.layers, self.block = list(cells), block
        self.norms, self.ff_norms, self.ffs, self.final_norm, self.input_map = norms, ff_norms, ffs, final_norm, \
            input_map
        children: dict[str, Any] = {} if input_map is None else {"in": input_map}
        for i, cell in enumerate(self.layers):
            children[str(i)] = cell
            children[f"{i}.norm"] = norms[i]
            if ffs[i] is not None:
                children[f"{i}.ff_norm"], children[f"{i}.ff"] = ff_norms[i], ffs[i]
        children["norm"] = final_norm
        self.params = ParamView(children)

    @classmethod
    def build(cls, cell: str, input_size: int, hidden_size: int, num_layers: int = 1, *, block: str = "mlp",
              norm: str = "rms", expansion: int | None = None, project_input: bool = True, seed: int | None = None,
              dtype: Any = np.float64, bias: bool = True, **cell_kwargs: Any) -> ResidualBlocks:
        """The cells are built as ``Stack.build`` builds them (same seeds), each hidden → hidden."""
        if block not in BLOCKS[1:]:
            raise ValueError(f"block: expected one of {BLOCKS[1:]}, got {block!r}")
        if norm not in NORMS:
            raise ValueError(f"block_norm: expected one of {NORMS}, got {norm!r}")
        num_layers = check_positive_int(num_layers, "num_layers")
        e = DEFAULT_EXPANSION[block] if expansion is None else check_positive_int(expansion, "block_expansion")
        if not project_input and input_size != hidden_size:
            raise ValueError(f"input_size {input_size}: without an input map the inputs must be hidden "
                             f"({hidden_size}) wide")
        cell_seed, block_seed = np.random.SeedSequence(seed).spawn(2)
        stack = Stack.build(cell, hidden_size, hidden_size, num_layers, seed=int(cell_seed.generate_state(1)[0]),
                            dtype=dtype, bias=bias, **cell_kwargs)
        rng = np.random.default_rng(block_seed)
        norms = [Norm(norm, hidden_size, dtype) for _ in range(num_layers)]
        has_ff = block != "mixer"
        ff_norms = [Norm(norm, hidden_size, dtype) if has_ff else None for _ in range(num_layers)]
        ffs = [FeedForward(block, hidden_size, e, bias, rng, dtype) if has_ff else None for _ in range(num_layers)]
        input_map = Linear(input_size, hidden_size, bias=bias, seed=int(rng.integers(2**63)), dtype=dtype) \
            if project_input else None
        return cls(stack.layers, norms, ff_norms, ffs, Norm(norm, hidden_size, dtype), input_map, block)

    @property
    def input_size(self) -> int:
        return self.input_map.in_features if self.input_map is not None else self.layers[0].input_size

    @property
    def hidden_size(self) -> int:
        return self.layers[-1].hidden_size

    @property
    def dtype(self) -> np.dtype:
        return self.layers[0].dtype

    def num_params(self) -> int:
        return int(sum(v.size for v in self.params.values()))

    def __repr__(self) -> str:
        return f"ResidualBlocks({self.block}, {self.layers!r}, params={self.num_params()})"

    def forward(self, x: Any, h0: list | None = None, mask: Any = None) -> tuple[np.ndarray, BlockCache]:
        """x (T, B, input_size), or (T, B) ids standing for one-hot rows → the final norm of the stream
        (T, B, hidden) and the cache."""
        if h0 is not None and len(h0) != len(self.layers):
            raise ValueError(f"h0: expected a list of {len(self.layers)} initial states, got {len(h0)}")
        if self.input_map is None:
            u = np.asarray(x, self.dtype)
        elif np.asarray(x).ndim == 2:           # one-hot ids: rows of the input map
            u = self.input_map.params["W"][x] + self.input_map.params.get("b", 0)
        else:
            u = linear(self.input_map.params, np.asarray(x, self.dtype))
        caches, saved = [], []
        for i, cell in enumerate(self.layers):
            n, norm_saved = NORM_OPS[self.norms[i].kind][0](self.norms[i].params, u)
            h, cache = cell.forward(n, None if h0 is None else h0[i], mask)
            u = u + h
            ff_saved = None
            if self.ffs[i] is not None:
                n2, ff_norm_saved = NORM_OPS[self.ff_norms[i].kind][0](self.ff_norms[i].params, u)
                f, ff_out_saved = FF_OPS[self.ffs[i].kind][0](self.ffs[i].params, n2)
                u = u + f
                ff_saved = (ff_norm_saved, ff_out_saved)
            caches.append(cache)
            saved.append((norm_saved, ff_saved))
        out, final_saved = NORM_OPS[self.final_norm.kind][0](self.final_norm.params, u)
        return out, BlockCache(x, caches, saved, final_saved)

    def backward(self, dout: Any, cache: BlockCache, back_steps: int | None = None, dh_out: list | None = None,
                 need_dx: bool = True):
        """(grads keyed like ``params``, dx (T, B, input_size) or None, dh0 per layer); ``dh_out[l]`` receives
        the total error reaching layer l's cell outputs h_t, as in a Stack."""
        grads: dict[str, np.ndarray] = {}
        g, du = NORM_OPS[self.final_norm.kind][1](self.final_norm.params, np.asarray(dout, self.dtype),
                                                  cache.final)
        grads.update({f"norm.{k}": v for k, v in g.items()})
        dh0s = [None] * len(self.layers)
        for i in range(len(self.layers) - 1, -1, -1):
            norm_saved, ff_saved = cache.saved[i]
            if ff_saved is not None:
                ff_norm_saved, ff_out_saved = ff_saved
                g, dn2 = FF_OPS[self.ffs[i].kind][1](self.ffs[i].params, du, ff_out_saved)
                grads.update({f"{i}.ff.{k}": v for k, v in g.items()})
                g, dres = NORM_OPS[self.ff_norms[i].kind][1](self.ff_norms[i].params, dn2, ff_norm_saved)
                grads.update({f"{i}.ff_norm.{k}": v for k, v in g.items()})
                du = du + dres
            out = None if dh_out is None else dh_out[i]
            cell_grads, dn, dh0s[i] = self.layers[i].backward(du, cache.cells[i], back_steps, out, True)
            grads.update({f"{i}.{k}": v for k, v in cell_grads.items()})
            g, dres = NORM_OPS[self.norms[i].kind][1](self.norms[i].params, dn, norm_saved)
            grads.update({f"{i}.norm.{k}": v for k, v in g.items()})
            du = du + dres
        dx = None
        if self.input_map is None:
            dx = du if need_dx else None
        else:
            x = np.asarray(cache.x)
            p = self.input_map.params
            if x.ndim == 2:          # one-hot ids: the rows they looked up
                grads["in.W"] = scatter_add(np.zeros_like(p["W"]), x.reshape(-1), du.reshape(-1, du.shape[-1]))
                if "b" in p:
                    grads["in.b"] = du.reshape(-1, du.shape[-1]).sum(axis=0)
            else:
                g, dx = linear_backward(p, x, du)
                grads.update({f"in.{k}": v for k, v in g.items()})
                dx = dx if need_dx else None
        return {name: grads[name] for name in self.params}, dx, dh0s

    @staticmethod
    def final_state(cache: BlockCache) -> list:
        """Per layer, the cell's state after the last step."""
        return Stack.final_state(cache.cells)
