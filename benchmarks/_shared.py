"""What the benchmark scripts share: their thread pools pinned before NumPy loads, a median timer and the
machine's matmul rate. Import it first (``import _shared``), before NumPy or rnnlab: pinning after them is
too late. It imports nothing heavy at the top for that reason."""

from __future__ import annotations

import os
import statistics
import time

POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def pin_one_thread() -> None:
    """Every thread pool (OpenBLAS, OpenMP, MKL, Numba) at one thread: the primary, CPU-time figures."""
    for name in POOLS:
        os.environ[name] = "1"


def median_time(fn, repeats: int, warmups: int = 2, clock=time.perf_counter) -> float:
    """The median of ``repeats`` timed calls after ``warmups`` untimed ones (which also compile)."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def gemm_rate(dtype: str = "float32", size: int = 1024, repeats: int = 5, cpu_time: bool = True) -> float:
    """FLOP/s of a size × size matmul, the best of ``repeats``: the machine's practical peak for ``dtype``, in CPU
    time (1 thread) or wall time (all cores)."""
    import numpy as np

    a = np.random.default_rng(0).normal(size=(size, size)).astype(dtype)
    a @ a
    clock = time.process_time if cpu_time else time.perf_counter
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        a @ a
        best = min(best, clock() - start)
    return 2 * size ** 3 / best
