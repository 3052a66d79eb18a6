"""Long short-term memory (Hochreiter & Schmidhuber 1997, with forget gate). Gate order: i, f, g, o.

    [i, f, g, o] = x W_x + b + h W_h (+ b_h),  then σ, σ, tanh, σ
    c' = f ⊙ c + i ⊙ g
    h' = o ⊙ tanh(c')

Backward, with (dh, dc) the errors arriving at (h', c'):

    dc_total = dc + dh ⊙ o ⊙ (1 − tanh²(c'))
    di = dc_total ⊙ g;  df = dc_total ⊙ c;  dg = dc_total ⊙ i;  do = dh ⊙ tanh(c')
    dc_prev = dc_total ⊙ f;  dh_prev = [di·σ', df·σ', dg·(1 − g²), do·σ'] W_hᵀ

The LSTM's own step and adjoint (and their fused Numba loops) sit first; Greff et al.'s variants follow as the
LSTM with parts swapped (a gate for the constant 1 or 1 − i, an activation for the identity), each part a pure
pair, chosen once by ``LSTM.equations``. Their FGR (full gate recurrence) adds to each gate's pre-activation the
previous step's gate activations through nine H × H matrices, ``W_gg`` (3H, 3H), rows i, f, o of t − 1, columns
i, f, o of t; the state then carries those activations, (h, c, i, f, o):

    [a_i, a_f, a_o] += [i, f, o]_{t−1} W_gg;   d[i, f, o]_{t−1} = [da_i, da_f, da_o] W_ggᵀ
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, partial
from typing import NamedTuple

import numpy as np

from rnnlab.cells.ages import initial_state_delta, inject, new_carry, pass_padding, step_back, sum_ages
from rnnlab.cells.base import Cell, Option, recurrent_preactivation
from rnnlab.cells.kernel_blas import kernel_matmul
from rnnlab.cells.kernel_math import inline, kernel, kernel_sigmoid, kernel_tanh, one_of, zero_of
from rnnlab.cells.registry import register_cell
from rnnlab.common import matrix_transpose, optional_float, sigmoid, to_bool


def lstm_step(p, xw, state, xp=np):
    h, c = state                                  # (B, H) each
    H = h.shape[-1]
    a = recurrent_preactivation(p, xw, h)
    s = sigmoid(a, xp)                            # one pass over all gates; the g block is unused
    i, f, o = s[..., :H], s[..., H:2 * H], s[..., 3 * H:]
    g = xp.tanh(a[..., 2 * H:3 * H])
    c_new = f * c + i * g
    tc = xp.tanh(c_new)
    h_new = o * tc
    return (h_new, c_new), {"s": s, "g": g, "tc": tc}


def lstm_step_backward(p, dstate, cache, prev, xp=np):
    dh, dc = dstate                               # (..., B, H) each
    _, c = prev
    s, g, tc = cache["s"], cache["g"], cache["tc"]
    H = g.shape[-1]
    i, f, o = s[..., :H], s[..., H:2 * H], s[..., 3 * H:]
    dc_total = dc + dh * o * (1.0 - tc * tc)
    da = xp.concatenate(
        [
            dc_total * g * i * (1.0 - i),
            dc_total * c * f * (1.0 - f),
            dc_total * i * (1.0 - g * g),
            dh * tc * o * (1.0 - o),
        ],
        axis=-1,
    )                                             # (..., B, 4H)
    return (da @ matrix_transpose(p["W_h"]), dc_total * f), da, da


def _block(a, blocks: str, gate: str, H: int):
    k = blocks.index(gate)
    return a[..., k * H:(k + 1) * H]


# Each variant is the LSTM with its parts swapped: a gate is a sigmoid of its block (reading the cell through a
# peephole where it has one), the constant 1, or (the forget gate of CIFG) 1 − i; an activation is tanh or the
# identity. Each part is a pure pair, its forward beside its adjoint, and a variant is chosen once (LSTM.equations).

def _sigmoid_gate(gate, a, blocks, H, reads, peep, cache, i, xp):
    """σ(a_gate + peep_gate ⊙ reads), kept in the cache for the adjoint."""
    cache[gate] = sigmoid(_block(a, blocks, gate, H) + (peep[gate] * reads if gate in peep else 0.0), xp)
    return cache[gate]


def _sigmoid_gate_adjoint(d_out, value):
    """The gate's pre-activation gradient from the gradient at its output."""
    return d_out * value * (1.0 - value)


def _unit_gate(gate, a, blocks, H, reads, peep, cache, i, xp):
    return 1.0


def _coupled_forget(gate, a, blocks, H, reads, peep, cache, i, xp):
    """CIFG: f = 1 − i."""
    return 1.0 - i


def _tanh_activation(x, xp):
    return xp.tanh(x)


def _tanh_slope(y):
    return 1.0 - y * y


def _identity_activation(x, xp):
    return x


def _identity_slope(y):
    return 1.0


class LSTMParts(NamedTuple):
    """One LSTM variant: its gate blocks (in the fused order), each gate's form, and each activation with its slope
    (written in terms of the activation's output)."""

    blocks: str
    input_gate: Callable
    forget_gate: Callable
    output_gate: Callable
    input_activation: tuple[Callable, Callable]
    output_activation: tuple[Callable, Callable]


TANH, IDENTITY = (_tanh_activation, _tanh_slope), (_identity_activation, _identity_slope)
# Greff et al. 2017's variants (and the LSTM itself, "none"), each as its parts
LSTM_VARIANTS = {
    "none": LSTMParts("ifgo", _sigmoid_gate, _sigmoid_gate, _sigmoid_gate, TANH, TANH),
    "nig": LSTMParts("fgo", _unit_gate, _sigmoid_gate, _sigmoid_gate, TANH, TANH),
    "nfg": LSTMParts("igo", _sigmoid_gate, _unit_gate, _sigmoid_gate, TANH, TANH),
    "nog": LSTMParts("ifg", _sigmoid_gate, _sigmoid_gate, _unit_gate, TANH, TANH),
    "niaf": LSTMParts("ifgo", _sigmoid_gate, _sigmoid_gate, _sigmoid_gate, IDENTITY, TANH),
    "noaf": LSTMParts("ifgo", _sigmoid_gate, _sigmoid_gate, _sigmoid_gate, TANH, IDENTITY),
    "cifg": LSTMParts("igo", _sigmoid_gate, _coupled_forget, _sigmoid_gate, TANH, TANH),
}
ABLATIONS = {name: parts.blocks for name, parts in LSTM_VARIANTS.items()}


def _peepholes(p, parts: LSTMParts, H: int) -> dict:
    """Each sigmoid gate's peephole weights (i and f read c, o reads c'); none without ``peep``."""
    if "peep" not in p:
        return {}
    gates = _peephole_gates(parts)
    return {gate: _block(p["peep"], gates, gate, H) for gate in gates}


def lstm_variant_step(p, xw, state, xp=np, *, parts: LSTMParts):
    """The LSTM with ``parts``: i, f, o each a sigmoid gate (with its peephole), 1, or 1 − i (CIFG's f);
    g = act_in(a_g);  c' = f ⊙ c + i ⊙ g;  h' = o ⊙ act_out(c'). With ``W_gg`` (FGR) the gates also read the
    previous step's gates, which the state carries: (h, c) → (h', c', i, f, o)."""
    h, c, *previous_gates = state
    H = h.shape[-1]
    a = recurrent_preactivation(p, xw, h)
    peep, cache = _peepholes(p, parts, H), {"c": c}
    if "W_gg" in p:
        u = cache["u"] = xp.concatenate(previous_gates, axis=-1)            # (B, 3H): i, f, o of t − 1
        a = a + _into_ifgo(u @ p["W_gg"], xp)
    i = parts.input_gate("i", a, parts.blocks, H, c, peep, cache, None, xp)
    f = parts.forget_gate("f", a, parts.blocks, H, c, peep, cache, i, xp)
    g = cache["g"] = parts.input_activation[0](_block(a, parts.blocks, "g", H), xp)
    c_new = cache["c_new"] = f * c + i * g
    o = parts.output_gate("o", a, parts.blocks, H, c_new, peep, cache, i, xp)
    tc = cache["tc"] = parts.output_activation[0](c_new, xp)
    return ((o * tc, c_new, i, f, o) if "W_gg" in p else (o * tc, c_new)), cache


def _into_ifgo(r, xp):
    """(…, 3H) contributions to the gates i, f, o placed in the (…, 4H) blocks i, f, g, o (none to g)."""
    H = r.shape[-1] // 3
    return xp.concatenate([r[..., :2 * H], xp.zeros_like(r[..., :H]), r[..., 2 * H:]], axis=-1)


def lstm_variant_step_backward(p, dstate, cache, prev, xp=np, *, parts: LSTMParts):
    """Adjoint of ``lstm_variant_step``: the LSTM's, with each part's own derivative, plus the peepholes' paths
    into dc (through i, f and, from o, through c'); CIFG's coupling moves df into di. Under FGR the errors at the
    carried gates join their gates' output errors, and reach the previous gates through ``W_ggᵀ``."""
    dh, dc, *dgates = dstate
    c = prev[1]
    H = c.shape[-1]
    i, f, o = (cache.get(gate, 1.0) for gate in "ifo")
    if parts.forget_gate is _coupled_forget:
        f = 1.0 - i
    d_carried = dict(zip("ifo", dgates)) if dgates else {}
    g, tc = cache["g"], cache["tc"]
    peep = _peepholes(p, parts, H)
    dc_total = dc + dh * o * parts.output_activation[1](tc)
    da = {}
    if parts.output_gate is _sigmoid_gate:
        da["o"] = _sigmoid_gate_adjoint(dh * tc + d_carried.get("o", 0.0), o)
        if "o" in peep:
            dc_total = dc_total + da["o"] * peep["o"]
    da["g"] = dc_total * i * parts.input_activation[1](g)
    di, df = dc_total * g + d_carried.get("i", 0.0), dc_total * c + d_carried.get("f", 0.0)
    if parts.forget_gate is _coupled_forget:
        di = di - df
    if parts.input_gate is _sigmoid_gate:
        da["i"] = _sigmoid_gate_adjoint(di, i)
    if parts.forget_gate is _sigmoid_gate:
        da["f"] = _sigmoid_gate_adjoint(df, f)
    dc_prev = dc_total * f
    for gate in ("i", "f"):
        if gate in peep:
            dc_prev = dc_prev + da[gate] * peep[gate]
    dprevious_gates = ()
    if "W_gg" in p:
        du = xp.concatenate([da["i"], da["f"], da["o"]], axis=-1) @ matrix_transpose(p["W_gg"])
        dprevious_gates = (du[..., :H], du[..., H:2 * H], du[..., 2 * H:])
    da = xp.concatenate([da[gate] for gate in parts.blocks], axis=-1)
    return (da @ matrix_transpose(p["W_h"]), dc_prev, *dprevious_gates), da, da


def _peephole_gates(parts: LSTMParts) -> str:
    return "".join(gate for gate, form in zip("ifo", (parts.input_gate, parts.forget_gate, parts.output_gate))
                   if form is _sigmoid_gate)


def peephole_gates(ablate: str) -> str:
    """The sigmoid gates that exist (and so have a peephole) under ``ablate``."""
    return _peephole_gates(LSTM_VARIANTS[ablate])


@register_cell("lstm")
class LSTM(Cell):
    """LSTM cell; states and h0/dh0 are (h, c) pairs.

    Parameters: ``W_x`` (input_size, 4*hidden), ``W_h`` (hidden, 4*hidden) in gate order i, f, g, o;
    ``b`` (4*hidden,) if bias; ``b_h`` (4*hidden,) if recurrent_bias. The forget block of ``b``
    starts at ``forget_bias`` (None keeps what the initialiser drew).

    ``ablate`` removes one part (Greff et al. 2017: ``nig``, ``nfg``, ``nog``, ``niaf``, ``noaf``,
    ``cifg``; see ``lstm_variant_step``); a removed gate's blocks leave W_x, W_h and the biases.
    ``peepholes`` adds ``peep`` (one hidden-sized block per sigmoid gate): Greff et al.'s "vanilla"
    LSTM is ``peepholes=True``. ``gate_recurrence`` is their FGR: ``W_gg`` (3·hidden, 3·hidden) feeds the
    previous step's gates into every gate, and the state becomes (h, c, i, f, o). Every configuration has fused
    Numba kernels: the plain LSTM its own pair, the variants one pair that reads the variant's layout.
    """

    title = "LSTM"
    options = (
        Option("forget_bias", 1.0, optional_float, "LSTM: the forget gate's starting bias (none = what --init "
               "drew: PyTorch, Zaremba et al. 2014)"),
        Option("ablate", "none", str, "LSTM: the part removed (Greff et al. 2017): no input, forget or output gate, "
               "no input or output activation, coupled input-forget gate", tuple(ABLATIONS)),
        Option("peepholes", False, to_bool, "LSTM: gates also read the cell state (Gers & Schmidhuber 2000)"),
        Option("gate_recurrence", False, to_bool, "LSTM: every gate also reads the previous step's gates, nine "
               "hidden × hidden matrices (Greff et al. 2017's FGR)"),
    )

    def _configure(self, *args, **kwargs) -> None:
        super()._configure(*args, **kwargs)
        if self.gate_recurrence and self.ablate != "none":
            raise ValueError(f"LSTM: gate_recurrence (FGR) adds to the full LSTM; not with ablate={self.ablate!r} "
                             "(Greff et al. 2017 vary one part at a time)")

    @property
    def state_size(self) -> int:
        """(h, c), and under FGR the previous step's gates (i, f, o) as well."""
        return 5 if self.gate_recurrence else 2

    @property
    def gates(self) -> int:
        return len(ABLATIONS[self.ablate])

    def param_shapes(self):
        shapes = super().param_shapes()
        if self.peepholes:
            shapes["peep"] = (len(peephole_gates(self.ablate)) * self.hidden_size,)
        if self.gate_recurrence:
            shapes["W_gg"] = (3 * self.hidden_size, 3 * self.hidden_size)
        return shapes

    def initialize(self, rng):
        blocks, H = ABLATIONS[self.ablate], self.hidden_size
        if self.bias and self.forget_bias is not None and "f" in blocks and self.ablate != "cifg":
            k = blocks.index("f")
            self.params["b"][k * H:(k + 1) * H] = self.forget_bias

    def has_kernels(self) -> bool:
        return True

    def _is_plain(self) -> bool:
        return self.ablate == "none" and not self.peepholes and not self.gate_recurrence

    @cached_property
    def equations(self) -> tuple[Callable, Callable]:
        """(step, its adjoint) of this cell's variant, chosen once from its options: the LSTM's own pair, or a
        variant's parts composed."""
        if self._is_plain():
            return lstm_step, lstm_step_backward
        parts = LSTM_VARIANTS[self.ablate]
        return partial(lstm_variant_step, parts=parts), partial(lstm_variant_step_backward, parts=parts)

    def step(self, p, xw, state, xp=np):
        return self.equations[0](p, xw, state, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return self.equations[1](p, dstate, cache, prev, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        grads = super().recurrent_grads(p, prev_h, steps, dhw, xp)
        if "peep" in p:   # i and f read c (before the step), o reads c' (after it)
            blocks, H = ABLATIONS[self.ablate], prev_h.shape[-1]
            reads = {"i": steps["c"], "f": steps["c"], "o": steps["c_new"]}
            grads["peep"] = xp.concatenate([(_block(dhw, blocks, gate, H) * reads[gate]).sum(axis=0)
                                            for gate in peephole_gates(self.ablate)])
        if "W_gg" in p:   # the previous gates feed i, f and o as h feeds every block
            H = prev_h.shape[-1]
            grads["W_gg"] = steps["u"].T @ xp.concatenate([dhw[..., :2 * H], dhw[..., 3 * H:]], axis=-1)
        return grads

    def fused_forward(self, p, xw, state0, mask):
        if not self._is_plain():
            return self._fused_variant_forward(p, xw, state0, mask)
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, cs, g, tc = (np.empty((T, B, H), dt) for _ in range(4))
        s = np.empty((T, B, 4 * H), dt)
        bias = sum((p[name] for name in ("b", "b_h") if name in p), np.zeros(4 * H, dt))   # xw comes without b
        lstm_forward_loop(xw, np.ascontiguousarray(p["W_h"]), bias, state0[0], state0[1], mask, hs, cs, s, g, tc)
        return (hs, cs), {"s": s, "g": g, "tc": tc}

    def fused_adds_bias(self) -> bool:
        return self._is_plain()       # its loop adds b_h to every pre-activation anyway: b with it costs nothing

    def fused_backward(self, p, dhs, cache, prev, mask, back_steps, dh_out, dxw, dhw):
        """The Numba engine's backward loop; dxw receives da (for an LSTM dxw = dhw, so dhw is unused)."""
        if not self._is_plain():
            return self._fused_variant_backward(p, dhs, cache, mask, back_steps, dh_out, dxw)
        dh0, dc0 = lstm_backward_loop(dhs, np.ascontiguousarray(p["W_h"].T), np.ascontiguousarray(prev[1]),
                                      cache.steps["s"], cache.steps["g"], cache.steps["tc"], mask, back_steps, dxw,
                                      dh_out)
        return dxw, dxw, (dh0, dc0)

    @cached_property
    def _layout(self) -> np.ndarray:
        """The variant as the kernels read it (``variant_layout``)."""
        return variant_layout(LSTM_VARIANTS[self.ablate], self.peepholes)

    def _kernel_parameters(self, p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``b_h``, ``peep`` and ``W_gg`` as the variant kernels take them: zeros or empty where the cell has none."""
        dt, width = self.dtype, p["W_h"].shape[1]
        return (p["b_h"] if "b_h" in p else np.zeros(width, dt),
                np.ascontiguousarray(p["peep"]) if "peep" in p else np.zeros(0, dt),
                np.ascontiguousarray(p["W_gg"]) if "W_gg" in p else np.zeros((0, 0), dt))

    def _fused_variant_forward(self, p, xw, state0, mask):
        T, B, _ = xw.shape
        H, dt = self.hidden_size, self.dtype
        hs, cs, c_steps, c_new, g, tc = (np.empty((T, B, H), dt) for _ in range(6))
        gates = np.empty((3, T, B, H), dt)
        recurrent = self.gate_recurrence
        gates0 = np.stack(state0[2:]) if recurrent else np.zeros((3, B, H), dt)
        gate_states = np.empty((3, T, B, H) if recurrent else (3, 0, B, H), dt)
        u = np.empty((T if recurrent else 0, B, 3 * H), dt)
        b_h, peep, W_gg = self._kernel_parameters(p)
        lstm_variant_forward_loop(xw, np.ascontiguousarray(p["W_h"]), b_h, peep, W_gg, self._layout, state0[0],
                                  state0[1], gates0, mask, hs, cs, gate_states, c_steps, c_new, u, gates, g, tc)
        steps = {"c": c_steps, "g": g, "c_new": c_new, "tc": tc}
        steps.update({gate: gates[k] for k, gate in enumerate("ifo") if gate in peephole_gates(self.ablate)})
        if recurrent:
            steps["u"] = u
        return (hs, cs, *gate_states) if recurrent else (hs, cs), steps

    def _fused_variant_backward(self, p, dhs, cache, mask, back_steps, dh_out, dxw):
        steps, dt = cache.steps, self.dtype
        gates = np.empty((3,) + steps["g"].shape, dt)       # the sigmoid gates' values (an absent gate's unread)
        for k, gate in enumerate("ifo"):
            if gate in steps:
                gates[k] = steps[gate]
        _, peep, W_gg = self._kernel_parameters(p)
        dh0, dc0, dgates0 = lstm_variant_backward_loop(
            dhs, np.ascontiguousarray(p["W_h"].T), peep, np.ascontiguousarray(W_gg.T), self._layout, steps["c"],
            gates, steps["g"], steps["tc"], mask, back_steps, dxw, dh_out)
        return dxw, dxw, (dh0, dc0, *dgates0) if self.gate_recurrence else (dh0, dc0)


# -- the fused time loops of the Numba engine (rnnlab.engines.numba) ---------------------------
# lstm_step / lstm_step_backward over all T steps in one compiled loop: the recurrent matmul in
# BLAS, the gates as short loops.

@kernel
def lstm_forward_loop(xw, W_h, b_h, h0, c0, mask, hs, cs, s_steps, g_steps, tc_steps):
    """[i, f, g, o] = xw + h W_h + b_h → σ, σ, tanh, σ;  c' = f ⊙ c + i ⊙ g;  h' = o ⊙ tanh(c')."""
    T, B, H = hs.shape
    h, c = h0.copy(), c0.copy()
    a = np.empty((B, 4 * H), hs.dtype)
    a_flat = a.reshape(-1)
    for t in range(T):
        kernel_matmul(h, W_h, a)
        x_t = xw[t]
        for i in range(B):
            for j in range(4 * H):
                a[i, j] += x_t[i, j] + b_h[j]
        # the gates in passes over all rows, the sigmoids over the whole (B, 4H) block, and the cache
        # indexed directly (no row views): row by row, loops of H or 4H ≲ 40 ran mostly as scalar
        # remainders (at hidden 10: 45 → 35 µs, the same bits)
        s_flat = s_steps[t].reshape(-1)
        for k in range(a_flat.size):
            s_flat[k] = kernel_sigmoid(a_flat[k])
        for i in range(B):
            for j in range(H):
                g_steps[t, i, j] = kernel_tanh(a[i, 2 * H + j])
        for i in range(B):
            if mask[t, i] > 0.0:
                for j in range(H):
                    c[i, j] = s_steps[t, i, H + j] * c[i, j] + s_steps[t, i, j] * g_steps[t, i, j]
        for i in range(B):
            if mask[t, i] > 0.0:
                for j in range(H):
                    tc_steps[t, i, j] = kernel_tanh(c[i, j])
                for j in range(H):
                    h[i, j] = s_steps[t, i, 3 * H + j] * tc_steps[t, i, j]
            else:
                for j in range(H):
                    tc_steps[t, i, j] = kernel_tanh(s_steps[t, i, H + j] * c[i, j]
                                                    + s_steps[t, i, j] * g_steps[t, i, j])
        hs[t], cs[t] = h, c


@kernel
def lstm_backward_loop(dhs, W_hT, prev_c, s_steps, g_steps, tc_steps, mask, back_steps, da_sum, dh_out):
    """dc_total = dc + dh ⊙ o(1 − tanh²c');  da = [dc_total g i(1−i), dc_total c f(1−f),
    dc_total i (1 − g²), dh tanh(c') o(1−o)];  dh_prev = da W_hᵀ, dc_prev = dc_total ⊙ f; for every
    age at once, masked steps passing their deltas through. Returns (dh0, dc0); da_sum (= dxw = dhw)."""
    T, B, H = dhs.shape
    carry_h, carry_c = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H, dhs)
    A = carry_h.shape[0]
    da = np.empty((A * B, 4 * H), dhs.dtype)
    dc_total = np.empty(H, dhs.dtype)
    dc_prev = np.empty((A, B, H), dhs.dtype)
    dh_prev = np.empty((A * B, H), dhs.dtype)
    one = one_of(dhs)
    for t in range(T - 1, -1, -1):
        inject(carry_h, dhs[t], dh_out[t])
        for s in range(A):
            for i in range(B):   # the cached gates indexed directly: ten views per row cost ~15% at H = 18
                m, row = mask[t, i], s * B + i
                for j in range(H):
                    dc_total[j] = m * (carry_c[s, i, j] + carry_h[s, i, j] * s_steps[t, i, 3 * H + j]
                                       * (one - tc_steps[t, i, j] * tc_steps[t, i, j]))
                for j in range(H):
                    ig = s_steps[t, i, j]
                    da[row, j] = dc_total[j] * g_steps[t, i, j] * ig * (one - ig)
                for j in range(H):
                    f = s_steps[t, i, H + j]
                    da[row, H + j] = dc_total[j] * prev_c[t, i, j] * f * (one - f)
                for j in range(H):
                    g = g_steps[t, i, j]
                    da[row, 2 * H + j] = dc_total[j] * s_steps[t, i, j] * (one - g * g)
                for j in range(H):
                    o = s_steps[t, i, 3 * H + j]
                    da[row, 3 * H + j] = m * carry_h[s, i, j] * tc_steps[t, i, j] * o * (one - o)
                for j in range(H):
                    dc_prev[s, i, j] = dc_total[j] * s_steps[t, i, H + j] + (one - m) * carry_c[s, i, j]
        sum_ages(da, B, da_sum[t])
        kernel_matmul(da, W_hT, dh_prev)
        pass_padding(dh_prev, carry_h, mask[t])
        step_back(carry_h, dh_prev.reshape(A, B, H), back_steps)
        step_back(carry_c, dc_prev, back_steps)
    return initial_state_delta(carry_h, back_steps), initial_state_delta(carry_c, back_steps)


# Greff et al.'s variants (the LSTM with peepholes, each ablation, FGR) in one pair of loops, the variant read from
# ``layout``: where each gate's block starts in the pre-activations (in units of H; −1 for a gate that is the
# constant 1), where each gate's peephole block starts in ``peep`` (−1: none), the forget gate's form, and whether
# the input and output activations are the identity; FGR is a non-empty ``W_gg``. The branches test per-call
# constants outside the passes over each (B, H) block: run with the plain LSTM's layout, the forward took
# 1.0–1.6× the plain LSTM's own and the backward 1.1–1.4× (T, B, I, H from (50, 20, 50, 50) to (200, 32, 2, 50),
# float32, 1 thread, AMD EPYC, thread CPU time on a loaded machine). With the branches inside them, per element,
# the forward had taken 2–4× at batch 20–32.
SIGMOID_FORGET, UNIT_FORGET, COUPLED_FORGET = 0, 1, 2
LAYOUT_FIELDS = ("i", "f", "g", "o", "peep_i", "peep_f", "peep_o", "forget", "input_identity", "output_identity")


def variant_layout(parts: LSTMParts, peepholes: bool) -> np.ndarray:
    """The integer layout ``lstm_variant_forward_loop`` and ``lstm_variant_backward_loop`` read (``LAYOUT_FIELDS``)."""
    sigmoid_gates = _peephole_gates(parts)
    at = [parts.blocks.index(gate) if gate in parts.blocks and (gate == "g" or gate in sigmoid_gates) else -1
          for gate in "ifgo"]
    peep = [sigmoid_gates.index(gate) if peepholes and gate in sigmoid_gates else -1 for gate in "ifo"]
    forget = {_sigmoid_gate: SIGMOID_FORGET, _unit_gate: UNIT_FORGET, _coupled_forget: COUPLED_FORGET}[
        parts.forget_gate]
    identity = [int(activation is IDENTITY) for activation in (parts.input_activation, parts.output_activation)]
    return np.array(at + peep + [forget] + identity, np.int64)


@kernel
def lstm_variant_forward_loop(xw, W_h, b_h, peep, W_gg, layout, h0, c0, gates0, mask, hs, cs, gate_states, c_steps,
                              c_new_steps, u_steps, gate_steps, g_steps, tc_steps):
    """a = xw + h W_h + b_h (+ [i, f, o]_{t−1} W_gg into a_i, a_f, a_o), then ``_variant_gates``. gate_steps holds
    i, f, o (the constants too); with W_gg (FGR) gate_states the carried gates and u_steps each step's previous
    gates."""
    T, B, H = hs.shape
    recurrent = W_gg.shape[0] > 0
    peeps = np.zeros((3, H), hs.dtype)       # i, f, o; zero where a gate has no peephole
    for k in range(3):
        if layout[4 + k] >= 0:
            peeps[k] = peep[layout[4 + k] * H:(layout[4 + k] + 1) * H]
    h, c = h0.copy(), c0.copy()
    u = np.empty((B, 3 * H), hs.dtype)        # the previous step's gates, i, f, o (FGR)
    for k in range(3):
        u[:, k * H:(k + 1) * H] = gates0[k]
    r_gates = np.empty((B, 3 * H), hs.dtype)
    a = np.empty((B, W_h.shape[1]), hs.dtype)
    for t in range(T):
        kernel_matmul(h, W_h, a)
        x_t = xw[t]
        for r in range(B):
            for j in range(a.shape[1]):
                a[r, j] += x_t[r, j] + b_h[j]
        if recurrent:
            u_steps[t] = u
            kernel_matmul(u, W_gg, r_gates)
            for r in range(B):
                for j in range(2 * H):
                    a[r, j] += r_gates[r, j]
                for j in range(H):
                    a[r, 3 * H + j] += r_gates[r, 2 * H + j]
        c_steps[t] = c
        _variant_gates(a, c, layout, peeps, gate_steps[0, t], gate_steps[1, t], gate_steps[2, t], g_steps[t],
                       c_new_steps[t], tc_steps[t])
        for r in range(B):
            if mask[t, r] > 0.0:
                for j in range(H):
                    c[r, j] = c_new_steps[t, r, j]
                    h[r, j] = gate_steps[2, t, r, j] * tc_steps[t, r, j]
                if recurrent:
                    for k in range(3):
                        u[r, k * H:(k + 1) * H] = gate_steps[k, t, r]
        hs[t], cs[t] = h, c
        if recurrent:
            for k in range(3):
                gate_states[k, t] = u[:, k * H:(k + 1) * H]


@inline
def _variant_gates(a, c, layout, peeps, i_t, f_t, o_t, g_t, c_new_t, tc_t):
    """i = σ(a_i + p_i ⊙ c) or 1;  f = σ(a_f + p_f ⊙ c), 1 or 1 − i;  g = tanh(a_g) or a_g;  c' = f ⊙ c + i ⊙ g;
    o = σ(a_o + p_o ⊙ c') or 1;  tanh(c') or c'. Each part one pass over a row, its variant tested outside the
    pass, so that the passes vectorise (a gate without a peephole adds 0 ⊙ c)."""
    B, H = c.shape
    i_at, f_at, g_at, o_at, forget = layout[0], layout[1], layout[2], layout[3], layout[7]
    one = one_of(c)
    for r in range(B):
        if i_at >= 0:
            for j in range(H):
                i_t[r, j] = kernel_sigmoid(a[r, i_at * H + j] + peeps[0, j] * c[r, j])
        else:
            i_t[r] = one
        if forget == SIGMOID_FORGET:
            for j in range(H):
                f_t[r, j] = kernel_sigmoid(a[r, f_at * H + j] + peeps[1, j] * c[r, j])
        elif forget == COUPLED_FORGET:
            for j in range(H):
                f_t[r, j] = one - i_t[r, j]
        else:
            f_t[r] = one
        if layout[8] == 1:
            for j in range(H):
                g_t[r, j] = a[r, g_at * H + j]
        else:
            for j in range(H):
                g_t[r, j] = kernel_tanh(a[r, g_at * H + j])
        for j in range(H):
            c_new_t[r, j] = f_t[r, j] * c[r, j] + i_t[r, j] * g_t[r, j]
        if o_at >= 0:
            for j in range(H):
                o_t[r, j] = kernel_sigmoid(a[r, o_at * H + j] + peeps[2, j] * c_new_t[r, j])
        else:
            o_t[r] = one
        if layout[9] == 1:
            for j in range(H):
                tc_t[r, j] = c_new_t[r, j]
        else:
            for j in range(H):
                tc_t[r, j] = kernel_tanh(c_new_t[r, j])


@kernel
def lstm_variant_backward_loop(dhs, W_hT, peep, W_ggT, layout, c_steps, gate_steps, g_steps, tc_steps, mask,
                               back_steps, da_sum, dh_out):
    """``lstm_variant_step_backward`` over all steps and ages (``_variant_adjoint``): dh_prev = da W_hᵀ; with W_gg
    (FGR) d[i, f, o]_{t−1} = [da_i, da_f, da_o] W_ggᵀ. Masked steps pass their deltas through. Returns (dh0, dc0,
    d[i, f, o]0); da_sum receives da (= dxw = dhw)."""
    T, B, H = dhs.shape
    recurrent = W_ggT.shape[0] > 0
    carry_h, carry_c = new_carry(back_steps, B, H, dhs), new_carry(back_steps, B, H, dhs)
    carry_gates = new_carry(back_steps, B, 3 * H if recurrent else 0, dhs)
    A = carry_h.shape[0]
    da = np.empty((A * B, W_hT.shape[0]), dhs.dtype)
    da_gates = np.zeros((A * B, 3 * H if recurrent else 0), dhs.dtype)
    dc_prev = np.empty((A, B, H), dhs.dtype)
    dh_prev = np.empty((A * B, H), dhs.dtype)
    dgates_prev = np.empty((A * B, 3 * H if recurrent else 0), dhs.dtype)
    for t in range(T - 1, -1, -1):
        inject(carry_h, dhs[t], dh_out[t])
        for s in range(A):
            for r in range(B):
                _variant_adjoint(carry_h[s, r], carry_c[s, r], carry_gates[s, r], mask[t, r], c_steps[t, r],
                                 gate_steps[0, t, r], gate_steps[1, t, r], gate_steps[2, t, r], g_steps[t, r],
                                 tc_steps[t, r], peep, layout, da[s * B + r], da_gates[s * B + r], dc_prev[s, r])
        sum_ages(da, B, da_sum[t])
        kernel_matmul(da, W_hT, dh_prev)
        pass_padding(dh_prev, carry_h, mask[t])
        if recurrent:
            kernel_matmul(da_gates, W_ggT, dgates_prev)
            pass_padding(dgates_prev, carry_gates, mask[t])
        step_back(carry_h, dh_prev.reshape(A, B, H), back_steps)
        step_back(carry_c, dc_prev, back_steps)
        if recurrent:
            step_back(carry_gates, dgates_prev.reshape(A, B, 3 * H), back_steps)
    dgates0 = initial_state_delta(carry_gates, back_steps)
    dgates = np.empty((3, B, H), dhs.dtype)
    if recurrent:
        for k in range(3):
            dgates[k] = dgates0[:, k * H:(k + 1) * H]
    return initial_state_delta(carry_h, back_steps), initial_state_delta(carry_c, back_steps), dgates


@inline
def _variant_adjoint(carry_h, carry_c, carry_gates, m, c, i_row, f_row, o_row, g_row, tc_row, peep, layout, da,
                     da_gates, dc_prev):
    """One row of one age: dc_total = dc + dh ⊙ o ⊙ act_out'; da_o = (dh ⊙ tanh(c') + d_o) ⊙ o(1 − o), reaching
    dc_total through p_o; da_g = dc_total ⊙ i ⊙ act_in'; di = dc_total ⊙ g + d_i (− df under coupling),
    df = dc_total ⊙ c + d_f; dc_prev = dc_total ⊙ f + p_i ⊙ da_i + p_f ⊙ da_f, plus what a padded step passes
    through. d_i, d_f, d_o: the errors at FGR's carried gates (none without it)."""
    H = c.shape[0]
    i_at, f_at, g_at, o_at = layout[0], layout[1], layout[2], layout[3]
    i_peep, f_peep, o_peep, forget = layout[4], layout[5], layout[6], layout[7]
    recurrent = carry_gates.shape[0] > 0
    one, zero = one_of(c), zero_of(c)
    for j in range(H):
        dh, dc = m * carry_h[j], m * carry_c[j]
        d_i = m * carry_gates[j] if recurrent else zero
        d_f = m * carry_gates[H + j] if recurrent else zero
        d_o = m * carry_gates[2 * H + j] if recurrent else zero
        g, tc = g_row[j], tc_row[j]
        i = i_row[j] if i_at >= 0 else one
        f = f_row[j] if forget == SIGMOID_FORGET else one - i if forget == COUPLED_FORGET else one
        o = o_row[j] if o_at >= 0 else one
        dc_total = dc + dh * o * (one if layout[9] == 1 else one - tc * tc)
        if o_at >= 0:
            da_o = da[o_at * H + j] = (dh * tc + d_o) * o * (one - o)
            if o_peep >= 0:
                dc_total += da_o * peep[o_peep * H + j]
            if recurrent:
                da_gates[2 * H + j] = da_o
        da[g_at * H + j] = dc_total * i * (one if layout[8] == 1 else one - g * g)
        di, df = dc_total * g + d_i, dc_total * c[j] + d_f
        if forget == COUPLED_FORGET:
            di -= df
        d_c = dc_total * f
        if i_at >= 0:
            da_i = da[i_at * H + j] = di * i * (one - i)
            if i_peep >= 0:
                d_c += da_i * peep[i_peep * H + j]
            if recurrent:
                da_gates[j] = da_i
        if forget == SIGMOID_FORGET:
            da_f = da[f_at * H + j] = df * f * (one - f)
            if f_peep >= 0:
                d_c += da_f * peep[f_peep * H + j]
            if recurrent:
                da_gates[H + j] = da_f
        dc_prev[j] = d_c + (one - m) * carry_c[j]
