"""One training step of S4's language model (sigmoid RNN-50, one-hot inputs over 2,000 words, a batch
of 100 sentences, summed-per-sentence loss), with its one-hot inputs read as row lookups of the input
weights (rnnlab's path) against the dense one-hot matrix multiplied as before: 1 thread, CPU time,
the two interleaved in one process.

    python benchmarks/bench_one_hot.py [--blocks 5] [--steps 20]

Needs the NLU data (``rnnlab data list``). The two paths compute the same states exactly and the same
gradients to rounding (tests/test_engines.py); only the time differs.
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"      # every thread pool pinned before NumPy is imported

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from rnnlab.experiments.settings import build, default_settings  # noqa: E402
from rnnlab.models import RecurrentModel, model_inputs  # noqa: E402


def dense_inputs(model: RecurrentModel, x) -> np.ndarray:
    """The path before row lookups: the (T, B, vocab) one-hot matrix."""
    return model_inputs(model, model.params, np.asarray(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    settings = dict(default_settings("nlu-lm", hidden=50, batch_size=100), seed=0)
    task, model = build(settings)
    batch = next(iter(task.splits["train"].batches(100, np.random.default_rng(0))))
    row_lookups = RecurrentModel._inputs

    def cpu_ms(inputs) -> float:
        RecurrentModel._inputs = inputs
        model.loss_and_grads(batch, None, 0, normalization="sequence")
        started = time.process_time()
        for _ in range(args.steps):
            model.loss_and_grads(batch, None, 0, normalization="sequence")
        return (time.process_time() - started) / args.steps * 1000

    times: dict[str, list[float]] = {"row lookups": [], "dense one-hot": []}
    for _ in range(args.blocks):
        times["row lookups"].append(cpu_ms(row_lookups))
        times["dense one-hot"].append(cpu_ms(dense_inputs))
    RecurrentModel._inputs = row_lookups
    print(f"{platform.processor() or platform.machine()}; batch {np.asarray(batch.x).shape} (T, B), vocab "
          f"{model.input_size}, hidden {model.hidden_size}; 1 thread, CPU ms per step (median of {args.blocks})")
    for name, values in times.items():
        print(f"  {name:14s} {np.median(values):7.2f}")
    print(f"  dense / row lookups: {np.median(times['dense one-hot']) / np.median(times['row lookups']):.2f}x")


if __name__ == "__main__":
    main()
