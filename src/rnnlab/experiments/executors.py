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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rnnlab.engines.threads import blas_threads, cpu_cores
from rnnlab.experiments.settings import SPLITS, build, final_metrics, jsonable, train_config

THREAD_ENV = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
EXECUTORS = ("local", "ray")


@contextmanager
def one_thread_workers():
    """Worker processes spawned inside the block inherit ``THREAD_ENV`` (read before they import
    NumPy); this process's environment is restored after."""
    saved = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update(THREAD_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def ray_session(ray, address: str | None, workers: int | None):
    """Join the cluster at ``address`` ("auto", HOST:PORT), or start a local Ray instance with
    ``workers`` CPUs when None, with one BLAS thread per worker; leave it if this call joined it."""
    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {"runtime_env": {"env_vars": THREAD_ENV}, "log_to_driver": False}
        if address is None:
            options.update(num_cpus=workers, include_dashboard=False)
        ray.init(address=address, **options)
    try:
        yield
    finally:
        if started_here:
            ray.shutdown()


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
    return {"status": "ok", "error": "", "metrics": final_metrics(result), "history": result["history"],
            "seconds": time.perf_counter() - started}


def run_replica_group(settings_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials that differ only in seed and learning rate, trained as one ``fit_replicas`` program
    (the jax extra); one outcome per trial, as ``run_trial`` gives it. Streams with carried state
    and weight noise, which ``fit_replicas`` does not do, train trial by trial."""
    from rnnlab.data.containers import SequenceData
    from rnnlab.replicas import fit_replicas

    started = time.perf_counter()
    try:
        built = [build(settings) for settings in settings_list]
    except Exception as err:  # recorded like run_trial's failures
        return [{"status": "failed", "error": f"{type(err).__name__}: {err}", "metrics": {}, "history": [],
                 "seconds": time.perf_counter() - started} for _ in settings_list]
    tasks = [task for task, _ in built]
    if len(settings_list) == 1 or settings_list[0].get("weight_noise") or not all(
            isinstance(d, SequenceData) for d in tasks[0].splits.values()):
        return [run_trial(settings) for settings in settings_list]
    splits = {name: [task.splits[name] for task in tasks] if name in tasks[0].splits else None
              for name in SPLITS}
    results = fit_replicas([model for _, model in built], splits["train"], splits["dev"], splits["test"],
                           train_config(settings_list[0], progress=False), [s["seed"] for s in settings_list],
                           [task.task_metrics for task in tasks], learning_rates=[s["lr"] for s in settings_list])
    seconds = (time.perf_counter() - started) / len(settings_list)
    return [{"status": "diverged" if r["diverged"] else "ok", "error": r["diverged"] or "",
             "metrics": {} if r["diverged"] else final_metrics(r),
             "history": r["history"], "seconds": seconds} for r in results]


def replica_groups(jobs: list[tuple[Any, dict]]) -> list[list[tuple[Any, dict]]]:
    """Jobs whose settings differ only in seed and learning rate, together (first-seen order); a
    group holds each seed once (``fit_replicas`` draws each replica's batches from its seed)."""
    groups: dict[tuple, list] = {}
    for key, settings in jobs:
        rest = json.dumps({k: v for k, v in settings.items() if k not in ("seed", "lr")}, sort_keys=True, default=str)
        copy = 0
        while any(s["seed"] == settings["seed"] for _, s in groups.get((rest, copy), [])):
            copy += 1
        groups.setdefault((rest, copy), []).append((key, settings))
    return list(groups.values())


def _run_group(settings_list: list[dict[str, Any]], replicas: bool) -> list[dict[str, Any]]:
    return run_replica_group(settings_list) if replicas else [run_trial(s) for s in settings_list]


def _pinned_group(settings_list: list[dict[str, Any]], replicas: bool) -> list[dict[str, Any]]:
    with blas_threads(1):
        return _run_group(settings_list, replicas)


def run_local(jobs: list[tuple[Any, dict]], workers: int, replicas: bool = False) -> Iterator[tuple[Any, dict]]:
    """(key, outcome) as each job finishes, from a pool of ``workers`` spawned processes. With
    ``replicas``, each group of ``replica_groups`` is one job."""
    if not jobs:
        return
    units = replica_groups(jobs) if replicas else [[job] for job in jobs]
    if workers <= 1:
        for unit in units:
            yield from zip([k for k, _ in unit], _pinned_group([s for _, s in unit], replicas))
        return
    with one_thread_workers(), ProcessPoolExecutor(max_workers=min(workers, len(units)),
                                                   mp_context=multiprocessing.get_context("spawn")) as pool:
        pending = {pool.submit(_run_group, [s for _, s in unit], replicas): [k for k, _ in unit] for unit in units}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield from zip(pending.pop(future), future.result())


def run_ray(jobs: list[tuple[Any, dict]], address: str | None, workers: int | None,
            replicas: bool = False) -> Iterator[tuple[Any, dict]]:
    """(key, outcome) as each job finishes on a Ray cluster: ``address`` "auto" or HOST:PORT joins
    one, None starts a local instance (with ``workers`` CPUs). A trial whose worker or node is lost
    is run again elsewhere (Ray's task retries)."""
    try:
        import ray
    except ImportError as err:
        raise ValueError("--executor ray: needs Ray; install it with pip install 'rnnlab[ray]'") from err
    if not jobs:
        return
    with ray_session(ray, address, workers):
        remote = ray.remote(num_cpus=1, max_retries=5)(_run_group)
        units = replica_groups(jobs) if replicas else [[job] for job in jobs]
        pending = {remote.remote([s for _, s in unit], replicas): [k for k, _ in unit] for unit in units}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield from zip(pending.pop(ref), ray.get(ref))


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

    with ray_session(ray, address, workers):
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


def executor(name: str, address: str | None = None, workers: int | None = None, early_stop: str | None = None,
             metric: str = "dev_loss", mode: str = "min", replicas: bool = False) -> Callable:
    """``jobs -> iterator of (key, outcome)`` for an executor name; ``replicas``: trials that differ
    only in seed and learning rate train as one ``fit_replicas`` program (the jax extra)."""
    if replicas:
        import importlib.util

        if importlib.util.find_spec("jax") is None:
            raise ValueError("--replicas: needs JAX; install it with pip install 'rnnlab[jax]'")
        if early_stop is not None:
            raise ValueError("--replicas: not with --early-stop (ASHA stops trials one by one)")
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
        return lambda jobs: run_local(jobs, workers or cpu_cores(), replicas)
    if early_stop == "asha":
        return lambda jobs: run_ray_asha(jobs, address, workers, metric, mode)
    return lambda jobs: run_ray(jobs, address, workers, replicas)


def progress_bar(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="trials", unit="trial", file=sys.stderr, leave=True)


def log_call(folder: str | Path, call: dict[str, Any]) -> list[dict[str, Any]]:
    """Append one call to ``folder/calls.jsonl`` and return every call logged there, so that the
    wall time of a sweep or a study run over several sessions adds up."""
    with open(Path(folder) / "calls.jsonl", "a") as log:
        log.write(json.dumps(call) + "\n")
    return read_calls(folder)


def read_calls(folder: str | Path) -> list[dict[str, Any]]:
    path = Path(folder) / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
