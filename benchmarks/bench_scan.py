"""Loop or scan: where, on a CPU, solving a linear recurrence over all steps at once beats running its step T
times. A training step (forward over T steps and full BPTT to every parameter and the input) of a cell linear in
its state, by each way rnnlab can run it:

- ``numpy loop``: the reference engine, a Python loop over the step and its adjoint;
- ``jax loop``: the step and its adjoint under ``jax.jit`` with ``lax.scan`` as the loop;
- ``numba loop``: the cell's fused kernels (where it has them), the whole loop compiled;
- ``scan seq``: the scan engine with the compiled sequential solver;
- ``scan assoc``: the scan engine with the associative (Hillis–Steele) solver, the parallel form.

    python benchmarks/bench_scan.py [--cell diag-linear] [--repeats 5] [--docs]
    python benchmarks/bench_scan.py --all-cores [--docs]

1 thread: every pool pinned before anything is imported, the contenders called in turn (interleaved), median
CPU time. All cores: default pools, each contender's repeats in one block, median wall time. The grid is the
issue's: T ∈ {64, 256, 1,024, 4,096}, hidden ∈ {64, 256, 1,024}, batch ∈ {1, 32}, input 64, float32. A size
whose arrays would not fit in ``--memory-gib`` is skipped and printed as such.
"""

from __future__ import annotations

import sys

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

ALL_CORES = "--all-cores" in sys.argv
if not ALL_CORES:
    _shared.pin_one_thread()

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

import rnnlab  # noqa: E402
from rnnlab.engines import scan  # noqa: E402

STEPS, HIDDEN, BATCHES, INPUT = (64, 256, 1024, 4096), (64, 256, 1024), (1, 32), 64
WAYS = ("numpy loop", "jax loop", "numba loop", "scan seq", "scan assoc")


def training_step(cell_name: str, way: str, T: int, B: int, H: int, options: dict):
    engine = {"numpy loop": "numpy", "jax loop": "jax", "numba loop": "numba"}.get(way, "scan")
    solver = {"scan seq": "sequential", "scan assoc": "associative"}.get(way)
    cell = rnnlab.make_cell(cell_name, INPUT, H, seed=0, dtype=np.float32, engine=engine, **options)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, INPUT)).astype(np.float32)
    upstream = rng.normal(size=(T, B, H)).astype(np.float32)

    def step():
        if solver is not None:
            scan.SOLVER = solver
        hs, cache = cell.forward(x)
        cell.backward(upstream, cache)
    return step


def main() -> None:
    parser = _shared.argument_parser(__doc__, all_cores=True)
    parser.add_argument("--cell", default="diag-linear")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-gib", type=float, default=12.0, help="skip sizes whose arrays exceed this")
    args = parser.parse_args()
    with _shared.PrintedToDocs(_shared.docs_name(f"scan-{args.cell}", ALL_CORES), args.docs, fenced=True):
        table(args)


def table(args: argparse.Namespace) -> None:
    ways = [w for w in WAYS if w != "jax loop" or importlib.util.find_spec("jax") is not None]
    if not rnnlab.make_cell(args.cell, 2, 2).has_kernels():
        ways.remove("numba loop")
    how = (f"all {os.cpu_count()} cores, wall time, in blocks" if ALL_CORES else "1 thread, CPU time, interleaved")
    print(f"rnnlab {rnnlab.__version__}: {args.cell}, input {INPUT}, float32, forward + full BPTT, {how}, median of "
          f"{args.repeats} (fewer above 10^8 elements)")
    print(_shared.machine_line())
    print(f"{'T':>5} {'B':>3} {'hid':>5} " + " ".join(f"{w + ' ms':>14}" for w in ways) +
          "   fastest  seq/loop (the faster of the NumPy and JAX step loops over the sequential scan)")
    for B in BATCHES:
        for H in HIDDEN:
            for T in STEPS:
                elements = T * B * H
                if elements * 4 * 40 > args.memory_gib * 2 ** 30:     # ~40 (T, B, H) float32 arrays at the peak
                    print(f"{T:5d} {B:3d} {H:5d}   skipped: about {elements * 160 / 2 ** 30:.0f} GiB of arrays")
                    continue
                repeats = args.repeats if elements < 10 ** 7 else max(2, args.repeats // 2)
                steps = {w: training_step(args.cell, w, T, B, H, {}) for w in ways}
                m = _shared.in_blocks(steps, repeats) if ALL_CORES else _shared.interleaved(steps, repeats)
                fastest = min(m, key=m.get)
                loops = min(m[w] for w in ways if w in ("numpy loop", "jax loop"))
                print(f"{T:5d} {B:3d} {H:5d} " + " ".join(f"{m[w] * 1e3:14.2f}" for w in ways) +
                      f"   {fastest:10} {loops / m['scan seq']:6.1f}x", flush=True)


if __name__ == "__main__":
    main()
