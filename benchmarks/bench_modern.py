"""The modern recurrences against what a PyTorch user runs on a CPU: a training step (forward over T steps, full
BPTT to every parameter and the input) of each new cell, rnnlab's engine ``auto`` against the PyTorch reference of
the cell's own form — the per-step loops of ``selective_scan_ref``, flash-linear-attention's naive recurrent
references and xLSTM's vanilla backend, minLSTM's log-space scan (its official parallel path) — written from the
papers in ``tests/test_modern_cells.py``, where each is proved equal to rnnlab's cell (forward 1e-12, gradients
1e-9).

    python benchmarks/bench_modern.py [--repeats 5] [--docs]

1 thread, every pool pinned before anything is imported; the two contenders called in turn in this one process
(interleaved); median CPU time; float64 (the references' dtype). Ratios are torch's time over rnnlab's (above 1:
rnnlab is faster). The sizes are (T, B, in, hidden) = (256, 32, 64, 256) and (1,024, 8, 64, 256).
"""

from __future__ import annotations

import os
import sys

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

_shared.pin_one_thread()

import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rnnlab  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import test_modern_cells as refs  # noqa: E402  (the references, proved equal to the cells there)

torch.set_num_threads(1)
SIZES = [(256, 32, 64, 256), (1024, 8, 64, 256)]
CELLS = {
    "minlstm": ({}, lambda p, x, s, c: refs.ref_minlstm(p, x, s[0]), "log-space scan (minRNNs' parallel path)"),
    "diag-linear": ({}, lambda p, x, s, c: refs.ref_diag_linear(p, x, s[0], False), "loop"),
    "rglru": ({}, lambda p, x, s, c: refs.ref_rglru(p, x, s[0]), "loop"),
    "lru": ({}, lambda p, x, s, c: refs.ref_lru(p, x, torch.complex(s[1], s[2]), c.n), "loop, complex"),
    "s6": ({}, lambda p, x, s, c: refs.ref_s6(p, x, s[1], c.d_state, False), "selective_scan_ref's loop"),
    "slstm": ({"heads": 4}, lambda p, x, s, c: refs.ref_slstm(p, x, s, c.heads, False), "vanilla backend's loop"),
    "mlstm": ({"heads": 4}, lambda p, x, s, c: refs.ref_mlstm(p, x, s, c.heads), "recurrent loop"),
    "deltanet": ({"heads": 4}, lambda p, x, s, c: refs.ref_delta(p, x, s[1], c.heads, False, False),
                 "fla's naive recurrent loop"),
    "gated-deltanet": ({"heads": 4}, lambda p, x, s, c: refs.ref_delta(p, x, s[1], c.heads, True, False),
                       "fla's naive recurrent loop"),
}


def contenders(name: str, T: int, B: int, I: int, H: int):
    options, reference, _ = CELLS[name]
    refs.T, refs.B, refs.I, refs.H = T, B, I, H          # the references read their sizes from the module
    cell = rnnlab.make_cell(name, I, H, seed=0, engine="auto", **options)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, I))
    upstream = rng.normal(size=(T, B, H))
    state0 = cell.random_state(rng, B)
    if name == "minlstm":                              # the log-space scan needs h0 > 0
        state0 = tuple(np.abs(s) + 0.1 for s in state0)
    h0 = state0[0] if cell.state_size == 1 else state0

    def ours():
        hs, cache = cell.forward(x, h0)
        cell.backward(upstream, cache)

    p = {n: torch.tensor(v, requires_grad=True) for n, v in cell.params.items()}
    xt, ut = torch.tensor(x, requires_grad=True), torch.tensor(upstream)
    st = tuple(torch.tensor(s) for s in state0)

    def theirs():
        for v in p.values():
            v.grad = None
        xt.grad = None
        (reference(p, xt, st, cell) * ut).sum().backward()
    return cell.engine, {"rnnlab": ours, "torch": theirs}


def main() -> None:
    parser = _shared.argument_parser(__doc__, all_cores=False)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cells", default=",".join(CELLS))
    args = parser.parse_args()
    with _shared.PrintedToDocs(_shared.docs_name("modern", False), args.docs, fenced=True):
        print(f"rnnlab {rnnlab.__version__} vs torch {torch.__version__}, float64, 1 thread, CPU time, interleaved, "
              f"median of {args.repeats}; training step = forward + full BPTT")
        print(_shared.machine_line())
        print(f"{'cell':15} {'engine':6} {'T':>5} {'B':>3} {'in':>3} {'hid':>4} {'rnnlab ms':>10} {'torch ms':>10} "
              f"{'x torch':>8}  torch reference")
        ratios = []
        for name in args.cells.split(","):
            for T, B, I, H in SIZES:
                engine, steps = contenders(name, T, B, I, H)
                m = _shared.interleaved(steps, args.repeats)
                ratios.append(m["torch"] / m["rnnlab"])
                print(f"{name:15} {engine:6} {T:5d} {B:3d} {I:3d} {H:4d} {m['rnnlab'] * 1e3:10.1f} "
                      f"{m['torch'] * 1e3:10.1f} {ratios[-1]:8.2f}  {CELLS[name][2]}", flush=True)
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geometric-mean speed-up over torch {geo:.2f}x (min {min(ratios):.2f}x, max {max(ratios):.2f}x; "
              f"at least 3x at {sum(r >= 3 for r in ratios)} of {len(ratios)})")


if __name__ == "__main__":
    main()
