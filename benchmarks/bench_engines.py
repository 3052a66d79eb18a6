"""rnnlab's NumPy and Numba engines against PyTorch: 1-thread CPU-time ratios measured interleaved
(the primary figures), or all-core wall-time ratios measured in blocks with pauses.

    python benchmarks/bench_engines.py [--repeats 15] [--dtype float32]
    python benchmarks/bench_engines.py --all-cores [--repeats 15]

1 thread: every thread pool is pinned to 1 thread before anything is imported (OpenBLAS, OpenMP,
MKL, Numba, torch), and the contenders are called in turn, numpy numba torch numpy numba torch …, in
this one process, so a noisy neighbour slows them alike; each row is the median CPU time
(time.process_time) of a training step: forward over T steps and full BPTT to every parameter and
the input (torch computes dx too). Ratios are torch's time over ours (above 1: rnnlab is faster).
Then the share of the single-thread sgemm peak (a 1024³ matmul) that the step's matmuls reach at
the largest size, and the first call of the Numba engine in a fresh process, with and without its
on-disk cache.

All cores: each library keeps its default thread pools (rnnlab's own thread rule included), and
each contender runs a block of repeats, median wall time, with a pause between blocks so that one
block's threads do not slow the next.
"""

from __future__ import annotations

import os
import sys

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

ALL_CORES = "--all-cores" in sys.argv
if not ALL_CORES:
    _shared.pin_one_thread()

import argparse  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rnnlab  # noqa: E402
from rnnlab.cells.kernel_blas import blas_description  # noqa: E402
from rnnlab.engines.threads import choose_threads  # noqa: E402
from rnnlab.interop import to_torch  # noqa: E402
from rnnlab.machine import processor_name  # noqa: E402

if not ALL_CORES:
    torch.set_num_threads(1)
SIZES = [(20, 100, 50, 50), (50, 32, 7, 18), (20, 5, 50, 50), (35, 20, 200, 200), (100, 64, 88, 256),
         (12, 32, 7, 10)]
FIRST_CALL = """
import time, numpy as np
t = time.perf_counter()
import rnnlab
for kind in ("rnn", "gru", "lstm"):
    cell = rnnlab.make_cell(kind, 7, 10, engine="numba", dtype=np.float32, seed=0)
    hs, cache = cell.forward(np.ones((12, 32, 7), np.float32))
    cell.backward(np.ones_like(hs), cache)
print(time.perf_counter() - t)
"""


def contenders(kind: str, T: int, B: int, I: int, H: int, dtype):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, I)).astype(dtype)
    upstream = rng.normal(size=(T, B, H)).astype(dtype)
    out = {}
    for engine in ("numpy", "numba"):
        cell = rnnlab.make_cell(kind, I, H, seed=0, dtype=dtype, engine=engine)

        def step(cell=cell):
            hs, cache = cell.forward(x)
            cell.backward(upstream, cache)
        # all cores: the thread count fit and evaluate would choose, set around the block (in_blocks)
        step.threads = choose_threads(B, H, cell.gates)
        out[engine] = step
    module = to_torch(rnnlab.make_cell(kind, I, H, seed=0, dtype=dtype))
    xt, ut = torch.tensor(x, requires_grad=True), torch.tensor(upstream)

    def torch_step():
        module.zero_grad()
        xt.grad = None
        hs, _ = module(xt)
        (hs * ut).sum().backward()
    out["torch"] = torch_step
    return out


def matmul_flops(kind: str, T: int, B: int, I: int, H: int) -> float:
    """Multiply-adds ×2 of one training step's matmuls: x W_x, h W_h per step, dh W_hᵀ per step, the
    two weight gradients and dx (the GRU's cho variant has the same count)."""
    G = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    return 2.0 * T * B * G * H * (3 * I + 3 * H)


def first_call(cache_dir: str | None) -> float:
    env = dict(os.environ, **({"NUMBA_CACHE_DIR": cache_dir} if cache_dir else {}))
    return float(subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True,
                                check=True).stdout)


def main() -> None:
    parser = _shared.argument_parser(__doc__, all_cores=True)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    with _shared.PrintedToDocs(_shared.docs_name("engines", ALL_CORES), args.docs, fenced=True):
        table(args)


def table(args: argparse.Namespace) -> None:
    dtype = np.dtype(args.dtype)
    how = (f"all {os.cpu_count()} cores, wall time, in blocks with pauses" if ALL_CORES
           else "1 thread, CPU time, interleaved")
    print(f"rnnlab {rnnlab.__version__} vs torch {torch.__version__}, {args.dtype}, {how}, median of {args.repeats}")
    print(f"{processor_name()}; {blas_description()}")
    print(f"{'cell':5} {'T':>4} {'B':>4} {'in':>4} {'hid':>4} {'numpy ms':>9} {'numba ms':>9} {'torch ms':>9} "
          f"{'x numpy':>8} {'x numba':>8}")
    ratios: dict[str, list[float]] = {"numpy": [], "numba": []}
    largest: dict[str, dict[str, float]] = {}
    stolen: dict[str, float] = {}
    for T, B, I, H in SIZES:
        for kind in ("rnn", "gru", "lstm"):
            steps = contenders(kind, T, B, I, H, dtype)
            steal = _shared.stolen_seconds()
            m = _shared.in_blocks(steps, args.repeats) if ALL_CORES else _shared.interleaved(steps, args.repeats)
            stolen[f"{kind} {(T, B, I, H)}"] = _shared.stolen_seconds() - steal
            if (T, B, I, H) == (100, 64, 88, 256):
                largest[kind] = m
            for engine in ratios:
                ratios[engine].append(m["torch"] / m[engine])
            print(f"{kind:5} {T:4d} {B:4d} {I:4d} {H:4d} {m['numpy'] * 1e3:9.3f} {m['numba'] * 1e3:9.3f} "
                  f"{m['torch'] * 1e3:9.3f} {ratios['numpy'][-1]:8.2f} {ratios['numba'][-1]:8.2f}")
    for engine, r in ratios.items():
        geo = math.exp(sum(math.log(v) for v in r) / len(r))
        slower = sum(v < 1 for v in r)
        print(f"{engine:6}: geometric-mean speed-up over torch {geo:.2f}x (min {min(r):.2f}x, max {max(r):.2f}x, "
              f"slower than torch at {slower} of {len(r)} sizes)")
    if ALL_CORES:
        if sum(stolen.values()):     # wall time on a virtual machine moves with it
            worst = max(stolen, key=stolen.get)
            print(f"CPU time stolen by the hypervisor while the blocks ran: {sum(stolen.values()):.1f} s in all, "
                  f"most at {worst} ({stolen[worst]:.1f} s)")
        return
    peak = _shared.gemm_rate(dtype, repeats=10)
    for kind, m in largest.items():
        flops = matmul_flops(kind, 100, 64, 88, 256)
        shares = ", ".join(f"{name} {flops / t / peak:.0%}" for name, t in m.items())
        print(f"{kind} (100, 64, 88, 256): matmul FLOPs / step time / sgemm peak ({peak / 1e9:.0f} GFLOP/s): {shares}")
    with tempfile.TemporaryDirectory() as empty:
        cold = first_call(empty)
    warm = first_call(None)
    print(f"numba engine, first forward+backward of rnn, gru and lstm in a fresh process (import included): "
          f"{cold:.1f} s compiling, {warm:.2f} s from the on-disk cache")


if __name__ == "__main__":
    main()
