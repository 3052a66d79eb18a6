"""The one training loop every experiment uses, with its data containers and checkpoints.

``fit(model, train, dev, test, config, out_dir)`` trains epoch by epoch and, in ``out_dir``,
appends one row per epoch to ``metrics.csv``, writes ``checkpoint.npz`` after every epoch
(atomically: temp file, fsync, rename; loaded with ``allow_pickle=False``) and ``result.json`` at
the end. ``resume=True`` continues from the checkpoint; a resumed run ends with the same parameters
and metrics, bit for bit, as an uninterrupted one (timings aside), because everything random is
drawn from one generator whose state is checkpointed.

NaN or Inf in a loss, a gradient or an updated parameter raises ``TrainingDiverged`` naming the
epoch, batch and parameter; the checkpoint of the last good epoch stays as it was.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.models import Batch, RecurrentModel, Stats
from rnnlab.optim import clip_global_norm, clip_value, make_optimizer, make_schedule

CHECKPOINT = "checkpoint.npz"


# -- data -----------------------------------------------------------------------------------


def pad(arrays: list[np.ndarray], dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad sequences (T_i, ...) into (T, B, ...) and return it with the (T, B) 0/1 mask."""
    T = max(len(a) for a in arrays)
    first = np.asarray(arrays[0])
    out = np.zeros((T, len(arrays)) + first.shape[1:], dtype or first.dtype)
    mask = np.zeros((T, len(arrays)), np.float64)
    for j, a in enumerate(arrays):
        out[: len(a), j] = a
        mask[: len(a), j] = 1
    return out, mask


class SequenceData:
    """Sequences of different lengths with a target each (``per_step=False``: a class id) or a
    target per step (``per_step=True``: (T_i,) ids or (T_i, K) 0/1 rows).

    Training batches are length-bucketed: a shuffled pool of 50 batches is sorted by length, cut
    into batches, and the batches are shuffled, so padding stays small and the order random.
    """

    def __init__(self, inputs: list[np.ndarray], targets: Any, per_step: bool = False) -> None:
        if len(inputs) == 0:
            raise ValueError("inputs: expected at least one sequence")
        if len(inputs) != len(targets):
            raise ValueError(f"targets: expected one per sequence ({len(inputs)}), got {len(targets)}")
        self.inputs = [np.asarray(x) for x in inputs]
        self.targets = list(targets) if per_step else np.asarray(targets)
        self.per_step = per_step
        self.lengths = np.array([len(x) for x in self.inputs])
        if self.lengths.min() < 1:
            raise ValueError("inputs: every sequence needs at least one step")

    def __len__(self) -> int:
        return len(self.inputs)

    def num_batches(self, batch_size: int) -> int:
        return math.ceil(len(self) / batch_size)

    def batch(self, index: np.ndarray) -> Batch:
        x, mask = pad([self.inputs[i] for i in index])
        if self.per_step:
            y, _ = pad([self.targets[i] for i in index])
        else:
            y = self.targets[index]
        full = bool(mask.all())
        return Batch(x, y, None if full else mask)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        """All sequences once; shuffled and bucketed when ``rng`` is given, in order otherwise."""
        for index in self.batch_indices(batch_size, rng):
            yield self.batch(index)

    def batch_indices(self, batch_size: int, rng: np.random.Generator | None = None) -> list[np.ndarray]:
        """The sequence indices of each batch of ``batches`` (same draws from ``rng``)."""
        n = len(self)
        if rng is None:
            groups = [np.arange(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]
        else:
            order = rng.permutation(n)
            pool = batch_size * 50
            groups = []
            for start in range(0, n, pool):
                chunk = order[start:start + pool]
                chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
                groups += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
            groups = [groups[i] for i in rng.permutation(len(groups))]
        return groups


class StreamData:
    """One long token stream (PTB style) cut into ``batch_size`` parallel streams and read in
    chunks of ``bptt`` steps; the state is carried from chunk to chunk (``Batch.carry``)."""

    def __init__(self, tokens: np.ndarray, bptt: int) -> None:
        self.tokens = np.asarray(tokens)
        self.bptt = bptt
        if len(self.tokens) < 2:
            raise ValueError("tokens: a stream needs at least two tokens")

    def __len__(self) -> int:
        return len(self.tokens) - 1

    def _layout(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        width = (len(self.tokens) - 1) // batch_size
        if width < 1:
            raise ValueError(f"batch_size: {len(self.tokens)} tokens are too few for {batch_size} streams")
        x = self.tokens[: width * batch_size].reshape(batch_size, width).T          # (width, B)
        y = self.tokens[1: width * batch_size + 1].reshape(batch_size, width).T
        return x, y

    def num_batches(self, batch_size: int) -> int:
        return math.ceil(((len(self.tokens) - 1) // batch_size) / self.bptt)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        x, y = self._layout(batch_size)
        for i, start in enumerate(range(0, x.shape[0], self.bptt)):
            stop = start + self.bptt
            yield Batch(x[start:stop], y[start:stop], None, carry=i > 0)


# -- configuration ----------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Training settings (model and task settings live with the caller)."""

    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    weight_decay: float = 0.0
    epochs: int = 10
    batch_size: int = 32
    back_steps: int | None = None
    clip: float | None = None           # global-norm clipping threshold
    clip_value: float | None = None     # per-coefficient clipping
    schedule: str = "constant"
    milestones: tuple[int, ...] = (20,)  # step schedule
    gamma: float = 0.5                   # step / exponential factor
    decay_start: int = 4                 # exponential schedule: first epoch that decays
    anneal: float = 0.0                  # anneal schedule: lr0 · a / (a + epoch)
    plateau_patience: int = 2
    weight_noise: float = 0.0            # σ of Gaussian noise added to weights for each gradient (S3)
    early_stopping: int | None = None    # stop after this many epochs without a dev improvement
    min_delta: float = 1e-4              # what counts as an improvement
    seed: int = 0
    progress: bool = True

    def schedule_kwargs(self) -> dict[str, Any]:
        return {
            "step": {"milestones": tuple(self.milestones), "gamma": self.gamma},
            "anneal": {"a": self.anneal},
            "exponential": {"gamma": self.gamma, "start": self.decay_start},
            "plateau": {"patience": self.plateau_patience, "min_delta": self.min_delta},
        }.get(self.schedule, {})


class TrainingDiverged(RuntimeError):
    """A loss, gradient or parameter became NaN or Inf."""


@dataclass
class _Progress:
    epoch: int = 0                       # epochs completed
    history: list[dict] = field(default_factory=list)
    best_epoch: int | None = None
    best_dev: float | None = None
    bad_epochs: int = 0
    stopped_early: bool = False


# -- checkpoints --------------------------------------------------------------------------------


def atomic_write(path: Path, write) -> None:
    """Write through ``write(file)`` to a temp file beside ``path``, fsync, then rename over it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_checkpoint(path: Path, model: RecurrentModel, optimizer, meta: dict, best: dict | None) -> None:
    """Parameters, optimizer state (None: a finished run's parameters only) and best-dev snapshot."""
    arrays = {f"param/{k}": v for k, v in model.params.items()}
    if optimizer is not None:
        arrays.update({f"opt/{k}": v for k, v in optimizer.state_dict().items()})
    if best is not None:
        arrays.update({f"best/{k}": v for k, v in best.items()})
    arrays["meta"] = np.array(json.dumps(meta))
    atomic_write(path, lambda f: np.savez(f, **arrays))


def load_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays (without ``meta``) and the decoded meta of a checkpoint; clear errors otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise ValueError(f"checkpoint {path}: not a readable rnnlab checkpoint ({err})") from err
    if "meta" not in arrays:
        raise ValueError(f"checkpoint {path}: missing 'meta' entry; not an rnnlab checkpoint")
    meta = json.loads(str(arrays.pop("meta")))
    return arrays, meta


def load_params(model: RecurrentModel, arrays: dict[str, np.ndarray], prefix: str, source: str) -> None:
    for name, p in model.params.items():
        key = f"{prefix}/{name}"
        if key not in arrays:
            raise ValueError(f"checkpoint {source}: no parameter {name!r}; the model does not match")
        if arrays[key].shape != p.shape:
            raise ValueError(f"checkpoint {source}: parameter {name!r} has shape {arrays[key].shape}, "
                             f"the model expects {p.shape}")
        p[...] = arrays[key]


# -- evaluation -------------------------------------------------------------------------------


def summarize(stats: list[Stats], model: RecurrentModel, prefix: str) -> dict[str, float]:
    count = sum(s.count for s in stats)
    loss = sum(s.loss_sum for s in stats) / count
    out = {f"{prefix}_loss": loss}
    if stats and stats[0].correct is not None:
        out[f"{prefix}_accuracy"] = sum(s.correct for s in stats) / count
    if model.head == "steps" and model.loss_name == "cross_entropy":
        out[f"{prefix}_perplexity"] = math.exp(min(loss, 700.0))
    if model.head == "multilabel":  # music: the loss is the NLL per time step, summed over the notes
        out[f"{prefix}_nll_per_step"] = loss
    return out


def evaluate(model: RecurrentModel, data, batch_size: int, prefix: str = "eval") -> dict[str, float]:
    """Mean loss (and accuracy / perplexity where they apply) over a whole data set."""
    stats, state = [], None
    for batch in data.batches(batch_size):
        s, state = model.evaluate(batch, state if batch.carry else None)
        stats.append(s)
    return summarize(stats, model, prefix)


# -- the loop ---------------------------------------------------------------------------------


def _progress_bar(total: int, enabled: bool, desc: str):
    if not (enabled and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False, unit="batch")


def _first_non_finite(arrays: dict[str, np.ndarray]) -> str | None:
    for name, a in arrays.items():
        if not np.isfinite(a).all():
            return name
    return None


def write_metrics(path: Path, history: list[dict]) -> None:
    fields = list(history[0]) if history else []
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(history)


def fit(
    model: RecurrentModel,
    train,
    dev=None,
    test=None,
    config: TrainConfig | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    run_info: dict | None = None,
    extra_metrics: Callable[[RecurrentModel], dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Train ``model`` on ``train`` (SequenceData or StreamData); returns the result dict also
    written to ``out_dir/result.json``. With a dev set, the best-dev parameters are restored at
    the end; train/dev/test metrics in the result are measured with those parameters, and so are
    the task's own metrics, ``extra_metrics(model)`` (e.g. Reber's "solved" rates)."""
    config = config or TrainConfig()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(config.seed)
    optimizer = make_optimizer(config.optimizer, model.params, config.lr, config.momentum, config.weight_decay)
    schedule = make_schedule(config.schedule, config.lr, **config.schedule_kwargs())
    progress = _Progress()
    best: dict[str, np.ndarray] | None = None
    meta_base = {"format": 1, "config": dataclasses.asdict(config), "run": run_info or {}}

    if resume:
        if out is None or not (out / CHECKPOINT).is_file():
            raise FileNotFoundError(f"--resume: no checkpoint at {out / CHECKPOINT if out else '(no --out)'}")
        arrays, meta = load_checkpoint(out / CHECKPOINT)
        source = str(out / CHECKPOINT)
        load_params(model, arrays, "param", source)
        optimizer.load_state_dict({k[4:]: v for k, v in arrays.items() if k.startswith("opt/")})
        schedule.load_state_dict(meta["schedule"])
        rng.bit_generator.state = meta["rng"]
        progress = _Progress(**meta["progress"])
        if any(k.startswith("best/") for k in arrays):
            best = {k[5:]: v for k, v in arrays.items() if k.startswith("best/")}
        write_metrics(out / "metrics.csv", progress.history)

    started = time.perf_counter()
    for epoch in range(progress.epoch, config.epochs):
        if progress.stopped_early:
            break
        optimizer.lr = schedule.lr_for(epoch)
        tic = time.perf_counter()
        stats, sequences, state = [], 0, None
        bar = _progress_bar(train.num_batches(config.batch_size), config.progress, f"epoch {epoch + 1}")
        for b, batch in enumerate(train.batches(config.batch_size, rng)):
            clean = None
            if config.weight_noise:
                clean = {k: p.copy() for k, p in model.params.items()}
                for p in model.params.values():
                    p += rng.normal(0.0, config.weight_noise, p.shape).astype(p.dtype)
            loss, grads, batch_stats, state = model.loss_and_grads(
                batch, state if batch.carry else None, config.back_steps)
            if clean is not None:
                for k, p in model.params.items():
                    p[...] = clean[k]
            where = "the loss" if not math.isfinite(loss) else None
            bad = _first_non_finite(grads)
            if where or bad:
                what = where or f"the gradient of parameter {bad!r}"
                raise TrainingDiverged(_diverged(epoch, b, what, out, progress.epoch))
            if config.clip_value is not None:
                grads = clip_value(grads, config.clip_value)
            if config.clip is not None:
                grads, _ = clip_global_norm(grads, config.clip)
            optimizer.step(grads)
            bad = _first_non_finite(dict(model.params))
            if bad:
                raise TrainingDiverged(_diverged(epoch, b, f"parameter {bad!r} after the update", out, progress.epoch))
            stats.append(batch_stats)
            sequences += batch.size
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}")
        if bar is not None:
            bar.close()
        seconds = time.perf_counter() - tic
        row: dict[str, Any] = {"epoch": epoch + 1, "lr": optimizer.lr}
        row.update(summarize(stats, model, "train"))
        dev_loss = None
        if dev is not None:
            row.update(evaluate(model, dev, config.batch_size, "dev"))
            dev_loss = row["dev_loss"]
        row["seconds"] = seconds
        row["sequences_per_second"] = sequences / seconds if seconds > 0 else float("inf")
        schedule.observe(row["train_loss"], dev_loss)

        watched = row["train_loss"] if dev_loss is None else dev_loss
        if progress.best_dev is None or watched < progress.best_dev - config.min_delta:
            progress.best_dev, progress.best_epoch, progress.bad_epochs = watched, epoch + 1, 0
            if dev is not None:
                best = {k: p.copy() for k, p in model.params.items()}
        else:
            progress.bad_epochs += 1
        if config.early_stopping is not None and dev is not None and progress.bad_epochs >= config.early_stopping:
            progress.stopped_early = True
        progress.epoch = epoch + 1
        progress.history.append(row)
        if out is not None:
            if len(progress.history) == 1 or not (out / "metrics.csv").exists():
                write_metrics(out / "metrics.csv", progress.history)
            else:
                with open(out / "metrics.csv", "a", newline="") as f:
                    csv.DictWriter(f, fieldnames=list(row)).writerow(row)
            meta = dict(meta_base, rng=rng.bit_generator.state, schedule=schedule.state_dict(),
                        progress=dataclasses.asdict(progress))
            save_checkpoint(out / CHECKPOINT, model, optimizer, meta, best)
        if config.progress:
            shown = ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k not in ("epoch",))
            print(f"epoch {epoch + 1}/{config.epochs}: {shown}", file=sys.stderr)

    if best is not None:
        for k, p in model.params.items():
            p[...] = best[k]
    result: dict[str, Any] = {
        "config": dataclasses.asdict(config),
        "run": run_info or {},
        "num_params": model.num_params(),
        "epochs_run": progress.epoch,
        "best_epoch": progress.best_epoch,
        "stopped_early": progress.stopped_early,
        "restored_best_dev": best is not None,
        "seconds_total": time.perf_counter() - started,
    }
    result.update(evaluate(model, train, config.batch_size, "train"))
    if dev is not None:
        result.update(evaluate(model, dev, config.batch_size, "dev"))
    if test is not None:
        result.update(evaluate(model, test, config.batch_size, "test"))
    if extra_metrics is not None:
        result.update(extra_metrics(model))
    result["history"] = progress.history
    if out is not None:
        atomic_write(out / "result.json", lambda f: f.write(json.dumps(result, indent=2).encode()))
    return result


def _diverged(epoch: int, batch: int, what: str, out: Path | None, good_epochs: int) -> str:
    kept = (f"the checkpoint of epoch {good_epochs} is kept at {out / CHECKPOINT}" if out is not None and good_epochs
            else "no checkpoint was written")
    return f"training diverged at epoch {epoch + 1}, batch {batch + 1}: {what} is NaN or Inf; {kept}"
