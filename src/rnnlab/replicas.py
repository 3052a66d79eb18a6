"""Many independent training runs of one model as one compiled program (``jax.vmap`` over replicas).

A *replica* is what ``fit(model, train, dev, test, replace(config, seed=seed))`` trains: its own
model (initial parameters), its own shuffled and bucketed batches, its own optimizer state,
schedule, best-dev snapshot and early stop. ``fit_replicas`` trains R of them in one pass over the
data and returns, replica by replica, the result ``fit`` would have returned (the same parameters
and metrics to float rounding; the tests compare them in float64). Each step stacks the R
replicas' batches, padded to a common length and batch size, and one compiled program runs R
forward passes, R backward passes and R optimizer updates. Padding is exact, not approximate: a
masked step keeps the state and passes the error through unchanged, and padded positions carry no
loss.

The math is the project's own, and so is the bookkeeping: the recurrence runs the cells' step
functions through the compiled engine's scans (``rnnlab.engines.jax``); inputs, head, readout,
loss and their adjoints are ``rnnlab.models``' pure functions, clipping and the update the
optimizers' pure rules (``rnnlab.optim``), all under ``jax.numpy``; the end of every epoch (rows,
best-dev, early stopping, the schedule) and the result are ``rnnlab.train``'s epoch core, run per
replica. Nothing is differentiated by JAX.

Differences from ``fit``: no checkpoints or resume (a run is a sweep of short runs); a replica whose
loss, gradient or parameters become NaN or Inf is frozen at its last good parameters and reported
(``"diverged"`` in its result) while the others go on; ``seconds`` per epoch is the wall time of all
replicas together. Streams with carried state and weight noise are not supported (ValueError).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from rnnlab.data.containers import SequenceData, pad
from rnnlab.models import RecurrentModel, Stats, head_loss, head_loss_backward, model_inputs, model_inputs_backward
from rnnlab.optim import clip_gradients, make_optimizer, make_schedule
from rnnlab.train import Progress, TrainConfig, epoch_row, metrics_from_stats, run_result

try:
    import jax
    import jax.numpy as jnp
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("fit_replicas needs JAX: pip install 'rnnlab[jax]'") from err

from rnnlab.engines.jax import backward_scan, forward_scan  # noqa: E402

# -- one replica's step (pure; vmapped below) -------------------------------------------------------


def _split(model: RecurrentModel, params: dict):
    layers = [{name: params[f"rnn.{i}.{name}"] for name in cell.params} for i, cell in enumerate(model.rnn.layers)]
    readout = {name: params[f"out.{name}"] for name in model.readout.params}
    return layers, readout


def _stack_forward(model: RecurrentModel, layers: list, inputs, mask):
    """The stack's layers through the compiled engine's scan; per layer, what its backward needs."""
    B = inputs.shape[1]
    m = mask[..., None]
    saved, h = [], inputs
    for cell, p in zip(model.rnn.layers, layers):
        state0 = tuple(jnp.zeros((B,) + shape, inputs.dtype) for shape in cell.state_shapes())
        states, steps = forward_scan(cell, True, p, h, state0, m)
        saved.append((h, state0, states, steps))
        h = states[0]
    return h, saved


def _loss_and_grads(model: RecurrentModel, config: TrainConfig, params, x, y, mask, weight):
    """RecurrentModel.loss_and_grads for one replica: the model's own pure pieces under jax.numpy."""
    layers, readout = _split(model, params)
    hs, saved = _stack_forward(model, layers, model_inputs(model, params, x, jnp), mask)
    loss, stats, head_saved = head_loss(model, readout, hs, y, mask, weight, jnp, config.loss_normalization)
    readout_grads, d = head_loss_backward(model, readout, hs.shape, mask, head_saved, jnp)
    grads = {f"out.{name}": g for name, g in readout_grads.items()}
    for i in range(len(layers) - 1, -1, -1):
        h_in, state0, states, steps = saved[i]
        layer_grads, d, _, _ = backward_scan(model.rnn.layers[i], True, config.back_steps, layers[i], h_in,
                                             mask[..., None], state0, states, steps, d)
        grads.update({f"rnn.{i}.{name}": g for name, g in layer_grads.items()})
    grads.update(model_inputs_backward(model, params, x, d, jnp))
    return loss, {name: grads[name] for name in params}, stats


def _evaluate_batch(model: RecurrentModel, params, x, y, mask, weight):
    layers, readout = _split(model, params)
    hs, _ = _stack_forward(model, layers, model_inputs(model, params, x, jnp), mask)
    return _sums(head_loss(model, readout, hs, y, mask, weight, jnp)[1])


def _sums(stats):
    """(loss sum, count, correct) with a number in place of ``correct`` where there is none."""
    loss_sum, count, correct = stats
    return loss_sum, count, jnp.zeros((), count.dtype) if correct is None else correct


def _train_step(model: RecurrentModel, config: TrainConfig, rule, params, slots, t, lr, active, x, y, mask, weight):
    """One replica's step: gradients, clipping, the optimizer's rule. A replica that is not active
    (stopped early or diverged) keeps its parameters; one whose step is not finite keeps them and
    stops being active."""
    loss, grads, stats = _loss_and_grads(model, config, params, x, y, mask, weight)
    grads = clip_gradients(grads, config.clip_value, config.clip, jnp)
    new_params, new_slots = rule.apply(params, grads, slots, t + 1, lr, jnp)
    finite = jnp.isfinite(loss)
    for tree in (grads, new_params):
        for a in tree.values():
            finite = finite & jnp.isfinite(a).all()
    keep = active & finite

    def choose(new, old):
        return jnp.where(keep, new, old)

    params = {k: choose(new_params[k], params[k]) for k in params}
    slots = {slot: {k: choose(new_slots[slot][k], slots[slot][k]) for k in slots[slot]} for slot in slots}
    return params, slots, t + keep, keep, _sums(stats), finite


_PROGRAMS: dict = {}


def _programs(model: RecurrentModel, config: TrainConfig, rule):
    """The compiled (train step, batch evaluation) for this kind of model, configuration and rule,
    kept across calls: the traced functions read only the structure below from ``model``,
    ``config`` and ``rule`` (shapes are JAX's own cache key)."""
    layers = tuple((c.config, c.input_size, c.hidden_size, tuple(c.params)) for c in model.rnn.layers)
    hyper = tuple(sorted((k, v) for k, v in vars(rule).items() if k not in ("params", "state", "lr", "steps")))
    key = (layers, model.head, model.loss_name, model.one_hot, model.embedding is not None, model.input_size,
           str(model.dtype), tuple(model.readout.params), config.back_steps, config.clip, config.clip_value,
           config.weight_decay, config.loss_normalization, type(rule), hyper)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = (jax.jit(jax.vmap(partial(_train_step, model, config, rule))),
                          jax.jit(jax.vmap(partial(_evaluate_batch, model))))
    return _PROGRAMS[key]


# -- batches --------------------------------------------------------------------------------------


class _Padded:
    """One split per replica (or one shared by all), padded once to (T_max, R_data, N, ...), from
    which each step gathers the R replicas' batches."""

    def __init__(self, splits: list[SequenceData], dtype, bucket: int) -> None:
        self.splits, self.bucket, self.dtype = splits, bucket, dtype
        self.per_step = splits[0].per_step
        self.lengths = np.stack([d.lengths for d in splits])                      # (R_data, N)
        T = int(self.lengths.max())
        self.x = np.stack([self._pad(d.inputs, T) for d in splits], axis=1)
        if self.per_step:
            self.y = np.stack([self._pad(d.targets, T) for d in splits], axis=1)
        else:
            self.y = np.stack([self._cast(d.targets) for d in splits])             # (R_data, N, ...)

    def _cast(self, a):
        a = np.asarray(a)
        return a if np.issubdtype(a.dtype, np.integer) else a.astype(self.dtype)

    def _pad(self, arrays, T: int) -> np.ndarray:
        out, _ = pad([self._cast(a) for a in arrays])
        return np.concatenate([out, np.zeros((T - out.shape[0],) + out.shape[1:], out.dtype)])

    @property
    def targets_are_classes(self) -> bool:
        return bool(np.issubdtype(self.y.dtype, np.integer))

    def gather(self, groups: Sequence[np.ndarray], batch_size: int):
        """R index groups (replica r reads its own split) → x (R, T, B, ...), y, mask (R, T, B),
        weight (R, B), padded to B = batch_size and T = the longest sequence rounded up to the bucket."""
        R = len(groups)
        index = np.zeros((R, batch_size), np.int64)
        valid = np.zeros((R, batch_size), bool)
        for r, g in enumerate(groups):
            index[r, : len(g)], valid[r, : len(g)] = g, True
        split = (np.arange(R) if len(self.splits) > 1 else np.zeros(R, np.int64))[:, None]   # (R, 1)
        lengths = np.where(valid, self.lengths[split, index], 0)
        T = min(self.x.shape[0], self.bucket * math.ceil(lengths.max() / self.bucket))
        x = np.moveaxis(self.x[:T, split, index], 0, 1)
        y = np.moveaxis(self.y[:T, split, index], 0, 1) if self.per_step else self.y[split, index]
        mask = (np.arange(T)[None, :, None] < lengths[:, None, :]).astype(self.dtype)
        return x, y, mask, valid.astype(self.dtype)


def _aligned(groups: list[list[np.ndarray]], data: _Padded, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Each replica's batches ranked by their longest sequence, the ranks taken in one random order."""
    split = (lambda r: r) if len(data.splits) > 1 else (lambda r: 0)
    ranked = [sorted(g, key=lambda index, r=r: int(data.lengths[split(r), index].max())) for r, g in enumerate(groups)]
    order = rng.permutation(len(groups[0]))
    return [[g[i] for i in order] for g in ranked]


def _per_replica(data, R: int, name: str) -> list[SequenceData] | None:
    if data is None:
        return None
    splits = list(data) if isinstance(data, (list, tuple)) else [data]
    if len(splits) not in (1, R):
        raise ValueError(f"{name}: expected one SequenceData or one per replica ({R}), got {len(splits)}")
    for d in splits:
        if not isinstance(d, SequenceData):
            raise ValueError(f"{name}: fit_replicas trains on SequenceData; streams with carried state "
                             f"(StreamData) need fit")
    if len({len(d) for d in splits}) > 1 or len({d.per_step for d in splits}) > 1:
        raise ValueError(f"{name}: every replica's split needs the same number and kind of sequences, got sizes "
                         f"{[len(d) for d in splits]}")
    return splits


# -- the loop -------------------------------------------------------------------------------------


def _fit_replicas(models: Sequence[RecurrentModel], train: Any, dev: Any, test: Any, config: TrainConfig | None,
                  seeds: Sequence[int] | None, task_metrics: Any, length_bucket: int, align_lengths: bool,
                  learning_rates: Sequence[float] | None) -> list[dict[str, Any]]:
    config = config or TrainConfig()
    models = list(models)
    R = len(models)
    seeds, splits, metric_fns, initial_lrs = _replica_arguments(models, train, dev, test, config, seeds,
                                                                task_metrics, length_bucket, learning_rates)
    template = models[0]
    dtype = template.dtype
    rule = make_optimizer(config.optimizer, {}, config.lr, config.momentum, config.weight_decay, config.nesterov,
                          config.momentum_scales_lr)
    params = {k: jnp.asarray(np.stack([m.params[k] for m in models])) for k in template.params}
    slots = {slot: {k: jnp.zeros_like(v) for k, v in params.items()} for slot in rule.slots}
    t = jnp.zeros(R, jnp.int32)
    step, evaluate_batch = _programs(template, config, rule)

    rngs, shared_rng = [np.random.default_rng(seed) for seed in seeds], np.random.default_rng(seeds)
    schedules = [make_schedule(config.schedule, lr, **config.schedule_kwargs()) for lr in initial_lrs]
    padded = {name: _Padded(data, dtype, length_bucket) for name, data in splits.items() if data is not None}
    has_dev, accuracy = "dev" in padded, _reports_accuracy(template, padded["train"])
    progress = [Progress() for _ in seeds]
    best = dict(params) if has_dev else None
    diverged: list[str | None] = [None] * R
    n_train = len(splits["train"][0])
    started = time.perf_counter()
    for epoch in range(config.epochs):
        active_now = [not (progress[r].stopped_early or diverged[r]) for r in range(R)]
        if not any(active_now):
            break
        lrs = [s.lr_for(epoch) for s in schedules]
        tic = time.perf_counter()
        groups = [splits["train"][min(r, len(splits["train"]) - 1)].batch_indices(config.batch_size, rng,
                                                                                  bucket=config.bucket)
                  for r, rng in enumerate(rngs)]
        if align_lengths:
            groups = _aligned(groups, padded["train"], shared_rng)
        state = (params, slots, t, jnp.asarray(active_now))
        state, fetched = _replica_epoch(step, state, groups, padded["train"], config.batch_size,
                                        jnp.asarray(lrs, dtype))
        params, slots, t, _ = state
        seconds = time.perf_counter() - tic
        dev_stats = _evaluate_all(evaluate_batch, params, padded["dev"], config.batch_size, accuracy) \
            if has_dev else None
        for r in (r for r in range(R) if active_now[r]):
            row = functools.partial(epoch_row, epoch, lrs[r], seconds=seconds, sequences=R * n_train)  # all replicas
            diverged[r], improved = _close_replica_epoch(progress[r], schedules[r], config, template, fetched, r,
                                                         accuracy, row, dev_stats[r] if has_dev else None)
            if improved and best is not None:
                best = {k: best[k].at[r].set(params[k][r]) for k in best}
        if config.progress:
            losses = [p.history[-1].get("train_loss", math.nan) for p in progress if p.epoch == epoch + 1]
            print(f"epoch {epoch + 1}/{config.epochs}: {R} replicas, train loss mean {np.nanmean(losses):.4g}, "
                  f"{seconds:.2f} s", file=sys.stderr)
    final = best if best is not None else params
    split_stats = {name: _evaluate_all(evaluate_batch, final, data, config.batch_size, accuracy)
                   for name, data in padded.items()}
    return _replica_results(models, {k: np.asarray(v) for k, v in final.items()}, split_stats, config, seeds,
                            initial_lrs, metric_fns, progress, diverged, best is not None,
                            time.perf_counter() - started)


def _reports_accuracy(template: RecurrentModel, train: Any) -> bool:
    """Whether ``fit`` would report an accuracy: only where the outputs are classes."""
    return template.loss_name == "cross_entropy" or (template.loss_name == "squared_error"
                                                     and train.targets_are_classes)


def _replica_epoch(step: Callable, state: tuple, groups: list, train: Any, batch_size: int, lr: Any) -> tuple:
    """One epoch's batches through the compiled step, every replica at once: the new (params, slots, t, active)
    and each batch's (stats, finite) fetched from the device."""
    params, slots, t, active = state
    sums = []
    for b in range(len(groups[0])):
        x, y, mask, weight = train.gather([g[b] for g in groups], batch_size)
        params, slots, t, active, stats, finite = step(params, slots, t, lr, active, x, y, mask, weight)
        sums.append((stats, finite))
    return (params, slots, t, active), jax.device_get(sums)


def _close_replica_epoch(progress: Progress, schedule: Any, config: TrainConfig, template: RecurrentModel,
                         fetched: list, r: int, accuracy: bool, make_row: Callable,
                         dev_stats: Any) -> tuple[str | None, bool]:
    """Replica ``r``'s epoch recorded as ``fit`` records one (its batches up to a non-finite one; ``make_row``:
    ``epoch_row`` with all but the metrics given): (why it diverged or None, whether its dev score improved so
    that its parameters are the best so far)."""
    bad_batch = next((b for b, (_, ok) in enumerate(fetched) if not ok[r]), None)
    stats = [_stats(s, r, accuracy) for s, _ in fetched[:bad_batch]]
    has_dev = dev_stats is not None
    row = make_row(metrics_from_stats(stats, template, "train") if stats else {},
                   metrics_from_stats([dev_stats], template, "dev") if has_dev else None)
    diverged = None if bad_batch is None else (
        f"training diverged at epoch {row['epoch']}, batch {bad_batch + 1}: the loss, a gradient or an updated "
        f"parameter is NaN or Inf; this replica kept its last good parameters")
    if diverged or not stats:
        progress.record(row)
        return diverged, False
    return diverged, progress.close_epoch(row, schedule, config, has_dev)


def _replica_results(models: list[RecurrentModel], final: dict[str, np.ndarray], split_stats: dict, config: TrainConfig,
                     seeds: list[int], initial_lrs: list[float], metric_fns: list, progress: list[Progress],
                     diverged: list[str | None], kept_best: bool, total: float) -> list[dict[str, Any]]:
    """Each replica's trained parameters put back into its model, and its result as ``fit`` returns one."""
    results = []
    for r, (seed, model, metrics) in enumerate(zip(seeds, models, metric_fns)):
        for k, p in model.params.items():
            p[...] = final[k][r]
        result = run_result(dataclasses.replace(config, seed=seed, lr=initial_lrs[r]), None, model.num_params(),
                            progress[r], kept_best, total, replicas=len(models), diverged=diverged[r])
        for prefix, stats in split_stats.items():
            result.update(metrics_from_stats([stats[r]], model, prefix))
        if metrics is not None:
            result.update(metrics(model))
        result["history"] = progress[r].history
        results.append(result)
    return results


def _replica_arguments(models: list[RecurrentModel], train: Any, dev: Any, test: Any, config: TrainConfig,
                       seeds: Sequence[int] | None, task_metrics: Any, length_bucket: int,
                       learning_rates: Sequence[float] | None) -> tuple[list[int], dict, list, list[float]]:
    """``fit_replicas``'s arguments checked, each error naming its argument: (seeds, splits per replica,
    task metrics per replica, initial learning rates)."""
    R = len(models)
    if R == 0:
        raise ValueError("models: expected at least one model")
    seeds = list(range(R)) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != R:
        raise ValueError(f"seeds: expected one per model ({R}), got {len(seeds)}")
    if len(set(seeds)) != R:
        raise ValueError(f"seeds: expected distinct seeds, got {seeds}")
    splits = {name: _per_replica(data, R, name) for name, data in (("train", train), ("dev", dev), ("test", test))}
    if splits["train"] is None:
        raise ValueError("train: expected training data")
    metric_fns = list(task_metrics) if isinstance(task_metrics, (list, tuple)) else [task_metrics] * R
    if len(metric_fns) != R:
        raise ValueError(f"task_metrics: expected one callable or one per replica ({R}), got {len(metric_fns)}")
    initial_lrs = [config.lr] * R if learning_rates is None else [float(lr) for lr in learning_rates]
    if len(initial_lrs) != R or not all(lr > 0 for lr in initial_lrs):
        raise ValueError(f"learning_rates: expected one positive rate per model ({R}), got {initial_lrs}")
    if getattr(models[0], "block", "none") != "none":
        raise ValueError(f"models: block {models[0].block!r} is not compiled for replicas; train these runs one "
                         "by one (without --replicas)")
    for noise in ("weight_noise", "input_noise"):
        if getattr(config, noise):
            raise ValueError(f"{noise}: not supported by fit_replicas (fit draws it from NumPy's generator)")
    if length_bucket < 1:
        raise ValueError(f"length_bucket: expected a positive number of steps, got {length_bucket}")
    shapes = {k: v.shape for k, v in models[0].params.items()}
    for r, m in enumerate(models[1:], 1):
        if {k: v.shape for k, v in m.params.items()} != shapes or type(m) is not type(models[0]):
            raise ValueError(f"models: model {r} differs from model 0 ({m!r} vs {models[0]!r})")
    return seeds, splits, metric_fns, initial_lrs


def _stats(sums, r: int, accuracy: bool) -> Stats:
    """Replica r's Stats from the (loss sum, count, correct) arrays of a vmapped call."""
    loss_sum, count, correct = (np.asarray(a)[r] for a in sums)
    return Stats(float(loss_sum), int(round(float(count))), int(round(float(correct))) if accuracy else None)


def _evaluate_all(evaluate_batch, params, data: _Padded, batch_size: int, accuracy: bool) -> list[Stats]:
    """Every replica's loss sum, count and correct over a whole split (batched by length, as ``evaluate``)."""
    R = next(iter(params.values())).shape[0]
    sums = [evaluate_batch(params, *data.gather([index] * R, batch_size))
            for index in data.splits[0].batch_indices(batch_size, by_length=True)]
    totals = [np.sum([np.asarray(s[i]) for s in sums], axis=0) for i in range(3)]
    return [_stats(totals, r, accuracy) for r in range(R)]


def fit_replicas(
    models: Sequence[RecurrentModel],
    train: SequenceData | Sequence[SequenceData],
    dev: SequenceData | Sequence[SequenceData] | None = None,
    test: SequenceData | Sequence[SequenceData] | None = None,
    config: TrainConfig | None = None,
    seeds: Sequence[int] | None = None,
    task_metrics: Callable | Sequence[Callable] | None = None,
    length_bucket: int = 8,
    align_lengths: bool = False,
    learning_rates: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Train ``models[r]`` with ``config.seed = seeds[r]`` (default 0, 1, ...) as R replicas at once;
    returns one result dict per replica, as ``fit`` returns it, plus ``"replicas"`` (how many were
    trained together) and ``"diverged"`` (None, or where that replica stopped). The models are
    left holding their trained (best-dev) parameters.

    ``train``/``dev``/``test``: one SequenceData shared by all replicas, or one per replica (same
    number of sequences). ``task_metrics``: one callable, or one per replica (a task's metrics
    read its own data). ``learning_rates``: one initial rate per replica (a learning-rate sweep as
    one program; each replica's schedule scales its own), default ``config.lr`` for all.
    ``length_bucket``: batches are padded to a multiple of this many steps, so
    the program is compiled for a few lengths only.

    ``align_lengths``: every step pads to the longest of the R replicas' batches, so with randomly
    ordered, length-bucketed batches most steps run near the longest length there is. With
    ``align_lengths=True`` each replica keeps its own batches (same sequences as ``fit``'s) but
    takes them in an order shared by all replicas: its batches ranked by length, the ranks visited
    in one random order per epoch. Each replica still sees its batches in a uniformly random
    order, so it trains the same model in distribution, faster, but not number for number as
    ``fit`` does (the replicas' orders are no longer independent of each other).
    """
    # 64-bit types for this call only, not for the whole process: float64 models need them, and the
    # losses and norms accumulate in float64 whatever the model's dtype (as fit does in NumPy)
    with jax.enable_x64(True):
        return _fit_replicas(models, train, dev, test, config, seeds, task_metrics, length_bucket, align_lengths,
                             learning_rates)
