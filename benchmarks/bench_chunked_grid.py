"""Chunked form or fused loop: the crossover over the issue's grid for the matrix-state cells. A training step
(forward over T steps and full BPTT to every parameter and the input) of DeltaNet and mLSTM on the Numba engine
(the fused loop, which ``auto`` runs below the cell's measured head size) and on the chunked engine (chunks of
``CHUNK_LENGTH`` steps), at head size 64 (the papers' and flash-linear-attention's usual one: heads = hidden / 64).

    python benchmarks/bench_chunked_grid.py [--cells deltanet,mlstm] [--repeats 3] [--docs]
    python benchmarks/bench_chunked_grid.py --all-cores [--docs]

1 thread: every pool pinned before anything is imported, the contenders called in turn (interleaved), median CPU
time. All cores: default pools, each contender's repeats in one block, median wall time. The grid: T ∈ {64, 256,
1,024, 4,096}, hidden ∈ {64, 256, 1,024}, batch ∈ {1, 32}, input 64, float32. A size whose per-step matrix states
(T·B·hidden·64 floats, which both engines cache) would not fit in ``--memory-gib`` is skipped and printed as such.
"""

from __future__ import annotations

import sys

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

ALL_CORES = "--all-cores" in sys.argv
if not ALL_CORES:
    _shared.pin_one_thread()

import argparse  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

import rnnlab  # noqa: E402
from rnnlab.cells import chunks  # noqa: E402

STEPS, HIDDEN, BATCHES, INPUT, HEAD = (64, 256, 1024, 4096), (64, 256, 1024), (1, 32), 64, 64


def training_step(cell_name: str, engine: str, T: int, B: int, H: int):
    cell = rnnlab.make_cell(cell_name, INPUT, H, seed=0, dtype=np.float32, engine=engine, heads=H // HEAD)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, INPUT)).astype(np.float32)
    upstream = rng.normal(size=(T, B, H)).astype(np.float32)

    def step():
        hs, cache = cell.forward(x)
        cell.backward(upstream, cache)
    return step


def main() -> None:
    parser = _shared.argument_parser(__doc__, all_cores=True)
    parser.add_argument("--cells", default="deltanet,mlstm")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-gib", type=float, default=4.0, help="skip sizes whose per-step states exceed this")
    args = parser.parse_args()
    with _shared.PrintedToDocs(_shared.docs_name("chunked-grid", ALL_CORES), args.docs, fenced=True):
        table(args)


def table(args: argparse.Namespace) -> None:
    how = (f"all {os.cpu_count()} cores, wall time, in blocks" if ALL_CORES else "1 thread, CPU time, interleaved")
    print(f"rnnlab {rnnlab.__version__}: head size {HEAD}, chunks of {chunks.CHUNK_LENGTH}, input {INPUT}, float32, "
          f"forward + full BPTT, {how}, median of {args.repeats}")
    print(_shared.machine_line())
    print(f"{'cell':>8} {'T':>5} {'B':>3} {'hid':>5} {'fused ms':>11} {'chunked ms':>11}   fused/chunked")
    for name in args.cells.split(","):
        for B in BATCHES:
            for H in HIDDEN:
                for T in STEPS:
                    state_bytes = T * B * H * HEAD * 4
                    if state_bytes > args.memory_gib * 2 ** 30:
                        print(f"{name:>8} {T:5d} {B:3d} {H:5d}   skipped: {state_bytes / 2 ** 30:.0f} GiB of states")
                        continue
                    steps = {e: training_step(name, e, T, B, H) for e in ("numba", "chunked")}
                    m = _shared.in_blocks(steps, args.repeats) if ALL_CORES else _shared.interleaved(steps,
                                                                                                    args.repeats)
                    print(f"{name:>8} {T:5d} {B:3d} {H:5d} {m['numba'] * 1e3:11.2f} {m['chunked'] * 1e3:11.2f}   "
                          f"{m['numba'] / m['chunked']:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
