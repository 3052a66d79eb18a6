"""Wall time of training 32 seeds of GRU-10 on embedded Reber (S2's setting: one-hot inputs,
Adam 0.01, batches of 16, 256 training strings) as replicas of one compiled program
(``rnnlab.replicas.fit_replicas``, the jax extra), against one seed and against 32 sequential
single-seed runs of the NumPy engine. Issue 7's target: 32 seeds in at most 4x the time of one.

    python benchmarks/bench_replicas.py [--seeds 32] [--epochs 20] [--repeats 3]

Compilation is measured once, apart (each padded length compiles once per process); every time
printed is the median of the repeats and includes the final evaluation of every replica.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from rnnlab.data.tasks import STUDY_DEFAULTS, build_model, get_task
from rnnlab.replicas import fit_replicas
from rnnlab.train import TrainConfig, fit


def _median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    task = get_task("embedded-reber")
    defaults = STUDY_DEFAULTS["embedded-reber"]
    config = TrainConfig(optimizer=defaults["optimizer"], lr=defaults["lr"], batch_size=defaults["batch_size"],
                         epochs=args.epochs, progress=False)
    train, test = task.splits["train"], task.splits["test"]
    seeds = list(range(args.seeds))

    def models(n: int):
        return [build_model(task, "gru", 10, seed=s, dtype=np.float32) for s in range(n)]

    start = time.perf_counter()
    fit_replicas(models(args.seeds), train, None, test, TrainConfig(**{**vars(config), "epochs": 1}), seeds)
    fit_replicas(models(1), train, None, test, TrainConfig(**{**vars(config), "epochs": 1}), [0])
    fit_replicas(models(args.seeds), train, None, test, TrainConfig(**{**vars(config), "epochs": 1}), seeds,
                 align_lengths=True)
    compile_s = time.perf_counter() - start

    one_numpy = _median_seconds(lambda: fit(models(1)[0], train, None, test, config), args.repeats)
    one_replica = _median_seconds(lambda: fit_replicas(models(1), train, None, test, config, [0]), args.repeats)
    together = _median_seconds(lambda: fit_replicas(models(args.seeds), train, None, test, config, seeds),
                               args.repeats)
    aligned = _median_seconds(lambda: fit_replicas(models(args.seeds), train, None, test, config, seeds,
                                                   align_lengths=True), args.repeats)
    sequential = _median_seconds(
        lambda: [fit(m, train, None, test, TrainConfig(**{**vars(config), "seed": s}))
                 for s, m in zip(seeds, models(args.seeds))], 1)
    n = args.seeds
    print(f"GRU-10 (627 parameters) on embedded Reber, {len(train)} strings, {args.epochs} epochs, float32, "
          f"{cores} cores; median of {args.repeats} (sequential: 1 run); compiling took {compile_s:.1f} s once")
    print(f"one seed, NumPy fit                 {one_numpy:8.2f} s")
    print(f"one seed, fit_replicas (JAX)        {one_replica:8.2f} s")
    print(f"{n} seeds, sequential NumPy fits    {sequential:8.2f} s   ({sequential / one_numpy:5.1f}x one seed)")
    print(f"{n} seeds, fit_replicas (one program){together:8.2f} s   ({together / one_numpy:5.1f}x one NumPy seed, "
          f"{together / one_replica:5.1f}x one JAX replica, {sequential / together:4.1f}x faster than sequential)")
    print(f"{n} seeds, same, align_lengths=True  {aligned:8.2f} s   ({aligned / one_numpy:5.1f}x one NumPy seed, "
          f"{aligned / one_replica:5.1f}x one JAX replica, {sequential / aligned:4.1f}x faster than sequential)")
    for name, seconds in (("fit's exact batch order", together), ("aligned lengths", aligned)):
        verdict = "met" if seconds <= 4 * one_numpy else "NOT met"
        print(f"target {n} seeds <= 4x one seed ({name}): {verdict}")


if __name__ == "__main__":
    main()
