"""The chunked forms against their fused loops: a training step (forward + full BPTT) of DeltaNet, Gated DeltaNet
and mLSTM on the chunked engine at chunk lengths 16, 32 and 64, and on the Numba engine, at the modern cells'
benchmark sizes (T, B) = (256, 32) and (1,024, 8), input 64, hidden 256, float32, heads 8, 4, 2 and 1 (head size
32, 64, 128, 256). 1 thread, every pool pinned before anything is imported, the contenders interleaved, best CPU time
of ``--repeats``. The rules ``auto`` applies (``rnnlab.cells.deltanet.CHUNKED_FROM_HEAD_DIM``,
``rnnlab.cells.xlstm.MLSTM_CHUNKED_FROM_HEAD_DIM``) come from this table.

    python benchmarks/bench_chunked.py [--cells deltanet,gated-deltanet,mlstm] [--heads 8,4,2,1] [--repeats 3] [--docs]
"""

from __future__ import annotations

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

_shared.pin_one_thread()

import time  # noqa: E402

import numpy as np  # noqa: E402

import rnnlab  # noqa: E402
from rnnlab.cells import chunks  # noqa: E402

SIZES, INPUT, HIDDEN, LENGTHS = ((256, 32), (1024, 8)), 64, 256, (16, 32, 64)


def training_step(cell, x, upstream, length: int) -> float:
    chunks.CHUNK_LENGTH = length
    start = time.process_time()
    hs, cache = cell.forward(x)
    cell.backward(upstream, cache)
    return time.process_time() - start


def row(name: str, heads: int, T: int, B: int, repeats: int) -> str:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, INPUT)).astype(np.float32)
    upstream = rng.normal(size=(T, B, HIDDEN)).astype(np.float32)
    cells = {e: rnnlab.make_cell(name, INPUT, HIDDEN, seed=0, dtype=np.float32, engine=e, heads=heads)
             for e in ("numba", "chunked")}
    ways = [("numba", 32)] + [("chunked", L) for L in LENGTHS]
    for engine, L in ways:                      # compile and warm every contender first
        training_step(cells[engine], x, upstream, L)
    times: dict = {w: [] for w in ways}
    for _ in range(repeats):
        for engine, L in ways:
            times[(engine, L)].append(training_step(cells[engine], x, upstream, L))
    best = {w: 1e3 * min(v) for w, v in times.items()}
    chunked = min(best[w] for w in ways[1:])
    return (f"| {name} | {heads} ({HIDDEN // heads}) | {T}, {B} | {best[ways[0]]:.1f} | " +
            " | ".join(f"{best[w]:.1f}" for w in ways[1:]) + f" | {best[ways[0]] / chunked:.2f}× |")


def main() -> None:
    parser = _shared.argument_parser(__doc__, all_cores=False)
    parser.add_argument("--cells", default="deltanet,gated-deltanet,mlstm")
    parser.add_argument("--heads", default="8,4,2,1")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with _shared.PrintedToDocs(_shared.docs_name("chunked", False), args.docs, fenced=False):
        print(f"rnnlab {rnnlab.__version__}: chunked form vs fused loop, input {INPUT}, hidden {HIDDEN}, float32, "
              f"forward + full BPTT, 1 thread, CPU time, interleaved, best of {args.repeats} (ms)\n")
        print(_shared.machine_line() + "\n")
        print("| cell | heads (d) | T, B | fused loop | " + " | ".join(f"chunked L = {L}" for L in LENGTHS) +
              " | best chunked ÷ loop |")
        print("|---|---|---|---|" + "---|" * len(LENGTHS) + "---|")
        for name in args.cells.split(","):
            for heads in (int(h) for h in args.heads.split(",")):
                for T, B in SIZES:
                    print(row(name, heads, T, B, args.repeats), flush=True)


if __name__ == "__main__":
    main()
