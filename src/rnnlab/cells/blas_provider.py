"""Which BLAS runs the Numba kernels' per-step products and the products over all T·B rows: NumPy's OpenBLAS, or
Intel's oneMKL where the ``mkl`` package is installed (``pip install rnnlab[mkl]``), chosen per shape class by
timing both here.

Measured on an Intel Xeon (AVX-512, 1 thread, median of 300 calls), oneMKL's ``cblas_sgemm`` ran the
per-step products of the LSTM sizes where the kernels trailed PyTorch 1.2–1.5× faster than OpenBLAS 0.3.31
((20×200)·(200×800): 142 against 93–101 GFLOP/s); on an AMD EPYC (Zen, 1 thread, both called the same way
through ctypes) the two were within ±10% above OpenBLAS's small-matrix bound and oneMKL 1.1–1.2× slower
under it. No vendor rule is safe, so the choice is a measurement, and of the products in their context: at
first use each provider runs a few recurrences of each class (``TIMED``: T steps of a forward product
(m×H)·(H×gH) and its backward (m×gH)·(gH×H), each step's input written by the pass over the previous product,
as in the kernels; the classes are ``kernel_blas``'s, at most ``SMALL_PRODUCT`` multiply-adds and above),
interleaved, on one thread, and each class goes to the faster median; OpenBLAS keeps a tie. Timed alone, the
same products misled: on the AMD EPYC the large class ran 1.12–1.14× faster in oneMKL called back to back on
unchanging inputs, yet the kernels ran slower with it (``bench_engines.py``, 1 thread: the LSTM at (35, 20,
200, 200) 15.6 → 17.4 ms, slower than PyTorch; GRU (100, 64, 88, 256) 123 → 133 ms), and in a recurrence
oneMKL took 1.01–1.52× OpenBLAS's time at every shape tried. Each class is timed again with NumPy's BLAS on
every core (the ``threaded`` classes, wall time; oneMKL runs on one thread, its sequential layer), and the
kernels and the readout call, product by product, the provider chosen for the thread count NumPy's BLAS has
then. The timings are kept per machine (processor, core count, both libraries' versions) in
``<cache>/blas.json``, so a process reads them instead of timing again. Two classes are products over all T·B
rows, timed the same way as a model's step runs them (forward, a pass over its result, both backward products;
``TIMED_ROWS``), NumPy's ``@`` against oneMKL called through ctypes: the readout's (``layers.linear`` and its
adjoint: on the Intel Xeon 53% of PTB's step), and the engines' ``projection``s (x·W_x before the time loop,
xᵀ·dxw, hᵀ·dhw and dxw·W_xᵀ after it: 45% of the LSTM's step at (35, 20, 200, 200)) of at least
``PROJECTION_MIN_PRODUCT`` multiply-adds; smaller projections are NumPy's own.

``RNNLAB_BLAS`` overrides it: ``openblas`` (today's bits: every product as before), ``mkl`` (every class;
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

import llvmlite.binding as llvm
import numpy as np
from numba import types
from threadpoolctl import threadpool_limits

from rnnlab.compile import inline, kernel
from rnnlab.files import atomic_write
from rnnlab.machine import cache_dir, cpu_cores, processor_name

ENV = "RNNLAB_BLAS"
MODES = ("auto", "openblas", "mkl")
KERNEL_CLASSES = ("small", "large")         # the Numba kernels' per-step products
# and the products over all T·B rows: the readout's (``readout_matmul``) and the engines' input projections and
# weight gradients (``projection_matmul``)
ROW_CLASSES = ("readout", "projection")
PRODUCT_CLASSES = (*KERNEL_CLASSES, *ROW_CLASSES)
THREADED = " threaded"      # a class's name with this: its products while NumPy's BLAS runs on more than one thread
CLASSES = (*PRODUCT_CLASSES, *(c + THREADED for c in PRODUCT_CLASSES))
# (batch m, hidden H, gates g) per class: recurrences of the study models and the cell benchmark, whose forward
# (m×H)·(H×gH) and backward (m×gH)·(gH×H) products both fall in the class
TIMED = {"small": ((5, 50, 4), (20, 50, 4), (32, 40, 3), (20, 200, 1), (32, 18, 4)),
         "large": ((20, 200, 4), (20, 200, 3), (64, 256, 4))}
# (rows T·B, hidden H, outputs V) of the readouts whose products weigh in a step, at the studies' batches: PTB's
# LSTM (20 × 20 rows, 10,000 words; on an Intel Xeon its readout products were 53% of the step) and the NLU
# language model (51 × 100 rows, 2,000 words)
TIMED_READOUT = ((400, 200, 10000), (5100, 50, 2000))
# (rows T·B, inputs, gates·hidden) of the engines' products over all rows (x·W_x, xᵀ·dxw, dxw·W_xᵀ; hᵀ·dhw is one
# of the same kind): PTB's 200-unit LSTM layers at its batch of 20 × 20 and the cell benchmark's (35, 20, 200, 200)
# LSTM; only products of at least ``PROJECTION_MIN_PRODUCT`` multiply-adds are the class's. Larger ones (its
# (100, 64, 88, 256)) would add seconds to the first timing on a machine
TIMED_PROJECTION = ((400, 200, 800), (700, 200, 800))
TIMED_ROWS = {"readout": TIMED_READOUT, "projection": TIMED_PROJECTION}
# Under it a projection is NumPy's own product whatever the class's provider: there oneMKL called through ctypes
# lost (the LSTM at (50, 32, 7, 18), products of 8·10⁵ multiply-adds: its step 0.84× as fast), at (2000×50)·(50×200)
# = 2·10⁷ the two tied (1.005×), and above it oneMKL won (the LSTM's step at (35, 20, 200, 200) 1.075× as fast, at
# (100, 64, 88, 256) 1.078×; the GRU's 1.06×); Intel Xeon, 1 thread, interleaved, 2026-11-29.
PROJECTION_MIN_PRODUCT = 30_000_000
REPEATS = 7                 # interleaved rounds; each round times every recurrence on both providers
ROUND_SECONDS = 0.01        # per recurrence and provider in a round: steps enough to fill it
MKL_CBWR_AUTO, MKL_CBWR_STRICT = 2, 0x10000
MKL_THREADING_SEQUENTIAL = 1
CACHE_FILE = "blas.json"
_SIGNATURE = types.void(types.int32, types.int32, types.int32, types.int64, types.int64, types.int64, types.float32,
                        types.uintp, types.int64, types.uintp, types.int64, types.float32, types.uintp, types.int64)
TIMED_GEMM = {p: types.ExternalFunction(f"rnnlab_timed_sgemm_{p}", _SIGNATURE) for p in ("openblas", "mkl")}
_OPENBLAS_TIMED, _MKL_TIMED = TIMED_GEMM["openblas"], TIMED_GEMM["mkl"]


@dataclass(frozen=True)
class Choice:
    """The provider of each shape class, how it was chosen (``mode``), and the timings that chose it
    (seconds per class and provider, the median over rounds of the summed shapes)."""

    mode: str
    providers: dict[str, str]
    versions: dict[str, str]
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    measured: str = ""
    threads: int = 1            # the thread count of NumPy's BLAS at which the threaded classes were timed

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Choice:
        """The choice a run kept (``record``'s output), to describe where it is read; its timings are not kept."""
        return cls(record["mode"], dict(record["providers"]), dict(record.get("versions", {})),
                   threads=record.get("threads", 1))

    def describe(self, where: str = "here") -> str:
        """Each class's provider, in words; a record from before a class existed names the classes it has."""
        named = [c for c in PRODUCT_CLASSES if c in self.providers]
        classes = ", ".join(f"{c} products in {self.providers[c]}" for c in named)
        threaded = {c: self.providers.get(c + THREADED, self.providers[c]) for c in named}
        if threaded != {c: self.providers[c] for c in named}:
            classes += "; on more threads " + ", ".join(f"{c} in {p}" for c, p in threaded.items())
        how = {"auto": f"timed {where}" + (f" on {self.measured}" if self.measured else ""),
               "openblas": f"{ENV}=openblas", "mkl": f"{ENV}=mkl"}[self.mode]
        if self.mode == "auto" and "mkl" not in self.versions:
            how = "oneMKL not installed"
        return f"{classes} ({how})"

    def record(self) -> dict[str, Any]:
        """What a run stores: the provider per class, the mode and the libraries' versions."""
        return {"providers": dict(self.providers), "mode": self.mode, "versions": dict(self.versions),
                **({"threads": self.threads} if self.mode == "auto" and self.timings else {})}


def requested_mode() -> str:
    """``$RNNLAB_BLAS``, checked: one of ``MODES`` (default ``auto``)."""
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(MODES)}")
    return mode


def mkl_library() -> tuple[ctypes.CDLL, str] | None:
    """oneMKL's single dynamic library from the ``mkl`` package, set to its sequential layer (each product on the
    calling thread) and to strict reproducibility, and its version; None where the package is not installed.

    Sequential because two thread pools fought: with oneMKL's OpenMP threads following NumPy's count, at 2 threads
    (Intel Xeon, 2 cores) they spun between products while OpenBLAS's threads ran the products over all T·B rows,
    and a training step took 1.4–2× OpenBLAS's alone (the LSTM at (35, 20, 200, 200) 20.5 against 14.8 ms, the
    RNN at (100, 64, 88, 256) 95 against 47 ms, PTB's model 114 against 81 ms); with oneMKL sequential 12.7, 42 and
    79 ms."""
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
    lib.MKL_Set_Threading_Layer(ctypes.c_int(MKL_THREADING_SEQUENTIAL))     # first: oneMKL fixes it at its first call
    lib.MKL_CBWR_Set(ctypes.c_int(MKL_CBWR_AUTO | MKL_CBWR_STRICT))    # the C name; mkl_cbwr_set takes a pointer
    return lib, version


def mkl_gemm(lib: ctypes.CDLL) -> dict[str, int]:
    """The addresses of oneMKL's ILP64 ``cblas_sgemm_64`` and ``cblas_dgemm_64`` (the kernels' signature)."""
    return {kind: ctypes.cast(getattr(lib, f"cblas_{kind}gemm_64"), ctypes.c_void_p).value for kind in "sd"}


def choose(openblas: dict[str, int], mkl: dict[str, int], versions: dict[str, str],
           openblas_blocks: Callable[[int, int, int], int]) -> Choice:
    """Each class's provider under ``$RNNLAB_BLAS``: fixed, or (auto, both present) the cached or measured
    faster one, at one thread and (the threaded classes) at every core. ``openblas_blocks(m, n, k)`` is the width
    the kernels split an OpenBLAS product into at one thread (0: whole), so that OpenBLAS is timed as the kernels
    call it."""
    mode = requested_mode()
    if mode == "mkl" and not mkl:
        raise ValueError(f"{ENV}=mkl: the mkl package is not installed (pip install 'rnnlab[mkl]')")
    if mode != "auto" or not mkl or not openblas:
        provider = "mkl" if mode == "mkl" else "openblas"
        return Choice(mode, dict.fromkeys(CLASSES, provider), versions)
    threads = cpu_cores()
    key = cache_key(versions)
    path = cache_dir() / CACHE_FILE
    known = _read_cache(path)
    if key in known:
        timings, measured = known[key]["timings"], known[key]["measured"]
    else:
        timings = time_providers({"openblas": openblas["s"], "mkl": mkl["s"]}, openblas_blocks, threads)
        measured = date.today().isoformat()
        _write_cache(path, key, {"timings": timings, "measured": measured})
    return Choice("auto", faster(timings), versions, timings, measured, threads)


def cache_key(versions: dict[str, str]) -> str:
    """What the kept timings hold for: this processor, its cores (the threaded classes' thread count) and both
    libraries' versions."""
    return f"{processor_name()} | {cpu_cores()} cores | " + " | ".join(f"{k} {v}" for k, v in sorted(versions.items()))


def faster(timings: dict[str, dict[str, float]]) -> dict[str, str]:
    """Each class's provider from its timings: oneMKL where it took less time, else OpenBLAS (a tie too)."""
    return {c: "mkl" if timings[c]["mkl"] < timings[c]["openblas"] else "openblas" for c in CLASSES}


def time_providers(sgemm: dict[str, int], openblas_blocks: Callable[[int, int, int], int], threads: int = 1) -> dict:
    """Seconds per class and provider: the median over ``REPEATS`` interleaved rounds of the per-step time
    summed over the class's recurrences (``TIMED``) or products over all rows (``TIMED_ROWS``), float32. The classes
    at one thread in CPU time of this thread, OpenBLAS's products split as the kernels split them there
    (``openblas_blocks``); the threaded classes with NumPy's BLAS on ``threads`` threads, in wall time, whole (oneMKL
    runs on the calling thread either way); with ``threads`` 1 they are the one-thread timings. OpenBLAS's products
    over all rows are NumPy's ``@``, as ``readout_matmul`` and ``projection_matmul`` run them."""
    register_timed(sgemm)
    providers = list(sgemm)
    rng = np.random.default_rng(0)
    cases = []
    for c in KERNEL_CLASSES:
        for m, H, g in TIMED[c]:
            w = (rng.standard_normal((H, g * H)) * 0.05).astype(np.float32)
            steps = max(2, int(ROUND_SECONDS * 50e9 / (4 * m * H * g * H)))
            cases.append((c, m, H, g, w, np.ascontiguousarray(w.T), steps))
    rows = [(c, rng.standard_normal((n, H)).astype(np.float32), (rng.standard_normal((H, V)) * 0.05).astype(np.float32))
            for c in ROW_CLASSES for n, H, V in TIMED_ROWS[c]]
    rows_gemm = {p: None if p == "openblas" else gemm_function(sgemm[p], np.float32) for p in providers}
    one = _timed_rounds(cases, rows, rows_gemm, 1, openblas_blocks, time.thread_time)
    many = one if threads == 1 else _timed_rounds(cases, rows, rows_gemm, threads, lambda m, n, k: 0,
                                                  time.perf_counter)
    return {**one, **{c + THREADED: by for c, by in many.items()}}


def _timed_rounds(cases: list, rows: list, rows_gemm: dict[str, Callable | None], threads: int,
                  openblas_blocks: Callable[[int, int, int], int], clock: Callable[[], float]) -> dict:
    """``time_providers``'s rounds at one thread count: seconds per class of ``PRODUCT_CLASSES`` and provider."""
    providers = list(rows_gemm)
    rounds: dict[str, dict[str, list[float]]] = {c: {p: [] for p in providers} for c in PRODUCT_CLASSES}
    with threadpool_limits(threads):
        widths = {(m, H, g): {p: (openblas_blocks(m, g * H, H), openblas_blocks(m, H, g * H)) if p == "openblas"
                              else (0, 0) for p in providers} for _, m, H, g, *_ in cases}
        for p in providers:      # compiled, and the products' memory touched and threads started, before the clock
            _, m, H, g, w, wt, _ = cases[0]
            _recurrence(*_buffers(m, H, g), w, wt, 1, *widths[m, H, g][p], p == "mkl")
            for _, h, w in rows:
                _rows_step(rows_gemm[p], h, w, clock)
        for _ in range(REPEATS):
            spent = {(c, p): 0.0 for c in PRODUCT_CLASSES for p in providers}
            for c, m, H, g, w, wt, steps in cases:
                for p in providers:
                    buffers = _buffers(m, H, g)
                    started = clock()
                    _recurrence(*buffers, w, wt, steps, *widths[m, H, g][p], p == "mkl")
                    spent[c, p] += (clock() - started) / steps
            for c, h, w in rows:
                for p in providers:
                    # the faster of two: a readout step is long enough (0.05–0.2 s) for another process to
                    # take the second core in the middle of it, and OpenBLAS on both cores waits for the slower
                    spent[c, p] += min(_rows_step(rows_gemm[p], h, w, clock) for _ in range(2))
            for (c, p), seconds in spent.items():
                rounds[c][p].append(seconds)
    return {c: {p: statistics.median(v) for p, v in by.items()} for c, by in rounds.items()}


def _rows_step(gemm: Callable | None, h: np.ndarray, w: np.ndarray, clock: Callable[[], float]) -> float:
    """Seconds (by ``clock``) of one layer's three products over all rows as a model's step runs them: y = h·W, a
    pass over y (the loss's, or the time loop's), dW = hᵀ·dy and dh = dy·Wᵀ, through ``gemm`` (None: NumPy's ``@``,
    OpenBLAS)."""
    multiply = (lambda a, b: a @ b) if gemm is None else (lambda a, b: blas_matmul(gemm, a, b))
    started = clock()
    dy = np.exp(multiply(h, w))
    multiply(h.T, dy), multiply(dy, w.T)
    return clock() - started


def gemm_function(address: int, dtype: Any) -> Callable:
    """A ctypes function over the ILP64 ``cblas_?gemm`` at ``address`` (float32: s, float64: d)."""
    real = ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double
    i64, pointer = ctypes.c_int64, ctypes.c_void_p
    return ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64, real, pointer, i64,
                            pointer, i64, real, pointer, i64)(address)


def blas_matmul(gemm: Callable, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ b through ``gemm`` (``gemm_function``) for 2-d arrays of its dtype, each C-contiguous or the transpose of
    one (F-contiguous: passed as a transposed operand, not copied), into ``out`` (C-contiguous (m, n), that dtype)
    where given."""
    m, k = a.shape
    n = b.shape[1]
    if out is None:
        out = np.empty((m, n), a.dtype)
    elif out.shape != (m, n) or out.dtype != a.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous {a.dtype} array of shape {(m, n)}, got {out.dtype} "
                         f"{out.shape}")
    if out.size == 0 or k == 0:
        out[...] = 0
        return out
    (trans_a, lda), (trans_b, ldb) = _operand(a), _operand(b)
    gemm(101, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb, 0.0, out.ctypes.data, n)
    return out


def is_operand(x: np.ndarray) -> bool:
    """Whether ``blas_matmul`` takes ``x`` as it is: a matrix, C-contiguous or the transpose of such."""
    return x.ndim == 2 and (x.flags.c_contiguous or x.flags.f_contiguous)


def _operand(x: np.ndarray) -> tuple[int, int]:
    """(cblas transpose flag, leading dimension) of a row-major operand: C-contiguous as it is, else the
    transpose of a C-contiguous array."""
    if x.flags.c_contiguous:
        return 111, x.shape[1]
    if x.flags.f_contiguous:
        return 112, x.shape[0]
    raise ValueError(f"expected a C- or F-contiguous matrix, got strides {x.strides} for shape {x.shape}")


def register_timed(sgemm: dict[str, int]) -> None:
    """Each provider's sgemm under the name the timing's loops call (``TIMED_GEMM``)."""
    for provider, address in sgemm.items():
        llvm.add_symbol(f"rnnlab_timed_sgemm_{provider}", address)


def _buffers(m: int, H: int, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.full((m, H), 0.5, np.float32), np.empty((m, g * H), np.float32), np.empty((m, H), np.float32)


@kernel
def _recurrence(h, a, dh, w, wt, steps, forward_width, backward_width, use_mkl):   # pragma: no cover - compiled
    """A recurrence over one provider's sgemm (oneMKL's with ``use_mkl``), as the kernels' loops run one: each step
    a forward product, a pass over all of its g·H columns (the gates) that writes the next input, a pass over them
    again (the gates' adjoints), the backward product, and a pass over its result. The passes span what the
    kernels' do: with shorter ones (H columns), OpenBLAS's second thread stayed awake between products and its
    large products timed 1.4× faster than oneMKL's at 2 threads, while in the kernels they ran slower."""
    m, k = h.shape
    n = w.shape[1]
    for _ in range(steps):
        _timed_product(use_mkl, m, k, n, h.ctypes.data, w.ctypes.data, a.ctypes.data, forward_width)
        for i in range(m):
            for j in range(n):
                a[i, j] = np.tanh(a[i, j] * np.float32(0.05))
            for j in range(k):
                h[i, j] = a[i, j] * a[i, n - 1 - j]
        for i in range(m):
            for j in range(n):
                a[i, j] = a[i, j] * (np.float32(1.0) - a[i, j] * a[i, j])
        _timed_product(use_mkl, m, n, k, a.ctypes.data, wt.ctypes.data, dh.ctypes.data, backward_width)
        for i in range(m):
            for j in range(k):
                h[i, j] = np.float32(0.5) * h[i, j] + np.tanh(dh[i, j] * np.float32(0.01))


@inline
def _timed_product(use_mkl, m, k, n, a, b, out, width):     # pragma: no cover - compiled
    if use_mkl:
        split_product(_MKL_TIMED, m, k, n, a, b, out, width)
    else:
        split_product(_OPENBLAS_TIMED, m, k, n, a, b, out, width)


@inline
def split_product(gemm, m, k, n, a, b, out, width):     # pragma: no cover - compiled
    """out = a · b through ``gemm`` (row-major float32 (m×k)·(k×n) at these addresses): whole (width 0), or in
    blocks of ``width`` along the longer of n and k, column blocks of b and out (each entry still one sum over
    all of k) or blocks of k added into out in order. The kernels' large products and the timing both call it."""
    one, zero = np.float32(1.0), np.float32(0.0)
    if width == 0:
        gemm(101, 111, 111, m, n, k, one, a, k, b, n, zero, out, n)
    elif n >= k:
        for start in range(0, n, width):
            gemm(101, 111, 111, m, min(width, n - start), k, one, a, k, b + 4 * start, n, zero, out + 4 * start, n)
    else:
        for start in range(0, k, width):
            gemm(101, 111, 111, m, n, min(width, k - start), one, a + 4 * start, k, b + 4 * start * n, n,
                 zero if start == 0 else one, out, n)


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
