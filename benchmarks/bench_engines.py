"""1-thread CPU-time ratios of rnnlab's NumPy and Numba engines against PyTorch, measured interleaved.

    python benchmarks/bench_engines.py [--repeats 15] [--dtype float32]

Every thread pool is pinned to 1 thread before anything is imported (OpenBLAS, OpenMP, MKL, Numba,
torch), and the contenders are called in turn, numpy numba torch numpy numba torch …, in this one
process, so a noisy neighbour slows them alike; each row is the median CPU time (time.process_time)
of a training step: forward over T steps and full BPTT to every parameter and the input (torch
computes dx too). Ratios are torch's time over ours (above 1: rnnlab is faster). Last, the first
call of the Numba engine in a fresh process, with and without its on-disk cache.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rnnlab  # noqa: E402
from rnnlab.interop import to_torch  # noqa: E402

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


def interleaved(steps: dict, repeats: int) -> dict[str, float]:
    for step in steps.values():   # warm up (and compile or load the kernels)
        step()
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            t = time.process_time()
            step()
            times[name].append(time.process_time() - t)
    return {name: statistics.median(v) for name, v in times.items()}


def first_call(cache_dir: str | None) -> float:
    env = dict(os.environ, **({"NUMBA_CACHE_DIR": cache_dir} if cache_dir else {}))
    return float(subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True,
                                check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    dtype = np.dtype(args.dtype)
    print(f"rnnlab {rnnlab.__version__} vs torch {torch.__version__}, {args.dtype}, 1 thread, CPU time, interleaved, "
          f"median of {args.repeats}")
    print(f"{'cell':5} {'T':>4} {'B':>4} {'in':>4} {'hid':>4} {'numpy ms':>9} {'numba ms':>9} {'torch ms':>9} "
          f"{'x numpy':>8} {'x numba':>8}")
    ratios: dict[str, list[float]] = {"numpy": [], "numba": []}
    for T, B, I, H in SIZES:
        for kind in ("rnn", "gru", "lstm"):
            m = interleaved(contenders(kind, T, B, I, H, dtype), args.repeats)
            for engine in ratios:
                ratios[engine].append(m["torch"] / m[engine])
            print(f"{kind:5} {T:4d} {B:4d} {I:4d} {H:4d} {m['numpy'] * 1e3:9.3f} {m['numba'] * 1e3:9.3f} "
                  f"{m['torch'] * 1e3:9.3f} {ratios['numpy'][-1]:8.2f} {ratios['numba'][-1]:8.2f}")
    for engine, r in ratios.items():
        geo = math.exp(sum(math.log(v) for v in r) / len(r))
        slower = sum(v < 1 for v in r)
        print(f"{engine:6}: geometric-mean speed-up over torch {geo:.2f}x (min {min(r):.2f}x, max {max(r):.2f}x, "
              f"slower than torch at {slower} of {len(r)} sizes)")
    with tempfile.TemporaryDirectory() as empty:
        cold = first_call(empty)
    warm = first_call(None)
    print(f"numba engine, first forward+backward of rnn, gru and lstm in a fresh process (import included): "
          f"{cold:.1f} s compiling, {warm:.2f} s from the on-disk cache")


if __name__ == "__main__":
    main()
