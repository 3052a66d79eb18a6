"""The compiled engines (Numba's fused loops, and JAX when its extra is installed): the same gradient
checks as the NumPy engine over every cell × variant × activation × bias × loss × mask × back_steps,
and agreement with the NumPy engine, the reference (float64 to 1e-10, float32 within its precision)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numba import njit
from threadpoolctl import threadpool_info

import rnnlab
from helpers import (
    BIASES,
    CELL_CONFIGS,
    LOSS_MODES,
    Head,
    backward_against_finite_differences,
    covering_rows,
    join_state,
    make_mask,
    split_state,
    subnormal,
)
from rnnlab.cells.kernel_math import (
    EXP_CLAMP32,
    EXP_CLAMP64,
    X86_64,
    flush_subnormals,
    kernel_exp,
    kernel_sigmoid,
    kernel_softplus,
    kernel_tanh,
    restore_float_control,
)
from rnnlab.cells.lstm import ABLATIONS, LAYOUT_FIELDS, variant_layout
from rnnlab.cells.lstm import LSTM_VARIANTS as LSTM_PARTS
from rnnlab.compile import KERNEL_OPTIONS
from rnnlab.engines.threads import available_threads, blas_threads, choose_threads

try:
    import jax  # noqa: F401
    JAX_MARK = pytest.mark.slow      # JAX compiles each case: the slow tier
except ImportError:  # the jax extra is optional; its tests are skipped, naming why
    JAX_MARK = pytest.mark.skip(reason="the jax extra is not installed")
ENGINES = ["numba", pytest.param("jax", marks=JAX_MARK)]

GRID = [list(CELL_CONFIGS), list(BIASES), list(LOSS_MODES), [False, True], [None, 0, 1, 3]]
COMBOS = list(itertools.product(*GRID))
# the Numba engine is checked on the whole grid (576 cases); JAX, and oneMKL serving the Numba kernels' products
# (test_blas_provider.py, which selects the cases named "covering"), on the 96 rows in which every combination of
# any three of the five factors appears: the same finite differences, a sixth of the time
COVERING = set(covering_rows(GRID))


def _fd_case(combo: tuple, engine: str, marks=()):
    name = "-".join(map(str, (*combo, engine)))
    return pytest.param(*combo, engine, marks=marks, id=name + ("-covering" if combo in COVERING else ""))


FD_CASES = [_fd_case(combo, "numba") for combo in COMBOS] + [_fd_case(combo, "jax", JAX_MARK) for combo in COMBOS
                                                            if combo in COVERING]


def test_the_covering_rows_hold_every_combination_of_three_factors_and_a_sixth_of_the_grid():
    for group in itertools.combinations(range(len(GRID)), 3):
        seen = {tuple(row[i] for i in group) for row in COVERING}
        assert seen == set(itertools.product(*(GRID[i] for i in group))), group
    assert len(COVERING) == 6 * 4 * 4      # the fewest possible: every cell × loss × depth needs its own row
    assert covering_rows([[1, 2], [3, 4]], strength=2) == [(1, 3), (1, 4), (2, 3), (2, 4)]


def _pair(config, bias, I, H, seed, engine, dtype=np.float64):
    """The same cell on the NumPy engine (which computes the finite-difference references) and on ``engine``."""
    kind, kwargs = CELL_CONFIGS[config]
    common = dict(seed=seed, init="normal", init_scale=0.5, dtype=dtype, **kwargs, **BIASES[bias])
    return rnnlab.make_cell(kind, I, H, **common), rnnlab.make_cell(kind, I, H, engine=engine, **common)


@pytest.mark.parametrize("config, bias, loss_mode, masked, back_steps, engine", FD_CASES)
def test_compiled_backward_matches_finite_differences(config, bias, loss_mode, masked, back_steps, engine):
    T, B, I, H = 4, 2, 3, 3
    rng = np.random.default_rng(7)
    reference, compiled = _pair(config, bias, I, H, 3, engine)
    head = Head(loss_mode, H, 3, T, B, rng)
    x = rng.normal(size=(T, B, I))
    h0 = join_state(reference, [rng.normal(scale=0.5, size=(B, H)) for _ in range(reference.state_size)])
    mask = make_mask(rng, T, B) if masked else None
    result = backward_against_finite_differences(compiled, reference, head, x, h0, mask, back_steps)
    assert result.passed(1e-6), str(result)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize("config", list(CELL_CONFIGS))
@settings(max_examples=4)
@given(T=st.integers(1, 7), B=st.integers(1, 4), back_steps=st.sampled_from([None, 0, 2, 9]), masked=st.booleans(),
       seed=st.integers(0, 2**31))
def test_engines_agree_with_the_reference_in_float64(config, bias, engine, T, B, back_steps, masked, seed):
    a, b = _pair(config, bias, 4, 5, 1, engine)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, B, 4))
    mask = make_mask(rng, T, B) if masked else None
    ha, ca = a.forward(x, mask=mask)
    hb, cb = b.forward(x, mask=mask)
    np.testing.assert_allclose(hb, ha, rtol=0, atol=1e-10)
    for name in ca.steps:                   # the same intermediates: one engine's cache serves the other
        np.testing.assert_allclose(cb.steps[name], ca.steps[name], rtol=0, atol=1e-10, err_msg=name)
    d = rng.normal(size=ha.shape)
    buffers = [np.zeros_like(ha), np.zeros_like(ha)]
    ga, dxa, d0a = a.backward(d, ca, back_steps, buffers[0])
    gb, dxb, d0b = b.backward(d, cb, back_steps, buffers[1])
    for name in ga:
        np.testing.assert_allclose(gb[name], ga[name], rtol=0, atol=1e-10, err_msg=name)
    np.testing.assert_allclose(dxb, dxa, rtol=0, atol=1e-10)
    np.testing.assert_allclose(buffers[1], buffers[0], rtol=0, atol=1e-10)
    for u, v in zip(d0a if isinstance(d0a, tuple) else (d0a,), d0b if isinstance(d0b, tuple) else (d0b,)):
        np.testing.assert_allclose(v, u, rtol=0, atol=1e-10)


# The kernels beyond the three cells above, under the same checks: Greff et al.'s LSTM variants (one pair of loops
# that reads the variant's layout: every ablation with and without peepholes, and FGR), IndRNN and minGRU
KERNEL_CONFIGS = {f"lstm-{ablate}{'+peepholes' * peepholes}": ("lstm", {"ablate": ablate, "peepholes": peepholes})
                  for ablate in ABLATIONS for peepholes in (False, True) if (ablate, peepholes) != ("none", False)}
KERNEL_CONFIGS.update({"lstm-fgr": ("lstm", {"gate_recurrence": True}),
                       "lstm-fgr+peepholes": ("lstm", {"gate_recurrence": True, "peepholes": True}),
                       "indrnn": ("indrnn", {}), "mingru": ("mingru", {}), "ugrnn": ("ugrnn", {}),
                       "janet": ("janet", {}), "janet-chrono": ("janet", {"chrono": 50.0}),
                       "antisymmetric": ("antisymmetric", {"euler_step": 0.5, "diffusion": 0.1}),
                       "gated-antisymmetric": ("gated-antisymmetric", {"euler_step": 0.5, "diffusion": 0.1})})
KERNEL_CONFIGS.update({f"gru-{variant}-{reads}-gates": ("gru", {"variant": variant, "gate_inputs": reads})
                       for variant in ("cudnn", "cho") for reads in ("h", "h-nobias", "x", "bias")})
KINK_MARGIN = 5e-3      # finite differences move a pre-activation by ~1e-3 at most: farther than this from a kink


def _kernel_pair(config, bias, I, H, seed, dtype=np.float64):
    """As ``_pair``, with the peepholes and biases drawn too ("gaussian"): a peephole's value scales the paths
    through it, which zero peepholes would leave untested."""
    kind, options = KERNEL_CONFIGS[config]
    common = dict(seed=seed, init="gaussian", init_scale=0.5, dtype=dtype, **options, **BIASES[bias])
    return rnnlab.make_cell(kind, I, H, **common), rnnlab.make_cell(kind, I, H, engine="numba", **common)


def _cell_exists(config, bias) -> bool:
    """Gates that read only their bias need one: the cell refuses ``bias=False``."""
    return not (KERNEL_CONFIGS[config][1].get("gate_inputs") == "bias" and bias == "none")


def _kink_distance(cell, x, h0, mask) -> float:
    """How close a pre-activation comes to a kink: IndRNN's ReLU at 0, minGRU's candidate activation at 0."""
    p, H = cell.params, cell.hidden_size
    xw = x @ p["W_x"] + p.get("b", 0.0)
    if isinstance(cell, rnnlab.cells.mingru.MinGRU):
        return float(np.abs(xw[..., H:]).min())
    if not isinstance(cell, rnnlab.cells.indrnn.IndRNN):
        return np.inf
    h, closest = h0, np.inf
    for t in range(x.shape[0]):
        pre = xw[t] + p["u"] * h
        closest = min(closest, float(np.abs(pre).min()))
        h = np.where(mask is None or mask[t][:, None] > 0, np.maximum(pre, 0.0), h)
    return closest


@pytest.mark.parametrize("config", list(KERNEL_CONFIGS))
@settings(max_examples=8, deadline=None)
@given(bias=st.sampled_from(list(BIASES)), loss_mode=st.sampled_from(LOSS_MODES), masked=st.booleans(),
       back_steps=st.sampled_from([None, 0, 1, 3]), seed=st.integers(0, 2**31))
def test_more_kernels_match_finite_differences(config, bias, loss_mode, masked, back_steps, seed):
    assume(_cell_exists(config, bias))
    T, B, I, H = 4, 2, 3, 3
    rng = np.random.default_rng(seed)
    reference, compiled = _kernel_pair(config, bias, I, H, int(rng.integers(1 << 30)))
    head = Head(loss_mode, H, 3, T, B, rng)
    x = rng.normal(size=(T, B, I))
    h0 = join_state(reference, [rng.normal(scale=0.5, size=(B, H)) for _ in range(reference.state_size)])
    mask = make_mask(rng, T, B) if masked else None
    assume(_kink_distance(reference, x, h0, mask) > KINK_MARGIN)
    result = backward_against_finite_differences(compiled, reference, head, x, h0, mask, back_steps)
    assert result.passed(1e-6), str(result)


@pytest.mark.parametrize("config", list(KERNEL_CONFIGS))
@settings(max_examples=6, deadline=None)
@given(T=st.integers(1, 7), B=st.integers(1, 4), back_steps=st.sampled_from([None, 0, 2, 9]), masked=st.booleans(),
       bias=st.sampled_from(list(BIASES)), seed=st.integers(0, 2**31))
def test_more_kernels_agree_with_the_reference_in_float64(config, T, B, back_steps, masked, bias, seed):
    assume(_cell_exists(config, bias))
    a, b = _kernel_pair(config, bias, 4, 5, 1)
    assert b.engine == "numba"
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, B, 4))
    h0 = join_state(a, [rng.normal(size=(B, 5)) for _ in range(a.state_size)])
    mask = make_mask(rng, T, B) if masked else None
    ha, ca = a.forward(x, h0, mask)
    hb, cb = b.forward(x, h0, mask)
    assert set(cb.steps) == set(ca.steps)       # one engine's cache serves the other
    for name in ca.steps:
        np.testing.assert_allclose(cb.steps[name], ca.steps[name], rtol=0, atol=1e-10, err_msg=name)
    for u, v in zip(ca.states, cb.states, strict=True):
        np.testing.assert_allclose(v, u, rtol=0, atol=1e-10)
    d = rng.normal(size=ha.shape)
    ga, dxa, d0a = a.backward(d, ca, back_steps)
    gb, dxb, d0b = b.backward(d, cb, back_steps)
    for name in ga:
        np.testing.assert_allclose(gb[name], ga[name], rtol=0, atol=1e-10, err_msg=name)
    np.testing.assert_allclose(dxb, dxa, rtol=0, atol=1e-10)
    for u, v in zip(split_state(a, d0a), split_state(b, d0b), strict=True):
        np.testing.assert_allclose(v, u, rtol=0, atol=1e-10)


@pytest.mark.parametrize("config", list(KERNEL_CONFIGS))
def test_more_kernels_in_float32_agree_with_the_reference_within_float32(config):
    _assert_float32_agreement(*_kernel_pair(config, "bias", 6, 8, 2, np.float32))


def test_the_variant_layout_names_each_gates_block_and_peephole():
    fields = dict(zip(LAYOUT_FIELDS, variant_layout(LSTM_PARTS["cifg"], peepholes=True)))
    assert fields == {"i": 0, "f": -1, "g": 1, "o": 2, "peep_i": 0, "peep_f": -1, "peep_o": 1, "forget": 2,
                      "input_identity": 0, "output_identity": 0}
    fields = dict(zip(LAYOUT_FIELDS, variant_layout(LSTM_PARTS["nig"], peepholes=False)))
    assert (fields["i"], fields["f"], fields["g"], fields["o"], fields["peep_f"], fields["forget"]) == (-1, 0, 1, 2,
                                                                                                        -1, 0)
    fields = dict(zip(LAYOUT_FIELDS, variant_layout(LSTM_PARTS["noaf"], peepholes=True)))
    assert (fields["peep_i"], fields["peep_f"], fields["peep_o"], fields["output_identity"]) == (0, 1, 2, 1)


@pytest.mark.parametrize("config", list(CELL_CONFIGS))
def test_numba_float32_agrees_with_the_reference_within_float32(config):
    _assert_float32_agreement(*_pair(config, "bias", 6, 8, 2, "numba", np.float32))


def _assert_float32_agreement(a, b):
    """``b`` (compiled, float32) against ``a`` (the NumPy reference, float32) on one masked batch, within float32's
    precision, and float32 throughout: states, cached intermediates, gradients."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(9, 5, 6)).astype(np.float32)
    mask = make_mask(rng, 9, 5)
    ha, ca = a.forward(x, mask=mask)
    hb, cb = b.forward(x, mask=mask)
    assert hb.dtype == np.float32 and all(v.dtype == np.float32 for v in cb.steps.values())
    np.testing.assert_allclose(hb, ha, rtol=1e-5, atol=1e-5)
    d = rng.normal(size=ha.shape).astype(np.float32)
    ga, dxa, _ = a.backward(d, ca, 3)
    gb, dxb, _ = b.backward(d, cb, 3)
    for name in ga:
        assert gb[name].dtype == np.float32
        np.testing.assert_allclose(gb[name], ga[name], rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(dxb, dxa, rtol=1e-4, atol=1e-4)


def _vanishing(kind: str, dtype, engine: str):
    """A cell whose error vanishes below the dtype's smallest normal number within T steps back: W_h shrunk, the
    gate that carries the state (GRU's z, the LSTM's f) shut by its bias, the error injected at the last step."""
    T, shrink = {np.float32: (60, 0.01), np.float64: (120, 1e-6)}[dtype]
    cell = rnnlab.make_cell(kind, 3, 8, seed=0, dtype=dtype, engine=engine)
    cell.params["W_h"] *= dtype(shrink)
    if kind in ("gru", "lstm"):       # the second block: z of r, z, n; f of i, f, g, o
        cell.params["b"][8:16] = -30
    x = np.random.default_rng(0).normal(size=(T, 4, 3)).astype(dtype)
    upstream = np.zeros((T, 4, 8), dtype)
    upstream[-1] = 1
    return cell, x, upstream


@pytest.mark.skipif(not X86_64, reason="the control word set is x86-64's; elsewhere nothing is flushed")
@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_numba_engine_flushes_subnormals_and_nothing_else(kind, dtype, monkeypatch):
    """Through a vanishing gradient the deltas reach subnormal numbers (~100× slower on x86): the Numba engine's are
    0 there, and every number it returns is within a hundred smallest normals of what it gives without the flush
    (which holds subnormals)."""
    def run():
        cell, x, upstream = _vanishing(kind, dtype, "numba")
        totals = np.empty_like(upstream)
        hs, cache = cell.forward(x)
        grads, dx, dh0 = cell.backward(upstream, cache, dh_out=totals)
        return {"hs": hs, "dh_out": totals, "dx": dx, "dh0": np.asarray(dh0), **grads}

    flushed = run()
    with monkeypatch.context() as patch:
        patch.setattr("rnnlab.engines.numba.flush_subnormals", lambda: None)
        patch.setattr("rnnlab.engines.numba.restore_float_control", lambda word: None)
        ieee = run()
    assert subnormal(ieee["dh_out"]).any()
    tiny = np.finfo(dtype).tiny
    for name, value in flushed.items():
        assert not subnormal(value).any(), name
        np.testing.assert_allclose(value, ieee[name], rtol=0, atol=100 * tiny, err_msg=name)
    # the deltas themselves and dx move; the states and the weights' gradients (sums over all T·B rows) keep their bits
    assert {name for name in flushed if not np.array_equal(flushed[name], ieee[name])} <= {"dh_out", "dx"}


def test_the_flush_ends_with_the_call_even_when_it_fails(monkeypatch):
    """The control word is the caller's again after a forward, a backward, and a backward that raises: NumPy's
    arithmetic outside the engine keeps IEEE 754's subnormal numbers (compared as bit patterns: under DAZ even the
    conversion to a Python float would read the subnormal as 0)."""
    subnormal = np.array([1e-39], np.float32)

    def survives() -> bool:
        return (subnormal * np.float32(1)).view(np.uint32)[0] == subnormal.view(np.uint32)[0] != 0

    cell, x, upstream = _vanishing("rnn", np.float32, "numba")
    assert survives()
    hs, cache = cell.forward(x)
    assert survives()
    cell.backward(upstream, cache)
    assert survives()
    monkeypatch.setattr(cell, "param_grads", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cell.backward(upstream, cache)
    assert survives()
    before = flush_subnormals()       # and inside the engine they were flushed: the same product there is 0
    assert survives() == (not X86_64)
    restore_float_control(before)
    assert survives()


def test_float32_stays_float32_and_unknown_engine_is_rejected():
    pytest.importorskip("jax", reason="the jax extra is not installed")
    cell = rnnlab.GRU(3, 4, engine="jax", dtype=np.float32)
    hs, cache = cell.forward(np.ones((3, 2, 3)))
    grads, dx, _ = cell.backward(np.ones_like(hs), cache)
    assert hs.dtype == np.float32 and dx.dtype == np.float32 and grads["W_h"].dtype == np.float32
    with pytest.raises(ValueError, match="engine: unknown engine 'torch'"):
        rnnlab.RNN(2, 3, engine="torch")


# -- the Numba kernels' own math and buffers ----------------------------------------------------------

@njit(**KERNEL_OPTIONS)     # compiled as the kernels are
def _apply_kernel_math(x, exp_out, tanh_out, sigmoid_out, softplus_out):
    for j in range(x.size):
        exp_out[j] = kernel_exp(x[j])
        tanh_out[j] = kernel_tanh(x[j])
        sigmoid_out[j] = kernel_sigmoid(x[j])
        softplus_out[j] = kernel_softplus(x[j])


def _near_the_ends_of_exp(dtype: str) -> list[float]:
    """Points around where e^x stops being a normal number of the dtype, at both ends (beyond the
    kernels' clamp: tanh and sigmoid must still be exact there)."""
    info = np.finfo(dtype)
    ends = (np.log(info.tiny), np.log(info.max))
    return [float(end + d) for end in ends for d in np.linspace(-1.0, 1.0, 41)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-750, 750, allow_nan=False), min_size=1, max_size=64)
       | st.sampled_from(["float64", "float32"]).map(_near_the_ends_of_exp),
       st.sampled_from(["float64", "float32"]))
def test_kernel_exp_tanh_sigmoid_softplus_match_numpy(values, dtype):
    x = np.asarray(values, dtype)
    outs = [np.empty_like(x) for _ in range(4)]
    _apply_kernel_math(x, *outs)
    with np.errstate(over="ignore"):
        wide = x.astype(np.float64)
        exp_ref, tanh_ref, sig_ref = np.exp(wide), np.tanh(wide), 1.0 / (1.0 + np.exp(-wide))
        representable = exp_ref.astype(dtype)
    eps = np.finfo(dtype).eps
    # exp inside the range the kernels clamp to (tanh and sigmoid are checked for every input)
    low, high = EXP_CLAMP32 if dtype == "float32" else EXP_CLAMP64
    inside = np.isfinite(representable) & (wide >= low) & (wide <= high)
    np.testing.assert_allclose(outs[0][inside], exp_ref[inside], rtol=4 * eps)
    np.testing.assert_allclose(outs[1], tanh_ref, rtol=0, atol=4 * eps)
    np.testing.assert_allclose(outs[2], sig_ref, rtol=0, atol=4 * eps)
    # softplus to 4 epsilons relative (it is e^x on the far left) down to where exp clamps; below, to 4 smallest normals
    np.testing.assert_allclose(outs[3], np.logaddexp(0.0, wide), rtol=4 * eps, atol=4 * np.finfo(dtype).tiny)
    assert all(o.dtype == x.dtype for o in outs)


# each kind's fused loops, the options that select them, and the passes they share (compiled inside them)
FUSED_LOOPS = {
    "rnn": ([{}], ("rnn_forward_loop", "rnn_backward_loop"), ()),
    "gru": ([{"variant": "cudnn"}, {"variant": "cho"}],
            ("gru_cudnn_forward_loop", "gru_cudnn_backward_loop", "gru_cho_forward_loop", "gru_cho_backward_loop"),
            ("_gates_pass", "_candidate_and_update_pass", "_update_and_candidate_deltas", "through_the_gate")),
    "lstm": ([{}], ("lstm_forward_loop", "lstm_backward_loop"), ()),
    "ugrnn": ([{}], ("ugrnn_forward_loop", "ugrnn_backward_loop"), ("gated_step_back",)),
    "janet": ([{}], ("janet_forward_loop", "janet_backward_loop"), ("gated_step_back",)),
    "antisymmetric": ([{}, {"cell": "gated-antisymmetric"}],
                      ("antisymmetric_forward_loop", "antisymmetric_backward_loop", "gated_antisymmetric_forward_loop",
                       "gated_antisymmetric_backward_loop"), ()),
    "xlstm": ([{"cell": "slstm", "heads": 2}, {"cell": "mlstm", "heads": 2}],
              ("slstm_forward_loop", "slstm_backward_loop", "mlstm_forward_loop", "mlstm_backward_loop"),
              ("_slstm_gates", "_recurrent_error", "_mlstm_head_backward")),
    "deltanet": ([{}, {"cell": "gated-deltanet"}], ("delta_forward_loop", "delta_backward_loop"),
                 ("_delta_head_backward",)),
}


@pytest.mark.parametrize("kind", list(FUSED_LOOPS))
def test_float32_kernels_never_widen_to_float64(kind, monkeypatch):
    """A float literal or an integer from math.floor in a kernel is float64 and turns a float32 loop
    into float64 (half the vector width): the compiled float32 loops hold no float→double conversion."""
    import importlib
    module = importlib.import_module(f"rnnlab.cells.{kind}")
    options, names, shared = FUSED_LOOPS[kind]
    for name in (*shared, *names):   # uncached twins: code loaded from the disk cache cannot be inspected
        monkeypatch.setattr(module, name, njit(**KERNEL_OPTIONS)(getattr(module, name).py_func))
    for option in options:       # "cell": a cell of the module other than the one it is named after
        option = dict(option)
        cell = rnnlab.make_cell(option.pop("cell", kind), 3, 8, seed=0, dtype=np.float32, engine="numba", **option)
        hs, cache = cell.forward(np.ones((4, 2, 3), np.float32))
        cell.backward(np.ones_like(hs), cache, back_steps=2)
    for name in shared:
        for ir in getattr(module, name).inspect_llvm().values():
            assert "fpext float" not in ir, f"{name}: a float32 value widened to float64"
    for name in names:
        (ir,) = getattr(module, name).inspect_llvm().values()
        assert "x float>" in ir, f"{name}: the float32 loops were not vectorised"
        assert "fpext float" not in ir, f"{name}: a float32 value widened to float64"


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_numba_caches_stay_valid_after_later_calls(kind):
    """The engine reuses its temporaries between calls; what a forward returns must not be overwritten."""
    cell = rnnlab.make_cell(kind, 3, 5, seed=0, engine="numba")
    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=(6, 4, 3)), rng.normal(size=(6, 4, 3))
    d = rng.normal(size=(6, 4, 5))
    h1, c1 = cell.forward(x1)
    expected = cell.backward(d, c1)
    kept = h1.copy()
    _, c2 = cell.forward(x2)
    cell.backward(d, c2)
    again = cell.backward(d, c1)
    np.testing.assert_array_equal(h1, kept)
    for name in expected[0]:
        np.testing.assert_array_equal(again[0][name], expected[0][name])
    np.testing.assert_array_equal(again[1], expected[1])


def test_compiled_programs_are_keyed_by_the_cells_declared_configuration():
    assert rnnlab.GRU(2, 3, variant="cho").config != rnnlab.GRU(2, 3, variant="cudnn").config
    assert rnnlab.RNN(2, 3, activation="relu").config == rnnlab.RNN(5, 7, activation="relu").config
    assert rnnlab.LSTM(2, 3).config == (rnnlab.LSTM, ("forget_bias", 1.0), ("ablate", "none"), ("peepholes", False),
                                        ("gate_recurrence", False))
    assert rnnlab.LSTM(2, 3, ablate="cifg").config != rnnlab.LSTM(2, 3).config
    hash(rnnlab.LSTM(2, 3, ablate="nog", peepholes=True).config)       # one frozen value: a key


def test_jax_engine_enables_float64_only_for_its_own_calls():
    pytest.importorskip("jax", reason="the jax extra is not installed")
    code = ("import numpy as np, jax, rnnlab\n"
            "cell = rnnlab.LSTM(3, 4, engine='jax', dtype=np.float64, seed=0)\n"
            "hs, cache = cell.forward(np.ones((5, 2, 3)))\n"
            "grads, dx, _ = cell.backward(np.ones_like(hs), cache)\n"
            "ref = rnnlab.LSTM(3, 4, dtype=np.float64, seed=0)\n"
            "hr, cr = ref.forward(np.ones((5, 2, 3)))\n"
            "print(hs.dtype, dx.dtype, float(abs(hs - hr).max()) < 1e-12, jax.config.jax_enable_x64,"
            " jax.numpy.ones(1).dtype)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["float64", "float64", "True", "False", "float32"]


# -- threads --------------------------------------------------------------------------------------------

def test_thread_rule_pins_small_models_to_one_thread_and_never_exceeds_the_process_limit():
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    before = {p["filepath"]: p["num_threads"] for p in pools}
    with blas_threads(2):
        inside = {p["filepath"]: p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"}
    # NumPy's BLAS gets the count (up to the cores there are); any other BLAS (Numba's) stays at 1
    numpy_libs = [f for f in inside if "numpy" in f]
    assert all(inside[f] == min(2, before[f]) or inside[f] == 2 for f in numpy_libs)
    assert all(inside[f] == 1 for f in inside if f not in numpy_libs) or not numpy_libs
    assert {p["filepath"]: p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"} == before
    assert choose_threads(32, 50, 4) == 1
    assert choose_threads(5, 50, 4) == 1
    assert choose_threads(64, 256, 4) == available_threads()
    with blas_threads(1):
        assert available_threads() == 1
        assert choose_threads(64, 256, 4) == 1
    with pytest.raises(ValueError, match="threads: expected a positive count"):
        with blas_threads(0):
            pass


def test_a_readout_at_every_step_counts_toward_the_thread_rule():
    from rnnlab.models import RecurrentModel
    from rnnlab.train import training_threads

    # the NLU course's language model: a small recurrence (100 × 50 × 50) under a 2,000-way readout at every step
    language_model = RecurrentModel("rnn", 2000, 50, 2000, head="steps", one_hot=True, seed=0)
    assert choose_threads(100, 50, 1) == 1
    assert training_threads(language_model, 100) == available_threads()
    assert training_threads(language_model, 5) == 1            # 5 × 50 × 2,000 multiply-adds: below MIN_WORK
    # the same readout once per sequence (head "last") is not a product per step
    classifier = RecurrentModel("rnn", 2000, 50, 2000, head="last", one_hot=True, seed=0)
    assert training_threads(classifier, 100) == 1
    with blas_threads(1):
        assert training_threads(language_model, 100) == 1


def test_fit_runs_under_the_chosen_thread_count(monkeypatch):
    from rnnlab.data.containers import SequenceData
    from rnnlab.models import RecurrentModel
    from rnnlab.train import TrainConfig, fit, training_threads

    model = RecurrentModel("rnn", 3, 4, 2, seed=0, engine="numba")
    assert training_threads(model, 8) == 1
    assert training_threads(model, 8, threads=2) == 2
    seen = []
    original = model.loss_and_grads

    def spy(*args, **kwargs):
        seen.append(max(p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "loss_and_grads", spy)
    rng = np.random.default_rng(0)
    data = SequenceData([rng.normal(size=(5, 3)) for _ in range(8)], rng.integers(0, 2, 8))
    fit(model, data, config=TrainConfig(epochs=1, batch_size=4, progress=False))
    assert seen and set(seen) == {1}


@pytest.mark.parametrize("engine", ["numpy", *ENGINES])
@pytest.mark.parametrize("config", list(CELL_CONFIGS))
@settings(max_examples=3)
@given(T=st.integers(1, 6), B=st.integers(1, 4), back_steps=st.sampled_from([None, 0, 2]), masked=st.booleans(),
       seed=st.integers(0, 2**31))
def test_token_ids_are_one_hot_rows_read_by_row_lookups(config, engine, T, B, back_steps, masked, seed):
    """A cell fed token ids computes what it computes on their one-hot rows (float64): the same states,
    the same gradients (W_x's a scatter-add of rows instead of a product with zeros), and no dx."""
    V = 7
    kind, kwargs = CELL_CONFIGS[config]
    cell = rnnlab.make_cell(kind, V, 5, seed=1, init="normal", init_scale=0.5, dtype=np.float64, engine=engine,
                            **kwargs, **BIASES["bias"])
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, size=(T, B))
    dense = np.eye(V)[ids]
    mask = make_mask(rng, T, B) if masked else None
    h_ids, cache_ids = cell.forward(ids, mask=mask)
    h_dense, cache_dense = cell.forward(dense, mask=mask)
    np.testing.assert_array_equal(h_ids, h_dense)
    d = rng.normal(size=h_ids.shape)
    g_ids, dx_ids, d0_ids = cell.backward(d, cache_ids, back_steps)
    g_dense, _, d0_dense = cell.backward(d, cache_dense, back_steps)
    assert dx_ids is None
    for name in g_dense:
        np.testing.assert_allclose(g_ids[name], g_dense[name], rtol=0, atol=1e-12, err_msg=name)
    for u, v in zip(d0_ids if isinstance(d0_ids, tuple) else (d0_ids,),
                    d0_dense if isinstance(d0_dense, tuple) else (d0_dense,)):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)


def test_token_ids_out_of_range_are_refused_naming_the_range():
    cell = rnnlab.make_cell("gru", 4, 3)
    with pytest.raises(ValueError, match=r"token ids \(T, B\) in \[0, 4\)"):
        cell.forward(np.array([[0, 4]]))


@pytest.mark.parametrize("engine", ["numpy", "numba", "jax"])
def test_a_gradient_nobody_asks_for_is_not_computed(engine):
    """need_dx=False (a model's dense inputs: nothing upstream learns) skips dx, and nothing else moves."""
    if engine == "jax":
        pytest.importorskip("jax")
    stack = rnnlab.Stack.build("lstm", 3, 4, num_layers=2, seed=0, engine=engine)
    x = np.random.default_rng(0).normal(size=(6, 2, 3))
    hs, cache = stack.forward(x)
    dhs = np.ones_like(hs)
    grads, dx, _ = stack.backward(dhs, cache)
    skipped, none, _ = stack.backward(dhs, cache, need_dx=False)
    assert none is None and dx.shape == x.shape
    assert all(np.array_equal(grads[k], skipped[k]) for k in grads)


# -- the kernels' matrix product ------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 9), k=st.integers(0, 9), n=st.integers(1, 9), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_the_kernels_product_is_numpys_in_every_blas_the_kernels_may_call(m, k, n, dtype, seed):
    """kernel_matmul (cblas through the registered symbol) computes a @ b; so does the compiled np.dot
    registered where NumPy's BLAS is not an ILP64 OpenBLAS, called through its C address."""
    import ctypes

    from rnnlab.cells import kernel_blas

    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(m, k)).astype(dtype), rng.normal(size=(k, n)).astype(dtype)
    out = np.full((m, n), np.nan, dtype)
    njit(lambda a, b, out: kernel_blas.kernel_matmul(a, b, out))(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    real = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fallback = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, i64, i64, i64, real, ptr, i64,
                                ptr, i64, real, ptr, i64)(kernel_blas._fallback(dtype, kernel_blas.types.float32
                                                          if dtype == np.float32 else kernel_blas.types.float64))
    other = np.full((m, n), np.nan, dtype)
    fallback(101, 111, 111, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0, other.ctypes.data, n)
    # the fallback's np.dot runs in SciPy's BLAS, which may take another path (gemv for n = 1) than
    # NumPy's @: the same product, not always the same last bit
    np.testing.assert_allclose(other, a @ b, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_the_benchmarks_blas_line_names_the_library_its_kernels_and_whose_blas_the_kernels_call():
    from rnnlab.cells import kernel_blas

    line = kernel_blas.blas_description()
    assert f"the products: {kernel_blas.CHOICE.describe()}, the kernels' large ones " in line
    assert ("(OpenBLAS: SciPy's)" in line) == (kernel_blas.SOURCE == "scipy" and not kernel_blas._MKL_SERVES)
    assert ("split under the small-matrix bound" in line) == kernel_blas.splits_products()
    ours, _ = kernel_blas.blas_libraries()
    for lib in ours:     # every BLAS NumPy loaded, with the version threadpoolctl reads from the library itself
        assert f"{lib.internal_api} {lib.version}" in line
    assert ours or "none found" in line
    assert any(info.get("architecture", "?") in line for info in threadpool_info() if info["user_api"] == "blas")


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 3000), k=st.integers(1, 3000))
def test_small_block_widths_put_every_block_under_openblass_small_matrix_bound(m, n, k):
    from rnnlab.cells.kernel_blas import SMALL_PRODUCT, small_block_width

    width = small_block_width(m, n, k)
    if width == 0:       # whole: under the bound already, or no block of 32 fits under it
        assert m * n * k <= SMALL_PRODUCT or m * min(n, k) * 32 > SMALL_PRODUCT
    else:
        assert m * n * k > SMALL_PRODUCT and width % 32 == 0 and m * width * min(n, k) <= SMALL_PRODUCT
        assert m * (width + 32) * min(n, k) > SMALL_PRODUCT          # the widest such width
        assert width < max(n, k)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 24), k=st.sampled_from([150, 200, 256, 333]), gates=st.sampled_from([1, 3, 4]),
       forward=st.booleans(), threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_the_kernels_product_above_the_small_matrix_bound_is_the_product_split_or_whole(m, k, gates, forward,
                                                                                        threads, seed):
    """Products above SMALL_PRODUCT (split in blocks at 1 thread where OpenBLAS has small-matrix
    kernels, whole otherwise): the same product as NumPy's within float32 rounding."""
    from threadpoolctl import threadpool_limits

    from rnnlab.cells import kernel_blas

    rng = np.random.default_rng(seed)
    shape = (m, k, gates * k) if forward else (m, gates * k, k)      # h·W_h, or da·W_hᵀ
    a = rng.normal(size=shape[:2]).astype(np.float32)
    b = rng.normal(size=shape[1:]).astype(np.float32)
    out = np.full((shape[0], shape[2]), np.nan, np.float32)
    with threadpool_limits(threads, user_api="blas"):
        njit(lambda a, b, out: kernel_blas.kernel_matmul(a, b, out))(a, b, out)
        splitting = kernel_blas.splits_products()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, exact, rtol=0, atol=1e-5 * shape[1] ** 0.5 * np.abs(exact).max())
    assert splitting == (threads == 1 and _has_small_matrix_kernels())


def _has_small_matrix_kernels() -> bool:
    from rnnlab.cells import kernel_blas

    ours, _ = kernel_blas.blas_libraries()
    return kernel_blas.SOURCE == "numpy" and kernel_blas.CHOICE.providers["large"] == "openblas" and any(
        lib.internal_api == "openblas" and getattr(lib, "architecture", None) in kernel_blas.SMALL_KERNEL_FAMILIES
        for lib in ours)


def test_products_split_only_at_one_thread_and_where_openblas_has_small_matrix_kernels():
    from threadpoolctl import threadpool_limits

    from rnnlab.cells import kernel_blas

    with threadpool_limits(1, user_api="blas"):
        assert kernel_blas.splits_products() == _has_small_matrix_kernels()
    with threadpool_limits(2, user_api="blas"):
        assert not kernel_blas.splits_products()


def test_the_gate_where_products_never_split_answers_zero():
    """Where NumPy's BLAS has no small-matrix kernels the kernels ask this compiled function instead
    of OpenBLAS's thread count; 0 is never 1, so they call every product whole."""
    import ctypes

    from rnnlab.cells import kernel_blas

    assert ctypes.CFUNCTYPE(ctypes.c_int32)(kernel_blas._never_split())() == 0


@pytest.mark.parametrize("m, k, n", [(0, 0, 0), (3, 0, 0), (0, 5, 0), (2, 0, 4), (4, 3, 0)])
def test_the_kernels_product_of_empty_matrices_is_numpys(m, k, n):
    from rnnlab.cells import kernel_blas

    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    out = np.full((m, n), np.nan, np.float32)
    njit(lambda a, b, out: kernel_blas.kernel_matmul(a, b, out))(a, b, out)
    np.testing.assert_array_equal(out, a @ b)


def test_every_blas_serving_the_kernels_runs_on_the_threads_granted():
    """NumPy's BLAS follows ``blas_threads``; every other BLAS (oneMKL where it serves a class of the kernels'
    products: its sequential layer, on the calling thread) stays at 1."""
    from rnnlab.cells import kernel_blas
    from rnnlab.engines.threads import available_threads, blas_threads

    n = available_threads()
    with blas_threads(n):
        ours, others = kernel_blas.blas_libraries()
        assert all(lib.num_threads == n for lib in ours) and all(lib.num_threads == 1 for lib in others)
        assert "mkl" not in {lib.internal_api for lib in ours} or not kernel_blas._ADDRESSES


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_kernels_large_products_agree_with_the_reference_in_float64(cell):
    """Batch 20, hidden 200: the recurrent products (20×200)·(200×4·200) and back are above ``SMALL_PRODUCT``, so
    they go to the large class's provider; the states and gradients are the NumPy engine's to 1e−10."""
    from rnnlab.cells.kernel_blas import SMALL_PRODUCT

    assert 20 * 200 * 3 * 200 > SMALL_PRODUCT
    x = np.random.default_rng(1).normal(size=(4, 20, 3))
    results = {}
    for engine in ("numpy", "numba"):
        stack = rnnlab.Stack.build(cell, 3, 200, seed=0, engine=engine)
        hs, cache = stack.forward(x)
        grads, dx, _ = stack.backward(np.cos(hs), cache)
        results[engine] = (hs, dx, grads)
    (h_ref, dx_ref, g_ref), (h, dx, g) = results["numpy"], results["numba"]
    np.testing.assert_allclose(h, h_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-10, atol=1e-12)
    for name in g_ref:
        np.testing.assert_allclose(g[name], g_ref[name], rtol=1e-10, atol=1e-12)


def test_every_rnnlab_kernel_is_cached_against_all_of_rnnlabs_compiled_sources(tmp_path):
    """A cached kernel is stale when a helper it inlines from another file changes; so each is stamped with the
    digest of every rnnlab module that names Numba (or rnnlab.compile), and only those modules move it."""
    from rnnlab import compile as compiled
    from rnnlab.cells import kernel_blas, lstm

    for function in (lstm.lstm_forward_loop, kernel_blas._sgemm_in_blocks):
        locator = function._cache._impl._locator
        assert type(locator).__name__.startswith("Rnnlab")
        assert locator.get_source_stamp() == compiled.kernel_sources_digest()
    package = tmp_path / "package"
    (package / "cells").mkdir(parents=True)
    (package / "cells" / "kernels.py").write_text("from numba import njit\n")
    (package / "pages.py").write_text("TITLE = 'a'\n")
    before = compiled.kernel_sources_digest(package)
    (package / "pages.py").write_text("TITLE = 'b'\n")
    assert compiled.kernel_sources_digest(package) == before
    (package / "cells" / "kernels.py").write_text("from numba import njit  # a helper changed\n")
    compiled.kernel_sources_digest.cache_clear()
    assert compiled.kernel_sources_digest(package) != before
    outside = njit(cache=True)(lambda x: x + 1)       # a function of another package keeps Numba's own stamp
    outside(1)
    assert not type(outside._cache._impl._locator).__name__.startswith("Rnnlab")
