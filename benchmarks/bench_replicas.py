"""Wall time of training 32 seeds of GRU-10 on embedded Reber (S2's setting: one-hot inputs,
Adam 0.01, batches of 16, 256 training strings) as replicas of one compiled program
(``rnnlab.replicas.fit_replicas``, the jax extra), against one seed and against 32 sequential
single-seed runs of the NumPy engine. Issue 7's target: 32 seeds in at most 4x the time of one.

    python benchmarks/bench_replicas.py [--seeds 32] [--epochs 20] [--repeats 3]

Each configuration runs once first (it compiles every padded length it meets, once per process;
that time is printed apart), then the median of the repeats is printed; every time includes the
final evaluation of every replica.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import _shared  # the script's folder is on sys.path
from _shared import median_time  # the script's folder is on sys.path
from rnnlab.data.tasks import build_model, get_task
from rnnlab.experiments.defaults import STUDY_DEFAULTS
from rnnlab.replicas import fit_replicas
from rnnlab.train import TrainConfig, fit


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

    def replicas(n: int, **options):
        return lambda: fit_replicas(models(n), train, None, test, config, seeds[:n], **options)

    start = time.perf_counter()
    one_numpy = median_time(lambda: fit(models(1)[0], train, None, test, config), args.repeats, warmups=0)
    sequential = median_time(
        lambda: [fit(m, train, None, test, TrainConfig(**{**vars(config), "seed": s}))
                 for s, m in zip(seeds, models(args.seeds))], 1, warmups=0)
    n = args.seeds
    rows = [("one seed, fit_replicas (JAX)", 1, {}),
            (f"{n} seeds, one program, fit's batch order", n, {}),
            (f"{n} seeds, one program, align_lengths", n, {"align_lengths": True}),
            (f"{n} seeds, one program, align_lengths, bucket 2", n, {"align_lengths": True, "length_bucket": 2})]
    timed = []
    for name, count, options in rows:
        tic = time.perf_counter()
        replicas(count, **options)()          # compiles every padded length it meets
        compile_s = time.perf_counter() - tic
        timed.append((name, count, median_time(replicas(count, **options), args.repeats, warmups=0), compile_s))
    print(_shared.machine_line())
    print(f"GRU-10 ({models(1)[0].num_params()} parameters) on embedded Reber, {len(train)} strings, {args.epochs} "
          f"epochs, float32, {cores} cores; median of {args.repeats} after a first (compiling) run; "
          f"{time.perf_counter() - start:.0f} s in all")
    print(f"{'one seed, NumPy fit':48} {one_numpy:7.2f} s")
    print(f"{f'{n} seeds, sequential NumPy fits':48} {sequential:7.2f} s  ({sequential / one_numpy:5.1f}x one seed)")
    for name, count, seconds, compile_s in timed:
        extra = f", {sequential / seconds:4.1f}x faster than sequential" if count == n else ""
        print(f"{name:48} {seconds:7.2f} s  ({seconds / one_numpy:5.1f}x one NumPy seed{extra}; first run "
              f"{compile_s:.1f} s)")
    for name, _, seconds, _ in timed[1:]:
        verdict = "met" if seconds <= 4 * one_numpy else "NOT met"
        print(f"target {n} seeds <= 4x one seed, {name.split('program, ')[1]}: {verdict}")


if __name__ == "__main__":
    main()
