"""Training-step time (forward + full BPTT) of rnnlab's cells against PyTorch, side by side.

    python benchmarks/bench_cells.py [--dtype float32] [--repeats 20]

For each (T, B, input, hidden) and cell, both sides get the same weights and input; the step is
forward over T steps plus backward of sum(hs * upstream) to every parameter and the input.
PyTorch runs with as many threads as this process may use, and so does NumPy's BLAS.
``speedup`` = PyTorch time / rnnlab time (above 1: rnnlab is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

import rnnlab
from rnnlab.interop import to_torch

SIZES = [(20, 100, 50, 50), (50, 32, 7, 18), (20, 5, 50, 50), (35, 20, 200, 200), (100, 64, 88, 256), (12, 32, 7, 10)]
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def best_time(fn, repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_flops(kind: str, T: int, B: int, I: int, H: int) -> float:
    """Matmul flops of forward + backward: 3 passes (forward, input grad, weight grad) of 2·m·n·k."""
    G = GATES[kind]
    return 3 * 2 * T * B * (I + H) * G * H


def bench(kind: str, T: int, B: int, I: int, H: int, dtype, repeats: int) -> tuple[float, float]:
    cell = rnnlab.make_cell(kind, I, H, seed=0, dtype=dtype)
    module = to_torch(cell)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, I)).astype(dtype)
    upstream = rng.normal(size=(T, B, H)).astype(dtype)

    def ours():
        hs, cache = cell.forward(x)
        cell.backward(upstream, cache)

    xt, ut = torch.from_numpy(x).requires_grad_(), torch.from_numpy(upstream)

    def theirs():
        module.zero_grad(set_to_none=True)
        out, _ = module(xt)
        (out * ut).sum().backward()

    return best_time(ours, repeats), best_time(theirs, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    print(f"rnnlab {rnnlab.__version__} vs torch {torch.__version__}, {args.dtype}, {threads} threads, "
          f"median of {args.repeats}")
    header = f"{'cell':5} {'T':>4} {'B':>4} {'in':>4} {'hid':>4} {'rnnlab ms':>10} {'torch ms':>9} " \
             f"{'speedup':>8} {'GFLOP/s':>8}"
    print(header)
    print("-" * len(header))
    speedups = []
    for T, B, I, H in SIZES:
        for kind in ("rnn", "gru", "lstm"):
            ours, theirs = bench(kind, T, B, I, H, np.dtype(args.dtype), args.repeats)
            speedups.append(theirs / ours)
            gflops = step_flops(kind, T, B, I, H) / ours / 1e9
            print(f"{kind:5} {T:4d} {B:4d} {I:4d} {H:4d} {ours * 1e3:10.3f} {theirs * 1e3:9.3f} "
                  f"{theirs / ours:8.2f} {gflops:8.2f}")
    geo = float(np.exp(np.mean(np.log(speedups))))
    print(f"geometric-mean speedup over PyTorch: {geo:.2f}x (min {min(speedups):.2f}x, max {max(speedups):.2f}x)")


if __name__ == "__main__":
    main()
