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
        return tuple(np.concatenate([s0[None], s[:-1]], axis=0) for s0, s in zip(self.state0, self.states))
