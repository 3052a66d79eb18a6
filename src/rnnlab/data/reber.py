"""The Reber grammar and the embedded Reber grammar (S2; Hochreiter & Schmidhuber 1997).

Reber automaton, states 0..5 with 3 final, every branch taken with probability 0.5:

    0 →T 1, 0 →P 4;  1 →S 1, 1 →X 2;  2 →S 3, 2 →X 4;  4 →T 4, 4 →V 5;  5 →P 2, 5 →V 3

A Reber string is 'B' + the symbols of a walk from 0 to 3 + 'E'. An embedded Reber string is
'B' + c + <Reber string> + c + 'E' with c ∈ {T, P}: the symbol before the last 'E' must repeat the
second one, a dependency across the whole inner string. Alphabet and one-hot order: B T S X V P E.

The walker below is a small state machine over *whole* strings (B and E included), so one piece of
code generates strings, checks them and lists the legal next symbols after every prefix.
"""

from __future__ import annotations

import numpy as np

ALPHABET = "BTSXVPE"
INDEX = {s: i for i, s in enumerate(ALPHABET)}
EDGES = {0: {"T": 1, "P": 4}, 1: {"S": 1, "X": 2}, 2: {"S": 3, "X": 4}, 4: {"T": 4, "V": 5}, 5: {"P": 2, "V": 3}}


def _plain(state) -> dict:
    """Transitions of the plain grammar: 'start' -B→ 0 … 3 -E→ 'end'."""
    if state == "start":
        return {"B": 0}
    if state == 3:
        return {"E": "end"}
    if state == "end":
        return {}
    return EDGES[state]


def transitions(state, embedded: bool) -> dict:
    """Legal next symbols → next state. States of the embedded grammar are tuples."""
    if not embedded:
        return _plain(state)
    phase = state[0]
    if phase == "start":
        return {"B": ("choose",)}
    if phase == "choose":
        return {c: ("inner", "start", c) for c in "TP"}
    if phase == "inner":
        _, inner, c = state
        if inner == "end":
            return {c: ("close",)}
        return {s: ("inner", nxt, c) for s, nxt in _plain(inner).items()}
    if phase == "close":
        return {"E": ("done",)}
    return {}


def _start(embedded: bool):
    return ("start",) if embedded else "start"


def _is_final(state, embedded: bool) -> bool:
    return state == (("done",) if embedded else "end")


def reber_strings(n: int, embedded: bool = False, seed: int = 0) -> list[str]:
    """``n`` random strings of the (embedded) Reber grammar; duplicates may occur."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        state, chars = _start(embedded), []
        while not _is_final(state, embedded):
            options = transitions(state, embedded)
            symbol = list(options)[rng.integers(len(options))] if len(options) > 1 else next(iter(options))
            chars.append(symbol)
            state = options[symbol]
        out.append("".join(chars))
    return out


def legal_next(s: str, embedded: bool = False) -> list[set[str]] | None:
    """For every prefix s[:i+1], the set of legal next symbols; None if ``s`` leaves the grammar."""
    state, sets = _start(embedded), []
    for symbol in s:
        options = transitions(state, embedded)
        if symbol not in options:
            return None
        state = options[symbol]
        sets.append(set(transitions(state, embedded)))
    return sets


def is_reber(s: str, embedded: bool = False) -> bool:
    """True when ``s`` is a complete string of the (embedded) Reber grammar, B and E included."""
    state = _start(embedded)
    for symbol in s:
        options = transitions(state, embedded)
        if symbol not in options:
            return False
        state = options[symbol]
    return _is_final(state, embedded)


def encode(s: str) -> np.ndarray:
    """Symbol ids in the one-hot order B T S X V P E."""
    try:
        return np.array([INDEX[c] for c in s], dtype=np.int64)
    except KeyError as err:
        raise ValueError(f"string {s!r}: symbol {err.args[0]!r} is not in the alphabet {ALPHABET}") from None


def legal_mask(s: str, embedded: bool = False) -> np.ndarray:
    """(len(s) − 1, 7) booleans: which symbols may follow each prefix s[:t+1], t < len(s) − 1."""
    sets = legal_next(s, embedded)
    if sets is None:
        raise ValueError(f"string {s!r} is not a {'embedded ' if embedded else ''}Reber string")
    out = np.zeros((len(s) - 1, len(ALPHABET)), bool)
    for t, allowed in enumerate(sets[:-1]):
        out[t, [INDEX[c] for c in allowed]] = True
    return out


def solved_stats(outputs: np.ndarray, strings: list[str], embedded: bool = False) -> dict[str, float]:
    """Hochreiter & Schmidhuber's criterion on a batch of model outputs.

    outputs: (T, B, 7) scores (logits, probabilities or linear outputs), where outputs[t, b]
    predicts the symbol after strings[b][:t+1]. A step is *right* when every legal next symbol
    scores above every illegal one; a string is *solved* when every one of its steps is right.

    Returns the fraction of strings solved, the fraction of steps right, and the fraction of
    strings whose final T/P step (the prediction of the symbol before the last 'E') is right.
    """
    solved, steps_right, steps, final_right = 0, 0, 0, 0
    for b, s in enumerate(strings):
        legal = legal_mask(s, embedded)                  # (len − 1, 7)
        scores = outputs[: len(s) - 1, b]
        low_legal = np.where(legal, scores, np.inf).min(axis=1)
        high_illegal = np.where(legal, -np.inf, scores).max(axis=1)
        right = low_legal > high_illegal
        solved += bool(right.all())
        steps_right += int(right.sum())
        steps += len(right)
        final_right += bool(right[-2]) if len(right) >= 2 else bool(right[-1])
    n = len(strings)
    return {"solved": solved / n, "step_accuracy": steps_right / steps, "final_step_accuracy": final_right / n}
