"""The matrix product inside the Numba kernels' time loops: NumPy's own BLAS where it can be found.

Numba's ``np.dot`` in a kernel calls the BLAS SciPy ships (``scipy.linalg.cython_blas``). Measured on
an AMD EPYC (1 thread, CPU time), the per-step recurrent product (20×200)·(200×800) of PTB's LSTM
and of the cell benchmark took 105 µs there (SciPy's OpenBLAS 0.3.30, 61 GFLOP/s) and 78 µs in the
OpenBLAS NumPy ships (0.3.31, 82 GFLOP/s); (64×256)·(256×1024), (8×34)·(34×136) and (20×50)·(50×200)
took the same time in both. So the kernels multiply with ``kernel_matmul``, which calls ILP64
``cblas_?gemm`` under the names ``rnnlab_cblas_sgemm`` and ``rnnlab_cblas_dgemm``. This module
registers those names with LLVM when it is imported: NumPy's OpenBLAS where threadpoolctl finds it
with that interface, else a compiled ``np.dot`` with the same signature (SciPy's BLAS, as before).
Kernels cached on disk name the symbols, not an address, so they link in every process.

One BLAS then runs both the kernels' per-step products and the big products over all T·B rows, on
the threads the thread rule grants: with one pool instead of two, the per-step products gain from a
second core too (``benchmarks/bench_threads.py``: LSTM (100, 64, 88, 256) at 2 threads 145 ms with
them on one thread, 115 ms on both).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
from numba import carray, cfunc, types
from numba.extending import overload
from threadpoolctl import ThreadpoolController

ROW_MAJOR, NO_TRANS = 101, 111
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


_ADDRESSES = _numpy_gemm()
SOURCE = "numpy" if _ADDRESSES else "scipy"      # whose BLAS the kernels' products run in
for _kind, _dtype, _real in (("s", np.float32, types.float32), ("d", np.float64, types.float64)):
    llvm.add_symbol(f"rnnlab_cblas_{_kind}gemm", _ADDRESSES.get(_kind) or _fallback(_dtype, _real))
_SGEMM = types.ExternalFunction("rnnlab_cblas_sgemm", _gemm_signature(types.float32, types.uintp))
_DGEMM = types.ExternalFunction("rnnlab_cblas_dgemm", _gemm_signature(types.float64, types.uintp))


def blas_description() -> str:
    """NumPy's BLAS as a benchmark quotes it: library, version, the kernels it picked for this
    processor, and whose BLAS the Numba kernels' per-step products call."""
    ours, _ = blas_libraries()
    libraries = ", ".join(f"{lib.internal_api} {lib.version} ({getattr(lib, 'architecture', None) or 'kernels: ?'})"
                          for lib in ours) or "none found"
    return f"NumPy's BLAS: {libraries}; the kernels' per-step products in {SOURCE}'s BLAS"


def kernel_matmul(a, b, out):
    """out = a @ b in a kernel (2-d, C-contiguous, one dtype: cblas; anything else: np.dot)."""
    raise TypeError("kernel_matmul runs only inside Numba kernels")


@overload(kernel_matmul, inline="always")
def _kernel_matmul(a, b, out):
    arrays = (a, b, out)
    if not all(isinstance(t, types.Array) and t.ndim == 2 and t.layout == "C" and t.dtype == a.dtype
               for t in arrays) or a.dtype not in (types.float32, types.float64):
        return lambda a, b, out: np.dot(a, b, out)
    gemm, real = (_SGEMM, np.float32) if a.dtype == types.float32 else (_DGEMM, np.float64)
    one, zero = real(1.0), real(0.0)

    def impl(a, b, out):
        m, k = a.shape
        n = b.shape[1]
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a.ctypes.data, k, b.ctypes.data, n, zero,
             out.ctypes.data, n)
    return impl
