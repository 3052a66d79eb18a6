"""The providers of the Numba kernels' per-step products and of the readout's (``cells/blas_provider.py``): the
choice follows ``RNNLAB_BLAS``, ``auto`` takes the faster measured provider per shape class and keeps it per
machine, both providers multiply as NumPy does, and the kernels' own checks (finite differences, float64 parity
with the NumPy engine, the product tests) and the gradient checks through the readout pass under oneMKL in a
process of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnlab
from rnnlab.cells import blas_provider
from rnnlab.machine import cpu_cores

ROOT = Path(__file__).resolve().parents[1]


def _mkl_installed() -> bool:
    try:
        metadata.version("mkl")
    except metadata.PackageNotFoundError:
        return False
    return True


needs_mkl = pytest.mark.skipif(not _mkl_installed(),
                               reason="the mkl extra is not installed (pip install 'rnnlab[mkl]')")
OPENBLAS, MKL = {"s": 1, "d": 2}, {"s": 3, "d": 4}
VERSIONS = {"openblas": "0.3.31 (Haswell)", "mkl": "2026.2.0"}


def _never_timed(*_):
    raise AssertionError("timed where nothing was to be chosen")


def test_the_mode_is_checked_and_an_unknown_one_named(monkeypatch):
    for value, mode in (("", "auto"), ("MKL", "mkl"), (" openblas ", "openblas")):
        monkeypatch.setenv("RNNLAB_BLAS", value)
        assert blas_provider.requested_mode() == mode
    monkeypatch.setenv("RNNLAB_BLAS", "atlas")
    with pytest.raises(ValueError, match="RNNLAB_BLAS='atlas': expected one of auto, openblas, mkl"):
        blas_provider.requested_mode()


def test_a_fixed_mode_or_a_missing_onemkl_times_nothing(monkeypatch):
    monkeypatch.setattr(blas_provider, "time_providers", _never_timed)
    choose = blas_provider.choose
    monkeypatch.setenv("RNNLAB_BLAS", "auto")
    alone = choose(OPENBLAS, {}, {"openblas": VERSIONS["openblas"]}, lambda m, n, k: 0)
    assert alone.providers == dict.fromkeys(("small", "large", "readout", "projection", "small threaded",
                                             "large threaded", "readout threaded", "projection threaded"), "openblas")
    assert "oneMKL not installed" in alone.describe()
    monkeypatch.setenv("RNNLAB_BLAS", "openblas")
    assert set(choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0).providers.values()) == {"openblas"}
    monkeypatch.setenv("RNNLAB_BLAS", "mkl")
    forced = choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert set(forced.providers.values()) == {"mkl"} and "(RNNLAB_BLAS=mkl)" in forced.describe()
    assert forced.record() == {"providers": forced.providers, "mode": "mkl", "versions": VERSIONS}
    missing = r"RNNLAB_BLAS=mkl: the mkl package is not installed \(pip install 'rnnlab\[mkl\]'\)"
    with pytest.raises(ValueError, match=missing):
        choose(OPENBLAS, {}, VERSIONS, lambda m, n, k: 0)


def test_auto_takes_the_faster_provider_of_each_class_and_keeps_the_choice_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNLAB_BLAS", "auto")
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path))
    timed = []

    def timings(sgemm, blocks, threads):
        timed.append(sgemm)
        return {"small": {"openblas": 1.0, "mkl": 2.0}, "large": {"openblas": 2.0, "mkl": 1.5},
                "readout": {"openblas": 3.0, "mkl": 3.5}, "projection": {"openblas": 3.0, "mkl": 2.5},
                "small threaded": {"openblas": 1.0, "mkl": 2.0}, "large threaded": {"openblas": 2.0, "mkl": 1.5},
                "readout threaded": {"openblas": 2.0, "mkl": 3.5}, "projection threaded": {"openblas": 2.0, "mkl": 2.5}}

    monkeypatch.setattr(blas_provider, "time_providers", timings)
    first = blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert first.providers == {"small": "openblas", "large": "mkl", "readout": "openblas", "projection": "mkl",
                               "small threaded": "openblas", "large threaded": "mkl", "readout threaded": "openblas",
                               "projection threaded": "openblas"}
    assert timed == [{"openblas": 1, "mkl": 3}]
    assert first.record()["threads"] == cpu_cores() == first.threads       # the threaded classes' thread count, kept
    assert "timed here on" in first.describe() and "; on more threads small in openblas, large in mkl, readout in " \
        "openblas, projection in openblas" in first.describe()
    monkeypatch.setitem(first.providers, "projection threaded", "mkl")
    assert "on more threads" not in first.describe()                                   # the same choice
    monkeypatch.setitem(first.providers, "projection threaded", "openblas")
    kept = json.loads((tmp_path / "blas.json").read_text())
    assert len(kept) == 1 and next(iter(kept.values()))["timings"] == first.timings
    again = blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert again == first and len(timed) == 1                                    # read, not timed again
    newer = blas_provider.choose(OPENBLAS, MKL, {**VERSIONS, "mkl": "2027.0"}, lambda m, n, k: 0)
    assert len(timed) == 2 and newer.providers == first.providers                  # another library: timed again
    assert len(json.loads((tmp_path / "blas.json").read_text())) == 2
    (tmp_path / "blas.json").write_text("{not json")
    blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert len(timed) == 3 and len(json.loads((tmp_path / "blas.json").read_text())) == 1   # rewritten whole

    close = {c: {"openblas": 1.0, "mkl": 1.0} for c in blas_provider.CLASSES}
    close["large"] = {"openblas": 0.99, "mkl": 1.0}
    assert set(blas_provider.faster(close).values()) == {"openblas"}                   # a tie keeps OpenBLAS
    assert blas_provider.faster({**close, "large": {"openblas": 1.01, "mkl": 1.0}})["large"] == "mkl"
    (tmp_path / "blas.json").write_text(json.dumps({next(iter(kept)): {"providers": {}, "measured": "x"}}))
    blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert len(timed) == 4                                   # an entry without every timing is measured again
    # the readout class, the threaded ones, the projection class: each new class times again
    for before in (("small", "large"), ("small", "large", "readout"),
                   tuple(c for c in blas_provider.CLASSES if not c.startswith("projection"))):
        older = {key: {**entry, "timings": {c: entry["timings"][c] for c in before}}
                 for key, entry in json.loads((tmp_path / "blas.json").read_text()).items()}
        (tmp_path / "blas.json").write_text(json.dumps(older))
        timed_before = len(timed)
        blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
        assert len(timed) == timed_before + 1                # timings from before a class existed: again


def _addresses() -> dict[str, int]:
    from rnnlab.cells import kernel_blas

    if not kernel_blas._ADDRESSES:
        pytest.skip("NumPy's BLAS is not an ILP64 OpenBLAS: no OpenBLAS provider to compare")
    lib, _ = blas_provider.mkl_library()
    return {"openblas": kernel_blas._ADDRESSES["s"], "mkl": blas_provider.mkl_gemm(lib)["s"]}


def _multiplier(gemm):
    from numba import njit

    return njit(lambda a, b, out, width: blas_provider.split_product(
        gemm, a.shape[0], a.shape[1], b.shape[1], a.ctypes.data, b.ctypes.data, out.ctypes.data, width))


@needs_mkl
@pytest.mark.parametrize("m, k, n", [(20, 200, 800), (20, 800, 200), (3, 5, 7), (1, 150, 600)])
def test_both_providers_multiply_as_numpy_whole_and_in_the_kernels_blocks(m, k, n):
    from rnnlab.cells.kernel_blas import small_block_width

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    blas_provider.register_timed(_addresses())
    for provider in ("openblas", "mkl"):
        multiply = _multiplier(blas_provider.TIMED_GEMM[provider])
        for width in {0, small_block_width(m, n, k)}:
            out = np.full((m, n), np.nan, np.float32)
            multiply(a, b, out, width)
            np.testing.assert_allclose(out, exact, rtol=0, atol=1e-5 * k ** 0.5 * np.abs(exact).max())


@needs_mkl
def test_the_timing_measures_both_providers_on_every_class(monkeypatch):
    monkeypatch.setattr(blas_provider, "REPEATS", 2)
    monkeypatch.setattr(blas_provider, "ROUND_SECONDS", 1e-4)
    rounds = []
    real = blas_provider._timed_rounds
    monkeypatch.setattr(blas_provider, "_timed_rounds", lambda *a: rounds.append(a[3]) or real(*a))
    once = blas_provider.time_providers(_addresses(), lambda m, n, k: 0, threads=1)
    assert rounds == [1] and all(once[c + blas_provider.THREADED] == once[c] for c in blas_provider.PRODUCT_CLASSES)
    timings = blas_provider.time_providers(_addresses(), lambda m, n, k: 0, threads=2)
    assert rounds == [1, 1, 2]                               # the threaded classes timed on their own threads
    assert set(timings) == set(blas_provider.CLASSES)
    assert all(set(by) == {"openblas", "mkl"} and min(by.values()) > 0 for by in timings.values())
    assert all(timings["large"][p] > timings["small"][p] for p in ("openblas", "mkl"))   # ~10× the work a step
    assert all(timings["readout"][p] > timings["large"][p] for p in ("openblas", "mkl"))  # PTB's: ~10³× the work
    assert all(timings["projection"][p] > timings["large"][p] for p in ("openblas", "mkl"))   # ~10²× the work


def _operands(draw_shape, dtype, transposed_a, transposed_b):
    m, k, n = draw_shape
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    a = rng.standard_normal((k, m)).T if transposed_a else rng.standard_normal((m, k))
    b = rng.standard_normal((n, k)).T if transposed_b else rng.standard_normal((k, n))
    return a.astype(dtype), b.astype(dtype)


@needs_mkl
@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(*[st.integers(0, 40)] * 3), dtype=st.sampled_from([np.float32, np.float64]),
       transposed_a=st.booleans(), transposed_b=st.booleans())
def test_onemkl_multiplies_as_numpy_in_either_layout(shape, dtype, transposed_a, transposed_b):
    """``blas_matmul`` (the readout's products in oneMKL) against NumPy's product in float64: C-contiguous operands
    and transposed ones (passed as transposed, not copied), empty ones included."""
    lib, _ = blas_provider.mkl_library()
    kind = "s" if dtype == np.float32 else "d"
    gemm = blas_provider.gemm_function(blas_provider.mkl_gemm(lib)[kind], dtype)
    a, b = _operands(shape, dtype, transposed_a, transposed_b)
    got = blas_provider.blas_matmul(gemm, a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == dtype and got.flags.c_contiguous
    scale = (np.abs(a).max(initial=0) * np.abs(b).max(initial=0)) * max(shape[1], 1)
    np.testing.assert_allclose(got, exact, rtol=0, atol=(1e-6 if dtype == np.float32 else 1e-14) * max(scale, 1))


def test_a_strided_operand_is_refused_by_name():
    a = np.ones((6, 4))[::2]
    with pytest.raises(ValueError, match=r"expected a C- or F-contiguous matrix, got strides \(64, 8\)"):
        blas_provider.blas_matmul(lambda *args: None, a, np.ones((4, 2)))
    assert not blas_provider.is_operand(a) and not blas_provider.is_operand(np.ones((2, 2, 2)))


def test_the_products_over_all_rows_are_numpys_own_where_openblas_serves_them():
    """Under OpenBLAS (the suite's pinned provider) the readout's and the engines' products over all rows are NumPy's
    ``@``, bit for bit."""
    from rnnlab.cells import kernel_blas

    served = [c for c in blas_provider.ROW_CLASSES if kernel_blas.CHOICE.providers[c] != "openblas"]
    if served:
        pytest.skip(f"oneMKL serves the {served} products here ({kernel_blas.CHOICE.describe()})")
    assert not any(by for by_threads in kernel_blas._ROWS_GEMM.values() for by in by_threads.values())
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        h, w = rng.standard_normal((700, 200)).astype(dtype), rng.standard_normal((200, 300)).astype(dtype)
        for multiply in (kernel_blas.readout_matmul, kernel_blas.projection_matmul):
            assert np.array_equal(multiply(h, w), h @ w)
            assert np.array_equal(multiply(h.T, h), h.T @ h)


def _onemkl_serves(monkeypatch, products: str) -> list:
    """oneMKL serving the class ``products`` at one thread (not on more), at one thread now; the list of the first
    operand's shape of each product it runs."""
    from rnnlab.cells import kernel_blas

    lib, _ = blas_provider.mkl_library()
    addresses = blas_provider.mkl_gemm(lib)
    gemms = {np.dtype(d): blas_provider.gemm_function(addresses[kind], d) for kind, d in (("s", np.float32),
                                                                                          ("d", np.float64))}
    monkeypatch.setitem(kernel_blas._ROWS_GEMM, products, {False: gemms, True: {}})
    monkeypatch.setattr(kernel_blas, "numpy_blas_threads", lambda: 1)
    served = []
    real = kernel_blas.blas_matmul
    monkeypatch.setattr(kernel_blas, "blas_matmul",
                        lambda gemm, a, b, out=None: served.append(a.shape) or real(gemm, a, b, out))
    return served


@needs_mkl
def test_the_readout_goes_to_onemkl_where_it_serves_and_anything_else_to_numpy(monkeypatch):
    from rnnlab.cells import kernel_blas
    from rnnlab.layers import Linear

    served = _onemkl_serves(monkeypatch, "readout")
    rng = np.random.default_rng(4)
    layer = Linear(20, 30, seed=0)
    h, dy = rng.standard_normal((5, 7, 20)), rng.standard_normal((5, 7, 30))
    y, saved = layer.forward(h)
    grads, dh = layer.backward(dy, saved)
    assert served == [(35, 20), (20, 35), (35, 30)]                 # forward, dW = hᵀ·dy, dh = dy·Wᵀ
    rows = h.reshape(-1, 20)
    np.testing.assert_allclose(y.reshape(-1, 30), rows @ layer.params["W"] + layer.params["b"], atol=1e-12)
    np.testing.assert_allclose(grads["W"], rows.T @ dy.reshape(-1, 30), atol=1e-12)
    np.testing.assert_allclose(dh, (dy.reshape(-1, 30) @ layer.params["W"].T).reshape(h.shape), atol=1e-12)
    served.clear()
    monkeypatch.setattr(kernel_blas, "numpy_blas_threads", lambda: 2)
    np.testing.assert_allclose(kernel_blas.readout_matmul(rows, layer.params["W"]), rows @ layer.params["W"])
    assert served == []
    served.clear()
    strided, stacked = rows[::2], rng.standard_normal((2, 3, 20))
    for a, b in ((strided, layer.params["W"]), (stacked, layer.params["W"]),
                 (rows.astype(np.float32), layer.params["W"]), (rows, [[1.0] * 30] * 20)):
        np.testing.assert_allclose(kernel_blas.readout_matmul(a, b), a @ np.asarray(b), rtol=1e-6)
    assert served == []                                  # strided, 3-d, mixed dtypes, lists: NumPy's product


@pytest.mark.slow
@needs_mkl
def test_the_kernels_checks_pass_with_onemkl_serving_every_product(tmp_path):
    """The engine tests that exercise the kernels' products (finite differences, float64 agreement with the NumPy
    engine at small and large products, the product and thread tests), and the gradient and PyTorch-parity tests
    through the readout, rerun with ``RNNLAB_BLAS=mkl``. The kernels' machine code names the product's symbol, not
    its provider, so the compiled kernels are shared."""
    env = {**os.environ, "RNNLAB_BLAS": "mkl", "RNNLAB_CACHE_DIR": str(tmp_path)}
    script = ("from rnnlab.cells import kernel_blas as k; assert set(k.CHOICE.providers.values()) == {'mkl'}; "
              "assert k._MKL_SERVES and not k.splits_products(); print(k.blas_description())")
    shown = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    assert ("small products in mkl, large products in mkl, readout products in mkl, projection products in mkl "
            "(RNNLAB_BLAS=mkl)") in shown.stdout
    # the whole-grid finite differences on the rows that cover every three factors (test_engines.COVERING); not
    # the float32 loops' IR, which names the product's symbol, not its provider
    chosen = ("kernels_product or (finite_differences and (covering or not test_compiled_backward)) or "
              "agree_with_the_reference or split or (float32 and not never_widen) or threads_granted or "
              "large_products")
    through_readout = "full_bptt or losses_match or forward_and_gradients or masks_match"
    for files, selected in ((["tests/test_engines.py"], chosen),
                            (["tests/test_gradcheck.py", "tests/test_torch_parity.py"], through_readout)):
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", *files,
                              "-k", selected], env=env, capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "[100%]" in run.stdout and "F" not in run.stdout.split("[100%]")[0]


@needs_mkl
def test_onemkl_runs_on_the_calling_thread_whatever_numpys_blas_is_granted():
    """oneMKL's layer is the sequential one, so its threads never spin against OpenBLAS's; the readout asks NumPy's
    BLAS for its thread count through the function ``numpy_blas_threads`` calls, which follows ``blas_threads``."""
    from threadpoolctl import threadpool_info

    from rnnlab.cells import kernel_blas
    from rnnlab.engines.threads import available_threads, blas_threads

    blas_provider.mkl_library()
    onemkl = [lib for lib in threadpool_info() if lib["internal_api"] == "mkl" and "libmkl_rt" in lib["filepath"]]
    assert onemkl and all(lib["threading_layer"] == "sequential" for lib in onemkl)
    for n in range(1, available_threads() + 1):
        with blas_threads(n):
            assert kernel_blas.numpy_blas_threads() == (n if kernel_blas._THREADS else 1)


@pytest.mark.slow
@needs_mkl
def test_the_kernels_call_the_provider_chosen_for_the_thread_count_of_numpys_blas(tmp_path):
    """With kept timings that give every class to OpenBLAS at one thread and to oneMKL on more, the kernels'
    products are NumPy's OpenBLAS's at one thread and oneMKL's, bit for bit, on two."""
    from rnnlab.cells import kernel_blas

    if cpu_cores() < 2:
        pytest.skip("one core: NumPy's BLAS never runs on more than one thread here")
    if not kernel_blas._ADDRESSES:
        pytest.skip("NumPy's BLAS is not an ILP64 OpenBLAS: no OpenBLAS provider to compare")
    versions = {"openblas": kernel_blas._openblas_version(), "mkl": metadata.version("mkl")}
    one_thread, threaded = {"openblas": 1.0, "mkl": 2.0}, {"openblas": 2.0, "mkl": 1.0}
    timings = {c: one_thread if c in blas_provider.PRODUCT_CLASSES else threaded for c in blas_provider.CLASSES}
    (tmp_path / "blas.json").write_text(json.dumps({blas_provider.cache_key(versions): {
        "timings": timings, "measured": "2026-11-28"}}))
    script = """
import numpy as np
from numba import njit
from rnnlab.cells import blas_provider, kernel_blas as k
from rnnlab.engines.threads import blas_threads
assert k.CHOICE.mode == "auto" and k.CHOICE.timings, k.CHOICE
product = njit(lambda a, b, out: k.kernel_matmul(a, b, out))
mkl = {d: blas_provider.gemm_function(k._MKL_GEMM[c], d) for c, d in (("s", np.float32), ("d", np.float64))}
rng = np.random.default_rng(0)
differs = []
for dtype in (np.float32, np.float64):
    for m, kk, n in ((5, 50, 200), (20, 200, 800)):       # a small and a large product
        a, b = rng.standard_normal((m, kk)).astype(dtype), rng.standard_normal((kk, n)).astype(dtype)
        out = np.empty((m, n), dtype)
        with blas_threads(2):
            product(a, b, out)
            assert np.array_equal(out, blas_provider.blas_matmul(mkl[dtype], a, b)), (dtype, m)
            differs.append(not np.array_equal(out, a @ b))
        with blas_threads(1):
            product(a, b, out)
            if m * n * kk <= k.SMALL_PRODUCT or dtype == np.float64:   # float32 large ones split at one thread
                assert np.array_equal(out, a @ b), (dtype, m)
print(k.blas_description())
print("providers differ:", sum(differs), "of", len(differs))
"""
    env = {**os.environ, "RNNLAB_BLAS": "auto", "RNNLAB_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "providers differ: 0 of" not in run.stdout, "both providers gave the same bits: the test tells nothing"
    assert ("small products in openblas, large products in openblas, readout products in openblas, projection products "
            "in openblas; on more threads small in mkl, large in mkl, readout in mkl, projection in mkl (timed here on "
            "2026-11-28)") in run.stdout


@needs_mkl
def test_the_engines_projections_go_to_onemkl_where_it_serves_them_from_the_bound_up(monkeypatch):
    """With oneMKL serving the projection class, a product of at least ``PROJECTION_MIN_PRODUCT`` multiply-adds is
    oneMKL's (into ``out`` where given) and a smaller one NumPy's, bit for bit."""
    from rnnlab.cells import kernel_blas

    served = _onemkl_serves(monkeypatch, "projection")
    rng = np.random.default_rng(5)
    bound = blas_provider.PROJECTION_MIN_PRODUCT
    x, w = rng.standard_normal((700, 200)).astype(np.float32), rng.standard_normal((200, 800)).astype(np.float32)
    assert 700 * 200 * 800 >= bound > 70 * 200 * 800
    out = np.full((700, 800), np.nan, np.float32)
    assert kernel_blas.projection_matmul(x, w, out=out) is out and served == [(700, 200)]
    exact = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(out, exact, rtol=0, atol=1e-5 * 200 ** 0.5 * np.abs(exact).max())
    np.testing.assert_allclose(kernel_blas.projection_matmul(x.T, out), x.T @ out, rtol=2e-5, atol=1e-2)
    assert served == [(700, 200), (200, 700)]                         # a transposed operand: passed as one
    small = x[:70]
    assert np.array_equal(kernel_blas.projection_matmul(small, w), small @ w) and len(served) == 2
    with pytest.raises(ValueError, match=r"out: expected a C-contiguous float32 array of shape \(700, 800\)"):
        kernel_blas.projection_matmul(x, w, out=np.empty((800, 700), np.float32).T)


@needs_mkl
@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_each_engines_gradients_hold_with_onemkl_serving_every_projection(monkeypatch, kind, engine):
    """Every projection in oneMKL (the bound set to 0): the input projection, xᵀ·dxw, hᵀ·dhw and dxw·W_xᵀ go there,
    and the states and gradients agree with NumPy's products to float64 rounding (those are the finite-difference
    checked ones)."""
    from rnnlab.cells import kernel_blas

    rng = np.random.default_rng(6)
    T, B, I, H = 5, 3, 4, 6
    x, dh = rng.standard_normal((T, B, I)), rng.standard_normal((T, B, H))
    cell = rnnlab.make_cell(kind, I, H, seed=0, dtype=np.float64, engine=engine)
    hs, cache = cell.forward(x)
    grads, dx, _ = cell.backward(dh, cache)
    served = _onemkl_serves(monkeypatch, "projection")
    monkeypatch.setattr(kernel_blas, "PROJECTION_MIN_PRODUCT", 0)
    hs_mkl, cache_mkl = cell.forward(x)
    grads_mkl, dx_mkl, _ = cell.backward(dh, cache_mkl)
    G = cell.params["W_x"].shape[1]
    assert sorted(served) == sorted([(T * B, I), (I, T * B), (H, T * B), (T * B, G)])
    np.testing.assert_allclose(hs_mkl, hs, rtol=0, atol=1e-13)
    np.testing.assert_allclose(dx_mkl, dx, rtol=0, atol=1e-13)
    for name in grads:
        np.testing.assert_allclose(grads_mkl[name], grads[name], rtol=0, atol=1e-13, err_msg=name)


def test_a_record_from_before_a_class_existed_describes_the_classes_it_has():
    """Runs kept before the projection class carry three classes (and their threaded twins): read, not refused."""
    record = {"mode": "auto", "providers": {"small": "openblas", "large": "mkl", "readout": "mkl",
                                            "small threaded": "openblas", "large threaded": "openblas",
                                            "readout threaded": "openblas"},
              "versions": VERSIONS, "threads": 2}
    assert blas_provider.Choice.from_record(record).describe("where they trained") == (
        "small products in openblas, large products in mkl, readout products in mkl; on more threads small in "
        "openblas, large in openblas, readout in openblas (timed where they trained)")


def test_a_pin_below_the_processor_is_warned_of_and_named_in_the_description(monkeypatch):
    from rnnlab.cells.kernel_blas import blas_description, openblas_pin_warning

    assert "Haswell" in openblas_pin_warning({"OPENBLAS_CORETYPE": "Haswell"}, {"avx2", "avx512f"})
    assert openblas_pin_warning({"OPENBLAS_CORETYPE": "Haswell"}, {"avx2"}) is None        # not below: no AVX-512
    assert openblas_pin_warning({"OPENBLAS_CORETYPE": "SkylakeX"}, {"avx512f"}) is None    # a pin at the processor
    assert openblas_pin_warning({}, {"avx512f"}) is None
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")
    assert "[OPENBLAS_CORETYPE=Zen]" in blas_description()
