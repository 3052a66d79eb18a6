"""Wall time of one training step (forward + full BPTT) with 1 BLAS thread and with every core, per
engine: the measurement behind the thread rule of ``rnnlab.engines.threads``.

    python benchmarks/bench_threads.py [--seconds 1.0]
    OPENBLAS_THREAD_TIMEOUT=28 python benchmarks/bench_threads.py   # OpenBLAS's own idle spin (~0.1 s)

Each cell of the table is the best of two one-second blocks (wall time: threads are the point),
alternating 1 thread and all cores so that drifting load on the machine hits both; the last column
is what the rule picks for that size.
"""

from __future__ import annotations

import _shared  # the script's folder is on sys.path
import rnnlab  # first: it sets OpenBLAS's idle-thread timeout before NumPy loads OpenBLAS

# isort: split
import argparse
import os
import time

import numpy as np

from rnnlab.engines import threads
from rnnlab.engines.threads import MIN_SPLIT, blas_threads, choose_threads
from rnnlab.machine import cpu_cores

SIZES = [("lstm", (35, 5, 50, 50)), ("lstm", (35, 20, 200, 200)), ("lstm", (100, 64, 88, 256)),
         ("gru", (100, 64, 88, 256)), ("lstm", (35, 100, 256, 512))]


def block(step, threads: int, seconds: float) -> float:
    with blas_threads(threads):
        step()
        t, reps = time.perf_counter(), 0
        while time.perf_counter() - t < seconds:
            step()
            reps += 1
        return (time.perf_counter() - t) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    cores = cpu_cores()
    print(_shared.machine_line())
    print(f"rnnlab {rnnlab.__version__}, float32, wall ms per training step, 1 thread / {cores} threads")
    print(f"{'cell':5} {'T':>4} {'B':>4} {'in':>4} {'hid':>4}  {'engine':6} {'1 thread':>9} {'all':>9}  rule")
    for kind, (T, B, I, H) in SIZES:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(T, B, I)).astype(np.float32)
        upstream = rng.normal(size=(T, B, H)).astype(np.float32)
        for engine in ("numba", "numpy"):
            cell = rnnlab.make_cell(kind, I, H, seed=0, dtype=np.float32, engine=engine)

            def step(cell=cell, x=x, upstream=upstream):
                hs, cache = cell.forward(x)
                cell.backward(upstream, cache)
            times = {1: [], cores: []}
            for _ in range(2):
                for n in times:
                    times[n].append(block(step, n, args.seconds))
            print(f"{kind:5} {T:4d} {B:4d} {I:4d} {H:4d}  {engine:6} {min(times[1]) * 1e3:9.2f} "
                  f"{min(times[cores]) * 1e3:9.2f}  {choose_threads(B, H, cell.gates)}")
    readout_pass(args.seconds)


def readout_pass(seconds: float) -> None:
    """The second rule: PTB's readout (400 rows of 200 → 10,000 classes), its fused softmax
    cross-entropy and the SGD update of its weights, at every core, with the loss and the update in
    one block or split over the cores (``split_rows``); OpenBLAS's idle timeout is this process's."""
    from rnnlab.losses import softmax_cross_entropy_fused
    from rnnlab.optim import SGD

    rng = np.random.default_rng(0)
    h = rng.normal(size=(400, 200)).astype(np.float32)
    params = {"W": (rng.normal(size=(200, 10_000)) * 0.01).astype(np.float32)}
    targets, w = rng.integers(0, 10_000, 400), np.ones(400, np.float32)
    optimizer = SGD(params, lr=1e-6)

    def step():
        _, dlogits, _ = softmax_cross_entropy_fused(h @ params["W"], targets, w)
        dlogits @ params["W"].T
        optimizer.step({"W": h.T @ dlogits})
    cores, timeout = cpu_cores(), os.environ.get("OPENBLAS_THREAD_TIMEOUT", "OpenBLAS's default")
    times = {"one block": [], "split": []}
    for _ in range(3):
        for how in times:
            threads.MIN_SPLIT = 10**15 if how == "one block" else MIN_SPLIT
            times[how].append(block(step, cores, seconds))
    threads.MIN_SPLIT = MIN_SPLIT
    print(f"\nreadout + softmax cross-entropy + SGD, (400, 200) → 10,000, {cores} threads, OpenBLAS idle timeout "
          f"{timeout}: " + ", ".join(f"{how} {min(t) * 1e3:.2f} ms" for how, t in times.items()))


if __name__ == "__main__":
    main()
