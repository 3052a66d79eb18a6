"""Synthetic sequence tasks: no download, generated from a seed.

- ``mean_sign_data``: S5's sign of the global mean (length 20, 10 features)
- ``lk_words``: S2's (l,k)-discrepancy inputs u = 0^l and v = 1 0^(l−1), one-hot over {0, 1}
- ``adding_data``: the adding problem (Hochreiter & Schmidhuber 1997): sum the two marked values
- ``copy_data``: the copy / memory task (Arjovsky et al. 2016): repeat K symbols after a delay
"""

from __future__ import annotations

import numpy as np


def mean_sign_data(n: int, length: int = 20, features: int = 10, rng: np.random.Generator | None = None):
    """x (n, length, features) ~ N(0, 1); y (n,) = 1 where the mean of all of x[i] is positive."""
    rng = rng or np.random.default_rng(0)
    x = rng.normal(size=(n, length, features))
    return x, (x.mean(axis=(1, 2)) > 0).astype(np.int64)


def lk_words(l: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair (u, v) of S2, each (l, 2) one-hot: u = 0^l, v = 1 0^(l−1) (0 = [1, 0], 1 = [0, 1])."""
    if l < 1:
        raise ValueError(f"l: expected a length >= 1, got {l}")
    u = np.zeros((l, 2))
    u[:, 0] = 1
    v = u.copy()
    v[0] = [0, 1]
    return u, v


def adding_data(n: int, length: int = 50, rng: np.random.Generator | None = None):
    """x (n, length, 2): a value in U(0, 1) and a 0/1 marker on exactly two steps, one in each half;
    y (n, 1) = the sum of the two marked values. Predicting 1.0 always gives MSE ≈ 0.167."""
    if length < 2:
        raise ValueError(f"length: the adding problem needs length >= 2, got {length}")
    rng = rng or np.random.default_rng(0)
    x = np.zeros((n, length, 2))
    x[:, :, 0] = rng.uniform(size=(n, length))
    half = length // 2
    first = rng.integers(0, half, size=n)
    second = rng.integers(half, length, size=n)
    rows = np.arange(n)
    x[rows, first, 1] = 1
    x[rows, second, 1] = 1
    y = (x[rows, first, 0] + x[rows, second, 0])[:, None]
    return x, y


def copy_data(n: int, symbols: int = 8, copy_length: int = 10, delay: int = 20,
              rng: np.random.Generator | None = None):
    """Token ids x, y (n, copy_length + delay + copy_length).

    Input: copy_length random symbols from 1..symbols, then delay − 1 blanks (0), a delimiter
    (symbols + 1), then copy_length blanks. Target: blanks, then the symbols again in the last
    copy_length steps. The vocabulary has symbols + 2 entries. A memoryless model that predicts the
    blank or a uniform symbol scores about copy_length · ln(symbols) / total length per step.
    """
    if delay < 1:
        raise ValueError(f"delay: expected >= 1, got {delay}")
    rng = rng or np.random.default_rng(0)
    T = copy_length + delay + copy_length
    seq = rng.integers(1, symbols + 1, size=(n, copy_length))
    x = np.zeros((n, T), np.int64)
    y = np.zeros((n, T), np.int64)
    x[:, :copy_length] = seq
    x[:, copy_length + delay - 1] = symbols + 1
    y[:, -copy_length:] = seq
    return x, y
