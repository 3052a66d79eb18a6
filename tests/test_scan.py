"""The scan engine (``rnnlab.engines.scan``) against the loop it replaces: each solver of the linear recurrence
against a plain Python loop, and every cell linear in its state run by the scan against the NumPy loop engine,
forward and backward, on hypothesis-drawn shapes, initial states, masks, truncation depths and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnlab
from helpers import assert_records_agree, drawn_case, engine_record
from rnnlab.engines import scan

LINEAR = [("mingru", {}), ("minlstm", {}), ("minlstm", {"coeff_norm": False}),
          ("diag-linear", {"eigenvalues": "signed", "input_scaling": "sqrt"}), ("diag-linear", {}),
          ("rglru", {}), ("s6", {"d_state": 3}), ("s6", {"eigenvalues": "signed", "d_state": 2}),
          ("lru", {}), ("lru", {"state_dim": 3, "skip": False})]


def _loop(a, b, s0):
    out, s = np.empty_like(b), s0
    for t in range(len(a)):
        s = a[t] * s + b[t]
        out[t] = s
    return out


@pytest.mark.parametrize("solver", scan.SOLVERS)
@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 70), width=st.integers(1, 5), kind=st.sampled_from(["float64", "float32", "complex128"]),
       seed=st.integers(0, 2**32 - 1))
def test_each_solver_equals_the_loop(solver, T, width, kind, seed):
    rng = np.random.default_rng(seed)

    def draw(*shape):
        values = rng.uniform(-1, 1, shape)
        return (values + 1j * rng.uniform(-1, 1, shape) if kind == "complex128" else values).astype(kind)

    a, b, s0 = draw(T, 2, width), draw(T, 2, width), draw(2, width)
    tol = 1e-5 if kind == "float32" else 1e-12
    np.testing.assert_allclose(scan.solve(a, b, s0, solver), _loop(a, b, s0), rtol=tol, atol=tol)
    c, e = draw(T, 2, width), draw(T, 2, width)          # the reverse recurrence X_t = c_t X_{t+1} + e_t
    reverse = _loop(c[::-1], e[::-1], np.zeros_like(s0))[::-1]
    np.testing.assert_allclose(scan.solve_reverse(c, e, solver), reverse, rtol=tol, atol=tol)


@pytest.mark.parametrize("solver", scan.SOLVERS)
@pytest.mark.parametrize("name,options", LINEAR, ids=[f"{n}{o or ''}" for n, o in LINEAR])
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # the solver is fixed
@given(T=st.integers(1, 9), B=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), with_h0=st.booleans(),
       mask_kind=st.sampled_from(["none", "random", "trailing"]), k=st.sampled_from([None, None, 0, 1, 3]),
       dtype=st.sampled_from(["float64", "float64", "float32"]), chunk=st.sampled_from([1, 7, 40, 2 ** 16]))
def test_the_scan_equals_the_loop(solver, name, options, T, B, seed, with_h0, mask_kind, k, dtype, chunk,
                                  monkeypatch):
    """Every output and gradient to 1e-12 in float64 (1e-4 relative in float32): states, the error reaching
    each h_t, parameters, inputs and initial state, with padding anywhere (a padded first step included), the
    sequence solved in one chunk or in chunks of one step and more."""
    monkeypatch.setattr(scan, "SOLVER", solver)
    monkeypatch.setattr(scan, "CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(seed)
    I, H = 3, 4
    cells = {e: rnnlab.make_cell(name, I, H, seed=1, engine=e, dtype=dtype, **options) for e in ("numpy", "scan")}
    x, dhs, h0, mask = drawn_case(cells["numpy"], rng, T, B, dtype, with_h0, mask_kind)
    loop, scanned = (engine_record(cells[e], x, h0, mask, dhs, k) for e in ("numpy", "scan"))
    assert_records_agree(loop, scanned, 1e-4 if dtype == "float32" else 1e-12)


def test_the_scan_is_chosen_for_cells_linear_in_their_state_and_refused_for_others():
    assert rnnlab.make_cell("lru", 2, 3, engine="auto").engine == "scan"      # linear, no fused kernels
    assert rnnlab.make_cell("s6", 2, 3, engine="auto").engine == "numba"     # its kernels come first
    assert "linear in its state" in rnnlab.make_cell("lru", 2, 3, engine="auto").engine_reason
    with pytest.raises(ValueError, match="not linear in its state"):
        rnnlab.make_cell("slstm", 2, 3, engine="scan")
    with pytest.raises(ValueError, match="solver"):
        scan.solve(np.ones((2, 1)), np.ones((2, 1)), np.ones(1), "blelloch")


def test_above_the_measured_crossover_the_engine_runs_the_step_loop(monkeypatch):
    """A large state per batch runs the step loop (the cache and every number the same as the loop engine's); a
    small one is solved by the scan (which calls the step on all rows at once, not once per step)."""
    assert scan.scans(1, ((64,),)) and not scan.scans(32, ((256,),))
    cell = rnnlab.make_cell("diag-linear", 3, 4, seed=0, engine="scan")
    x = np.random.default_rng(0).normal(size=(6, 2, 3))
    cell.forward(x)                           # the first input's shape check, once
    calls = []
    step = cell.step
    monkeypatch.setattr(cell, "step", lambda *a, **k: calls.append(1) or step(*a, **k))
    cell.forward(x)
    assert len(calls) == 2                    # b_t at s = 0, then the readouts: all steps at once
    monkeypatch.setattr(scan, "SCAN_UP_TO", 4)
    calls.clear()
    cell.forward(x)
    assert len(calls) == 6                    # the loop: one call per step
