"""How many BLAS threads a training run uses, chosen from the model's size.

Small recurrent matmuls pay more for waking threads than they gain, and the Numba engine's kernels
call a second OpenBLAS (SciPy's, through Numba) whose threads spin against NumPy's. Measured on this
project's 2-core machine (wall time of one forward + backward, float32; ``benchmarks/bench_threads.py``
reprints it):

    cell   T    B    in   hidden   numba 1 / 2 threads   numpy 1 / 2 threads (ms)
    lstm   35   5    50   50        0.54 /   0.48          2.26 /   1.94
    lstm   35   20   200  200      21.7  /  46.1          29.3  /  20.0
    lstm   100  64   88   256     221    / 281           251    / 178
    gru    100  64   88   256     155    / 238           165    / 118
    lstm   35   100  256  512     484    / 393           497    / 309

So the rule: the Numba engine uses one thread unless a step's recurrent matmul has at least
``NUMBA_MIN_WORK`` multiply-adds (batch × hidden × gates·hidden); the NumPy and JAX engines use
every core from ``NUMPY_MIN_WORK`` on. Never more than the threads the process was started with
(a runner's worker is pinned to 1), and ``threads=N`` (``--threads N``) overrides the rule.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from threadpoolctl import threadpool_info, threadpool_limits

NUMBA_MIN_WORK = 50_000_000
NUMPY_MIN_WORK = 1_000_000


def available_threads() -> int:
    """The BLAS threads this process may use now: the largest pool's size (1 inside a pinned worker)."""
    sizes = [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(max(sizes, default=cores), cores))


def choose_threads(engine: str, batch: int, hidden: int, gates: int) -> int:
    """The thread count the rule above gives for one layer's step: 1, or every available thread."""
    work = batch * hidden * gates * hidden
    minimum = NUMBA_MIN_WORK if engine == "numba" else NUMPY_MIN_WORK
    return available_threads() if work >= minimum else 1


@contextmanager
def blas_threads(n: int):
    """Run the block with every BLAS pool (NumPy's, SciPy's, Numba's through SciPy) limited to n threads."""
    if n < 1:
        raise ValueError(f"threads: expected a positive count, got {n}")
    with threadpool_limits(limits=n, user_api="blas"):
        yield
