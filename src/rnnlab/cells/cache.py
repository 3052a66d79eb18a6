"""What a forward pass hands to its backward pass: the contract every engine keeps.

Its own module so that the engines can import it without importing the cells that call them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Array = np.ndarray
State = tuple  # (h,) for RNN and GRU, (h, c) for LSTM, (y, S) for S6


@dataclass
class Cache:
    """What the backward pass needs from a forward pass.

    x: (T, B, input_size); mask: (T, B, 1) or None; state0: the initial state tuple, each
    (B, hidden), or (B, ...) as the cell's ``state_shapes()`` declare (a matrix memory); states: one
    (T, B, ...) array per state component, the state *after* each step; steps: the cell's per-step
    intermediates, each (T, B, ...).
    """

    x: Array
    mask: Array | None
    state0: State
    states: State
    steps: dict[str, Array] = field(default_factory=dict)

    @property
    def final_state(self):
        """The state after the last step: h (B, hidden), or the tuple of components ((h, c) for an LSTM)."""
        last = tuple(s[-1] for s in self.states)
        return last[0] if len(last) == 1 else last

    def prev_states(self) -> State:
        """Per component, the state *before* each step, (T, B, ...)."""
        return tuple(self.prev_state(i) for i in range(len(self.states)))

    def prev_state(self, i: int) -> Array:
        """Component i of the state *before* each step, (T, B, ...): a fresh copy of the history."""
        return np.concatenate([self.state0[i][None], self.states[i][:-1]], axis=0)


class PreviousStates:
    """``Cache.prev_states()`` built one component at a time, on first use: a kernel that reads the states before
    each step from ``cache.states`` itself never pays for a copy of the whole history (a matrix memory's is
    T·B·heads·d² numbers: 1 GB for mLSTM at (T, B, hidden, heads) = (256, 32, 256, 4))."""

    def __init__(self, cache: Cache):
        self._cache, self._built = cache, {}

    def __getitem__(self, i: int) -> Array:
        if i not in self._built:
            self._built[i] = self._cache.prev_state(i)
        return self._built[i]
