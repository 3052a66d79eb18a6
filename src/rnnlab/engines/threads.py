"""How many BLAS threads a training run uses, chosen from the model's size.

Two BLAS libraries can be at work: NumPy's OpenBLAS runs the matmuls over all T·B rows (the input
projection, the weight gradients, dx) and the NumPy engine's per-step matmuls; the Numba kernels'
per-step matmuls go through NumPy's OpenBLAS too where ``cells/kernel_blas.py`` finds it, else
through SciPy's (Numba's ``np.dot``), which is kept at 1 thread. Small matmuls pay more for
waking threads than they gain, and two pools of spinning threads on the same cores slow each other
down. Measured on this project's 2-core machine when the kernels still called SciPy's BLAS (wall ms
of one forward + backward, float32; ``benchmarks/bench_threads.py`` reprints it):

    cell  (T, B, in, hidden)    numba: NumPy's/SciPy's threads     numpy engine: threads
                                1/1      2/1      2/2              1        2
    lstm  (35, 5, 50, 50)        0.54     –        0.48             2.26     1.94
    lstm  (35, 20, 200, 200)    22.6     21.0     69.6             29.3     20.0
    lstm  (100, 64, 88, 256)   229      180      309              251      178
    gru   (100, 64, 88, 256)   147      129      222              165      118
    lstm  (35, 100, 256, 512)  469      357      389              497      309

Re-measured with OpenBLAS's idle timeout at 2^16 (below) and the kernels' products in NumPy's
OpenBLAS (AMD EPYC, 2 cores), 1 thread / 2 threads: numba 0.46/0.46, 17.6/12.7, 180/115, 133/106,
385/223; numpy 1.52/1.53, 24.5/18.3, 208/136, 144/97, 389/219: the same rule.

So the rule: SciPy's BLAS always runs on 1 thread; NumPy's BLAS (with the kernels' per-step products
where they call it) uses every available
core once a step's recurrent matmul has ``MIN_WORK`` multiply-adds (batch × hidden × gates·hidden),
or a readout at every step has them (batch × hidden × outputs: a language model's), else 1. Never
more than the threads the process was started with (a runner's worker is pinned to 1), and
``threads=N`` (``--threads N``) overrides the rule for NumPy's BLAS. The readout's part: the NLU
course's RNN-50 under 2,000 outputs (batch 100), whose recurrence alone gives 1 thread, took 72–128 ms
a step at 2 threads against 102–144 at 1 (wall, 2-core Intel Xeon, 2026-11-29, eight alternating blocks
of five steps: medians 86 against 112, 2 threads faster in 7 of 8).

The compiled passes between the big products (the softmax cross-entropy over the logits, the
optimizers' updates) run in one block per granted thread (``split_rows``) once an array holds
``MIN_SPLIT`` elements: each row's numbers are the one-thread pass's. That pays only if OpenBLAS's
threads stop spinning when a product ends (by default they spin ~0.1 s, i.e. through the whole
loss), so ``import rnnlab`` sets ``OPENBLAS_THREAD_TIMEOUT=16`` when NumPy is not yet loaded.
PTB's readout, loss and SGD update, (400, 200) → 10,000 at 2 threads (``bench_threads.py``, wall ms):

    OpenBLAS idle timeout      one block   split
    2^28 (OpenBLAS default)      37.5       34.3
    2^16 (rnnlab's)              32.3       29.6

and PTB's whole step at 2 cores 60.1 → 50.8 ms (``bench_models.py --threads all``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import TypeVar

import scipy.linalg.cython_blas  # noqa: F401  (the BLAS np.dot in Numba calls: loaded now so that it can be limited)

from rnnlab.cells.kernel_blas import blas_libraries
from rnnlab.machine import cpu_cores

MIN_WORK = 1_000_000
MIN_SPLIT = 1_000_000     # elements: below this one pass over an array costs less than waking a thread
_granted = 1              # the threads the innermost blas_threads block grants (1 outside any)
_pool: tuple[int, ThreadPoolExecutor] | None = None      # (its threads, the pool) of split_rows
Result = TypeVar("Result")


def available_threads() -> int:
    """The BLAS threads this process may use now: NumPy's pool size (1 inside a pinned worker)."""
    ours, _ = blas_libraries()
    cores = cpu_cores()
    return max(1, min(max((lib.num_threads for lib in ours), default=cores), cores))


def threads_for(multiply_adds: int) -> int:
    """The rule above for a step's product of ``multiply_adds`` multiply-adds: all available threads, or 1."""
    return available_threads() if multiply_adds >= MIN_WORK else 1


def choose_threads(batch: int, hidden: int, gates: int) -> int:
    """The thread count of NumPy's BLAS that the rule above gives for one layer: 1, or all available."""
    return threads_for(batch * hidden * gates * hidden)


@contextmanager
def blas_threads(n: int):
    """Run the block with NumPy's BLAS limited to n threads and every other BLAS (the one the Numba
    kernels call) to 1."""
    if n < 1:
        raise ValueError(f"threads: expected a positive count, got {n}")
    global _granted
    ours, others = blas_libraries()
    with ExitStack() as stack:
        for lib, limit in [(lib, n) for lib in ours] + [(lib, 1) for lib in others]:
            previous = lib.num_threads
            lib.set_num_threads(limit)
            stack.callback(lib.set_num_threads, previous)
        previous_granted, _granted = _granted, min(n, available_threads())
        try:
            yield
        finally:
            _granted = previous_granted


def split_rows(rows: int, work: Callable[[int, int], Result], row_size: int = 1) -> list[Result]:
    """``work(start, stop)`` over consecutive blocks of ``range(rows)``, one block per thread the
    enclosing ``blas_threads`` block grants (one block, run here, for fewer than ``MIN_SPLIT``
    elements or outside such a block), the results in block order. For the compiled passes between
    the big matrix products (the loss over the logits, the optimizers' updates): ``work`` must be a
    kernel that releases the GIL (``nogil=True``) and writes only its own rows."""
    global _pool
    blocks = max(1, min(_granted, rows * row_size // MIN_SPLIT, rows))
    if blocks == 1:
        return [work(0, rows)]
    if _pool is None or _pool[0] < blocks - 1:
        _pool = (blocks - 1, ThreadPoolExecutor(max_workers=blocks - 1, thread_name_prefix="rnnlab-split"))
    edges = [rows * i // blocks for i in range(blocks + 1)]
    others = [_pool[1].submit(work, edges[i], edges[i + 1]) for i in range(1, blocks)]
    return [work(edges[0], edges[1]), *(f.result() for f in others)]
