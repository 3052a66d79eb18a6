"""The one training loop every experiment uses, the epoch bookkeeping it shares with the compiled
replica trainer (``rnnlab.replicas``), and checkpoints.

``fit(model, train, dev, test, config, out_dir)`` trains epoch by epoch and, in ``out_dir``,
appends one row per epoch to ``metrics.csv``, writes ``checkpoint.npz`` (atomically: temp file, fsync,
rename; loaded with ``allow_pickle=False``) and ``result.json`` at the end. The checkpoint is written
after the first epoch, after the last, and between them after an epoch once
``config.checkpoint_seconds`` have passed since the last one (0: after every epoch): writing one costs
a few milliseconds (the fsyncs, the zip), while the small studies' epochs take ~10 ms, so after every
epoch it was 15% of ``rnnlab compare``. ``resume=True`` continues from the checkpoint (the epochs
after it are trained again, and their metrics.csv rows rewritten); a resumed run ends with the same
parameters and metrics, bit for bit, as an uninterrupted one (timings aside), because everything
random is drawn from one generator whose state is checkpointed.

NaN or Inf in a loss, a gradient or an updated parameter raises ``TrainingDiverged`` naming the
epoch, batch and parameter; the last checkpoint written stays as it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.common import RowGradient
from rnnlab.engines.threads import blas_threads, choose_threads, threads_for
from rnnlab.files import append_text, atomic_write, csv_text, is_number, is_whole, read_json, write_text
from rnnlab.models import STEP_HEADS, RecurrentModel, Stats
from rnnlab.optim import clip_gradients, global_norm, make_optimizer, make_schedule

CHECKPOINT = "checkpoint.npz"


# -- configuration ----------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Training settings (model and task settings live with the caller)."""

    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    nesterov: bool = False               # SGD: Nesterov's momentum
    momentum_scales_lr: bool = False     # SGD: the rate times (1 − momentum), as PyLSTM (Greff et al. 2017)
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
    input_noise: float = 0.0             # σ of Gaussian noise added to each training batch's inputs (Greff et al.)
    early_stopping: int | None = None    # stop after this many epochs without a dev improvement
    min_delta: float = 1e-4              # what counts as an improvement
    loss_normalization: str = "token"    # token: mean over positions; sequence: per-sequence sums averaged (S4)
    bucket: bool = True                  # length-bucketed training batches; False: a plain shuffle (S4)
    seed: int = 0
    threads: int | None = None           # BLAS threads; None: chosen from the model's size (engines.threads)
    progress: bool = True
    checkpoint_seconds: float = 10.0     # checkpoint after the first and last epochs, between at most this often

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
class Progress:
    """Where one run stands after each epoch (checkpointed with it; ``fit_replicas`` keeps one per
    replica). ``close_epoch`` is the bookkeeping that ends an epoch, written once for both trainers."""

    epoch: int = 0                       # epochs completed
    history: list[dict] = field(default_factory=list)
    best_epoch: int | None = None
    best_dev: float | None = None
    bad_epochs: int = 0
    stopped_early: bool = False
    seconds: float = 0.0                 # wall time of the finished epochs, over every call that trained them

    def record(self, row: dict) -> None:
        self.history.append(row)
        self.epoch = row["epoch"]

    def close_epoch(self, row: dict, schedule, config: TrainConfig, has_dev: bool) -> bool:
        """Record the epoch's row, let the schedule observe it, compare the watched loss (dev,
        else train) with the best so far by ``min_delta``, count epochs without improvement and
        decide early stopping (only with a dev set). True when this epoch is the new best: the
        caller snapshots its parameters."""
        self.record(row)
        dev_loss = row["dev_loss"] if has_dev else None
        schedule.observe(row["train_loss"], dev_loss)
        watched = row["train_loss"] if dev_loss is None else dev_loss
        improved = self.best_dev is None or watched < self.best_dev - config.min_delta
        if improved:
            self.best_dev, self.best_epoch, self.bad_epochs = watched, self.epoch, 0
        else:
            self.bad_epochs += 1
        if config.early_stopping is not None and has_dev and self.bad_epochs >= config.early_stopping:
            self.stopped_early = True
        return improved


def epoch_row(epoch: int, lr: float, train: dict[str, float], dev: dict[str, float] | None, seconds: float,
              sequences: int) -> dict[str, Any]:
    """One line of metrics.csv: epoch (from 1), rate, train and dev metrics, time, throughput."""
    row: dict[str, Any] = {"epoch": epoch + 1, "lr": lr, **train, **(dev or {})}
    row["seconds"] = seconds
    row["sequences_per_second"] = sequences / seconds if seconds > 0 else float("inf")
    return row


def run_result(config: TrainConfig, run_info: dict | None, num_params: int, progress: Progress,
               restored_best_dev: bool, seconds_total: float, **extra: Any) -> dict[str, Any]:
    """The head of a run's result (result.json); the caller adds the final metrics and history."""
    return {
        "config": dataclasses.asdict(config),
        "run": run_info or {},
        "num_params": num_params,
        "epochs_run": progress.epoch,
        "best_epoch": progress.best_epoch,
        "stopped_early": progress.stopped_early,
        "restored_best_dev": restored_best_dev,
        "seconds_total": seconds_total,
        **extra,
    }


# -- checkpoints --------------------------------------------------------------------------------


def save_checkpoint(path: Path, model: RecurrentModel, optimizer, meta: dict, best: dict | None) -> None:
    """Parameters, optimizer state (None: a finished run's parameters only) and best-dev snapshot."""
    arrays = {f"param/{k}": v for k, v in model.params.items()}
    if optimizer is not None:
        arrays.update({f"opt/{k}": v for k, v in optimizer.state_dict().items()})
    if best is not None:
        arrays.update({f"best/{k}": v for k, v in best.items()})
    arrays["meta"] = np.array(json.dumps(meta))
    atomic_write(path, lambda f: np.savez(f, **arrays))


RESULT, METRICS = "result.json", "metrics.csv"


@dataclass(frozen=True)
class RunFolder:
    """One run's folder, as every trainer writes it (``fit`` epoch by epoch, the replica trainer at the
    end) and every reader finds it: ``metrics.csv`` (a row per epoch), ``checkpoint.npz`` (parameters,
    and for a run that can continue, the optimizer, best-dev snapshot and progress) and ``result.json``,
    written last: it marks the run done."""

    path: Path

    FILES = (METRICS, CHECKPOINT, RESULT)

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def result_path(self) -> Path:
        return self.path / RESULT

    def done(self) -> bool:
        return self.result_path.is_file()

    def can_resume(self) -> bool:
        """An interrupted run: a checkpoint and no result."""
        return self.checkpoint.is_file() and not self.done()

    def result(self) -> dict[str, Any]:
        """The run's result.json. Its history is one row per epoch with the same columns: a row that differs is a
        damaged file (a changed byte can leave valid JSON), refused naming it, not read as a missing metric."""
        result = read_json(self.result_path)
        history = result.get("history", [])
        if not isinstance(history, list) or any(not isinstance(row, dict) or row.keys() != history[0].keys()
                                                for row in history):
            raise ValueError(f"{self.result_path}: its history is not one row per epoch with the same columns (a "
                             "damaged file?); move the run's folder away, or pass --force to train it again")
        return result

    def record(self) -> tuple[Path, Any] | None:
        """Where the folder says what it trained, and that record (``run``): its result's, else the checkpoint's
        of an interrupted run; None when nothing is stored."""
        if self.done():
            return self.result_path, self.result().get("run")
        if self.checkpoint.is_file():
            return self.checkpoint, load_checkpoint(self.checkpoint)[1].get("run")
        return None

    def write_metrics(self, history: list[dict]) -> None:
        write_metrics(self.path / METRICS, history)

    def append_metrics(self, row: dict[str, Any], history: list[dict]) -> None:
        """The epoch's metrics.csv row (the whole file for the first epoch, or where it is missing)."""
        if len(history) == 1 or not (self.path / METRICS).exists():
            self.write_metrics(history)
        else:
            append_text(self.path / METRICS, csv_text([row], header=False), own_line=True)

    def save(self, model: RecurrentModel, optimizer: Any, meta: dict, best: dict | None) -> None:
        save_checkpoint(self.checkpoint, model, optimizer, meta, best)

    def write_result(self, result: dict[str, Any]) -> None:
        atomic_write(self.result_path, lambda f: f.write(json.dumps(result, indent=2, default=float).encode()))

    def keep_finished(self, model: RecurrentModel, result: dict[str, Any]) -> None:
        """A run trained elsewhere (the replica trainer), kept as ``fit`` keeps one: its history, its final
        parameters (no optimizer state: it cannot continue), then its result."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.write_metrics(result["history"])
        self.save(model, None, {"format": 1, "config": result["config"], "run": result["run"]}, None)
        self.write_result(result)


CHECKPOINT_BOUND = 4 << 30     # bytes of arrays a checkpoint may declare: above any model rnnlab trains on a CPU


def read_npz(path: Path, bound: int = CHECKPOINT_BOUND) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, each member's header checked before its data is read: a numeric dtype (no
    pickled objects), a shape whose bytes are what the member holds, and all members together at most ``bound``
    bytes. A 6 MB file that declares a 6 GiB array inflates nothing: zip's declared sizes bound what is read."""
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        members = [m for m in archive.infolist() if m.filename.endswith(".npy")]
        declared = sum(m.file_size for m in members)
        if declared > bound:
            raise ValueError(f"its arrays declare {declared:,} bytes, more than the {bound:,} a checkpoint may hold")
        for member in members:
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
                if dtype.hasobject:
                    raise ValueError(f"{member.filename}: an array of Python objects; rnnlab stores numbers")
                size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if size > member.file_size:
                    raise ValueError(f"{member.filename}: its header declares {shape} {dtype} ({size:,} bytes), more "
                                     f"than the member's {member.file_size:,}")
                data = f.read(size)
                if len(data) != size:
                    raise ValueError(f"{member.filename}: {len(data):,} bytes where its shape needs {size:,}")
                array = np.frombuffer(data, dtype=dtype)
                array = array.reshape(shape[::-1]).T if fortran else array.reshape(shape)
                arrays[member.filename[:-len(".npy")]] = array.copy()
    return arrays


def load_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays (without ``meta``) and the decoded meta of a checkpoint; clear errors otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    try:
        arrays = read_npz(path)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as err:
        raise ValueError(f"checkpoint {path}: not a readable rnnlab checkpoint ({err})") from None
    if "meta" not in arrays:
        raise ValueError(f"checkpoint {path}: missing 'meta' entry; not an rnnlab checkpoint")
    try:
        meta = json.loads(str(arrays.pop("meta")))
    except json.JSONDecodeError as err:
        raise ValueError(f"checkpoint {path}: its 'meta' entry is not JSON ({err})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"checkpoint {path}: its 'meta' entry is not a JSON object")
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


def metrics_from_stats(stats: list[Stats], model: RecurrentModel, prefix: str) -> dict[str, float]:
    """Mean loss (and accuracy, perplexity, NLL per step where they apply) from batch sums."""
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
    """Mean loss (and accuracy / perplexity where they apply) over a whole data set; sequences are
    batched by length, so evaluation pads (almost) nothing."""
    stats, state = [], None
    with blas_threads(training_threads(model, batch_size)):
        for batch in data.batches(batch_size, by_length=True):
            s, state = model.evaluate(batch, state if batch.carry else None)
            stats.append(s)
    return metrics_from_stats(stats, model, prefix)


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
        if not np.isfinite(a.values if isinstance(a, RowGradient) else a).all():
            return name
    return None


def write_metrics(path: Path, history: list[dict]) -> None:
    write_text(path, csv_text(history))


def training_threads(model: RecurrentModel, batch_size: int, threads: int | None = None) -> int:
    """``threads`` when given, else the count rnnlab.engines.threads chooses for the model's largest product per
    step: a recurrent layer's, or the readout's where the head reads out at every step (a language model's: the
    NLU course's RNN-50 with 2,000 outputs is threaded for its readout and loss, not for its recurrence)."""
    if threads is not None:
        return threads
    layers = (choose_threads(batch_size, layer.hidden_size, layer.gates) for layer in model.rnn.layers)
    readout = batch_size * model.readout.params["W"].size if model.head in STEP_HEADS else 0
    return max(*layers, threads_for(readout))


def config_optimizer(model: RecurrentModel, config: TrainConfig) -> Any:
    """The optimizer ``config`` names, over ``model``'s parameters."""
    return make_optimizer(config.optimizer, model.params, config.lr, config.momentum, config.weight_decay,
                          config.nesterov, config.momentum_scales_lr)


def fit(
    model: RecurrentModel,
    train,
    dev=None,
    test=None,
    config: TrainConfig | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    run_info: dict | None = None,
    task_metrics: Callable[[RecurrentModel], dict[str, float]] | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train ``model`` on ``train`` (SequenceData or StreamData); returns the result dict also
    written to ``out_dir/result.json``. With a dev set, the best-dev parameters are restored at
    the end; train/dev/test metrics in the result are measured with those parameters, and so are
    the task's own metrics, ``task_metrics(model)`` (e.g. Reber's "solved" rates). ``on_epoch(row)``
    is called with each epoch's metrics.csv row (a scheduler such as Ray Tune's ASHA reads it)."""
    config = config or TrainConfig()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(config.seed)
    optimizer = config_optimizer(model, config)
    schedule = make_schedule(config.schedule, config.lr, **config.schedule_kwargs())
    meta_base = {"format": 1, "config": dataclasses.asdict(config), "run": run_info or {}}
    progress, best = _restore(out, model, optimizer, schedule, rng) if resume else (Progress(), None)

    # BLAS threads chosen from the model's size (or config.threads); see rnnlab.engines.threads
    with blas_threads(training_threads(model, config.batch_size, config.threads)):
        started, seconds_before = time.perf_counter(), progress.seconds
        kept, kept_at = progress.epoch, None      # the epoch checkpoint.npz holds; when this call last wrote it
        for epoch in range(progress.epoch, config.epochs):
            if progress.stopped_early:
                break
            optimizer.lr = schedule.lr_for(epoch)
            tic = time.perf_counter()
            stats, sequences = _train_epoch(model, train, config, optimizer, rng, epoch, out, kept)
            seconds = time.perf_counter() - tic
            dev_metrics = evaluate(model, dev, config.batch_size, "dev") if dev is not None else None
            row = epoch_row(epoch, optimizer.lr, metrics_from_stats(stats, model, "train"), dev_metrics, seconds,
                            sequences)
            if progress.close_epoch(row, schedule, config, dev is not None) and dev is not None:
                best = {k: p.copy() for k, p in model.params.items()}
            if on_epoch is not None:
                on_epoch(row)
            progress.seconds = seconds_before + time.perf_counter() - started
            if out is not None:
                RunFolder(out).append_metrics(row, progress.history)
                last = progress.stopped_early or epoch + 1 == config.epochs
                if last or kept_at is None or time.perf_counter() - kept_at >= config.checkpoint_seconds:
                    _save(out, model, optimizer, best, dict(meta_base, rng=rng.bit_generator.state,
                                                            schedule=schedule.state_dict()), progress)
                    kept, kept_at = progress.epoch, time.perf_counter()
            if config.progress:
                print(f"epoch {epoch + 1}/{config.epochs}: " + ", ".join(
                    f"{k} {v:.4g}" for k, v in row.items() if k != "epoch"), file=sys.stderr)

        return _finish(model, best, config, run_info, progress, seconds_before + time.perf_counter() - started,
                       {"train": train, "dev": dev, "test": test}, task_metrics, out)


def _save(out: Path, model: RecurrentModel, optimizer: Any, best: dict[str, np.ndarray] | None, meta: dict,
          progress: Progress) -> None:
    """The checkpoint a resume continues from: parameters, optimizer slots, the best-dev snapshot, and in
    ``meta`` the config, RNG, schedule and progress."""
    RunFolder(out).save(model, optimizer, dict(meta, progress=_progress_state(progress)), best)


def _finish(model: RecurrentModel, best: dict[str, np.ndarray] | None, config: TrainConfig, run_info: dict | None,
            progress: Progress, seconds: float, data: dict[str, Any],
            task_metrics: Callable[[RecurrentModel], dict[str, float]] | None, out: Path | None) -> dict[str, Any]:
    """The best-dev parameters restored, every split and the task's own metrics measured with them, the
    history attached, and the result written (``out/result.json``, last: it marks the run done)."""
    if best is not None:
        for k, p in model.params.items():
            p[...] = best[k]
    result = run_result(config, run_info, model.num_params(), progress, best is not None, seconds)
    for name, split in data.items():
        if split is not None:
            result.update(evaluate(model, split, config.batch_size, name))
    if task_metrics is not None:
        result.update(task_metrics(model))
    result["history"] = progress.history
    if out is not None:
        RunFolder(out).write_result(result)
    return result


def training_state_problem(meta: dict[str, Any]) -> str | None:
    """What in a checkpoint's training state is not what a run stores (checked before any of it is used: a stored
    epoch of −5 or a history that is not a list would train on from nowhere), or None."""
    progress, schedule = meta.get("progress"), meta.get("schedule")
    if not isinstance(progress, dict):
        return "no progress table"
    history = progress.get("history")
    if not (isinstance(history, list) and all(isinstance(row, dict) for row in history)):
        return "progress.history is not a list of epochs"
    if not (is_whole(progress.get("epoch"), 0) and progress["epoch"] == len(history)):
        return f"progress.epoch = {progress.get('epoch')!r} is not the count of its {len(history)} epochs"
    for key, low in (("bad_epochs", 0), ("best_epoch", 1)):
        if progress.get(key) is not None and not is_whole(progress[key], low):
            return f"progress.{key} = {progress[key]!r} is not a whole number >= {low}"
    for key in ("best_dev", "seconds"):
        if progress.get(key) is not None and not (is_number(progress[key]) and math.isfinite(progress[key])):
            return f"progress.{key} = {progress[key]!r} is not a number"
    if not isinstance(schedule, dict) or not all(
            v is None or isinstance(v, bool) or (is_number(v) and math.isfinite(v)) for v in schedule.values()):
        return "the schedule's state is not a table of numbers"
    return None


def _restore(out: Path | None, model: RecurrentModel, optimizer: Any, schedule: Any,
             rng: np.random.Generator) -> tuple[Progress, dict[str, np.ndarray] | None]:
    """Continue an interrupted run from ``out/checkpoint.npz``: parameters, optimizer, schedule, random
    state and progress as they were after its last finished epoch; returns (progress, best-dev params)."""
    if out is None or not (out / CHECKPOINT).is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {out / CHECKPOINT if out else '(no --out)'}")
    arrays, meta = load_checkpoint(out / CHECKPOINT)
    load_params(model, arrays, "param", str(out / CHECKPOINT))
    wrong = training_state_problem(meta)
    if wrong:
        raise ValueError(f"checkpoint {out / CHECKPOINT}: cannot resume from it, its training state is damaged "
                         f"({wrong})")
    try:
        optimizer.load_state_dict({k[4:]: v for k, v in arrays.items() if k.startswith("opt/")})
        schedule.load_state_dict(meta["schedule"])
        rng.bit_generator.state = meta["rng"]
        progress = Progress(**meta["progress"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"checkpoint {out / CHECKPOINT}: cannot resume from it, its training state is damaged "
                         f"({type(err).__name__}: {err})") from None
    best = {k[5:]: v for k, v in arrays.items() if k.startswith("best/")} or None
    RunFolder(out).write_metrics(progress.history)
    return progress, best


def _train_epoch(model: RecurrentModel, train: Any, config: TrainConfig, optimizer: Any, rng: np.random.Generator,
                 epoch: int, out: Path | None, kept_epoch: int) -> tuple[list, int]:
    """One pass over the training batches: (each batch's stats, sequences seen). Weight noise perturbs
    the weights for the gradient only; a non-finite loss, gradient or parameter stops the run, naming it."""
    stats, sequences, state = [], 0, None
    bar = _progress_bar(train.num_batches(config.batch_size), config.progress, f"epoch {epoch + 1}")
    for b, batch in enumerate(train.batches(config.batch_size, rng, bucket=config.bucket)):
        try:
            loss, batch_stats, state = train_step(model, batch, state if batch.carry else None, config, optimizer,
                                                  rng)
        except _NonFinite as err:
            raise TrainingDiverged(_diverged(epoch, b, str(err), out, kept_epoch)) from None
        stats.append(batch_stats)
        sequences += batch.size
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}")
    if bar is not None:
        bar.close()
    return stats, sequences


def timed_epoch(model: RecurrentModel, train: Any, dev: Any = None, config: TrainConfig | None = None,
                batches: int = 3) -> float:
    """The CPU seconds one epoch of ``fit`` would take: ``batches`` training updates (``train_step``) and as many
    evaluation batches on ``dev`` timed, each after one untimed call (which loads or compiles what a first call
    needs), scaled to the epoch's batch counts. For planning: batches of other lengths cost in proportion. The
    model's parameters are left as they were."""
    config = config or TrainConfig()
    saved = {k: p.copy() for k, p in model.params.items()}
    rng = np.random.default_rng(config.seed)
    optimizer = config_optimizer(model, config)

    def update(batch):
        try:
            train_step(model, batch, None, config, optimizer, rng)
        except _NonFinite:      # a diverging update costs what any update costs
            pass

    try:     # a diverging probe says nothing the runs will not: no warnings from its NaNs
        with blas_threads(training_threads(model, config.batch_size, config.threads)), np.errstate(all="ignore"):
            seconds = _seconds_per_batch(update, train.batches(config.batch_size, rng, bucket=config.bucket),
                                         batches) * train.num_batches(config.batch_size)
            if dev is not None:
                seconds += _seconds_per_batch(lambda batch: model.evaluate(batch, None),
                                              dev.batches(config.batch_size, by_length=True),
                                              batches) * dev.num_batches(config.batch_size)
    finally:
        for k, p in model.params.items():
            p[...] = saved[k]
    return seconds


def _seconds_per_batch(call: Callable[[Any], Any], batches: Any, count: int) -> float:
    """Mean CPU seconds of ``call`` over up to ``count`` batches after the first, which runs untimed (a lone
    batch is timed on its second call)."""
    taken = [b for _, b in zip(range(count + 1), batches)]
    if not taken:
        return 0.0
    call(taken[0])
    timed = taken[1:] or taken[:1]
    started = time.process_time()
    for batch in timed:
        call(batch)
    return (time.process_time() - started) / len(timed)


def _noisy_inputs(batch: Any, sigma: float, rng: np.random.Generator) -> Any:
    """The batch with N(0, σ²) added to every input value (a regulariser: the model never sees the clean
    sequence twice); token ids have no noise to add."""
    if not np.issubdtype(batch.x.dtype, np.floating):
        raise ValueError("input_noise: this task's inputs are token ids; noise is added to real-valued inputs only")
    return dataclasses.replace(batch, x=batch.x + rng.normal(0.0, sigma, batch.x.shape).astype(batch.x.dtype))


class _NonFinite(ArithmeticError):
    """A non-finite loss, gradient or parameter; the message names it."""


def train_step(model: RecurrentModel, batch: Any, h0: list | None, config: TrainConfig, optimizer: Any,
               rng: np.random.Generator) -> tuple[float, Any, list]:
    """One update, as every loop (and ``benchmarks/bench_models.py``) runs it: forward and backward
    (with weight noise perturbing the weights for the gradient only), the finiteness checks, clipping
    and the optimizer's step. Returns (loss, the batch's stats, the final state per layer)."""
    if config.input_noise:
        batch = _noisy_inputs(batch, config.input_noise, rng)
    clean = None
    if config.weight_noise:
        clean = {k: p.copy() for k, p in model.params.items()}
        for p in model.params.values():
            p += rng.normal(0.0, config.weight_noise, p.shape).astype(p.dtype)
    rows = config.clip_value is None and optimizer.takes_rows    # the embedding's SGD step on the rows read
    loss, grads, batch_stats, state = model.loss_and_grads(batch, h0, config.back_steps,
                                                           normalization=config.loss_normalization,
                                                           row_gradients=rows)
    if clean is not None:
        for k, p in model.params.items():
            p[...] = clean[k]
    if not math.isfinite(loss):
        raise _NonFinite("the loss")
    scale = 1.0
    if config.clip_value is None:        # one pass: the norm clipping needs also says whether all is finite
        norm = float(global_norm(grads))
        if not math.isfinite(norm) and _first_non_finite(grads):
            raise _NonFinite(f"the gradient of parameter {_first_non_finite(grads)!r}")
        if config.clip is not None and norm > config.clip:
            scale = config.clip / norm   # clip_global_norm's factor, applied inside the update
    else:
        bad = _first_non_finite(grads)
        if bad:
            raise _NonFinite(f"the gradient of parameter {bad!r}")
        grads = clip_gradients(grads, config.clip_value, config.clip)
    if not optimizer.step(grads, grad_scale=scale):
        raise _NonFinite(f"parameter {_first_non_finite(dict(model.params))!r} after the update")
    return loss, batch_stats, state


def _progress_state(progress: Progress) -> dict[str, Any]:
    """Progress as the checkpoint stores it; not ``dataclasses.asdict``, whose deep copy of the growing
    history took 1.8 ms an epoch at 150 epochs, more than the epochs of the small studies' models."""
    return {f.name: getattr(progress, f.name) for f in dataclasses.fields(progress)}


def _diverged(epoch: int, batch: int, what: str, out: Path | None, kept_epoch: int) -> str:
    kept = (f"the checkpoint of epoch {kept_epoch} is kept at {out / CHECKPOINT}" if out is not None and kept_epoch
            else "no checkpoint was written")
    return f"training diverged at epoch {epoch + 1}, batch {batch + 1}: {what} is NaN or Inf; {kept}"
