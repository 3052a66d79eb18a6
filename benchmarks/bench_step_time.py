"""Training-step time (forward + full BPTT) of rnnlab's engines against PyTorch, side by side.

    python benchmarks/bench_step_time.py [--dtype float32] [--repeats 20] [--no-jax]

For each (T, B, input, hidden) and cell, every contender gets the same weights and input; the step is
forward over T steps plus backward of sum(hs * upstream) to every parameter and the input.
- numpy: ``cell.forward`` + ``cell.backward`` (NumPy engine)
- jax: ``cell.forward`` + ``cell.backward`` with ``engine="jax"`` (NumPy arrays in and out)
- jax-fused: the compiled engine's single forward+backward program on device arrays
- torch: ``nn.RNN/GRU/LSTM`` + autograd, ``torch.set_num_threads`` = this process's cores
Speed-ups are torch time / our time (above 1: rnnlab is faster). GFLOP/s counts the matmul work of
the step (forward, input gradient, weight gradient) against the float32 matmul peak measured here.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch

import _shared  # the script's folder is on sys.path
import rnnlab
from rnnlab.interop import to_torch

SIZES = [(20, 100, 50, 50), (50, 32, 7, 18), (20, 5, 50, 50), (35, 20, 200, 200), (100, 64, 88, 256),
         (12, 32, 7, 10)]
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def step_flops(kind: str, T: int, B: int, I: int, H: int) -> float:
    return 3 * 2 * T * B * (I + H) * GATES[kind] * H


def bench(kind, T, B, I, H, dtype, repeats, with_jax):
    cell = rnnlab.make_cell(kind, I, H, seed=0, dtype=dtype)
    module = to_torch(cell)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, I)).astype(dtype)
    upstream = rng.normal(size=(T, B, H)).astype(dtype)
    times = {}

    def ours():
        hs, cache = cell.forward(x)
        cell.backward(upstream, cache)

    times["numpy"] = _shared.median_time(ours, repeats)
    if with_jax:
        import jax
        import jax.numpy as jnp

        from rnnlab.engines.jax import fused_step

        compiled = rnnlab.make_cell(kind, I, H, seed=0, dtype=dtype, engine="jax")

        def jax_api():
            hs, cache = compiled.forward(x)
            compiled.backward(upstream, cache)

        times["jax"] = _shared.median_time(jax_api, repeats)
        run = fused_step(compiled)
        p = {k: jnp.asarray(v) for k, v in compiled.params.items()}
        xj, uj = jnp.asarray(x), jnp.asarray(upstream)
        times["jax-fused"] = _shared.median_time(lambda: jax.block_until_ready(run(p, xj, uj)), repeats)
    xt, ut = torch.from_numpy(x).requires_grad_(), torch.from_numpy(upstream)

    def theirs():
        module.zero_grad(set_to_none=True)
        out, _ = module(xt)
        (out * ut).sum().backward()

    times["torch"] = _shared.median_time(theirs, repeats)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-jax", action="store_true", help="skip the compiled engine")
    args = parser.parse_args()
    with_jax = not args.no_jax
    if with_jax:
        try:
            import jax  # noqa: F401
        except ImportError:
            print(_shared.machine_line())
            print("jax is not installed (pip install -e '.[jax]'); benchmarking the NumPy engine only")
            with_jax = False
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    dtype = np.dtype(args.dtype)
    peak = _shared.gemm_rate(dtype, size=1536, repeats=10, cpu_time=False) / 1e9
    print(f"rnnlab {rnnlab.__version__} vs torch {torch.__version__}, {args.dtype}, {threads} cores/threads, "
          f"median of {args.repeats}; {args.dtype} matmul peak measured here: {peak:.0f} GFLOP/s")
    names = ["numpy"] + (["jax", "jax-fused"] if with_jax else [])
    header = f"{'cell':5} {'T':>4} {'B':>4} {'in':>4} {'hid':>4} " + " ".join(f"{n + ' ms':>13}" for n in names) + \
        f" {'torch ms':>9} " + " ".join(f"{'x ' + n:>11}" for n in names) + f" {'best GFLOP/s':>13} {'% peak':>7}"
    print(header)
    print("-" * len(header))
    ratios = {n: [] for n in names}
    for T, B, I, H in SIZES:
        for kind in ("rnn", "gru", "lstm"):
            t = bench(kind, T, B, I, H, dtype, args.repeats, with_jax)
            best = min(t[n] for n in names)
            gflops = step_flops(kind, T, B, I, H) / best / 1e9
            for n in names:
                ratios[n].append(t["torch"] / t[n])
            print(f"{kind:5} {T:4d} {B:4d} {I:4d} {H:4d} " + " ".join(f"{t[n] * 1e3:13.3f}" for n in names) +
                  f" {t['torch'] * 1e3:9.3f} " + " ".join(f"{t['torch'] / t[n]:11.2f}" for n in names) +
                  f" {gflops:13.1f} {100 * gflops / peak:6.1f}%")
    for n in names:
        r = np.array(ratios[n])
        print(f"{n:9}: geometric-mean speed-up over torch {np.exp(np.log(r).mean()):.2f}x "
              f"(min {r.min():.2f}x, max {r.max():.2f}x, slower than torch at {(r < 1).sum()} of {len(r)} sizes)")


if __name__ == "__main__":
    main()
