"""One training step of S4's language model (sigmoid RNN-50, one-hot inputs over 2,000 words, a batch
of 100 sentences, summed-per-sentence loss) three ways: rnnlab's (one-hot inputs as row lookups of the
input weights, the softmax cross-entropy, its gradient and accuracy in one compiled pass), with the
NumPy loss instead, and as before both (the dense one-hot matrix multiplied, the NumPy loss): 1 thread,
CPU time, the three interleaved in one process.

    python benchmarks/bench_lm_step.py [--blocks 5] [--steps 20]

Needs the NLU data (``rnnlab data list``). The three compute the same numbers to rounding
(tests/test_engines.py, tests/test_losses.py); only the time differs.
"""

from __future__ import annotations

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

_shared.pin_one_thread()

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import rnnlab.models as models  # noqa: E402
from rnnlab.experiments.settings import build, default_settings  # noqa: E402
from rnnlab.losses import softmax_cross_entropy_terms  # noqa: E402
from rnnlab.machine import processor_name  # noqa: E402
from rnnlab.models import RecurrentModel, model_inputs  # noqa: E402


def dense_inputs(model: RecurrentModel, x) -> np.ndarray:
    """The path before row lookups: the (T, B, vocab) one-hot matrix."""
    return model_inputs(model, model.params, np.asarray(x))


def numpy_loss(logits, targets, w, per=None):
    """The loss before its compiled pass: the pure NumPy function, then the argmax for the accuracy."""
    loss, dlogits = softmax_cross_entropy_terms(logits, targets, w, np, per)
    return loss, dlogits, ((logits.argmax(axis=-1) == targets) * w).sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    settings = dict(default_settings("nlu-lm", hidden=50, batch_size=100), seed=0)
    task, model = build(settings)
    batch = next(iter(task.splits["train"].batches(100, np.random.default_rng(0))))
    row_lookups, fused = RecurrentModel._inputs, models.softmax_cross_entropy_fused
    ways = {"rnnlab": (row_lookups, fused), "NumPy loss": (row_lookups, numpy_loss),
            "before (dense, NumPy loss)": (dense_inputs, numpy_loss)}

    def cpu_ms(inputs, loss) -> float:
        RecurrentModel._inputs, models.softmax_cross_entropy_fused = inputs, loss
        model.loss_and_grads(batch, None, 0, normalization="sequence")
        started = time.process_time()
        for _ in range(args.steps):
            model.loss_and_grads(batch, None, 0, normalization="sequence")
        return (time.process_time() - started) / args.steps * 1000

    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.blocks):
        for name, way in ways.items():
            times[name].append(cpu_ms(*way))
    RecurrentModel._inputs, models.softmax_cross_entropy_fused = row_lookups, fused
    print(_shared.machine_line())
    print(f"{processor_name()}; batch {np.asarray(batch.x).shape} (T, B), vocab "
          f"{model.input_size}, hidden {model.hidden_size}; 1 thread, CPU ms per step (median of {args.blocks})")
    base = np.median(times["rnnlab"])
    for name, values in times.items():
        print(f"  {name:28s} {np.median(values):7.2f}  ({np.median(values) / base:.2f}x rnnlab's)")


if __name__ == "__main__":
    main()
