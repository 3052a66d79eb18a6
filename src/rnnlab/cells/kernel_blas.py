"""The matrix product inside the Numba kernels' time loops: NumPy's own BLAS where it can be found.

Numba's ``np.dot`` in a kernel calls the BLAS SciPy ships (``scipy.linalg.cython_blas``). Measured on
an AMD EPYC (1 thread, CPU time), the per-step recurrent product (20×200)·(200×800) of PTB's LSTM
and of the cell benchmark took 105 µs there (SciPy's OpenBLAS 0.3.30, 61 GFLOP/s) and 78 µs in the
OpenBLAS NumPy ships (0.3.31, 82 GFLOP/s); (64×256)·(256×1024), (8×34)·(34×136) and (20×50)·(50×200)
took the same time in both. So the kernels multiply with ``kernel_matmul``, which calls ILP64
``cblas_?gemm`` under the names ``rnnlab_cblas_?gemm_small`` and ``rnnlab_cblas_?gemm_large``. This module
registers those names with LLVM when it is imported: NumPy's OpenBLAS where threadpoolctl finds it
with that interface, else a compiled ``np.dot`` with the same signature (SciPy's BLAS, as before).
Kernels cached on disk name the symbols, not an address, so they link in every process.

Each product goes to one of two symbols by its size, ``rnnlab_cblas_?gemm_small`` (at most
``SMALL_PRODUCT`` multiply-adds) and ``rnnlab_cblas_?gemm_large`` (each with a ``_threaded`` twin, called
while NumPy's BLAS runs on more than one thread, as ``rnnlab_blas_threads`` answers), and each class to the
provider ``blas_provider`` chose for it on this machine at that thread count: NumPy's OpenBLAS, or oneMKL where
the ``mkl`` package is installed and measured faster (``RNNLAB_BLAS`` overrides it). Without oneMKL every
symbol is the OpenBLAS function above, and every product is the same call as before.

One BLAS then runs both the kernels' per-step products and the big products over all T·B rows, on
the threads the thread rule grants: with one pool instead of two, the per-step products gain from a
second core too (``benchmarks/bench_threads.py``: LSTM (100, 64, 88, 256) at 2 threads 145 ms with
them on one thread, 115 ms on both).

At 1 thread, a float32 product just above OpenBLAS's small-matrix bound (M·N·K ≤ 10⁶,
``SMALL_PRODUCT``) runs faster as blocks under it: the SkylakeX-family kernels multiply those
unpacked. The forward's (20×200)·(200×800) (PTB's LSTM, the cell benchmark's (35, 20, 200, 200))
took 78 µs in one call and 57 µs as four column blocks, the backward's (20×800)·(800×200) 83 µs and
57 µs as four blocks of K (AMD EPYC; 1.06×–1.46× at the other shapes tried, e.g. (64×256)·(256×1024)
412 → 388 µs). The same split loses at 2 threads (the small kernels run on one) and with OpenBLAS's
Haswell kernels (no small-matrix path), so ``kernel_matmul`` asks at run time, through one more
registered symbol (``rnnlab_split_threads``): NumPy's OpenBLAS thread count where its kernel family
has the small-matrix path (``SMALL_KERNEL_FAMILIES``), else 0; it splits only at 1. A split sums in
blocks, so those products' last bits differ from one call's (float32 rounding); products under the
bound, float64 and every other BLAS are called whole, as before.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
from numba import carray, cfunc, types
from numba.extending import overload
from threadpoolctl import ThreadpoolController

from rnnlab.cells.blas_provider import (
    ENV,
    KERNEL_CLASSES,
    PROJECTION_MIN_PRODUCT,
    ROW_CLASSES,
    THREADED,
    blas_matmul,
    choose,
    gemm_function,
    is_operand,
    mkl_gemm,
    mkl_library,
    requested_mode,
    split_product,
)
from rnnlab.compile import kernel

ROW_MAJOR, NO_TRANS = 101, 111
SMALL_PRODUCT = 1_000_000          # OpenBLAS's bound on M·N·K for its small-matrix sgemm kernels
SMALL_KERNEL_FAMILIES = ("SkylakeX", "Cooperlake", "SapphireRapids")   # the families that have them
_NUMPY_DIR = Path(np.__file__).resolve().parent


def blas_libraries() -> tuple[list, list]:
    """(NumPy's BLAS libraries, every other BLAS library loaded), as threadpoolctl controllers."""
    controller = ThreadpoolController()
    ours, others = [], []
    for lib in controller.select(user_api="blas").lib_controllers:
        path = Path(lib.filepath).resolve()
        in_numpy = _NUMPY_DIR.parent in path.parents and path.parts[len(_NUMPY_DIR.parent.parts)].startswith("numpy")
        (ours if in_numpy else others).append(lib)
    if not ours:  # one shared BLAS (e.g. a conda environment): it is NumPy's
        ours, others = others, []
    return ours, others


def _gemm_signature(real: types.Type, pointer: types.Type) -> types.Type:
    i64 = types.int64
    return types.void(types.int32, types.int32, types.int32, i64, i64, i64, real, pointer, i64, pointer, i64, real,
                      pointer, i64)


def _fallback(dtype, real: types.Type):
    """cblas_?gemm (row-major, no transposes: the only call the kernels make) as a compiled np.dot."""
    @cfunc(_gemm_signature(real, types.voidptr), cache=True)
    def gemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):   # pragma: no cover
        np.dot(carray(a, (m, k), dtype), carray(b, (k, n), dtype), carray(c, (m, n), dtype))
    return gemm.address


def _numpy_gemm() -> dict[str, int]:
    """The addresses of ILP64 cblas_sgemm/dgemm in NumPy's OpenBLAS; {} where NumPy's BLAS is not an
    ILP64 OpenBLAS (MKL, a 32-bit-integer build)."""
    ours, _ = blas_libraries()
    for lib in ours:
        if lib.internal_api != "openblas":
            continue
        handle = ctypes.CDLL(lib.filepath)
        for prefix in ("scipy_", ""):
            try:
                return {kind: ctypes.cast(getattr(handle, f"{prefix}cblas_{kind}gemm64_"), ctypes.c_void_p).value
                        for kind in "sd"}
            except AttributeError:
                continue
    return {}


def _never_split() -> int:
    """The address of a C function that answers 0: the gate where the products never split."""
    @cfunc(types.int32(), cache=True)
    def never():   # pragma: no cover - compiled
        return 0
    return never.address


def _one_thread() -> int:
    """The address of a C function that answers 1: NumPy's BLAS thread count where it cannot be asked."""
    @cfunc(types.int32(), cache=True)
    def one():   # pragma: no cover - compiled
        return 1
    return one.address


def _openblas_threads_address(families: tuple[str, ...] | None = None) -> int | None:
    """The address of NumPy's OpenBLAS thread-count function (only where its kernel family is one of
    ``families``, when given); None where there is none."""
    ours, _ = blas_libraries()
    for lib in ours:
        if lib.internal_api != "openblas" or (families and getattr(lib, "architecture", None) not in families):
            continue
        handle = ctypes.CDLL(lib.filepath)
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
            if hasattr(handle, name):
                return ctypes.cast(getattr(handle, name), ctypes.c_void_p).value
    return None


def _split_threads_address() -> int:
    """The C function the kernels ask before splitting a product: NumPy's OpenBLAS thread count where
    its kernel family has small-matrix kernels, else one that answers 0 (never split)."""
    return _openblas_threads_address(SMALL_KERNEL_FAMILIES) or _never_split()


def _openblas_version() -> str:
    ours, _ = blas_libraries()
    return next((f"{lib.version} ({getattr(lib, 'architecture', None) or '?'})" for lib in ours
                 if lib.internal_api == "openblas"), "?")


def _family_splits() -> bool:
    """Whether NumPy's OpenBLAS has the small-matrix kernels the products are split for."""
    ours, _ = blas_libraries()
    return any(lib.internal_api == "openblas" and getattr(lib, "architecture", None) in SMALL_KERNEL_FAMILIES
               for lib in ours)


def _small_block_width(m: int, n: int, k: int) -> int:
    """The width of the blocks along the longer of n and k that put each block's product under
    ``SMALL_PRODUCT``: the widest multiple of 32 (narrower or unaligned blocks measured slower than
    one call: (64×256)·(256×1024) in 17 blocks of ~60 columns 776 µs, in 32 of 32 388 µs, whole 412),
    the last block what remains; 0 (one call) where the whole is under the bound already or no such
    width exists."""
    other = k if n >= k else n
    width = SMALL_PRODUCT // max(m * other, 1) // 32 * 32
    if m * n * k <= SMALL_PRODUCT or width < 32:
        return 0
    return width


small_block_width = kernel(_small_block_width)

_ADDRESSES = _numpy_gemm()
SOURCE = "numpy" if _ADDRESSES else "scipy"      # whose BLAS the kernels' products run in without oneMKL
# A $RNNLAB_BLAS that names no provider: the products run in OpenBLAS (the reference's bits), the command line
# refuses to start naming the variable (``cli.main``), and Python code importing rnnlab is warned.
try:
    _WANTED = requested_mode()
    ENV_ERROR = None
except ValueError as _err:
    _WANTED, ENV_ERROR = "openblas", str(_err)
    if Path(sys.argv[0] if sys.argv else "").name != "rnnlab":     # the command line says it once, itself
        warnings.warn(f"{ENV_ERROR}; rnnlab's products run in OpenBLAS", stacklevel=2)
    os.environ[ENV] = "openblas"
_MKL = mkl_library() if _WANTED != "openblas" else None
_MKL_GEMM = mkl_gemm(_MKL[0]) if _MKL else {}
_SPLITS = bool(_ADDRESSES) and _family_splits()
CHOICE = choose(_ADDRESSES, _MKL_GEMM, {**({"openblas": _openblas_version()} if _ADDRESSES else {}),
                                        **({"mkl": _MKL[1]} if _MKL else {})},
                lambda m, n, k: _small_block_width(m, n, k) if _SPLITS else 0)
_MKL_SERVES = "mkl" in CHOICE.providers.values()
# each class's product under two names: one the kernels call while NumPy's BLAS runs on one thread, one (``_threaded``)
# while it runs on more; each served by the provider chosen for it (the same calls where oneMKL serves neither)
for _kind, _dtype, _real in (("s", np.float32, types.float32), ("d", np.float64, types.float64)):
    for _class in KERNEL_CLASSES:
        for _suffix, _chosen in (("", _class), ("_threaded", _class + THREADED)):
            _served = _MKL_GEMM if CHOICE.providers[_chosen] == "mkl" else _ADDRESSES
            llvm.add_symbol(f"rnnlab_cblas_{_kind}gemm_{_class}{_suffix}",
                            _served.get(_kind) or _fallback(_dtype, _real))
_SPLIT_ADDRESS = (_split_threads_address() if _ADDRESSES and CHOICE.providers["large"] == "openblas"
                  else _never_split())
llvm.add_symbol("rnnlab_split_threads", _SPLIT_ADDRESS)
_THREADS = _openblas_threads_address()
llvm.add_symbol("rnnlab_blas_threads", _THREADS or _one_thread())
(_SGEMM_SMALL, _SGEMM_SMALL_THREADED, _SGEMM_LARGE, _SGEMM_LARGE_THREADED, _DGEMM_SMALL, _DGEMM_SMALL_THREADED,
 _DGEMM_LARGE, _DGEMM_LARGE_THREADED) = (
    types.ExternalFunction(f"rnnlab_cblas_{kind}gemm_{size}{suffix}", _gemm_signature(real, types.uintp))
    for kind, real in (("s", types.float32), ("d", types.float64)) for size in KERNEL_CLASSES
    for suffix in ("", "_threaded"))
_SPLIT_THREADS = types.ExternalFunction("rnnlab_split_threads", types.int32())
_BLAS_THREADS = types.ExternalFunction("rnnlab_blas_threads", types.int32())
numpy_blas_threads = ctypes.CFUNCTYPE(ctypes.c_int32)(_THREADS) if _THREADS else (lambda: 1)
# per class over all rows and thread count (more than one: True), oneMKL's gemm by dtype where it serves them
_ROWS_GEMM = {c: {threaded: ({np.dtype(d): gemm_function(_MKL_GEMM[kind], d)
                             for kind, d in (("s", np.float32), ("d", np.float64))}
                            if CHOICE.providers[c + (THREADED if threaded else "")] == "mkl" else {})
                  for threaded in (False, True)} for c in ROW_CLASSES}


def _rows_matmul(products: str, a, b, out=None):
    """a @ b (into ``out`` where given) by the provider chosen for ``products`` (a class of ``ROW_CLASSES``) at
    NumPy's BLAS's thread count now: NumPy's product (OpenBLAS: the same call and bits as before), or oneMKL's
    ``cblas_?gemm`` for 2-d NumPy float arrays of one dtype, each C-contiguous or a transposed one. Anything else
    (JAX arrays, other layouts) is NumPy's or the array's own ``@``."""
    served = _ROWS_GEMM[products][numpy_blas_threads() > 1]
    gemm = served.get(getattr(a, "dtype", None)) if isinstance(a, np.ndarray) else None
    if gemm is None or not (isinstance(b, np.ndarray) and b.dtype == a.dtype and is_operand(a) and is_operand(b)):
        return a @ b if out is None else np.matmul(a, b, out=out)
    return blas_matmul(gemm, a, b, out)


def readout_matmul(a, b):
    """a @ b for the readout's products over all T·B rows (``layers.linear`` and its adjoint), by the provider
    chosen for them (``_rows_matmul``)."""
    return _rows_matmul("readout", a, b)


def projection_matmul(a, b, out=None):
    """a @ b for an engine's products over all T·B rows (the input projection x·W_x, its adjoint dxw·W_xᵀ, the
    weight gradients xᵀ·dxw and hᵀ·dhw), into ``out`` where given: by the provider chosen for them
    (``_rows_matmul``) from ``PROJECTION_MIN_PRODUCT`` multiply-adds up, NumPy's own product under it."""
    if a.shape[-2] * a.shape[-1] * b.shape[-1] < PROJECTION_MIN_PRODUCT:
        return a @ b if out is None else np.matmul(a, b, out=out)
    return _rows_matmul("projection", a, b, out)


def splits_products() -> bool:
    """Whether the kernels' float32 products above ``SMALL_PRODUCT`` are split now: the kernels'
    own gate, asked from Python."""
    return ctypes.CFUNCTYPE(ctypes.c_int32)(_SPLIT_ADDRESS)() == 1


def _kernels_of(lib) -> str:
    """The kernel family OpenBLAS picked for this processor, or oneMKL's threading layer."""
    if getattr(lib, "architecture", None):
        return lib.architecture
    return f"threading: {lib.threading_layer}" if getattr(lib, "threading_layer", None) else "kernels: ?"


# OpenBLAS's kernel families without AVX-512, named as OPENBLAS_CORETYPE takes them
_BELOW_AVX512 = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "sandybridge", "haswell", "zen",
                 "opteron", "barcelona", "bobcat", "bulldozer", "piledriver", "steamroller", "excavator"}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_pin_warning(environ: dict | None = None, flags: set[str] | None = None) -> str | None:
    """A warning when ``OPENBLAS_CORETYPE`` pins OpenBLAS to kernels below this processor: an AVX-512 machine
    told to run Haswell's or Zen's (a workaround for old OpenBLAS bugs that some machines set). Measured on an
    AVX-512 Intel Xeon: the fused engine's geometric-mean speed-up over torch 2.74× → 2.01×, the LSTM at
    (35, 20, 200, 200) 1.04× → 0.62× torch. None when nothing is pinned or the pin is not below the processor."""
    environ = os.environ if environ is None else environ
    pinned = environ.get("OPENBLAS_CORETYPE", "").strip()
    flags = _cpu_flags() if flags is None else flags
    if not pinned or pinned.lower() not in _BELOW_AVX512 or "avx512f" not in flags:
        return None
    return (f"warning: OPENBLAS_CORETYPE={pinned} pins OpenBLAS to kernels without AVX-512 on a processor that has "
            "it; products run slower than this machine can (unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE to let "
            "OpenBLAS pick)")


def blas_description() -> str:
    """The BLAS libraries at work as a benchmark quotes them: NumPy's (library, version, the kernels it picked
    for this processor), oneMKL where it serves the kernels, and which provider runs each class of the Numba
    kernels' per-step products and of the readout's."""
    ours, _ = blas_libraries()
    libraries = ", ".join(f"{lib.internal_api} {lib.version} ({_kernels_of(lib)})"
                          for lib in ours) or "none found"
    split = "split under the small-matrix bound at 1 thread" if splits_products() else "whole"
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    warning = openblas_pin_warning()
    return (f"BLAS: {libraries}" + (f" [OPENBLAS_CORETYPE={pinned}]" if pinned else "") +
            f"; the products: {CHOICE.describe()}, the kernels' large ones "
            f"{split} now" + ("" if SOURCE == "numpy" or _MKL_SERVES else " (OpenBLAS: SciPy's)") +
            (f"\n{warning}" if warning else ""))


@kernel
def block_width_now(m: int, n: int, k: int) -> int:
    """``small_block_width`` where the kernels split now (1 BLAS thread, a small-matrix kernel
    family), else max(n, k, 1): one block, the whole product in one call."""
    width = small_block_width(m, n, k)
    return width if width > 0 and _SPLIT_THREADS() == 1 else max(n, k, 1)


@kernel
def _sgemm_in_blocks(m, n, k, a, b, out):
    """out = a · b for row-major float32 (m×k)·(k×n) at these addresses, by the provider of its class at NumPy's
    BLAS's thread count now: a small product in one call, a large one at one thread in blocks of
    ``block_width_now`` along the longer of n and k (one block: one call), on more threads in one call."""
    one, zero = np.float32(1.0), np.float32(0.0)
    threaded = _BLAS_THREADS() > 1
    if m * n * k <= SMALL_PRODUCT:     # leading dimensions ≥ 1 even for empty matrices, as oneMKL requires
        if threaded:
            _SGEMM_SMALL_THREADED(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a, max(k, 1), b, max(n, 1), zero, out,
                                  max(n, 1))
        else:
            _SGEMM_SMALL(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a, max(k, 1), b, max(n, 1), zero, out,
                         max(n, 1))
    elif threaded:
        split_product(_SGEMM_LARGE_THREADED, m, k, n, a, b, out, 0)
    else:
        split_product(_SGEMM_LARGE, m, k, n, a, b, out, block_width_now(m, n, k))


def kernel_matmul(a, b, out):
    """out = a @ b in a kernel (2-d, C-contiguous, one dtype: cblas; anything else: np.dot)."""
    raise TypeError("kernel_matmul runs only inside Numba kernels")


@overload(kernel_matmul, inline="always")
def _kernel_matmul(a, b, out):
    arrays = (a, b, out)
    if not all(isinstance(t, types.Array) and t.ndim == 2 and t.layout == "C" and t.dtype == a.dtype
               for t in arrays) or a.dtype not in (types.float32, types.float64):
        return lambda a, b, out: np.dot(a, b, out)
    if a.dtype == types.float32:
        def impl_float32(a, b, out):
            m, k = a.shape
            _sgemm_in_blocks(m, b.shape[1], k, a.ctypes.data, b.ctypes.data, out.ctypes.data)
        return impl_float32
    one, zero = np.float64(1.0), np.float64(0.0)

    def impl_float64(a, b, out):
        m, k = a.shape
        n = b.shape[1]
        lda, ldb = max(k, 1), max(n, 1)
        threaded = _BLAS_THREADS() > 1
        if m * n * k <= SMALL_PRODUCT:
            if threaded:
                _DGEMM_SMALL_THREADED(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a.ctypes.data, lda, b.ctypes.data,
                                      ldb, zero, out.ctypes.data, ldb)
            else:
                _DGEMM_SMALL(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a.ctypes.data, lda, b.ctypes.data, ldb,
                             zero, out.ctypes.data, ldb)
        elif threaded:
            _DGEMM_LARGE_THREADED(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a.ctypes.data, lda, b.ctypes.data,
                                  ldb, zero, out.ctypes.data, ldb)
        else:
            _DGEMM_LARGE(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a.ctypes.data, lda, b.ctypes.data, ldb, zero,
                         out.ctypes.data, ldb)
    return impl_float64
