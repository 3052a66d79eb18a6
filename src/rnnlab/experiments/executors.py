"""Where a sweep's trials run: ``local`` (a process pool on this machine) or ``ray`` (a Ray cluster,
extra ``rnnlab[ray]``). An executor only runs trials and hands their outcomes back to the driver,
which stores them (``rnnlab.experiments.sweeps.TrialStore``): results and resume are the same
whichever executor ran them.

Every worker trains with one BLAS thread (``THREAD_ENV``, set before NumPy is imported), so that a
trial computes the same numbers on any executor: more threads change the order of BLAS sums.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from rnnlab.engines.threads import blas_threads
from rnnlab.experiments.settings import build, jsonable, train_config

THREAD_ENV = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
EXECUTORS = ("local", "ray")
SPLITS = ("train", "dev", "test")


def run_trial(settings: dict[str, Any], on_epoch: Callable | None = None) -> dict[str, Any]:
    """One trial: one call of the training loop. Never raises: a diverged run or an error comes back
    as ``status`` ``diverged``/``failed`` with the ``error``, so the sweep goes on. ``on_epoch``
    receives each epoch's row (``fit``'s hook)."""
    from rnnlab.train import TrainingDiverged, fit

    started = time.perf_counter()
    try:
        task, model = build(settings)
        result = fit(model, task.splits["train"], task.splits.get("dev"), task.splits.get("test"),
                     train_config(settings, progress=False), None,
                     run_info={"settings": settings, "task_info": jsonable(task.info)}, task_metrics=task.task_metrics,
                     on_epoch=on_epoch)
    except TrainingDiverged as err:
        return {"status": "diverged", "error": str(err), "metrics": {}, "history": [],
                "seconds": time.perf_counter() - started}
    except Exception as err:  # a trial's failure is recorded, not raised: the other trials go on
        return {"status": "failed", "error": f"{type(err).__name__}: {err}", "metrics": {}, "history": [],
                "seconds": time.perf_counter() - started}
    metrics = {k: float(v) for k, v in result.items() if k.split("_")[0] in SPLITS and isinstance(v, (int, float))}
    return {"status": "ok", "error": "", "metrics": metrics, "history": result["history"],
            "seconds": time.perf_counter() - started}


def _pinned_trial(settings: dict[str, Any]) -> dict[str, Any]:
    with blas_threads(1):
        return run_trial(settings)


def run_local(jobs: list[tuple[Any, dict]], workers: int) -> Iterator[tuple[Any, dict]]:
    """(key, outcome) as each job finishes, from a pool of ``workers`` spawned processes."""
    if not jobs:
        return
    if workers <= 1:
        for key, settings in jobs:
            yield key, _pinned_trial(settings)
        return
    saved = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update(THREAD_ENV)  # spawned workers inherit it before importing numpy
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context) as pool:
            pending = {pool.submit(run_trial, settings): key for key, settings in jobs}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_ray(jobs: list[tuple[Any, dict]], address: str | None, workers: int | None) -> Iterator[tuple[Any, dict]]:
    """(key, outcome) as each job finishes on a Ray cluster: ``address`` "auto" or HOST:PORT joins
    one, None starts a local instance (with ``workers`` CPUs). A trial whose worker or node is lost
    is run again elsewhere (Ray's task retries)."""
    try:
        import ray
    except ImportError as err:
        raise ValueError("--executor ray: needs Ray; install it with pip install 'rnnlab[ray]'") from err
    if not jobs:
        return
    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {"runtime_env": {"env_vars": THREAD_ENV}, "log_to_driver": False}
        if address is None:
            options.update(num_cpus=workers, include_dashboard=False)
        ray.init(address=address, **options)
    try:
        remote = ray.remote(num_cpus=1, max_retries=5)(run_trial)
        pending = {remote.remote(settings): key for key, settings in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()


def _asha_trainable(config: dict[str, Any]) -> None:
    """A Ray Tune function trainable: one trial whose every epoch is reported (ASHA may stop it
    there); the last report carries the whole outcome."""
    from ray import tune

    def report(row: dict[str, Any]) -> None:
        tune.report({k: v for k, v in row.items() if isinstance(v, (int, float))})

    outcome = run_trial(config["settings"], on_epoch=report)
    metric, worst = config["metric"], math.inf if config["mode"] == "min" else -math.inf
    final = outcome["metrics"].get(metric, worst)
    tune.report({"outcome": json.dumps(outcome, default=float), "epoch": len(outcome["history"]) + 1,
                 metric: final if math.isfinite(final) else worst})


def run_ray_asha(jobs: list[tuple[Any, dict]], address: str | None, workers: int | None, metric: str,
                 mode: str) -> Iterator[tuple[Any, dict]]:
    """Like ``run_ray``, through Ray Tune with its ASHA scheduler on the per-epoch ``metric``: trials
    it stops early come back with status ``stopped`` and the metrics of their last epoch."""
    try:
        import ray
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler
    except ImportError as err:
        raise ValueError("--early-stop asha: needs Ray Tune; install it with pip install 'rnnlab[ray]'") from err
    if not metric.startswith("dev_"):
        raise ValueError(f"--early-stop asha: the metric {metric!r} is not measured each epoch; ASHA needs a dev "
                         "metric (dev_loss, dev_accuracy, ...)")
    if not jobs:
        return
    epochs = max(int(settings["epochs"]) for _, settings in jobs)
    from rnnlab.experiments.ray_asha import CHANNELS, StoreFinished

    finished: queue.Queue = queue.Queue()
    channel = f"asha-{id(finished)}"
    CHANNELS[channel] = finished
    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {"runtime_env": {"env_vars": THREAD_ENV}, "log_to_driver": False}
        if address is None:
            options.update(num_cpus=workers, include_dashboard=False)
        ray.init(address=address, **options)
    errors: list[BaseException] = []

    def fit_all() -> None:
        try:
            with tempfile.TemporaryDirectory() as storage:
                tuner = tune.Tuner(
                    tune.with_resources(_asha_trainable, {"cpu": 1}),
                    param_space={"key": tune.grid_search([key for key, _ in jobs]), "metric": metric, "mode": mode,
                                 "settings": tune.sample_from(lambda spec: dict(jobs)[spec.config["key"]])},
                    tune_config=tune.TuneConfig(scheduler=ASHAScheduler(
                        time_attr="epoch", metric=metric, mode=mode, max_t=epochs + 1, grace_period=1)),
                    run_config=tune.RunConfig(storage_path=storage, callbacks=[StoreFinished(channel)], verbose=0))
                tuner.fit()
        except BaseException as err:  # surfaced in the driver's thread below
            errors.append(err)
        finally:
            finished.put(None)

    thread = threading.Thread(target=fit_all, daemon=True)
    thread.start()
    try:
        while (item := finished.get()) is not None:
            yield item
        if errors:
            raise errors[0]
    finally:
        thread.join()
        CHANNELS.pop(channel, None)
        if started_here:
            ray.shutdown()


def executor(name: str, address: str | None = None, workers: int | None = None, early_stop: str | None = None,
             metric: str = "dev_loss", mode: str = "min") -> Callable:
    """``jobs -> iterator of (key, outcome)`` for an executor name."""
    if name not in EXECUTORS:
        raise ValueError(f"--executor: unknown executor {name!r}; expected one of {EXECUTORS}")
    if early_stop not in (None, "asha"):
        raise ValueError(f"--early-stop: unknown scheduler {early_stop!r}; expected asha")
    if name == "local":
        if address is not None:
            raise ValueError("--address: only with --executor ray")
        if early_stop is not None:
            raise ValueError("--early-stop asha: needs --executor ray (Ray Tune's ASHA scheduler stops poor trials "
                             "early); the local executor trains every trial to the end")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return lambda jobs: run_local(jobs, workers or cores)
    if early_stop == "asha":
        return lambda jobs: run_ray_asha(jobs, address, workers, metric, mode)
    return lambda jobs: run_ray(jobs, address, workers)


def progress_bar(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="trials", unit="trial", file=sys.stderr, leave=True)
