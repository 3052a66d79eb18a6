"""Formal languages for length generalisation, in the frame of Delétang et al. 2023 ("Neural Networks and the
Chomsky Hierarchy"; ``../shared/reference/SUITE.md`` §6): a string over the input alphabet, then one empty token
at which the model answers with one of the output alphabet's classes. Trained on lengths 1..40, tested on 41..500;
the score is the mean over test lengths of the accuracy at each length.

Each generator returns (strings, labels) for given lengths, from a NumPy generator:

- ``parity_check``: a binary string → the number of 1s mod 2 (chance 1/2);
- ``even_pairs``: a binary string → whether its first and last symbols agree, i.e. the parity of the
  number of unequal adjacent pairs (chance 1/2);
- ``cycle_navigation``: actions {0, 1, 2} moving −1, 0, +1 on a cycle of 5 from 0 → the final position (1/5);
- ``modular_arithmetic``: digits 0–4 alternating with +, −, · (· binds first) → the value mod 5 (1/5);
- ``dyck``: Dyck-1 or Dyck-2 membership, half balanced strings, half near misses (one symbol of a balanced
  string replaced), so that the answer is never in the length alone (1/2);
- ``anbncn``: aⁿbⁿcⁿ membership against near misses aᵖbᑫcʳ of the same length (1/2).

A language has only some lengths (odd for modular arithmetic, even for Dyck, multiples of 3 for aⁿbⁿcⁿ):
``Language.lengths`` lists those in a range, and the lengths are drawn from it, so that no test string is as
short as a training one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

TRAIN_MAX_LENGTH, TEST_MAX_LENGTH = 40, 500


def parity_check(lengths: np.ndarray, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    strings = [rng.integers(0, 2, n) for n in lengths]
    return strings, np.array([s.sum() % 2 for s in strings], np.int64)


def even_pairs(lengths: np.ndarray, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    strings = [rng.integers(0, 2, n) for n in lengths]
    return strings, np.array([int(s[0] == s[-1]) for s in strings], np.int64)


def cycle_navigation(lengths: np.ndarray, rng: np.random.Generator,
                     cycle: int = 5) -> tuple[list[np.ndarray], np.ndarray]:
    strings = [rng.integers(0, 3, n) for n in lengths]
    return strings, np.array([(s - 1).sum() % cycle for s in strings], np.int64)


PLUS, MINUS, TIMES = 5, 6, 7     # modular arithmetic's operators, after the digits 0–4


def modular_value(tokens: np.ndarray, modulus: int = 5) -> int:
    """The value mod ``modulus`` of digits alternating with +, −, · (· binds first)."""
    total, term, sign = 0, int(tokens[0]), 1
    for op, digit in zip(tokens[1::2], tokens[2::2]):
        if op == TIMES:
            term = term * int(digit)
        else:
            total, term, sign = total + sign * term, int(digit), 1 if op == PLUS else -1
    return (total + sign * term) % modulus


def modular_arithmetic(lengths: np.ndarray, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    strings = []
    for n in lengths:                                # n odd: digit (op digit)*
        s = np.empty(n, np.int64)
        s[0::2] = rng.integers(0, 5, (n + 1) // 2)
        s[1::2] = rng.integers(PLUS, TIMES + 1, n // 2)
        strings.append(s)
    return strings, np.array([modular_value(s) for s in strings], np.int64)


def balanced(n: int, kinds: int, rng: np.random.Generator) -> np.ndarray:
    """A balanced string of n (even) brackets of ``kinds`` types: opening 2k, closing 2k + 1. Its shape is drawn
    by the cycle lemma (a random arrangement of n/2 openings and n/2 closings, rotated after its lowest prefix,
    so every prefix is non-negative), each pair's type at random."""
    steps = rng.permutation(np.r_[np.ones(n // 2, np.int64), -np.ones(n // 2, np.int64)])
    steps = np.roll(steps, -(int(np.argmin(np.cumsum(steps))) + 1))
    out, stack = np.empty(n, np.int64), []
    for t, step in enumerate(steps):
        if step > 0:
            stack.append(int(rng.integers(0, kinds)))
            out[t] = 2 * stack[-1]
        else:
            out[t] = 2 * stack.pop() + 1
    return out


def is_balanced(s: np.ndarray) -> bool:
    stack = []
    for token in s:
        if token % 2 == 0:
            stack.append(token)
        elif not stack or stack.pop() != token - 1:
            return False
    return not stack


def dyck(lengths: np.ndarray, rng: np.random.Generator, kinds: int = 1) -> tuple[list[np.ndarray], np.ndarray]:
    """Dyck-``kinds`` membership: half balanced strings, half a balanced string with one symbol replaced by another
    (a near miss of the same length; one replacement always unbalances it: it changes the count of openings, or
    the type of one of a matched pair). The label is what ``is_balanced`` finds."""
    strings = []
    for n in lengths:
        s = balanced(n, kinds, rng)
        if rng.integers(0, 2):
            t = int(rng.integers(0, s.size))
            s[t] = (s[t] + rng.integers(1, 2 * kinds)) % (2 * kinds)        # any other symbol
        strings.append(s)
    return strings, np.array([int(is_balanced(s)) for s in strings], np.int64)


def anbncn(lengths: np.ndarray, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """aⁿbⁿcⁿ (a, b, c = 0, 1, 2) against near misses aᵖbᑫcʳ, p + q + r = 3n, one symbol moved between blocks."""
    strings, labels = [], []
    for n in lengths:
        k = n // 3
        counts = np.array([k, k, k])
        positive = bool(rng.integers(0, 2))
        if not positive:
            give, take = rng.choice(3, 2, replace=False)
            counts[give] += 1
            counts[take] -= 1
        strings.append(np.repeat(np.arange(3), counts))
        labels.append(int(positive))
    return strings, np.array(labels, np.int64)


class Language(NamedTuple):
    generate: Callable[[np.ndarray, np.random.Generator], tuple[list[np.ndarray], np.ndarray]]
    alphabet: int                  # the input alphabet's size
    classes: int                   # the answers'
    chance: float                  # a memoryless model's accuracy
    step: int = 1                  # the lengths it has: multiples of step (plus ``offset``)
    offset: int = 0

    def lengths(self, low: int, high: int) -> np.ndarray:
        """The string lengths in [low, high] this language has (odd for modular arithmetic, even for Dyck,
        multiples of 3 for aⁿbⁿcⁿ)."""
        every = np.arange(max(low, 1), high + 1)
        return every[every % self.step == self.offset % self.step]


LANGUAGES = {
    "parity-check": Language(parity_check, 2, 2, 1 / 2),
    "even-pairs": Language(even_pairs, 2, 2, 1 / 2),
    "cycle-navigation": Language(cycle_navigation, 3, 5, 1 / 5),
    "modular-arithmetic": Language(modular_arithmetic, 8, 5, 1 / 5, step=2, offset=1),
    "dyck-1": Language(lambda lengths, rng: dyck(lengths, rng, 1), 2, 2, 1 / 2, step=2),
    "dyck-2": Language(lambda lengths, rng: dyck(lengths, rng, 2), 4, 2, 1 / 2, step=2),
    "anbncn": Language(anbncn, 3, 2, 1 / 2, step=3),
}


def with_answer_slot(strings: list[np.ndarray], alphabet: int) -> list[np.ndarray]:
    """Each string with the empty token (id ``alphabet``) appended: the step the model answers at."""
    return [np.r_[s, alphabet] for s in strings]
