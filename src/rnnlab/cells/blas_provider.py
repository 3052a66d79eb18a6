"""Which BLAS runs the Numba kernels' per-step products: NumPy's OpenBLAS, or Intel's oneMKL where the
``mkl`` package is installed (``pip install rnnlab[mkl]``), chosen per shape class by timing both here.

Measured on an Intel Xeon (AVX-512, 1 thread, median of 300 calls), oneMKL's ``cblas_sgemm`` ran the
per-step products of the LSTM sizes where the kernels trailed PyTorch 1.2–1.5× faster than OpenBLAS 0.3.31
((20×200)·(200×800): 142 against 93–101 GFLOP/s); on an AMD EPYC (Zen, 1 thread, both called the same way
through ctypes) the two were within ±10% above OpenBLAS's small-matrix bound and oneMKL 1.1–1.2× slower
under it. No vendor rule is safe, so the choice is a measurement: at first use each provider multiplies a
few shapes of each class (``TIMED``; the classes are ``kernel_blas``'s: at most ``SMALL_PRODUCT``
multiply-adds, and above), interleaved, on one thread, and a class goes to oneMKL only where its median sum
is at least ``MIN_GAIN`` times faster; else OpenBLAS keeps it. The margin is measured too: on the AMD EPYC
the products alone ran 1.12–1.14× faster in oneMKL (the large class, three first-use timings), yet the
kernels that make them ran slower with oneMKL (``bench_engines.py``, 1 thread: the LSTM at (35, 20, 200, 200)
15.6 → 17.4 ms, slower than PyTorch; GRU (100, 64, 88, 256) 123 → 133 ms; the RNN 10% faster), so a gain
that small does not survive the kernels' context; on the Intel Xeon the products gained 1.2–1.5×. The
timings are kept per machine (processor, both libraries' versions) in ``<cache>/blas.json``, so a process
reads them instead of timing again.

``RNNLAB_BLAS`` overrides it: ``openblas`` (today's bits: every product as before), ``mkl`` (both classes;
an error where the package is missing), or ``auto`` (the default: the measured choice where ``mkl`` is
installed, else OpenBLAS without timing anything). oneMKL runs in its strict conditional-numerical-
reproducibility mode, so that a product's bits do not depend on its arrays' alignment (a run and its
resumed twin stay bit for bit the same).
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from rnnlab.files import atomic_write
from rnnlab.machine import cache_dir, processor_name

ENV = "RNNLAB_BLAS"
MODES = ("auto", "openblas", "mkl")
CLASSES = ("small", "large")
# (m, k, n) per class: the recurrent products of the study models and the cell benchmark, forward and backward
TIMED = {"small": ((20, 50, 200), (32, 40, 160), (1, 150, 600), (64, 34, 136), (20, 200, 200)),
         "large": ((20, 200, 800), (20, 800, 200), (64, 256, 1024), (64, 1024, 256))}
MIN_GAIN = 1.2              # oneMKL takes a class only this many times faster than OpenBLAS (module docstring)
REPEATS = 5                 # interleaved rounds; each round times every shape on both providers
ROUND_SECONDS = 0.004       # per shape and provider in a round: calls enough to fill it
MKL_CBWR_AUTO, MKL_CBWR_STRICT = 2, 0x10000
CACHE_FILE = "blas.json"
GEMM = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                        ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                        ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)


@dataclass(frozen=True)
class Choice:
    """The provider of each shape class, how it was chosen (``mode``), and the timings that chose it
    (seconds per class and provider, the median over rounds of the summed shapes)."""

    mode: str
    providers: dict[str, str]
    versions: dict[str, str]
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    measured: str = ""

    def describe(self) -> str:
        classes = ", ".join(f"{c} products in {p}" for c, p in self.providers.items())
        how = {"auto": "timed here" + (f" on {self.measured}" if self.measured else ""),
               "openblas": f"{ENV}=openblas", "mkl": f"{ENV}=mkl"}[self.mode]
        if self.mode == "auto" and "mkl" not in self.versions:
            how = "oneMKL not installed"
        return f"{classes} ({how})"

    def record(self) -> dict[str, Any]:
        """What a run stores: the provider per class, the mode and the libraries' versions."""
        return {"providers": dict(self.providers), "mode": self.mode, "versions": dict(self.versions)}


def requested_mode() -> str:
    """``$RNNLAB_BLAS``, checked: one of ``MODES`` (default ``auto``)."""
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(MODES)}")
    return mode


def mkl_library() -> tuple[ctypes.CDLL, str] | None:
    """oneMKL's single dynamic library from the ``mkl`` package, set to strict reproducibility, and its
    version; None where the package is not installed."""
    try:
        files = metadata.files("mkl") or []
        version = metadata.version("mkl")
    except metadata.PackageNotFoundError:
        return None
    paths = [Path(str(f.locate())).resolve() for f in files if Path(str(f)).name.startswith("libmkl_rt.so")]
    paths = [p for p in paths if p.is_file()]
    if not paths:
        return None
    lib = ctypes.CDLL(str(min(paths, key=lambda p: len(p.name))))
    lib.MKL_CBWR_Set(ctypes.c_int(MKL_CBWR_AUTO | MKL_CBWR_STRICT))    # the C name; mkl_cbwr_set takes a pointer
    return lib, version


def mkl_gemm(lib: ctypes.CDLL) -> dict[str, int]:
    """The addresses of oneMKL's ILP64 ``cblas_sgemm_64`` and ``cblas_dgemm_64`` (the kernels' signature)."""
    return {kind: ctypes.cast(getattr(lib, f"cblas_{kind}gemm_64"), ctypes.c_void_p).value for kind in "sd"}


def choose(openblas: dict[str, int], mkl: dict[str, int], versions: dict[str, str],
           openblas_blocks: Callable[[int, int, int], int]) -> Choice:
    """Each class's provider under ``$RNNLAB_BLAS``: fixed, or (auto, both present) the cached or measured
    faster one. ``openblas_blocks(m, n, k)`` is the width the kernels split an OpenBLAS product into (0:
    whole), so that OpenBLAS is timed as the kernels call it."""
    mode = requested_mode()
    if mode == "mkl" and not mkl:
        raise ValueError(f"{ENV}=mkl: the mkl package is not installed (pip install 'rnnlab[mkl]')")
    if mode != "auto" or not mkl or not openblas:
        provider = "mkl" if mode == "mkl" else "openblas"
        return Choice(mode, dict.fromkeys(CLASSES, provider), versions)
    key = f"{processor_name()} | " + " | ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    path = cache_dir() / CACHE_FILE
    known = _read_cache(path)
    if key in known:
        timings, measured = known[key]["timings"], known[key]["measured"]
    else:
        timings = time_providers({"openblas": openblas["s"], "mkl": mkl["s"]}, openblas_blocks)
        measured = date.today().isoformat()
        _write_cache(path, key, {"timings": timings, "measured": measured})
    return Choice("auto", faster(timings), versions, timings, measured)


def faster(timings: dict[str, dict[str, float]]) -> dict[str, str]:
    """Each class's provider from its timings: oneMKL where OpenBLAS takes ``MIN_GAIN`` times as long or more."""
    return {c: "mkl" if timings[c]["openblas"] >= MIN_GAIN * timings[c]["mkl"] else "openblas" for c in CLASSES}


def time_providers(sgemm: dict[str, int], openblas_blocks: Callable[[int, int, int], int]) -> dict:
    """Seconds per class and provider: the median over ``REPEATS`` interleaved rounds of the per-call time
    summed over the class's shapes, float32, one thread (CPU time of this thread)."""
    calls = {name: GEMM(address) for name, address in sgemm.items()}
    rng = np.random.default_rng(0)
    rounds: dict[str, dict[str, list[float]]] = {c: {p: [] for p in calls} for c in CLASSES}
    with threadpool_limits(1):
        cases = []
        for c in CLASSES:
            for m, k, n in TIMED[c]:
                a, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
                cases.append((c, m, k, n, a, b, np.empty((m, n), np.float32)))
        for _ in range(REPEATS):
            spent = {(c, p): 0.0 for c in CLASSES for p in calls}
            for c, m, k, n, a, b, out in cases:
                reps = max(1, int(ROUND_SECONDS * 50e9 / (2 * m * n * k)))
                for p, gemm in calls.items():
                    width = openblas_blocks(m, n, k) if p == "openblas" else 0
                    started = time.thread_time()
                    for _ in range(reps):
                        _multiply(gemm, m, k, n, a, b, out, width)
                    spent[c, p] += (time.thread_time() - started) / reps
            for (c, p), seconds in spent.items():
                rounds[c][p].append(seconds)
    return {c: {p: statistics.median(v) for p, v in by.items()} for c, by in rounds.items()}


def _multiply(gemm, m: int, k: int, n: int, a: np.ndarray, b: np.ndarray, out: np.ndarray, width: int) -> None:
    """out = a · b (row-major float32) in one call, or as the kernels split it: blocks of ``width`` along the
    longer of n and k."""
    pa, pb, po = a.ctypes.data, b.ctypes.data, out.ctypes.data
    if not width:
        gemm(101, 111, 111, m, n, k, 1.0, pa, k, pb, n, 0.0, po, n)
    elif n >= k:
        for start in range(0, n, width):
            gemm(101, 111, 111, m, min(width, n - start), k, 1.0, pa, k, pb + 4 * start, n, 0.0, po + 4 * start, n)
    else:
        for start in range(0, k, width):
            gemm(101, 111, 111, m, n, min(width, k - start), 1.0, pa + 4 * start, k, pb + 4 * start * n, n,
                 0.0 if start == 0 else 1.0, po, n)


def _read_cache(path: Path) -> dict[str, Any]:
    """The kept timings; an unreadable file, or an entry without timings of both providers for every class, is
    measured again and rewritten (it is rnnlab's own cache)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: entry for key, entry in data.items() if _complete(entry)}


def _complete(entry: Any) -> bool:
    try:
        return isinstance(entry["measured"], str) and all(
            isinstance(entry["timings"][c][p], float) for c in CLASSES for p in ("openblas", "mkl"))
    except (KeyError, TypeError):
        return False


def _write_cache(path: Path, key: str, entry: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**_read_cache(path), key: entry}
        atomic_write(path, lambda f: f.write(json.dumps(data, indent=2, sort_keys=True).encode()))
    except OSError:
        pass          # a read-only home: the choice holds for this process and is timed again in the next
