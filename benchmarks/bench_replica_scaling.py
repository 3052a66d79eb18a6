"""Wall time of ``fit_replicas`` against the number of replicas: GRU-10 on embedded Reber (S2's
setting: one-hot inputs, Adam 0.01, batches of 16, 256 training strings, 20 epochs, float32,
``align_lengths``), on whatever device JAX picks (``JAX_PLATFORMS=cpu`` forces the CPU).

    python benchmarks/bench_replica_scaling.py 32 256 1024 4096

Each count runs twice with fresh models: the first run compiles (printed apart), the second is timed.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import _shared  # the script's folder is on sys.path
from rnnlab.data.tasks import build_model, get_task
from rnnlab.experiments.defaults import STUDY_DEFAULTS
from rnnlab.replicas import fit_replicas
from rnnlab.train import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counts", type=int, nargs="+", help="numbers of replicas to time")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    task = get_task("embedded-reber")
    defaults = STUDY_DEFAULTS["embedded-reber"]
    config = TrainConfig(optimizer=defaults["optimizer"], lr=defaults["lr"], batch_size=defaults["batch_size"],
                         epochs=args.epochs, progress=False)
    train, test = task.splits["train"], task.splits["test"]

    def run(n: int) -> float:
        models = [build_model(task, "gru", 10, seed=s, dtype=np.float32) for s in range(n)]
        tic = time.perf_counter()
        fit_replicas(models, train, None, test, config, list(range(n)), align_lengths=True)
        return time.perf_counter() - tic

    print(_shared.machine_line())
    print(f"GRU-10 on embedded Reber, {len(train)} strings, {args.epochs} epochs, float32, on {jax.devices()}")
    for n in args.counts:
        first = run(n)
        print(f"{n:6d} replicas: {run(n):7.2f} s (first run, compiling: {first:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
