"""Shared pieces of the gradient tests: cell configurations, a readout + loss on top, and the
reference truncated gradient built independently of the backward pass."""

from __future__ import annotations

import itertools

import numpy as np

import rnnlab
from rnnlab.layers import Linear, select_last, select_last_backward

CELL_CONFIGS = {
    "rnn-tanh": ("rnn", {"activation": "tanh"}),
    "rnn-sigmoid": ("rnn", {"activation": "sigmoid"}),
    "rnn-relu": ("rnn", {"activation": "relu"}),
    "gru-cudnn": ("gru", {"variant": "cudnn"}),
    "gru-cho": ("gru", {"variant": "cho"}),
    "lstm": ("lstm", {}),
}
BIASES = {"none": {"bias": False}, "bias": {"bias": True}, "two-biases": {"bias": True, "recurrent_bias": True}}
LOSS_MODES = ("ce-steps", "ce-last", "bce-steps", "se-steps")


def covering_rows(factors: list[list], strength: int = 3) -> list[tuple]:
    """Rows of the full grid ``itertools.product(*factors)`` such that every combination of values of any
    ``strength`` factors appears in at least one row: a covering array, picked greedily (the row covering the most
    combinations not yet covered, the first such in grid order), so the same rows on every run. For a grid whose
    other engines share one engine's full check, it keeps every interaction of up to ``strength`` factors
    (cell × loss × truncation depth, cell × bias × mask, …) at a fraction of the rows."""
    rows = list(itertools.product(*factors))
    groups = list(itertools.combinations(range(len(factors)), strength))

    def combinations(row: tuple) -> set:
        return {(group, tuple(row[i] for i in group)) for group in groups}

    uncovered, chosen = set().union(*map(combinations, rows)), []
    while uncovered:
        best = max(rows, key=lambda row: len(combinations(row) & uncovered))
        chosen.append(best)
        uncovered -= combinations(best)
    return sorted(chosen, key=rows.index)


def gradcheck_cell(config: str, bias: str, input_size: int, hidden: int, seed: int) -> rnnlab.Cell:
    kind, kwargs = CELL_CONFIGS[config]
    # normal(0.5) draws make gates and activations leave their linear regime
    return rnnlab.make_cell(kind, input_size, hidden, seed=seed, init="normal", init_scale=0.5,
                            **kwargs, **BIASES[bias])


def subnormal(a: np.ndarray) -> np.ndarray:
    """Where ``a`` holds a subnormal number: non-zero and below its dtype's smallest normal."""
    return (a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny)


def make_mask(rng: np.random.Generator, T: int, B: int) -> np.ndarray:
    """Right-padded lengths in [1, T], at least one sequence of full length."""
    lengths = rng.integers(1, T + 1, size=B)
    lengths[0] = T
    return (np.arange(T)[:, None] < lengths[None, :]).astype(np.float64)


class Head:
    """A linear readout and a loss over the hidden states: every step, or the last valid one."""

    def __init__(self, mode: str, hidden: int, outputs: int, T: int, B: int, rng: np.random.Generator):
        self.mode = mode
        self.readout = Linear(hidden, outputs, seed=int(rng.integers(1 << 30)), init="normal", init_scale=0.5)
        if mode == "ce-last":
            self.targets = rng.integers(0, outputs, size=B)
        elif mode == "ce-steps":
            self.targets = rng.integers(0, outputs, size=(T, B))
        elif mode == "bce-steps":
            self.targets = rng.integers(0, 2, size=(T, B, outputs)).astype(np.float64)
        else:
            self.targets = rng.normal(size=(T, B, outputs))

    def loss(self, hs: np.ndarray, mask) -> tuple[float, dict, np.ndarray]:
        """Loss, readout grads, dL/dhs."""
        if self.mode == "ce-last":
            last = select_last(hs, mask)
            y, rc = self.readout.forward(last)
            L, dy = rnnlab.softmax_cross_entropy(y, self.targets)
            g, dlast = self.readout.backward(dy, rc)
            return L, g, select_last_backward(dlast, hs.shape, mask)
        y, rc = self.readout.forward(hs)
        fn = {"ce-steps": rnnlab.softmax_cross_entropy, "bce-steps": rnnlab.sigmoid_binary_cross_entropy,
              "se-steps": rnnlab.squared_error}[self.mode]
        L, dy = fn(y, self.targets, mask)
        g, dhs = self.readout.backward(dy, rc)
        return L, g, dhs


def split_state(cell, h0):
    return (h0,) if cell.state_size == 1 else tuple(h0)


def join_state(cell, parts):
    return parts[0] if cell.state_size == 1 else tuple(parts)


def truncated_reference_loss(cell, head, x, h0, mask, k, frozen_states, frozen_hs):
    """F = Σ_t L(hs with only hs[t] live), where hs[t] is recomputed from the detached state
    h_{t-k-1} (taken from the frozen forward pass) through steps t-k..t. ∇F at the frozen point is
    the exact truncated-BPTT gradient, obtained here without the backward pass."""
    T = x.shape[0]
    total = 0.0
    for t in range(T):
        start = t - k - 1
        if start < -1:  # the window reaches past the initial state, which stays live
            s0, first = h0, 0
        elif start == -1:
            s0, first = frozen_states[0], 0
        else:
            s0, first = frozen_states[start + 1], start + 1
        sub_mask = None if mask is None else mask[first:t + 1]
        hs_live, _ = cell.forward(x[first:t + 1], s0, sub_mask)
        hs = frozen_hs.copy()
        hs[t] = hs_live[-1]
        total += head.loss(hs, mask)[0]
    return total


def near_relu_kink(cell, x, h0, margin: float = 1e-2) -> bool:
    """True when a ReLU cell's pre-activation comes within ``margin`` of 0 on this input: finite
    differences (steps of up to 2e-4 in a weight) would then straddle the kink, where the function
    has no derivative, and compare the analytic gradient with a meaningless number."""
    if getattr(cell, "activation", None) != "relu":
        return False
    p, h = cell.params, h0
    for t in range(x.shape[0]):
        pre = x[t] @ p["W_x"] + h @ p["W_h"] + p.get("b", 0.0) + p.get("b_h", 0.0)
        if np.abs(pre).min() < margin:
            return True
        h = np.maximum(pre, 0.0)
    return False


def backward_against_finite_differences(cell, reference, head, x, h0, mask, back_steps):
    """``cell``'s backward pass (any engine) against central differences, computed on ``reference``
    (the same cell on the NumPy engine, or ``cell`` itself), of the loss (full BPTT) or of the
    independent truncated construction; for the cell's parameters, x and h0."""
    hs, cache = cell.forward(x, h0, mask)
    grads, dx, dh0 = cell.backward(head.loss(hs, mask)[2], cache, back_steps=back_steps)
    analytic = {**{"cell." + k: v for k, v in grads.items()}, "x": dx,
                **{f"h0.{i}": s for i, s in enumerate(split_state(reference, dh0))}}
    arrays = {**{"cell." + k: v.copy() for k, v in reference.params.items()}, "x": x,
              **{f"h0.{i}": s for i, s in enumerate(split_state(reference, h0))}}
    frozen_hs, frozen_cache = reference.forward(x, h0, mask)
    frozen_states = [h0] + [join_state(reference, [s[t] for s in frozen_cache.states]) for t in range(x.shape[0])]

    def loss(a):
        for name in reference.params:
            reference.params[name] = a["cell." + name]
        h0_ = join_state(reference, [a[f"h0.{i}"] for i in range(reference.state_size)])
        if back_steps is None:
            return head.loss(reference.forward(a["x"], h0_, mask)[0], mask)[0]
        return truncated_reference_loss(reference, head, a["x"], h0_, mask, back_steps, frozen_states, frozen_hs)

    return rnnlab.gradcheck(loss, arrays, analytic)


# a sweep that trains in about a second: 2 cells × 2 learning rates × 2 seeds on a tiny mean-sign task
TINY_SWEEP = """
task = "mean-sign"
metric = "dev_loss"
mode = "min"
seeds = 2
samples = 2
[task_options]
n_train = 48
n_dev = 24
n_test = 24
length = 6
features = 3
[settings]
epochs = 2
hidden = 4
layers = 1
batch_size = 16
dtype = "float64"
[search]
cell = ["rnn", "gru"]
lr = { loguniform = [1e-3, 1e-1] }
"""


def pin_fixture_data(root, monkeypatch) -> None:
    """Tiny fixture files under ``root`` stand in for the real data sets: rnnlab verifies every data file
    against its pinned sha256 before use, so the fixtures' own hashes are pinned in this process instead."""
    import dataclasses

    from rnnlab.data import registry

    for name, dataset in list(registry.DATASETS.items()):
        folder = root / dataset.folder
        files = tuple(dataclasses.replace(f, sha256=registry.sha256_of(folder / f.name)) if (folder / f.name).is_file()
                      else f for f in dataset.files)
        monkeypatch.setitem(registry.DATASETS, name, dataclasses.replace(dataset, files=files))


JSON_DAMAGES = ("rename", "drop", "null", "text", "list", "negative")


def damaged_json(data, place: int, key: int, how: str):
    """``data`` (parsed JSON, changed in place and returned) with one key of one of its objects renamed, dropped or
    given a value of another type (``JSON_DAMAGES``): valid JSON still. ``place`` and ``key`` pick the object
    (among all, a list's first two entries only) and its key, modulo their counts."""
    def objects(value) -> list[dict]:
        found = [value] if isinstance(value, dict) and value else []
        inner = value.values() if isinstance(value, dict) else value[:2] if isinstance(value, list) else ()
        return found + [o for v in inner for o in objects(v)]

    chosen = objects(data)
    target = chosen[place % len(chosen)]
    name = list(target)[key % len(target)]
    if how == "rename":
        target[name + "x"] = target.pop(name)
    elif how == "drop":
        del target[name]
    else:
        target[name] = {"null": None, "text": "abc", "list": [1, 2], "negative": -1}[how]
    return data


# -- one engine against another: a drawn case, each engine's record of it, the records compared --------------------

MASK_KINDS = ("none", "random", "trailing", "first padded")


def drawn_case(cell, rng, T: int, B: int, dtype, with_h0: bool, mask_kind: str):
    """x (T, B, in), the error dhs (T, B, hidden), h0 (the cell's ``random_state``, or None) and a mask of the kind
    named in ``MASK_KINDS`` (random padding, trailing padding, only the first step of the first row padded)."""
    x = rng.normal(size=(T, B, cell.input_size)).astype(dtype)
    dhs = rng.normal(size=(T, B, cell.hidden_size)).astype(dtype)
    h0 = None
    if with_h0:
        parts = tuple(v.astype(dtype) for v in cell.random_state(rng, B))
        h0 = parts[0] if len(parts) == 1 else parts
    mask = None
    if mask_kind == "random":
        mask = (rng.uniform(size=(T, B)) < 0.7).astype(dtype)
    elif mask_kind == "trailing":
        mask = (np.arange(T)[:, None] < rng.integers(1, T + 1, B)[None, :]).astype(dtype)
    elif mask_kind == "first padded":
        mask = np.ones((T, B), dtype)
        mask[0, 0] = 0.0
    return x, dhs, h0, mask


def engine_record(cell, x, h0, mask, dhs, back_steps) -> dict:
    """Everything a forward and backward pass produce, by name: outputs, states, per-step intermediates, every
    gradient, the error reaching each h_t and the initial state's."""
    hs, cache = cell.forward(x, h0, mask)
    dh_out = np.zeros_like(dhs)
    grads, dx, dh0 = cell.backward(dhs, cache, back_steps=back_steps, dh_out=dh_out)
    dh0 = dh0 if isinstance(dh0, tuple) else (dh0,)
    return {"hs": hs, "dx": dx, "dh_out": dh_out, **grads, **{f"states[{i}]": s for i, s in enumerate(cache.states)},
            **{f"dh0[{i}]": d for i, d in enumerate(dh0)}, **{f"steps[{n}]": v for n, v in cache.steps.items()}}


def assert_records_agree(want: dict, got: dict, tol: float) -> None:
    """Every entry of ``want`` in ``got``, of the same shape, within ``tol`` of its own largest entry (at least 1)."""
    for key, expected in want.items():
        actual = got[key]
        if expected is None:
            assert actual is None, key
            continue
        assert np.shape(actual) == np.shape(expected), key
        scale = max(1.0, float(np.abs(expected).max()))
        error = np.abs(np.asarray(actual, np.float64) - expected).max()
        assert error <= tol * scale, (key, error)
