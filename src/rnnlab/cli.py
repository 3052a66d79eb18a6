"""The ``rnnlab`` command line."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _demo(args: argparse.Namespace) -> int:
    """Build the three cells at one parameter budget and prove their backward passes exact."""
    import rnnlab
    from rnnlab.budget import count_params, hidden_for_budget

    inputs = outputs = 7  # the Reber alphabet B T S X V P E
    print(f"Cells at a budget of {args.budget} parameters ({inputs} inputs, {outputs} softmax outputs):")
    sizes = {}
    for kind in ("rnn", "gru", "lstm"):
        sizes[kind] = hidden_for_budget(kind, args.budget, inputs, outputs)
        n = count_params(kind, input_size=inputs, hidden_size=sizes[kind], output_size=outputs)
        print(f"  {kind:4} hidden {sizes[kind]:3d} → {n} parameters")

    print("\nFinite-difference gradient check, float64 (relative error, must be < 1e-6):")
    rng = np.random.default_rng(args.seed)
    T, B = 6, 3
    x = rng.normal(size=(T, B, inputs))
    targets = rng.integers(0, outputs, size=(T, B))
    worst = 0.0
    for kind, kwargs in (("rnn", {"activation": "sigmoid"}), ("gru", {"variant": "cho"}),
                         ("gru", {"variant": "cudnn"}), ("lstm", {})):
        cell = rnnlab.make_cell(kind, inputs, 4, seed=args.seed, init="normal", init_scale=0.5, **kwargs)
        readout = rnnlab.Linear(4, outputs, seed=args.seed)
        start = time.perf_counter()
        hs, cache = cell.forward(x)
        y, readout_cache = readout.forward(hs)
        _, dy = rnnlab.softmax_cross_entropy(y, targets)
        _, dhs = readout.backward(dy, readout_cache)
        grads, _, _ = cell.backward(dhs, cache)

        def loss(arrays, cell=cell, readout=readout):
            cell.params.update(arrays)
            return rnnlab.softmax_cross_entropy(readout.forward(cell.forward(x)[0])[0], targets)[0]

        error = rnnlab.gradcheck(loss, {k: v.copy() for k, v in cell.params.items()}, grads).max_error
        worst = max(worst, error)
        label = " ".join(f"{k}={v}" for k, v in kwargs.items())
        print(f"  {kind:4} {label:16} {error:.1e}  ({(time.perf_counter() - start) * 1e3:.0f} ms)")
    print(f"\nAll backward passes exact: {worst < 1e-6} (worst {worst:.1e}). "
          "Truncated BPTT, masks, every loss and PyTorch parity are proved by the test suite.")
    return 0 if worst < 1e-6 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rnnlab",
        description="A laboratory for recurrent neural networks: RNN, GRU and LSTM from scratch.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    demo = sub.add_parser("demo", help="cells at equal budgets and a gradient check of each",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    demo.add_argument("--budget", type=int, default=600, help="parameter budget shared by the three cells")
    demo.add_argument("--seed", type=int, default=0, help="random seed")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
