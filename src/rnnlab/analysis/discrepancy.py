"""The (l,k)-discrepancy of Stérin, Farrugia & Gripon (2017), S2.

Binary alphabet, one-hot (0 = [1, 0], 1 = [0, 1]); words u = 0^l and v = 1 0^(l−1); an untrained
network with k hidden units, no biases, h_{−1} = 0. D(l,k) is the mean over independent parameter
draws of ‖h_u − h_v‖₂ after reading the whole word. If D(l,k) → 0 the network has forgotten the
first symbol after l steps, whatever it learns later from the output layer.

Vectorised over draws: all draws are one batch of stacked weights (P, fan_in, G·k), run through
the cells' own step functions (which broadcast over leading axes), with u and v as a batch of two.
Because u and v of length l+1 extend those of length l, one pass of ``max_l`` steps gives every l.

Draws (per gate block, fan_in = 2 for W_x and k for W_h): ``normal`` N(0, 1) (the paper);
``xavier`` N(0, 1/fan_in); ``uniform`` U(−√(1/fan_in), +√(1/fan_in)).
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.registry import cell_class
from rnnlab.data.synthetic import lk_words

VARIANTS = {   # name → (cell, options); any registered cell name also works, with its default options
    "rnn-sigmoid": ("rnn", {"activation": "sigmoid"}),
    "rnn-tanh": ("rnn", {"activation": "tanh"}),
    "gru-cho": ("gru", {"variant": "cho"}),
    "gru-cudnn": ("gru", {"variant": "cudnn"}),
}
ALIASES = {"rnn": "rnn-sigmoid", "gru": "gru-cho"}  # the variants S2 uses
INITS = ("normal", "xavier", "uniform")
EPS = float(np.finfo(np.float64).eps)


def precision_floor(k: int) -> float:
    """The smallest D(l, k) that float64 can tell from zero: states of k units in (−1, 1) each carry
    rounding of a few ulps, so ‖h_u − h_v‖ below ~16·eps·√k is rounding noise, not memory."""
    return 16 * EPS * float(np.sqrt(k))


def draw_weights(rng: np.random.Generator, draws: int, fan_in: int, width: int, init: str) -> np.ndarray:
    if init == "normal":
        return rng.normal(size=(draws, fan_in, width))
    if init == "xavier":
        return rng.normal(0.0, np.sqrt(1.0 / fan_in), size=(draws, fan_in, width))
    if init == "uniform":
        bound = np.sqrt(1.0 / fan_in)
        return rng.uniform(-bound, bound, size=(draws, fan_in, width))
    raise ValueError(f"init: unknown draw {init!r}; expected one of {INITS}")


def discrepancy_curve(cell: str, k: int, init: str = "normal", max_l: int = 50, draws: int = 2000,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """D(l, k) and its standard error over draws for l = 1..max_l: two arrays of length max_l."""
    name, options = VARIANTS.get(ALIASES.get(cell, cell), (cell, {}))
    try:
        model = cell_class(name)(2, k, bias=False, **options)
    except (TypeError, ValueError) as err:
        raise ValueError(f"cell: cannot build {cell!r} ({err}); expected a registered cell or one of "
                         f"{tuple(VARIANTS) + tuple(ALIASES)}") from None
    vectors = all(shape == (k,) for shape in model.state_shapes())
    odd = [n for n, shape in model.param_shapes().items() if len(shape) > 2]
    if not vectors or odd:
        raise ValueError(f"cell: the (l,k)-discrepancy draws a vector state and matrix or vector parameters; "
                         f"{cell!r} has " + (f"state shapes {model.state_shapes()}" if not vectors else
                                             f"the parameter(s) {odd} of more than two axes"))
    rng = np.random.default_rng(seed)
    # every parameter drawn per draw (W_x first, as the paper's W and U); vectors broadcast over the two words
    p = {n: draw_weights(rng, draws, shape[0], shape[1], init) if len(shape) == 2
         else draw_weights(rng, draws, k, shape[0], init)[:, :1]
         for n, shape in model.param_shapes().items()}
    u, v = lk_words(max_l)
    words = np.stack([u, v], axis=1)                                    # (max_l, 2, 2): step, word, symbol
    xw = np.einsum("lws,psg->lpwg", words, p["W_x"])                   # (max_l, P, 2 words, G·k)
    state = tuple(np.zeros((draws, 2, k)) for _ in range(model.state_size))
    D, se = np.empty(max_l), np.empty(max_l)
    for t in range(max_l):
        state, _ = model.step(p, xw[t], state)
        dist = np.linalg.norm(state[0][:, 0] - state[0][:, 1], axis=-1)  # (P,)
        D[t], se[t] = dist.mean(), dist.std(ddof=1) / np.sqrt(draws) if draws > 1 else 0.0
    return D, se


def discrepancy(cells=("rnn", "gru"), inits=INITS, ks=range(1, 21), max_l: int = 50, draws: int = 2000,
                seed: int = 0) -> list[dict]:
    """Records ``{cell, init, l, k, D, se, below_precision}`` over the grid (the columns of
    discrepancy.csv); ``below_precision`` marks values at float64 rounding level (``precision_floor``),
    which are zero as far as the arithmetic can tell. Each (cell, draw, k) has its own stream of
    random draws, spawned from ``seed``, so no two grid points share draws however large the grid."""
    records = []
    for ci, cell in enumerate(cells):
        for ii, init in enumerate(inits):
            for k in ks:
                stream = int(np.random.SeedSequence([seed, ci, ii, k]).generate_state(1)[0])
                D, se = discrepancy_curve(cell, k, init, max_l, draws, stream)
                records += [{"cell": cell, "init": init, "l": l + 1, "k": k, "D": float(D[l]), "se": float(se[l]),
                             "below_precision": bool(D[l] < precision_floor(k))} for l in range(max_l)]
    return records


def trained_discrepancy(model, seq_a: np.ndarray, seq_b: np.ndarray) -> np.ndarray:
    """‖h_a(t) − h_b(t)‖ of a (trained) model's top layer along two inputs of equal length, e.g.
    two strings that differ in their first symbols: how long does the network remember it?"""
    from rnnlab.data.containers import Batch

    if len(seq_a) != len(seq_b):
        raise ValueError(f"seq_b: expected the length of seq_a ({len(seq_a)}), got {len(seq_b)}")
    x = np.stack([np.asarray(seq_a), np.asarray(seq_b)], axis=1)
    y = np.zeros(x.shape[:2], np.int64)
    _, _, hs = model.forward(Batch(x, y))
    return np.linalg.norm(hs[:, 0] - hs[:, 1], axis=-1)
