"""One training step of each study's whole model, rnnlab against the PyTorch script of the same model.

A step is what a user's loop runs: inputs, recurrent layers, readout, loss, backward, the finiteness
checks, clipping and the optimizer's update (rnnlab: ``rnnlab.train.train_step``, the step of every
training loop; PyTorch: ``nn.RNN/GRU/LSTM`` + ``nn.Linear`` (+ ``nn.Embedding``) + the same loss +
``torch.optim``, with the same weights, copied by ``rnnlab.interop``). Each model is the study's own
configuration (``EXPERIMENTS[study]``) at its real batch shape: one training batch drawn as training
draws it.

    python benchmarks/bench_models.py                 # 1 thread: CPU time, the two interleaved in one process
    python benchmarks/bench_models.py --threads all   # every core: wall time, in blocks with pauses

Every thread pool is pinned before NumPy and PyTorch are imported. Two substitutions keep the models
the same in both: S4's sigmoid RNN runs with tanh (``nn.RNN`` has no sigmoid) and S2's Cho GRU as
the cuDNN GRU (``nn.GRU``'s); the cost of a step does not depend on either. Both steps draw S3's
weight noise where the study sets it (the polyphonic models: the gradient at perturbed weights, the
update to the clean ones). Where a study truncates BPTT (S4's LM, k = 5), the PyTorch script runs
full BPTT, which costs it less: rnnlab's backward carries k + 1 ages of deltas. Models whose data is
missing (``rnnlab data list``) are skipped, saying so. The floor column is the step's matrix-product
FLOPs over this machine's measured float32 GEMM rate at the same thread count: the time a step
could not beat.
"""

from __future__ import annotations

import sys

import _shared  # the script's folder is on sys.path; first: it pins the pools before NumPy loads

ALL_CORES = "--threads" in sys.argv and sys.argv[sys.argv.index("--threads") + 1] == "all"
if not ALL_CORES:
    _shared.pin_one_thread()

import rnnlab  # noqa: E402, F401  (first: it sets OpenBLAS's idle-thread timeout before NumPy loads OpenBLAS)

# isort: split
import argparse  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from rnnlab.cells.kernel_blas import blas_description  # noqa: E402
from rnnlab.engines.threads import blas_threads  # noqa: E402
from rnnlab.experiments.settings import build, train_config  # noqa: E402
from rnnlab.experiments.studies import EXPERIMENTS  # noqa: E402
from rnnlab.interop import to_torch  # noqa: E402
from rnnlab.machine import cpu_cores, processor_name  # noqa: E402
from rnnlab.optim import make_optimizer  # noqa: E402
from rnnlab.train import train_step, training_threads  # noqa: E402

# (label, study, configuration key, settings changed so that PyTorch has the same model)
MODELS = (
    ("mean-sign 2×RNN-64", "mean-sign", "rnn-64x2", {}),
    ("embedded Reber GRU-10", "embedded-reber", "gru-10", {"variant": "cudnn"}),
    ("NLU LM RNN-50 (one-hot 2,000)", "nlu-lm", "h50-lr0.5-k5", {"activation": "tanh"}),
    ("SST-5 GRU-64", "sentiment", "sst5-gru", {}),
    ("SST-5 RNN-64", "sentiment", "sst5-rnn", {}),
    ("JSB GRU-41", "polyphonic", "jsb-gru-41", {}),
    ("JSB LSTM-34", "polyphonic", "jsb-lstm-34", {}),
    ("JSB tanh-RNN-78", "polyphonic", "jsb-rnn-78", {}),
    ("PTB 2×200 LSTM (vocab 10k)", "ptb", "lstm", {}),
)


def study_model(study: str, key: str, changes: dict):
    """(settings, task, model, one training batch) of a study's configuration."""
    spec = next(s for s in EXPERIMENTS[study].specs(False) if s.key == key or s.label == key)
    spec = replace(spec, settings={**spec.settings, **changes})
    settings = spec.full_settings(0)
    task, model = build(settings)
    batch = next(iter(task.splits["train"].batches(settings["batch_size"], np.random.default_rng(0),
                                                   bucket=settings["bucket"])))
    return settings, task, model, batch


class TorchModel(nn.Module):
    """The same model in PyTorch: one-hot inputs as a dense one-hot matrix (as rnnlab's model is
    defined), token inputs through nn.Embedding, the recurrent stack from rnnlab's weights, a linear
    readout; the head reads every step or each sequence's last valid one."""

    def __init__(self, model) -> None:
        super().__init__()
        self.rnn = to_torch(model.rnn)
        readout = model.readout.params
        self.out = nn.Linear(model.rnn.hidden_size, readout["W"].shape[1], bias="b" in readout)
        with torch.no_grad():
            self.out.weight.copy_(torch.from_numpy(readout["W"].T.copy()))
            if "b" in readout:
                self.out.bias.copy_(torch.from_numpy(readout["b"].copy()))
        self.embedding = None
        if model.embedding is not None:
            self.embedding = nn.Embedding.from_pretrained(torch.from_numpy(model.params["emb.W"].copy()), freeze=False)
        self.one_hot, self.vocab, self.head = model.one_hot, model.input_size, model.head

    def forward(self, x, lengths):
        if self.embedding is not None:
            x = self.embedding(x)
        elif self.one_hot:
            x = nn.functional.one_hot(x, self.vocab).float()
        hs, _ = self.rnn(x)
        if self.head == "last":
            hs = hs[lengths - 1, torch.arange(hs.shape[1])]
        elif self.head == "mean":
            hs = hs.mean(0)
        return self.out(hs)


def torch_step(settings: dict, model, batch):
    """A closure running one PyTorch training step of the same model on the same batch."""
    net = TorchModel(model)
    x = torch.from_numpy(np.asarray(batch.x))
    x = x.long() if x.dtype in (torch.int32, torch.int64) else x.float()
    mask = torch.ones(x.shape[:2]) if batch.mask is None else torch.from_numpy(np.asarray(batch.mask, np.float32))
    lengths = mask.sum(0).long()
    y = torch.from_numpy(np.asarray(batch.y))
    kind = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}
    optimizer = (kind[settings["optimizer"]](net.parameters(), lr=settings["lr"]) if settings["optimizer"] in kind
                 else torch.optim.SGD(net.parameters(), lr=settings["lr"], momentum=settings["momentum"]))

    def loss_of(logits):
        if model.loss_name == "binary_cross_entropy":
            per = nn.functional.binary_cross_entropy_with_logits(logits, y.float(), reduction="none").sum(-1)
        elif model.loss_name == "squared_error":
            per = ((logits.squeeze(-1) - y.float()) ** 2)
        else:
            per = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.long().reshape(-1),
                                              reduction="none").reshape(y.shape)
        if model.head in ("last", "mean"):
            return per.mean()
        total = (per * mask).sum()
        return total / (mask.shape[1] if settings["loss_normalization"] == "sequence" else mask.sum())

    params = list(net.parameters())

    def step():
        optimizer.zero_grad(set_to_none=True)
        if settings["weight_noise"]:       # S3's weight noise: the gradient is taken at perturbed weights
            with torch.no_grad():
                clean = [p.clone() for p in params]
                for p in params:
                    p.add_(torch.randn_like(p), alpha=settings["weight_noise"])
        loss = loss_of(net(x, lengths))
        loss.backward()
        if settings["weight_noise"]:
            with torch.no_grad():
                for p, kept in zip(params, clean):
                    p.copy_(kept)
        if settings["clip"]:
            nn.utils.clip_grad_norm_(net.parameters(), settings["clip"])
        optimizer.step()
    return step


def rnnlab_step(settings: dict, model, batch):
    config = train_config(settings, progress=False)
    optimizer = make_optimizer(settings["optimizer"], model.params, settings["lr"], settings["momentum"],
                               settings["weight_decay"])
    rng = np.random.default_rng(0)
    return lambda: train_step(model, batch, None, config, optimizer, rng)


def step_flops(model, batch) -> float:
    """Matrix-product FLOPs of one step: forward, and twice that backward (the gradients of the
    inputs and of the weights), for each layer's input and recurrent products and the readout."""
    T, B = np.asarray(batch.x).shape[:2]
    flops = 0.0
    for layer in model.rnn.layers:
        width = layer.params["W_x"].shape[1]
        inputs = 0 if (layer is model.rnn.layers[0] and np.asarray(batch.x).ndim == 2) else layer.input_size
        flops += 2 * T * B * (inputs + layer.hidden_size) * width
    rows = B if model.head in ("last", "mean") else T * B
    flops += 2 * rows * model.rnn.hidden_size * model.readout.params["W"].shape[1]
    return 3 * flops


def measure(steps: dict, repeats: int, blocks: int, wall: bool) -> tuple[dict[str, float], dict[str, float]]:
    """Median ms per step of each closure: blocks of ``repeats`` steps, the two alternating; and the CPU seconds the
    hypervisor stole while each closure's blocks ran (``_shared.stolen_seconds``)."""
    clock = time.perf_counter if wall else time.process_time
    for fn in steps.values():
        fn()                                 # compile, allocate, warm caches
    times = {name: [] for name in steps}
    stolen = dict.fromkeys(steps, 0.0)
    for _ in range(blocks):
        for name, fn in steps.items():
            steal, started = _shared.stolen_seconds(), clock()
            for _ in range(repeats):
                fn()
            times[name].append((clock() - started) / repeats * 1000)
            stolen[name] += _shared.stolen_seconds() - steal
            if wall:
                time.sleep(0.5)              # a pause between blocks: the machine is shared
    return {name: float(np.median(v)) for name, v in times.items()}, stolen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", choices=("1", "all"), default="1")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="rough length of one block")
    parser.add_argument("--only", default=None, help="comma-separated labels' first words (e.g. PTB,JSB)")
    parser.add_argument("--profile", action="store_true", help="after the table, where rnnlab's step spends its "
                        "time: the functions with the largest own time over 20 steps, as shares of the step")
    parser.add_argument("--docs", action="store_true", help="also write the printout to docs/benchmarks/")
    args = parser.parse_args()
    threads = cpu_cores() if ALL_CORES else 1
    with _shared.PrintedToDocs(_shared.docs_name("models", ALL_CORES), args.docs):
        table(args, threads)


def table(args: argparse.Namespace, threads: int) -> None:
    torch.set_num_threads(threads)
    rate = _shared.gemm_rate(cpu_time=threads == 1)
    print(f"{processor_name()}; {threads} thread(s); {'wall' if ALL_CORES else 'CPU'} ms per step, median of "
          f"{args.blocks} interleaved blocks; float32 GEMM {rate / 1e9:.1f} GFLOP/s measured")
    print(f"{blas_description()}\n")
    print("| study model | batch (T, B) | rnnlab ms | torch ms | torch / rnnlab | rnnlab at % of the GEMM floor |")
    print("|---|---|---|---|---|---|")
    profiles, steals = [], []
    for label, study, key, changes in MODELS:
        if args.only and not any(label.startswith(w) for w in args.only.split(",")):
            continue
        try:
            settings, _, model, batch = study_model(study, key, changes)
        except (ValueError, FileNotFoundError) as err:     # missing data: say so and go on
            print(f"| {label} | skipped: {str(err).splitlines()[0][:90]} | | | | |")
            continue
        if ALL_CORES:
            settings = {**settings, "threads": None}        # rnnlab's thread rule decides, as in training
        ours, theirs = rnnlab_step(settings, model, batch), torch_step(settings, model, batch)
        probe = time.perf_counter()
        ours()
        repeats = max(1, int(args.seconds / max(time.perf_counter() - probe, 1e-4)))
        # the BLAS threads training would use (the rule of rnnlab.engines.threads, or 1), for both
        with blas_threads(training_threads(model, settings["batch_size"], settings["threads"] if ALL_CORES else 1)):
            ms, stolen = measure({"rnnlab": ours, "torch": theirs}, repeats, args.blocks, ALL_CORES)
            steals.append((label, stolen))
            if args.profile:     # under the same threads as the table (the loss and updates split by them)
                profiles.append((label, profile(ours)))
        floor = step_flops(model, batch) / rate * 1000
        print(f"| {label} | {tuple(np.asarray(batch.x).shape[:2])} | {ms['rnnlab']:.2f} | {ms['torch']:.2f} | "
              f"{ms['torch'] / ms['rnnlab']:.2f}× | {100 * floor / ms['rnnlab']:.0f}% |", flush=True)
    if ALL_CORES and any(sum(stolen.values()) for _, stolen in steals):   # wall time on a virtual machine
        print("\nCPU time stolen by the hypervisor while the blocks ran (rnnlab / torch, s): "
              + "; ".join(f"{label} {s['rnnlab']:.1f} / {s['torch']:.1f}" for label, s in steals))
    for label, shares in profiles:
        print(f"\n{label}: " + "; ".join(f"{name} {share:.0%}" for name, share in shares))


def profile(step, steps: int = 20, top: int = 6) -> list[tuple[str, float]]:
    """The functions with the largest own time over ``steps`` calls of ``step``, as shares of the total."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    total = sum(row[2] for row in stats.values())
    rows = sorted(((f"{Path(file).stem}.{name}", row[2]) for (file, _, name), row in stats.items()),
                  key=lambda item: -item[1])[:top]
    return [(name, own / total) for name, own in rows]


if __name__ == "__main__":
    main()
