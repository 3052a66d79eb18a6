"""The modern cells' fused Numba kernels (``engine="numba"``) against the NumPy loop over their steps, the reference:
every output, state, per-step intermediate and gradient on hypothesis-drawn lengths, batches, initial states, masks
(a padded first step included), truncation depths, dtypes and options; and against finite differences in float64,
the kernels' own backward passes checked directly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnlab
from helpers import (
    MASK_KINDS,
    Head,
    assert_records_agree,
    backward_against_finite_differences,
    drawn_case,
    engine_record,
    make_mask,
)

KERNELS = [("minlstm", {}), ("minlstm", {"coeff_norm": False}), ("diag-linear", {}),
           ("diag-linear", {"eigenvalues": "signed", "input_scaling": "sqrt"}), ("rglru", {}),
           ("s6", {"d_state": 3}), ("s6", {"eigenvalues": "signed", "d_state": 2}),
           ("slstm", {}), ("slstm", {"heads": 2, "forget_gate": "exp", "r_init": "uniform"}),
           ("slstm", {"heads": 4, "r_init": "uniform", "bias": False}),
           ("mlstm", {}), ("mlstm", {"heads": 2, "forget_gate": "exp"}),
           ("deltanet", {}), ("deltanet", {"heads": 2, "eigenvalues": "signed"}),
           ("gated-deltanet", {}), ("gated-deltanet", {"heads": 2, "eigenvalues": "signed", "bias": False})]
IDS = [f"{n}{o or ''}" for n, o in KERNELS]


def test_every_modern_cell_with_kernels_runs_on_them_by_default():
    for name, options in KERNELS:
        assert rnnlab.make_cell(name, 2, 4, engine="auto", **options).engine == "numba", name
    assert rnnlab.make_cell("lru", 2, 4, engine="auto").engine == "scan"       # the one without: solved at once


@pytest.mark.parametrize("name,options", KERNELS, ids=IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 8), B=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), with_h0=st.booleans(),
       mask_kind=st.sampled_from(MASK_KINDS),
       k=st.sampled_from([None, None, 0, 1, 3]), dtype=st.sampled_from(["float64", "float64", "float32"]))
def test_the_kernels_equal_the_step_loop(name, options, T, B, seed, with_h0, mask_kind, k, dtype):
    """1e-12 in float64 (1e-4 relative in float32), each quantity against its own largest entry."""
    rng = np.random.default_rng(seed)
    I, H = 3, 4
    cells = {e: rnnlab.make_cell(name, I, H, seed=int(rng.integers(1 << 30)), engine=e, dtype=dtype,
                                 init="gaussian", init_scale=0.5, **options) for e in ("numpy", "numba")}
    cells["numba"].params = {n: v.copy() for n, v in cells["numpy"].params.items()}
    x, dhs, h0, mask = drawn_case(cells["numpy"], rng, T, B, dtype, with_h0, mask_kind)
    loop, fused = (engine_record(cells[e], x, h0, mask, dhs, k) for e in ("numpy", "numba"))
    assert_records_agree(loop, fused, 1e-4 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("name,options", KERNELS, ids=IDS)
@pytest.mark.parametrize("back_steps", [None, 1])
def test_the_kernels_backward_matches_finite_differences(name, options, back_steps):
    """The loss of a readout head over a padded batch from a drawn initial state, every parameter, x and h0."""
    result = _against_finite_differences(name, options, "numba", T=4, seed=11, back_steps=back_steps)
    assert result.passed(1e-6), str(result)


def _against_finite_differences(name, options, engine, T, seed, back_steps):
    B, I, H = 2, 3, 4
    rng = np.random.default_rng(seed)
    common = dict(seed=seed - 6, init="gaussian", init_scale=0.5, **options)
    reference, tested = (rnnlab.make_cell(name, I, H, engine=e, **common) for e in ("numpy", engine))
    head = Head("ce-steps", H, 3, T, B, rng)
    x = rng.normal(size=(T, B, I))
    state = reference.random_state(rng, B)
    h0 = state[0] if len(state) == 1 else state
    return backward_against_finite_differences(tested, reference, head, x, h0, make_mask(rng, T, B), back_steps)


CHUNKED = [("deltanet", {}), ("deltanet", {"heads": 2, "eigenvalues": "signed"}), ("gated-deltanet", {}),
           ("gated-deltanet", {"heads": 2, "eigenvalues": "signed", "bias": False}),
           ("mlstm", {}), ("mlstm", {"heads": 2, "forget_gate": "exp"}), ("mlstm", {"bias": False})]
CHUNKED_IDS = [f"{n}{o or ''}" for n, o in CHUNKED]


def _chunk_length(L: int):
    """CHUNK_LENGTH set for one example (hypothesis runs many examples under one function-scoped fixture)."""
    from contextlib import contextmanager

    from rnnlab.cells import chunks

    @contextmanager
    def chunk():
        before, chunks.CHUNK_LENGTH = chunks.CHUNK_LENGTH, L
        try:
            yield
        finally:
            chunks.CHUNK_LENGTH = before
    return chunk()


@pytest.mark.parametrize("name,options", CHUNKED, ids=CHUNKED_IDS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 14), B=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), with_h0=st.booleans(),
       mask_kind=st.sampled_from(MASK_KINDS), L=st.sampled_from([1, 3, 4, 32]),
       k=st.sampled_from([None, None, None, 0, 2]), dtype=st.sampled_from(["float64", "float64", "float32"]))
def test_the_chunked_form_equals_the_step_loop(name, options, T, B, seed, with_h0, mask_kind, L, k, dtype):
    """Chunks of L steps, one chunk or many, the last one partial: outputs, per-step states, every gradient, dh_out
    and dh0 to 1e-12 (float64), with truncated BPTT on the fused loop over the chunked form's cache."""
    rng = np.random.default_rng(seed)
    I, H = 3, 4
    cells = {e: rnnlab.make_cell(name, I, H, seed=int(rng.integers(1 << 30)), engine=e, dtype=dtype,
                                 init="gaussian", init_scale=0.5, **options) for e in ("numpy", "chunked")}
    cells["chunked"].params = {n: v.copy() for n, v in cells["numpy"].params.items()}
    x, dhs, h0, mask = drawn_case(cells["numpy"], rng, T, B, dtype, with_h0, mask_kind)
    with _chunk_length(L):
        chunked = engine_record(cells["chunked"], x, h0, mask, dhs, k)
    loop = engine_record(cells["numpy"], x, h0, mask, dhs, k)
    assert_records_agree(loop, chunked, 1e-4 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("name,options", CHUNKED, ids=CHUNKED_IDS)
def test_the_chunked_backward_matches_finite_differences(name, options):
    """Three chunks of 2 steps over a padded batch from a drawn initial state: every parameter, x and h0."""
    with _chunk_length(2):
        result = _against_finite_differences(name, options, "chunked", T=5, seed=12, back_steps=None)
    assert result.passed(1e-6), str(result)


def test_only_the_matrix_state_cells_linear_in_their_state_have_a_chunked_form():
    for name in ("deltanet", "gated-deltanet", "mlstm"):
        assert rnnlab.make_cell(name, 2, 4, engine="chunked").engine == "chunked"
    for name in ("slstm", "s6", "lstm"):        # sLSTM's state feeds its gates; S6's is diagonal (the scan's)
        with pytest.raises(ValueError, match="no chunked form"):
            rnnlab.make_cell(name, 2, 4, engine="chunked")


def test_auto_runs_the_chunked_form_from_the_measured_head_size():
    from rnnlab.cells.deltanet import CHUNKED_FROM_HEAD_DIM as d
    from rnnlab.cells.xlstm import MLSTM_CHUNKED_FROM_HEAD_DIM as d_mlstm
    assert rnnlab.make_cell("gated-deltanet", 2, 4 * d, heads=4, engine="auto").engine == "chunked"
    assert rnnlab.make_cell("deltanet", 2, 4 * (d // 2), heads=4, engine="auto").engine == "numba"
    assert rnnlab.make_cell("mlstm", 2, 4 * d_mlstm, heads=4, engine="auto").engine == "chunked"
    assert rnnlab.make_cell("mlstm", 2, 4 * (d_mlstm // 2), heads=4, engine="auto").engine == "numba"


def test_a_run_resolves_auto_at_its_own_hidden_size():
    """``rnnlab train`` and the studies resolve the engine from the run's settings: the head size they give."""
    from rnnlab.cells.xlstm import MLSTM_CHUNKED_FROM_HEAD_DIM as d
    from rnnlab.experiments.settings import default_settings, resolve_engine
    assert resolve_engine(default_settings("mean-sign", cell="mlstm", hidden=d, heads=1))[0] == "chunked"
    assert resolve_engine(default_settings("mean-sign", cell="mlstm", hidden=d, heads=2))[0] == "numba"
    assert resolve_engine(default_settings("mean-sign", cell="deltanet", hidden=d, heads=1))[0] == "numba"
