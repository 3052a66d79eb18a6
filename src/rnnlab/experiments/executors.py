"""Where training jobs run, for studies and sweeps alike: ``local`` (a process pool on this machine) or
``ray`` (a Ray cluster, extra ``rnnlab[ray]``). An executor only runs jobs and hands their outcomes back
to the driver, which keeps them in the one ``JobStore`` (a study's run folders, a sweep's trials):
results and resume are the same whichever executor ran them. One worker function (``run_job``), one
grouping rule for replicas (``replica_groups``), one way to ship a job's files back from another machine.

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
from typing import Any, NamedTuple

from rnnlab.cells.registry import adopt_named_cell_files, named_cell_files
from rnnlab.engines.threads import blas_threads
from rnnlab.experiments.results import run_metrics
from rnnlab.experiments.settings import SPLITS, build, run_record, train_config
from rnnlab.files import append_text, atomic_write, read_json, read_json_lines, refuse_linked_folder
from rnnlab.machine import cpu_cores
from rnnlab.train import RESULT, RunFolder

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


class StudyRunFailed(RuntimeError):
    """A run of a study diverged or failed; the study stops, naming it and its folder."""


class Job(NamedTuple):
    """One training run to execute. Every executor runs a list of jobs and yields (key, outcome) as each
    finishes; an outcome is the same dict whichever executor ran it."""

    key: Any                        # what the caller knows it by (a run's "KEY seed N", a trial's id)
    settings: dict[str, Any]        # the complete settings of one training run
    folder: str | Path | None       # where its result, metrics and parameters are kept (None: a sweep's trial,
                                    # whose outcome alone the driver stores)


def _outcome(status: str, started: float, error: str = "", result: dict[str, Any] | None = None,
             replicas: int = 1) -> dict[str, Any]:
    return {"status": status, "error": error, "metrics": run_metrics(result) if result else {},
            "history": result["history"] if result else [], "seconds": time.perf_counter() - started,
            "replicas": replicas}


def _ship(folder: Path) -> dict[str, bytes]:
    """A job folder's files as bytes, for a driver on another machine to store."""
    return {name: (folder / name).read_bytes() for name in RunFolder.FILES if (folder / name).is_file()}


class JobStore:
    """Finished jobs, one folder each under ``root``: a study's runs (``NAME/jobs/KEY-sSEED``) and a
    sweep's trials (``OUT/trials/ID``) alike. A job is done when its ``marker`` file exists; the marker is
    written last and atomically, so a kill in between leaves the job undone, and it trains again."""

    def __init__(self, root: str | Path, marker: str = RESULT) -> None:
        self.root, self.marker = Path(root), marker

    def folder(self, job_id: str) -> Path:
        """The job's folder; refused (``files.UnsafePath``) where it or the store's root is a link, since a job
        trains into it: a received folder's ``jobs/KEY`` that points elsewhere would be written through."""
        for path in (self.root, self.root / job_id, *(self.root / job_id / name for name in
                                                       dict.fromkeys((*RunFolder.FILES, self.marker)))):
            refuse_linked_folder(path)
        return self.root / job_id

    def done(self, job_id: str) -> dict[str, Any] | None:
        """The job's marker (its result or record) when it is done, else None."""
        path = self.folder(job_id) / self.marker
        return read_json(path) if path.is_file() else None

    def forget(self, job_id: str) -> None:
        (self.folder(job_id) / self.marker).unlink(missing_ok=True)

    def keep(self, job_id: str, files: dict[str, bytes], marker: dict[str, Any] | None = None) -> None:
        """Write a job's files (shipped from a worker, or made by the driver), then its marker: from
        ``marker`` when given, else the file of that name among ``files``."""
        folder = self.folder(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        if marker is not None:
            files = {**files, self.marker: json.dumps(marker, indent=2, default=float).encode()}
        for name in sorted(files, key=lambda n: n == self.marker):
            atomic_write(folder / name, lambda f, data=files[name]: f.write(data))


@contextmanager
def _job_folder(job_dir: str | Path | None, ship: bool):
    """Where the job trains: its own folder, a temporary one whose files are shipped back (``ship``: the
    worker may not see the driver's disk), or none."""
    if job_dir is None:
        yield None
    elif ship:
        with tempfile.TemporaryDirectory(prefix="rnnlab-job-") as folder:
            yield Path(folder)
    else:
        Path(job_dir).mkdir(parents=True, exist_ok=True)
        yield Path(job_dir)


def run_job(settings: dict[str, Any], job_dir: str | Path | None = None, ship: bool = False,
            on_epoch: Callable | None = None) -> dict[str, Any]:
    """One job: one call of the training loop. With ``job_dir`` it keeps its metrics, checkpoint and
    result there, and a run cut off (a checkpoint but no result) continues from its last finished epoch,
    ending with the parameters an uninterrupted run would have. Never raises: a diverged run or an error
    comes back as ``status`` ``diverged``/``failed`` with the ``error``. ``on_epoch`` receives each
    epoch's row (``fit``'s hook); ``ship`` returns the folder's files in ``files``."""
    from rnnlab.train import TrainingDiverged, fit

    started = time.perf_counter()
    with _job_folder(job_dir, ship) as folder:
        try:
            task, model = build(settings)
            result = fit(model, task.splits["train"], task.splits.get("dev"), task.splits.get("test"),
                         train_config(settings, progress=False), folder,
                         resume=folder is not None and RunFolder(folder).checkpoint.is_file(),
                         run_info=run_record(settings, task),
                         task_metrics=task.task_metrics, on_epoch=on_epoch)
        except TrainingDiverged as err:
            return _outcome("diverged", started, str(err))
        except Exception as err:  # a job's failure is recorded, not raised: the other jobs go on
            return _outcome("failed", started, f"{type(err).__name__}: {err}")
        outcome = _outcome("ok", started, result=result)
        if ship and folder is not None:
            outcome["files"] = _ship(folder)
        return outcome


def _store_replica(folder: Path, settings: dict[str, Any], task: Any, model: Any, result: dict[str, Any]) -> None:
    """A replica's run kept like ``fit`` keeps one (``train.RunFolder``), with what it ran."""
    result["run"] = run_record(settings, task)
    RunFolder(folder).keep_finished(model, result)


def run_replica_group(settings_list: list[dict[str, Any]], job_dirs: list | None = None,
                      ship: bool = False) -> list[dict[str, Any]]:
    """Jobs that differ only in seed and learning rate, trained as one ``fit_replicas`` program (the jax
    extra); one outcome per job, as ``run_job`` gives it (each kept in its folder when given). Streams
    with carried state and weight noise, which ``fit_replicas`` does not do, train job by job."""
    from rnnlab.data.containers import SequenceData
    from rnnlab.replicas import fit_replicas

    job_dirs = job_dirs or [None] * len(settings_list)
    started = time.perf_counter()
    try:
        built = [build(settings) for settings in settings_list]
    except Exception as err:  # recorded like run_job's failures
        return [_outcome("failed", started, f"{type(err).__name__}: {err}") for _ in settings_list]
    tasks = [task for task, _ in built]
    noisy = settings_list[0].get("weight_noise") or settings_list[0].get("input_noise")   # drawn by NumPy in fit
    if len(settings_list) == 1 or noisy or not all(isinstance(d, SequenceData) for d in tasks[0].splits.values()):
        return [run_job(settings, job_dir, ship) for settings, job_dir in zip(settings_list, job_dirs)]
    splits = {name: [task.splits[name] for task in tasks] if name in tasks[0].splits else None
              for name in SPLITS}
    results = fit_replicas([model for _, model in built], splits["train"], splits["dev"], splits["test"],
                           train_config(settings_list[0], progress=False), [s["seed"] for s in settings_list],
                           [task.task_metrics for task in tasks], learning_rates=[s["lr"] for s in settings_list])
    outcomes = []
    for settings, (task, model), result, job_dir in zip(settings_list, built, results, job_dirs):
        outcome = _outcome("diverged" if result["diverged"] else "ok", started, result["diverged"] or "",
                           None if result["diverged"] else result, replicas=len(results))
        outcome["history"] = result["history"]
        with _job_folder(job_dir, ship) as folder:
            if folder is not None and not result["diverged"]:
                _store_replica(folder, settings, task, model, result)
                if ship:
                    outcome["files"] = _ship(folder)
        outcomes.append(outcome)
    seconds = (time.perf_counter() - started) / len(outcomes)
    return [dict(o, seconds=seconds) for o in outcomes]


def replica_groups(jobs: list[Job]) -> list[list[Job]]:
    """Jobs whose settings differ only in seed and learning rate, together (first-seen order); a group
    holds each seed once (``fit_replicas`` draws each replica's batches from its seed)."""
    groups: dict[tuple, list] = {}
    for job in jobs:
        settings = job.settings
        rest = json.dumps({k: v for k, v in settings.items() if k not in ("seed", "lr")}, sort_keys=True, default=str)
        copy = 0
        while any(s["seed"] == settings["seed"] for s in (job.settings for job in groups.get((rest, copy), []))):
            copy += 1
        groups.setdefault((rest, copy), []).append(job)
    return list(groups.values())


def _start_worker(named: dict[str, str], parent: int) -> None:
    """A pool worker: it may import the cell files its driver's command line named, and it exits when
    its driver dies (a ``kill -9`` of the driver would otherwise leave it training, orphaned)."""
    adopt_named_cell_files(named)

    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=exit_with_parent, daemon=True).start()


def _run_unit(unit: list[Job], replicas: bool, ship: bool = False,
              named: dict[str, str] | None = None) -> list[dict[str, Any]]:
    adopt_named_cell_files(named or {})
    settings, dirs = [job.settings for job in unit], [job.folder for job in unit]
    if replicas:
        return run_replica_group(settings, dirs, ship)
    return [run_job(s, d, ship) for s, d in zip(settings, dirs)]


def _pinned_unit(unit: list[Job], replicas: bool) -> list[dict[str, Any]]:
    with blas_threads(1):
        return _run_unit(unit, replicas)


def _units(jobs: list[Job], replicas: bool) -> list[list[Job]]:
    return replica_groups(jobs) if replicas else [[job] for job in jobs]


def run_local(jobs: list[Job], workers: int, replicas: bool = False) -> Iterator[tuple[Any, dict]]:
    """(key, outcome) as each job finishes, from a pool of ``workers`` spawned processes. With
    ``replicas``, each group of ``replica_groups`` is one unit of work."""
    if not jobs:
        return
    units = _units(jobs, replicas)
    if workers <= 1:
        for unit in units:
            yield from zip([job.key for job in unit], _pinned_unit(unit, replicas))
        return
    with one_thread_workers(), ProcessPoolExecutor(max_workers=min(workers, len(units)),
                                                   mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=_start_worker,
                                                   initargs=(named_cell_files(), os.getpid())) as pool:
        pending = {pool.submit(_run_unit, unit, replicas): [job.key for job in unit] for unit in units}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield from zip(pending.pop(future), future.result())


def run_ray(jobs: list[Job], address: str | None, workers: int | None,
            replicas: bool = False) -> Iterator[tuple[Any, dict]]:
    """(key, outcome) as each job finishes on a Ray cluster: ``address`` "auto" or HOST:PORT joins
    one, None starts a local instance (with ``workers`` CPUs). A job whose worker or node is lost is
    run again elsewhere (Ray's task retries); a job's folder comes back as files, which the driver
    stores (a worker need not see the driver's disk)."""
    try:
        import ray
    except ImportError as err:
        raise ValueError("--executor ray: needs Ray; install it with pip install 'rnnlab[ray]'") from err
    if not jobs:
        return
    with ray_session(ray, address, workers):
        remote = ray.remote(num_cpus=1, max_retries=5)(_run_unit)
        named = named_cell_files()
        pending = {remote.remote(unit, replicas, True, named): [job.key for job in unit]
                   for unit in _units(jobs, replicas)}
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

    adopt_named_cell_files(config["named"])
    outcome = run_job(config["settings"], on_epoch=report)
    metric, worst = config["metric"], math.inf if config["mode"] == "min" else -math.inf
    final = outcome["metrics"].get(metric, worst)
    tune.report({"outcome": json.dumps(outcome, default=float), "epoch": len(outcome["history"]) + 1,
                 metric: final if math.isfinite(final) else worst})


def run_ray_asha(jobs: list[Job], address: str | None, workers: int | None, metric: str,
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
    if any(job.folder is not None for job in jobs):
        raise ValueError("--early-stop asha: for a sweep's trials only (a study's runs train to the end)")
    epochs = max(int(job.settings["epochs"]) for job in jobs)
    from rnnlab.experiments.ray_asha import CHANNELS, StoreFinished

    settings_of = {job.key: job.settings for job in jobs}
    finished: queue.Queue = queue.Queue()
    channel = f"asha-{id(finished)}"
    CHANNELS[channel] = finished
    errors: list[BaseException] = []

    def fit_all() -> None:
        try:
            with tempfile.TemporaryDirectory() as storage:
                tuner = tune.Tuner(
                    tune.with_resources(_asha_trainable, {"cpu": 1}),
                    param_space={"key": tune.grid_search([job.key for job in jobs]), "metric": metric, "mode": mode,
                                 "named": named_cell_files(),
                                 "settings": tune.sample_from(lambda spec: settings_of[spec.config["key"]])},
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


def check_executor(name: str, address: str | None = None, workers: int | None = None, early_stop: str | None = None,
                   replicas: bool = False) -> None:
    """Refuse executor options that cannot work together, naming the flag: what ``executor`` checks, which a
    command also calls before any work (a search that trains first must not end in this error)."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers: expected at least 1, got {workers}")
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
    if name == "local" and address is not None:
        raise ValueError("--address: only with --executor ray")
    if name == "local" and early_stop is not None:
        raise ValueError("--early-stop asha: needs --executor ray (Ray Tune's ASHA scheduler stops poor trials "
                         "early); the local executor trains every trial to the end")


def executor(name: str, address: str | None = None, workers: int | None = None, early_stop: str | None = None,
             metric: str = "dev_loss", mode: str = "min", replicas: bool = False) -> Callable:
    """``jobs -> iterator of (key, outcome)`` for an executor name; ``replicas``: trials that differ
    only in seed and learning rate train as one ``fit_replicas`` program (the jax extra)."""
    check_executor(name, address, workers, early_stop, replicas)
    if name == "local":
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
    append_text(Path(folder) / "calls.jsonl", json.dumps(call) + "\n", own_line=True)
    return read_calls(folder)


def read_calls(folder: str | Path) -> list[dict[str, Any]]:
    """The calls logged in ``folder/calls.jsonl``; a damaged line is reported (naming the file and line)
    and skipped, so that it does not block every later report."""
    calls, bad = read_json_lines(Path(folder) / "calls.jsonl")
    for message in bad:
        print(f"rnnlab: {message}", file=sys.stderr)
    return calls
