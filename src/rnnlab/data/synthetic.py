"""Synthetic sequence tasks: no download, generated from a seed.

- ``mean_sign_data``: S5's sign of the global mean (length 20, 10 features)
- ``lk_words``: S2's (l,k)-discrepancy inputs u = 0^l and v = 1 0^(l−1), one-hot over {0, 1}
- ``adding_data``: the adding problem (Hochreiter & Schmidhuber 1997): sum the two marked values
- ``copy_data``: the copy / memory task (Arjovsky et al. 2016): repeat K symbols after a delay
- ``selective_copy_data``: selective copying (Gu & Dao 2023): recall M tokens scattered among noise, in order
- ``associative_recall_data``: associative recall (Ba et al. 2016): the digit bound to a queried letter
"""

from __future__ import annotations

import numpy as np


def mean_sign_data(n: int, length: int = 20, features: int = 10, rng: np.random.Generator | None = None):
    """x (n, length, features) ~ N(0, 1); y (n,) = 1 where the mean of all of x[i] is positive."""
    if length < 1:      # the mean of no values is undefined
        raise ValueError(f"length: the sign-of-the-mean task needs length >= 1, got {length}")
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


def selective_copy_data(n: int, length: int = 256, tokens: int = 16, alphabet: int = 16,
                        rng: np.random.Generator | None = None):
    """Token ids x, y (n, length + 2 tokens), as the Mamba authors' generator (``torch_copying_data(variable=True)``):
    ``tokens`` data symbols from 1..alphabet − 2 at sorted random positions among the first length + tokens
    steps, the noise symbol 0 elsewhere, then ``tokens`` markers (alphabet − 1); the target is 0 except at the
    markers, which hold the data symbols in order. Guessing scores 1 / (alphabet − 2) on the recalled tokens."""
    if alphabet < 3 or tokens < 1:
        raise ValueError(f"selective copy: expected alphabet >= 3 and tokens >= 1, got {alphabet} and {tokens}")
    rng = rng or np.random.default_rng(0)
    span = length + tokens
    x = np.zeros((n, span + tokens), np.int64)
    y = np.zeros((n, span + tokens), np.int64)
    data = rng.integers(1, alphabet - 1, size=(n, tokens))
    for i in range(n):
        x[i, np.sort(rng.choice(span, tokens, replace=False))] = data[i]
    x[:, span:] = alphabet - 1
    y[:, span:] = data
    return x, y


LETTERS, DIGITS = 26, 10
QUERY_MARK = LETTERS + DIGITS       # "?", after the letters (0–25) and the digits (26–35)


def associative_recall_data(n: int, pairs: int = 8, rng: np.random.Generator | None = None):
    """Token ids x (n, 2 pairs + 3) and labels y (n,): ``pairs`` distinct letters each followed by a digit (digits
    may repeat), then "??" and one of the letters; the label is the digit bound to it (c9k8j3f1??c → 9).
    Guessing scores 1/10."""
    if not 1 <= pairs <= LETTERS:
        raise ValueError(f"associative recall: expected 1 to {LETTERS} pairs, got {pairs}")
    rng = rng or np.random.default_rng(0)
    x = np.empty((n, 2 * pairs + 3), np.int64)
    y = np.empty(n, np.int64)
    for i in range(n):
        keys = rng.choice(LETTERS, pairs, replace=False)
        values = rng.integers(0, DIGITS, pairs)
        asked = int(rng.integers(0, pairs))
        x[i, :2 * pairs:2], x[i, 1:2 * pairs:2] = keys, LETTERS + values
        x[i, 2 * pairs:] = QUERY_MARK, QUERY_MARK, keys[asked]
        y[i] = values[asked]
    return x, y
