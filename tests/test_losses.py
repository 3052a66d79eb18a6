"""The compiled softmax cross-entropy (one pass: loss, gradient, accuracy) and sigmoid cross-entropy
against the pure functions they replace in the NumPy trainer, and their gradients against finite
differences in float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import subnormal
from rnnlab.gradcheck import gradcheck
from rnnlab.losses import (
    sigmoid_binary_cross_entropy_terms,
    sigmoid_cross_entropy_fused,
    softmax_cross_entropy_fused,
    softmax_cross_entropy_terms,
)
from rnnlab.machine import cpu_cores


def _case(seed: int, positions: tuple[int, ...], classes: int, masked: bool, dtype=np.float64):
    rng = np.random.default_rng(seed)
    logits = (3 * rng.normal(size=(*positions, classes))).astype(dtype)
    targets = rng.integers(0, classes, size=positions)
    w = (rng.random(positions) < 0.7).astype(dtype) if masked else np.ones(positions, dtype)
    w.reshape(-1)[0] = 1.0      # at least one position counts
    return logits, targets, w


@settings(max_examples=40)
@given(seed=st.integers(0, 2**31), T=st.integers(1, 5), B=st.integers(1, 4), classes=st.integers(2, 9),
       masked=st.booleans(), per=st.sampled_from([None, 3.0]))
def test_the_fused_loss_is_the_pure_one_with_its_accuracy(seed, T, B, classes, masked, per):
    logits, targets, w = _case(seed, (T, B), classes, masked)
    per_value = None if per is None else np.float64(per)
    loss, dlogits, correct = softmax_cross_entropy_fused(logits, targets, w, per_value)
    ref_loss, ref_d = softmax_cross_entropy_terms(logits, targets, w, np, per_value)
    assert loss == pytest.approx(float(ref_loss), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(dlogits, ref_d, rtol=0, atol=1e-12)
    assert correct == ((logits.argmax(axis=-1) == targets) * w).sum()


@pytest.mark.parametrize("fused, pure, targets", [
    (softmax_cross_entropy_fused, softmax_cross_entropy_terms, np.zeros((3, 2), int)),
    (sigmoid_cross_entropy_fused, sigmoid_binary_cross_entropy_terms, np.zeros((3, 2, 4)))])
def test_a_batch_without_weight_gives_the_pure_functions_nan_not_an_exception(fused, pure, targets):
    logits, w = np.random.default_rng(0).normal(size=(3, 2, 4)), np.zeros((3, 2))
    with pytest.warns(RuntimeWarning, match="invalid value"):
        ref_loss, ref_d = pure(logits, targets, w, np)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        loss, dlogits = fused(logits, targets, w)[:2]
    assert np.isnan(ref_loss) and np.isnan(loss) and np.isnan(ref_d).all() and np.isnan(dlogits).all()


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("positions", [(4,), (3, 2)])
def test_the_fused_gradient_matches_finite_differences(positions, masked):
    logits, targets, w = _case(7, positions, 5, masked)
    _, dlogits, _ = softmax_cross_entropy_fused(logits, targets, w)
    result = gradcheck(lambda a: softmax_cross_entropy_fused(a["logits"], targets, w)[0], {"logits": logits},
                       {"logits": dlogits})
    assert result.passed(1e-6), str(result)


def test_float32_stays_float32_within_its_precision_and_ties_pick_the_first_class():
    logits, targets, w = _case(3, (6, 3), 11, True, np.float32)
    loss, dlogits, _ = softmax_cross_entropy_fused(logits, targets, w)
    ref_loss, ref_d = softmax_cross_entropy_terms(logits.astype(np.float64), targets, w.astype(np.float64))
    assert dlogits.dtype == np.float32 and loss == pytest.approx(float(ref_loss), rel=1e-6)
    np.testing.assert_allclose(dlogits, ref_d, rtol=0, atol=1e-6)
    tied = np.zeros((2, 3), np.float32)      # every class equal: argmax says class 0, as NumPy's does
    assert softmax_cross_entropy_fused(tied, np.array([0, 1]), np.ones(2, np.float32))[2] == 1.0


def test_a_row_with_a_nan_or_an_infinity_gives_the_pure_functions_loss():
    """The row's max comes from NumPy's argmax: a NaN logit is that max, an infinite one too, and the loss is then
    NaN as the pure function's is; the other rows' gradients are the pure ones."""
    logits, targets, w = _case(11, (3, 2), 6, False)
    logits[1, 0, 2], logits[2, 1, 4] = np.nan, np.inf
    with np.errstate(invalid="ignore"):
        loss, dlogits, _ = softmax_cross_entropy_fused(logits, targets, w)
        ref_loss, ref_d = softmax_cross_entropy_terms(logits, targets, w)
    assert np.isnan(loss) and np.isnan(ref_loss)
    np.testing.assert_allclose(dlogits[0], ref_d[0], rtol=0, atol=1e-12)
    assert np.isnan(dlogits[1, 0]).all() and np.isnan(dlogits[2, 1]).any()


# -- the sigmoid (88 independent notes) cross-entropy -------------------------------------------------

def _notes(seed: int, positions: tuple[int, ...], notes: int, masked: bool, dtype=np.float64):
    rng = np.random.default_rng(seed)
    logits = (4 * rng.normal(size=(*positions, notes))).astype(dtype)
    targets = (rng.random((*positions, notes)) < 0.2).astype(dtype)
    w = (rng.random(positions) < 0.7).astype(dtype) if masked else np.ones(positions, dtype)
    w.reshape(-1)[0] = 1.0
    return logits, targets, w


@settings(max_examples=40)
@given(seed=st.integers(0, 2**31), T=st.integers(1, 5), B=st.integers(1, 4), notes=st.integers(1, 12),
       masked=st.booleans(), per=st.sampled_from([None, 3.0]))
def test_the_fused_sigmoid_loss_is_the_pure_one(seed, T, B, notes, masked, per):
    logits, targets, w = _notes(seed, (T, B), notes, masked)
    per_value = None if per is None else np.float64(per)
    loss, dlogits = sigmoid_cross_entropy_fused(logits, targets, w, per_value)
    ref_loss, ref_d = sigmoid_binary_cross_entropy_terms(logits, targets, w, np, per_value)
    assert loss == pytest.approx(float(ref_loss), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(dlogits, ref_d, rtol=0, atol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_the_fused_sigmoid_gradient_matches_finite_differences(masked):
    logits, targets, w = _notes(5, (3, 2), 6, masked)
    _, dlogits = sigmoid_cross_entropy_fused(logits, targets, w)
    result = gradcheck(lambda a: sigmoid_cross_entropy_fused(a["logits"], targets, w)[0], {"logits": logits},
                       {"logits": dlogits})
    assert result.passed(1e-6), str(result)


def test_the_fused_sigmoid_loss_cannot_overflow_and_keeps_float32():
    logits, targets, w = _notes(2, (4, 3), 9, True, np.float32)
    logits[0, 0, :2] = [1e4, -1e4]                      # exp would overflow where it not written as e^{−|l|}
    loss, dlogits = sigmoid_cross_entropy_fused(logits, targets, w)
    ref_loss, ref_d = sigmoid_binary_cross_entropy_terms(logits.astype(np.float64), targets, w.astype(np.float64))
    assert dlogits.dtype == np.float32 and np.isfinite(loss) and loss == pytest.approx(float(ref_loss), rel=1e-6)
    np.testing.assert_allclose(dlogits, ref_d, rtol=0, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), rows=st.integers(1, 40), classes=st.integers(2, 60),
       dtype=st.sampled_from([np.float32, np.float64]), masked=st.booleans())
def test_the_fused_gradients_hold_no_subnormal_numbers_and_are_the_pure_ones_above_them(seed, rows, classes, dtype,
                                                                                          masked):
    """Logits spread to the bottom of the dtype's exponent range: the pure gradients' far-off entries (e^{x − max}/Σ
    · 1/N; σ(l) · 1/N) fall below the smallest normal number, where the products reading them run ~100× slower on
    Intel processors. The fused gradients hold 0 there and agree with the pure ones to rounding above it."""
    rng = np.random.default_rng(seed)
    bottom = {np.float32: 105.0, np.float64: 745.0}[dtype]       # e^{−bottom}: subnormal or zero in the dtype
    logits = (-bottom * rng.random((rows, classes))).astype(dtype)
    w = (rng.random(rows) < 0.7).astype(dtype) if masked else np.ones(rows, dtype)
    w[0] = 1.0
    targets, notes = rng.integers(0, classes, rows), (rng.random((rows, classes)) < 0.2).astype(dtype)
    wide, w64 = logits.astype(np.float64), w.astype(np.float64)     # the reference in float64, as above
    for (_, fused, *_), (_, pure) in (
            (softmax_cross_entropy_fused(logits, targets, w), softmax_cross_entropy_terms(wide, targets, w64)),
            (sigmoid_cross_entropy_fused(logits, notes, w), sigmoid_binary_cross_entropy_terms(wide, notes, w64))):
        assert fused.dtype == dtype and not subnormal(fused).any()
        np.testing.assert_allclose(fused, pure, rtol=0, atol=1e-6 if dtype == np.float32 else 1e-12)


def test_the_wide_logits_above_give_subnormals_without_the_flush():
    """The case the test above draws is the one it guards: the pure softmax gradient in the logits' dtype, and the
    sigmoid kernel's own formula σ(l) · 1/N = e^{−|l|} / (1 + e^{−|l|}) / N for l < 0 (its exponential clamped at
    the dtype's lowest normal result), hold subnormals there."""
    rng = np.random.default_rng(0)
    for dtype, bottom, clamp in ((np.float32, 105.0, 87.0), (np.float64, 745.0, 708.0)):
        logits = (-bottom * rng.random((20, 50))).astype(dtype)
        w, targets = np.ones(20, dtype), rng.integers(0, 50, 20)
        assert subnormal(softmax_cross_entropy_terms(logits, targets, w)[1]).mean() > 0.01
        e = np.exp(np.maximum(logits, dtype(-clamp)))
        assert subnormal(e / (1 + e) / dtype(20)).mean() > 0.01


@pytest.mark.skipif(cpu_cores() < 2, reason="one core: nothing to split the loss over")
@settings(max_examples=20, deadline=None)
@given(rows=st.integers(2, 60), classes=st.integers(2, 50), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_the_losses_split_over_threads_give_the_one_thread_gradient_bit_for_bit(rows, classes, dtype, seed):
    """With two threads granted, the fused softmax and sigmoid cross-entropies run their rows in two
    blocks: each row's gradient is the one-thread pass's, bit for bit; the loss (and the count of right
    predictions) are sums of the blocks'."""
    import rnnlab.engines.threads as threads

    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(rows, classes)).astype(dtype)
    targets, w = rng.integers(0, classes, rows), (rng.random(rows) < 0.8).astype(dtype)
    w[rng.integers(rows)] = 1.0        # a batch scores at least one position (its mean divides by their count)
    notes = rng.integers(0, 2, size=(rows, classes))
    one = softmax_cross_entropy_fused(logits, targets, w), sigmoid_cross_entropy_fused(logits, notes, w)
    with pytest.MonkeyPatch.context() as patch, threads.blas_threads(2):
        patch.setattr(threads, "MIN_SPLIT", 1)
        blocks, split = [], threads.split_rows
        patch.setattr("rnnlab.losses.split_rows", lambda n, work, **k: split(
            n, lambda a, b: blocks.append((a, b)) or work(a, b), **k))
        two = softmax_cross_entropy_fused(logits, targets, w), sigmoid_cross_entropy_fused(logits, notes, w)
    assert sorted(blocks) == sorted(2 * [(0, rows // 2), (rows // 2, rows)]) and threads._granted == 1
    assert np.array_equal(one[0][1], two[0][1]) and one[0][2] == two[0][2]
    assert np.array_equal(one[1][1], two[1][1])
    for a, b in zip(one, two):
        assert b[0] == pytest.approx(a[0], rel=1e-12)
