"""The providers of the Numba kernels' per-step products (``cells/blas_provider.py``): the choice follows
``RNNLAB_BLAS``, ``auto`` takes the faster measured provider per shape class and keeps it per machine, both
providers multiply as NumPy does, and the kernels' own checks (finite differences, float64 parity with the NumPy
engine, the product tests) pass under oneMKL in a process of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from rnnlab.cells import blas_provider

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
    assert alone.providers == {"small": "openblas", "large": "openblas"} and "oneMKL not installed" in alone.describe()
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

    def timings(sgemm, blocks):
        timed.append(sgemm)
        return {"small": {"openblas": 1.0, "mkl": 2.0}, "large": {"openblas": 2.0, "mkl": 1.5}}

    monkeypatch.setattr(blas_provider, "time_providers", timings)
    first = blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert first.providers == {"small": "openblas", "large": "mkl"} and timed == [{"openblas": 1, "mkl": 3}]
    assert "timed here on" in first.describe()
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

    close = {"small": {"openblas": 1.0, "mkl": 1.0}, "large": {"openblas": 0.99, "mkl": 1.0}}
    assert blas_provider.faster(close) == {"small": "openblas", "large": "openblas"}     # a tie keeps OpenBLAS
    assert blas_provider.faster({**close, "large": {"openblas": 1.01, "mkl": 1.0}})["large"] == "mkl"
    (tmp_path / "blas.json").write_text(json.dumps({next(iter(kept)): {"providers": {}, "measured": "x"}}))
    blas_provider.choose(OPENBLAS, MKL, VERSIONS, lambda m, n, k: 0)
    assert len(timed) == 4                                   # an entry without every timing is measured again


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
    timings = blas_provider.time_providers(_addresses(), lambda m, n, k: 0)
    assert set(timings) == set(blas_provider.CLASSES)
    assert all(set(by) == {"openblas", "mkl"} and min(by.values()) > 0 for by in timings.values())
    assert all(timings["large"][p] > timings["small"][p] for p in ("openblas", "mkl"))   # ~10× the work a step


@pytest.mark.slow
@needs_mkl
def test_the_kernels_checks_pass_with_onemkl_serving_every_product(tmp_path):
    """The engine tests that exercise the kernels' products (finite differences, float64 agreement with the NumPy
    engine at small and large products, the product and thread tests), rerun with ``RNNLAB_BLAS=mkl``. The kernels'
    machine code names the product's symbol, not its provider, so the compiled kernels are shared."""
    env = {**os.environ, "RNNLAB_BLAS": "mkl", "RNNLAB_CACHE_DIR": str(tmp_path)}
    script = ("from rnnlab.cells import kernel_blas as k; assert set(k.CHOICE.providers.values()) == {'mkl'}; "
              "assert k._MKL_SERVES and not k.splits_products(); print(k.blas_description())")
    shown = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    assert "small products in mkl, large products in mkl (RNNLAB_BLAS=mkl)" in shown.stdout
    chosen = ("kernels_product or finite_differences or agree_with_the_reference or split or float32 or "
              "threads_granted or large_products")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x",
                          "tests/test_engines.py", "-k", chosen], env=env, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "[100%]" in run.stdout and "F" not in run.stdout.split("[100%]")[0]
