"""The bookkeeping of BPTT that does not depend on the cell, written once for the NumPy and JAX loops.

Truncated BPTT (``back_steps=k``) follows the stop-gradient definition: the error injected at step
t reaches the computations of steps t, t−1, …, t−k, and the state h_{t−k−1} is treated as a
constant. Errors injected at different steps expire at different steps, so the loop carries k + 1
deltas at once, one per age, as a leading axis of size k + 1: the step adjoint is linear, so one
batched call serves all of them, and the parameter gradients only need their sum. Full BPTT
(k = None) carries one delta with no age axis.

Masks (T, B, 1) mark valid steps with 1 and padding with 0. A padded step leaves the state as it
was (h_t = h_{t−1}), contributes no parameter gradient, and passes its error through unchanged.
Padded steps count as steps for ``back_steps``.

Every function is pure and takes the array namespace ``xp`` (NumPy or jax.numpy).
"""

from __future__ import annotations

from rnnlab.cells.kernel_blas import projection_matmul


def new_carry(shapes: tuple, k: int | None, dtype, xp) -> tuple:
    """Zero deltas for each state component, one per shape ((B, H), or (B, ...) for a matrix or per-channel
    state), with a leading axis of k + 1 ages under truncation."""
    return tuple(xp.zeros(tuple(shape) if k is None else (k + 1,) + tuple(shape), dtype) for shape in shapes)


def keep_padded(new: tuple, state: tuple, m_t, xp) -> tuple:
    """A padded step (m_t = 0) keeps the state it was given, in every component."""
    return tuple(xp.where(_fit(m_t, s.shape) > 0, n, s) for n, s in zip(new, state))


def inject(carry: tuple, dh_t, k: int | None, xp) -> tuple:
    """The error injected at this step joins the carried delta of h, at age 0."""
    d_h = carry[0] + dh_t if k is None else xp.concatenate([carry[0][:1] + dh_t, carry[0][1:]])
    return (d_h,) + tuple(carry[1:])


def total_error(d_h, k: int | None):
    """Everything reaching h_t: the delta, summed over ages."""
    return d_h if k is None else d_h.sum(axis=0)


def masked_deltas(d: tuple, m_t, shapes: tuple) -> tuple:
    """What enters the step's adjoint: nothing on a padded step (m_t = 0). ``shapes``: the state components'
    shapes (B, ...), which say how the mask broadcasts against each delta (ages lead)."""
    return d if m_t is None else tuple(_fit(m_t, s) * di for di, s in zip(d, shapes))


def pass_padding(dprev: tuple, d: tuple, m_t, shapes: tuple) -> tuple:
    """A padded step passes its deltas through to the previous state unchanged."""
    return dprev if m_t is None else tuple(dp + (1.0 - _fit(m_t, s)) * di for dp, di, s in zip(dprev, d, shapes))


def _fit(m_t, shape: tuple):
    """m_t (B, 1) against a component of shape (B, ...) and any leading age axis."""
    return m_t if len(shape) == 2 else m_t.reshape(m_t.shape[:1] + (1,) * (len(shape) - 1))


def sum_ages(grad_t, k: int | None):
    """A step's pre-activation gradient, summed over the ages that reached it."""
    return grad_t if k is None else grad_t.sum(axis=0)


def step_back(dprev: tuple, k: int | None, xp) -> tuple:
    """The deltas carried to the previous step: all of them, or ages 0..k−1 moved to ages 1..k with
    nothing at age 0 (age k expires here)."""
    if k is None:
        return tuple(dprev)
    return tuple(xp.concatenate([xp.zeros_like(dp[:1]), dp[:-1]]) for dp in dprev)


def initial_state_delta(carry: tuple, k: int | None) -> tuple:
    """What reaches the initial state: the carried delta, or the sum of its surviving ages."""
    return tuple(carry) if k is None else tuple(c[1:].sum(axis=0) for c in carry)


def project_input(p: dict, x, xp):
    """x W_x + b for all T steps as one matmul: (T, B, I) → (T, B, G·H); for token ids (T, B), which
    stand for one-hot rows, the same product is a row lookup of W_x."""
    T, B = x.shape[:2]
    xw = p["W_x"][x] if x.ndim == 2 else projection_matmul(x.reshape(T * B, -1), p["W_x"]).reshape(T, B, -1)
    return xw + p["b"] if "b" in p else xw


def input_gradient(p: dict, dxw, x):
    """dx = dxw W_xᵀ over all T·B rows; None for token ids (nothing asks for a gradient of ids)."""
    if x.ndim == 2:
        return None
    T, B, _ = dxw.shape
    return projection_matmul(dxw.reshape(T * B, -1), p["W_x"].T).reshape(T, B, -1)


def shaped_like_h0(dstate0: tuple):
    """dh0 as h0 was given: one array, or the (h, c) pair of an LSTM."""
    return dstate0[0] if len(dstate0) == 1 else tuple(dstate0)
