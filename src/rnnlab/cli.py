"""The ``rnnlab`` command line."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.cells.registry import CELLS, cell_class, is_cell_file, load_cell_file
from rnnlab.engines import DEFAULT_TRAINING_ENGINE, ENGINES
from rnnlab.experiments.executors import EXECUTORS, StudyRunFailed, check_executor
from rnnlab.experiments.settings import (
    build,
    check_task_options,
    default_settings,
    load_trained,
    read_toml,
    resolve_engine,
    resolve_settings,
    run_record,
    settings_table,
    train_config,
)
from rnnlab.files import check_publish_folder, publish_files


def _positive_int(text: str) -> int:
    """argparse's type for counts (--workers, --seeds): its error names the flag."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends each option's default, unless its help already says it in words."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if "(default:" in text else super()._get_help_string(action)


def _demo(args: argparse.Namespace) -> int:
    """Build the three cells at one parameter budget and prove their backward passes exact."""
    import rnnlab
    from rnnlab.budget import count_params, hidden_for_budget
    from rnnlab.cells.kernel_blas import blas_description
    from rnnlab.machine import processor_name

    print(f"{processor_name()}; {blas_description()}\n")
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
        cell = rnnlab.make_cell(kind, inputs, 4, seed=args.seed, init="normal", init_scale=0.5,
                                engine=args.engine or "numpy", **kwargs)
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


# -- train / evaluate -------------------------------------------------------------------------


def _add_settings(parser: argparse.ArgumentParser) -> None:
    for s in settings_table():
        flag = "--" + s.name.replace("_", "-")
        shown = s.default if not isinstance(s.default, list) else ",".join(map(str, s.default))
        choices = f" {{{','.join(s.choices)}}}" if s.choices else ""
        bare = {} if s.bare is None else {"nargs": "?", "const": s.bare}
        parser.add_argument(flag, dest=s.name, default=None, metavar=s.name.upper(),
                            help=f"{s.help}{choices} (default: {shown})", **bare)


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Built-in defaults < the task's study defaults < --config TOML < command-line flags. A
    ``[task_options]`` table in the file goes to the task (as in the files ``rnnlab sweep`` writes)."""
    sources, task_options = [], {}
    if args.config:
        where = f"--config {args.config}"
        data = {k.replace("-", "_"): v for k, v in read_toml(args.config, where=where).items()}
        task_options = data.pop("task_options", {})
        if not isinstance(task_options, dict):
            raise ValueError(f"{where}: task_options: expected a table [task_options]")
        check_task_options(task_options, where)
        sources.append((where, data))
    for s in settings_table():
        if getattr(args, s.name) is not None:
            sources.append(("--" + s.name.replace("_", "-"), {s.name: getattr(args, s.name)}))
    settings = resolve_settings(*sources)
    if task_options:
        settings["task_options"] = task_options
    return settings


def _train(args: argparse.Namespace) -> int:
    from rnnlab.files import hold

    settings = settings_from_args(args)
    out = Path(args.out or f"runs/{settings['task']}-{settings['cell']}-h{settings['hidden']}-s{settings['seed']}")
    if args.resume and args.overwrite:
        raise ValueError("--resume and --overwrite: choose one")
    built = None if args.resume else build(settings)    # bad data or a model too large stop before any write
    with hold(out, args.command_line):
        if args.resume:
            settings = _resume_settings(args, settings, out)
        else:
            _refuse_stored_run(out, args.overwrite)
        return _train_into(args, settings, out, built)


# What a resumed run may change: it may train longer, with other BLAS threads (the same numbers).
RESUMABLE_CHANGES = ("epochs", "threads")


def _resume_settings(args: argparse.Namespace, settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """The settings to resume ``out``'s run with: its stored ones. Settings the command line (or its
    --config) names must agree with them, each difference listed, except those a resumed run may change
    (``RESUMABLE_CHANGES``)."""
    from rnnlab.experiments.settings import complete_settings
    from rnnlab.train import CHECKPOINT, load_checkpoint

    _, meta = load_checkpoint(out / CHECKPOINT)
    stored = meta.get("run", {}).get("settings") if isinstance(meta.get("run"), dict) else None
    if not isinstance(stored, dict):
        raise ValueError(f"--resume: checkpoint {out / CHECKPOINT} records no run settings; cannot check what it "
                         "trained")
    stored = complete_settings(stored, f"--resume: checkpoint {out / CHECKPOINT}")
    try:
        cell_class(stored["cell"])
    except ValueError as err:
        raise ValueError(f"--resume: checkpoint {out / CHECKPOINT}: {err}") from None
    named = {s.name for s in settings_table() if getattr(args, s.name) is not None}
    if args.config:
        named |= {k.replace("-", "_") for k in read_toml(args.config, where=f"--config {args.config}")}
    differ = [f"{k}: stored {stored.get(k)!r}, given {settings.get(k)!r}" for k in sorted(named)
              if k not in RESUMABLE_CHANGES and json.dumps(stored.get(k), default=str) !=
              json.dumps(settings.get(k), default=str)]
    if differ:
        raise ValueError(f"--resume: the run in {out} was trained with other settings than this command line's: "
                         + "; ".join(differ) + ". Drop them to resume the run as stored, or train elsewhere "
                         "with --out")
    return {**stored, **{k: settings[k] for k in RESUMABLE_CHANGES if k in named}}


def _refuse_stored_run(out: Path, overwrite: bool) -> None:
    """A folder that holds a run (finished or cut off) is not trained into anew unless ``--overwrite``
    says so; then the run's own files (and only those) are removed first."""
    from rnnlab.train import RunFolder

    held = [name for name in RunFolder.FILES if (out / name).is_file()]
    if not held:
        return
    if not overwrite:
        state = "a finished run" if RunFolder(out).done() else "an interrupted run's checkpoint"
        raise ValueError(f"--out {out}: holds {state} ({', '.join(held)}); pass --resume to continue it, "
                         "--overwrite to replace it, or --out elsewhere")
    for name in held:
        (out / name).unlink()


def _train_into(args: argparse.Namespace, settings: dict[str, Any], out: Path, built: tuple | None) -> int:
    from rnnlab.train import TrainingDiverged, fit

    if (args.engine or DEFAULT_TRAINING_ENGINE) == "auto":
        print(f"engine {resolve_engine({**settings, 'engine': 'auto'})[1]}", file=sys.stderr)
    from rnnlab.cells.kernel_blas import CHOICE

    task, model = built or build(settings)
    config = train_config(settings, progress=not args.quiet)
    print(f"{task.name}: {model!r} → {out}", file=sys.stderr)
    print(f"BLAS products: {CHOICE.describe()}", file=sys.stderr)
    try:
        result = fit(model, task.splits["train"], task.splits.get("dev"), task.splits.get("test"), config, out,
                     resume=args.resume, run_info=run_record(settings, task), task_metrics=task.task_metrics)
    except TrainingDiverged as err:
        print(f"rnnlab train: {err}", file=sys.stderr)
        return 1
    shown = {k: v for k, v in result.items() if k not in ("history", "config", "run")}
    print(json.dumps(shown, indent=2))
    print(f"metrics: {out / 'metrics.csv'}  result: {out / 'result.json'}", file=sys.stderr)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from rnnlab.train import evaluate

    task, model, settings, meta, parameters = load_trained(args.checkpoint, last=args.last, engine=args.engine)
    batch_size = settings["batch_size"]        # range-checked where the checkpoint's settings were read
    progress = meta.get("progress") if isinstance(meta.get("progress"), dict) else {}
    metrics: dict[str, Any] = {"checkpoint": str(args.checkpoint), "parameters": parameters,
                               "epoch": progress.get("epoch"), "num_params": model.num_params()}
    for split in ("train", "dev", "test") if args.split == "all" else (args.split,):
        if split in task.splits:
            metrics.update(evaluate(model, task.splits[split], batch_size, split))
    metrics.update({k: v for k, v in task.task_metrics(model).items()
                    if args.split == "all" or k.startswith(args.split + "_")})
    print(json.dumps(metrics, indent=2))
    return 0


def _republish(args: argparse.Namespace) -> int:
    from rnnlab.pages.republish import (
        INDEX,
        index_would_change,
        is_figure,
        published_pages,
        republish,
        unlisted_pages,
        would_change,
    )

    folder = Path(args.folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder")
    pages = published_pages(folder)
    unknown = sorted(set(args.only) - {p.name for p in pages})
    if unknown:
        raise ValueError(f"--only: {', '.join(unknown)}: not a page published into {folder} "
                         f"({', '.join(p.name for p in pages) or 'none is'})")
    if not pages:
        raise ValueError(f"{folder}: no page rnnlab published (no manifest naming a study, sweep, bench-cells or "
                         "greff)")
    changed = 0
    for page in pages:
        if args.only and page.name not in args.only:
            continue
        files = (would_change if args.check else republish)(page, folder)
        text, figures = [f for f in files if not is_figure(f)], [f for f in files if is_figure(f)]
        changed += bool(text)
        verb = "would change" if args.check else "changed"
        print(f"{page.kind} {page.name}: " + (f"{verb} {', '.join(text)}" if text else "unchanged")
              + (f" (figures drawn again: {', '.join(figures)})" if figures else ""), flush=True)
    if not args.only:
        for rel in unlisted_pages(folder, pages):      # a check that cannot check a page fails on it
            changed += 1
            print(f"{rel}: not in the folder's manifests: nothing kept says what it was made from, so its numbers "
                  "were not checked", flush=True)
        if args.check and index_would_change(folder):
            changed += 1
            print(f"{INDEX}: would change (the results index, computed from the pages)", flush=True)
    return 1 if args.check and changed else 0


def _data(args: argparse.Namespace) -> int:
    from rnnlab.data import registry
    from rnnlab.machine import cache_dir

    if args.action == "list":
        for name, dataset in registry.DATASETS.items():
            print(f"{name}: {dataset.description}")
            for f in dataset.files:
                path = registry.find_file(name, f.name)
                where = str(path) if path else f"missing (would be cached at {cache_dir() / dataset.folder})"
                optional = "" if f.required else " [optional]"
                print(f"  {f.name:32} {where}{optional}")
        return 0
    names = args.names or (list(registry.DATASETS) if args.action == "verify" else [])
    if not names:
        raise ValueError(f"data fetch: name a dataset: {', '.join(registry.DATASETS)}")
    if args.action == "fetch":
        for name in names:
            for line in registry.fetch(name, force=args.force):
                print(f"{name}: {line}")
        return 0
    bad = 0
    for name in names:
        for dataset, file, status in registry.verify(name):
            print(f"{dataset:20} {file:32} {status}")
            bad += status.startswith("MISMATCH")
    return 1 if bad else 0


# -- analyze -------------------------------------------------------------------------------------


def _analysis_models(args: argparse.Namespace):
    """(task, {name: model}) from --checkpoint files, or untrained models from --task/--cells."""
    models: dict[str, Any] = {}
    task = None
    if args.checkpoint:
        first: tuple[str, Any] | None = None
        loaded = []
        for path in args.checkpoint:
            trained = load_trained(path, engine=args.engine)
            settings = trained.settings
            data = (settings["task"], json.dumps(settings.get("task_options", {}), sort_keys=True))
            if first is None:
                first, task = (str(path), data), trained.task
            elif data != first[1]:
                raise ValueError(f"--checkpoint {path}: trained on {data[0]} {data[1]}, but --checkpoint {first[0]} "
                                 f"on {first[1][0]} {first[1][1]}; the checkpoints of one analysis share one task's "
                                 "data")
            loaded.append((f"{settings['cell']}-{settings['hidden']}", settings["seed"], trained.model))
        bases = [base for base, _, _ in loaded]
        for i, (base, seed, model) in enumerate(loaded):    # two seeds of one configuration stay two results
            name = base if bases.count(base) == 1 else f"{base}-s{seed}"
            models[name if name not in models else f"{name}-{i + 1}"] = model
        return task, models
    for cell in args.cells.split(","):
        settings = default_settings(args.task, cell=cell, seed=args.seed,
                                    **({} if args.hidden is None else {"hidden": args.hidden}),
                                    **({} if args.engine is None else {"engine": args.engine}))
        task, model = build(settings)
        models[f"{cell}-{settings['hidden']}"] = model
    return task, models


def _analysis_batch(task, examples: int):
    data = task.splits.get("test") or task.splits["train"]
    batch = data.batch(np.arange(min(examples, len(data)))) if hasattr(data, "batch") else next(data.batches(examples))
    return data, batch


def _discrepancy(args: argparse.Namespace, out: Path) -> dict:
    from rnnlab.analysis import run

    cells, inits = args.cells.split(","), args.inits.split(",")
    result = run.write_discrepancy(out, tuple(cells), tuple(inits), args.max_k, args.max_l, args.draws, args.seed)
    table = {(r["cell"], r["init"], r["l"], r["k"]): r["D"] for r in result["records"]}
    for cell in cells:
        points = [(l, k) for l, k in ((1, 5), (5, 20), (10, 10), (50, 20)) if l <= args.max_l and k <= args.max_k]
        shown = ", ".join(f"D({l},{k}) = {table[(cell, inits[0], l, k)]:.4g}" for l, k in points)
        print(f"{cell} ({inits[0]} draws): {shown}")
    return result


def _gradient_flow(args: argparse.Namespace, out: Path) -> dict:
    from rnnlab.analysis import run

    task, models = _analysis_models(args)
    return run.write_gradient_flow(models, _analysis_batch(task, args.examples)[1], out)


def _gradients(args: argparse.Namespace, out: Path) -> dict:
    from rnnlab.analysis import run

    task, models = _analysis_models(args)
    return run.write_gradient_distribution(models, _analysis_batch(task, args.examples)[0], out, args.examples)


def _dynamics(args: argparse.Namespace, out: Path) -> dict:
    from rnnlab.analysis import run

    task, models = _analysis_models(args)
    if task.input_kind != "dense":
        raise ValueError(f"--task {task.name}: dynamics needs dense inputs (e.g. mean-sign)")
    return run.write_dynamics(models, np.asarray(_analysis_batch(task, args.examples)[1].x, np.float64), out)


def _hidden(args: argparse.Namespace, out: Path) -> dict:
    from rnnlab.analysis import run

    task, models = _analysis_models(args)
    return run.write_reber_readout(models, task, args.strings.split(","), out)


ANALYSES = {"discrepancy": _discrepancy, "gradient-flow": _gradient_flow, "gradients": _gradients,
            "hidden": _hidden, "dynamics": _dynamics}


def _analyze(args: argparse.Namespace) -> int:
    args.cells = args.cells or ("rnn,gru" if args.analysis == "discrepancy" else "rnn,gru,lstm")
    args.cells = ",".join([args.cells, *args.cell])
    out = Path(args.out or f"runs/analyze-{args.analysis}")
    result = ANALYSES[args.analysis](args, out)
    if "summary" in result:
        print(json.dumps(result["summary"], indent=2))
    print(f"wrote {len(result['files'])} files to {out}", file=sys.stderr)
    return 0


# -- experiments ---------------------------------------------------------------------------------


def _run_experiment(exp, args: argparse.Namespace) -> int:
    from rnnlab.experiments.runner import run_experiment
    from rnnlab.pages.run import summary_text, write_report
    from rnnlab.pages.study import SETTING, TUNED, check_replaces_no_fewer_seeds, write_published

    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds: expected at least 1, got {args.seeds}")
    check_executor(args.executor, args.address, args.workers, replicas=args.replicas)
    tune = getattr(args, "tune", False)
    if args.cell and (args.publish or tune):
        raise ValueError("--cell: a study with your cells is kept under runs/NAME+CELL, not published or tuned")
    if args.publish and args.quick:
        raise ValueError("--publish: quick runs are not published; drop --quick")
    if args.publish:        # before the search and training: a refused publish must not cost them
        check_publish_folder(args.publish)
        if args.seeds is not None:
            check_replaces_no_fewer_seeds(args.publish, exp.name, TUNED if tune else SETTING, args.seeds)
    if tune:
        from rnnlab.experiments.sweeps import tune_experiment

        exp = tune_experiment(exp, args.out, quick=args.quick, force=args.force, executor=args.executor,
                              address=args.address, workers=args.workers).experiment
    if args.cell:
        from rnnlab.experiments.with_cells import with_cells

        exp = with_cells(exp, args.cell)
    results = run_experiment(exp, args.out, seeds=args.seeds, workers=args.workers, quick=args.quick,
                             force=args.force, progress=True, replicas=args.replicas, engine=args.engine,
                             command=getattr(args, "command_line", ""), executor=args.executor, address=args.address)
    exp_dir = Path(args.out) / exp.name
    html_path, md_path = write_report(results, exp_dir)
    print(summary_text(results))
    print(f"report: {html_path.resolve()}\n(also {md_path}, results.json, results.csv)")
    if args.publish:
        published = write_published(args.out, exp.name.removesuffix("-tuned"), args.publish)
        print(f"published: {published} (with the stored results of both the study's setting and --tune, where run)")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from rnnlab.experiments.studies import EXPERIMENTS

    return _run_experiment(EXPERIMENTS[args.name], args)


def _compare(args: argparse.Namespace) -> int:
    from rnnlab.experiments.studies import COMPARE

    return _run_experiment(COMPARE, args)


def _sweep(args: argparse.Namespace) -> int:
    from rnnlab.experiments.sweeps import load_sweep, quick_version, run_sweep
    from rnnlab.pages.sweep import sweep_summary_text, write_published_sweep, write_sweep_report

    check_executor(args.executor, args.address, args.workers, args.early_stop, args.replicas)
    sweep = load_sweep(args.file)
    if args.quick:
        sweep = quick_version(sweep)
    out = Path(args.out or f"runs/sweep-{Path(args.file).stem}")
    if args.publish and args.quick:
        raise ValueError("--publish: quick sweeps are not published; drop --quick")
    dest = Path(args.publish if args.publish != "-" else f"docs/results/{Path(args.file).stem}") if args.publish \
        else None
    if dest is not None:
        check_publish_folder(dest)      # before training: a refused destination must not cost the sweep
    summary = run_sweep(sweep, out, executor=args.executor, address=args.address, workers=args.workers,
                        force=args.force, early_stop=args.early_stop, replicas=args.replicas,
                        command=getattr(args, "command_line", ""))
    html_path, md_path = write_sweep_report(summary, out)
    print(sweep_summary_text(summary))
    print(f"report: {html_path.resolve()}\n(also {md_path}, trials.csv, best/*.toml)")
    if dest is not None:
        print(f"published: {write_published_sweep(summary, out, dest)}")
    return 0


def _experiment_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=_positive_int, default=None, help="seeds per configuration (default: the "
                        "study's sequential plan where it has one, choosing seeds as results come in; else 3)")
    parser.add_argument("--workers", type=_positive_int, default=None,
                        help="parallel worker processes (default: CPU cores)")
    parser.add_argument("--quick", action="store_true", help="shrink data and epochs to run in seconds (a first try; "
                        "the report says so)")
    parser.add_argument("--force", action="store_true", help="retrain configurations that are already done")
    parser.add_argument("--cell", action="append", default=[], metavar="FILE.py:Class",
                        help="add your cell (or a registered one) to every group of the study, at the parameter "
                        "count of the group's first configuration, with a claim against each of the study's cells; "
                        "stored as OUT/NAME+CELL (repeatable)")
    parser.add_argument("--out", default="runs", help="folder that receives NAME/ with the results and report")
    parser.add_argument("--publish", nargs="?", const="docs/results", default=None, metavar="DIR",
                        help="also write DIR/NAME.md and DIR/NAME/*.png, the report kept with the repository: the "
                        "stored results at the study's setting and tuned (--tune) side by side, with date, seeds, "
                        "time and version (DIR defaults to docs/results)")
    parser.add_argument("--replicas", action="store_true",
                        help="train each configuration's seeds (and the learning rates of configurations that "
                        "differ only in it) together, as one compiled JAX program (needs rnnlab[jax]; streams and "
                        "weight noise still train run by run)")
    _executor_options(parser, "the runs (and --tune's search)")
    _engine_option(parser)


def _executor_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help=f"where {what} train: a process pool here, or a Ray cluster (rnnlab[ray]); each "
                        "finished one is kept here as it arrives")
    parser.add_argument("--address", default=None, help="ray: 'auto' or HOST:PORT of a running cluster (default: "
                        "start a Ray instance on this machine)")


def _cell_file_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--cell", action="append", default=[], metavar="FILE.py:Class", help=f"{what} (repeatable)")


def _engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=("auto",) + tuple(ENGINES), default=None,
                        help=f"time loops (default: the run's own setting, else {DEFAULT_TRAINING_ENGINE}; numpy is "
                        "the reference)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``command``: the one being run, whose choices that need the studies imported
    are filled in (the others' help stays cheap: no study, analysis or plotting module is imported for it)."""
    parser = argparse.ArgumentParser(
        prog="rnnlab",
        description="A laboratory for recurrent neural networks: RNN, GRU, LSTM and any cell you bring, from scratch.",
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in (_demo_command, _check_cell_command, _bench_cells_command, _greff_command,
                _train_command, _evaluate_command, _data_command, _analyze_command, _sweep_command,
                _republish_command):
        add(sub)
    _study_commands(sub, with_names=command == "reproduce")
    return parser


def _demo_command(sub) -> None:
    """rnnlab demo."""
    demo = sub.add_parser("demo", help="cells at equal budgets and a gradient check of each",
                          formatter_class=HelpFormatter)
    demo.add_argument("--budget", type=int, default=600, help="parameter budget shared by the three cells")
    demo.add_argument("--seed", type=int, default=0, help="random seed")
    demo.add_argument("--engine", choices=tuple(ENGINES), default=None,
                      help="time loops (default: numpy, the reference)")
    demo.set_defaults(run=_demo)


def _check_cell_command(sub) -> None:
    """rnnlab check-cell."""
    check = sub.add_parser("check-cell", help="check a cell's adjoint on every engine it runs on",
                           formatter_class=HelpFormatter,
                           description="Shapes and parameter count; the adjoint against finite differences in "
                           "float64 (full BPTT, masks, truncation k = 0, 1, 2), against jax.vjp of the cell's own "
                           "step when JAX is installed, and every engine against the NumPy reference; for every "
                           "configuration of the cell's options. Exit status 1 when a check fails.")
    check.add_argument("cells", nargs="+", metavar="CELL",
                       help="path/to/file.py:ClassName or a registered name (" + ", ".join(CELLS) + ")")
    check.add_argument("--seed", type=int, default=0, help="random draws")
    check.set_defaults(run=_check_cell)


def _check_cell(args: argparse.Namespace) -> int:
    from rnnlab.checks import check_cell

    failed = 0
    for name in args.cells:
        report = check_cell(name, seed=args.seed)
        print(report)
        failed += not report.passed
    return 1 if failed else 0


def _bench_cells_command(sub) -> None:
    """rnnlab bench-cells."""
    bench = sub.add_parser("bench-cells", help="every cell at matched budgets on the synthetic tasks, tuned alike, "
                           "with verdicts", formatter_class=HelpFormatter,
                           description="Each cell at each task's parameter budget, the same learning-rate search for "
                           "all (2 seeds per rate), the winner retrained on 10 disjoint seeds; a table cell × task, "
                           "every cell against the vanilla RNN, GRU and LSTM (the exact permutation test with Holm, "
                           "its inverted interval, P(A>B); 'same' by equivalence within each task's margin) and the "
                           "papers' claims as 'holds on k of N tasks'. Stored runs are reused.")
    bench.add_argument("cells", nargs="*", metavar="CELL", help="labels of the built-in benchmark cells (default: all)")
    bench.add_argument("--cell", action="append", default=[], metavar="FILE.py:Class",
                       help="add your own cell (repeatable); it joins every table")
    bench.add_argument("--tasks", default=None, help="comma-separated task labels (default: adding-50, copy-20, "
                       "mean-sign-20; the suite adds adding-200/1000, copy-100/500, selective-copy-256, "
                       "associative-recall-8, the real sequences digits-rows, digits-permuted, mnist-rows (extra "
                       "mnist), japanese-vowels (extra series), jsb, nottingham, sst5 and embedded-reber, and the "
                       "formal languages: parity-check, even-pairs, cycle-navigation, modular-arithmetic, dyck-1, "
                       "dyck-2, anbncn)")
    bench.add_argument("--out", default="runs/bench-cells", help="where the runs and results go")
    bench.add_argument("--publish", nargs="?", const="docs/results/cells.md", default=None, metavar="FILE",
                       help="also write the page (default: docs/results/cells.md)")
    bench.add_argument("--trials", type=_positive_int, default=0, help="a random search instead of the rate grid: "
                       "this many draws per cell of the learning rate, gradient clip and weight decay (default: the "
                       "grid of 3 rates)")
    bench.add_argument("--search-size", action="store_true", help="with --trials: the hidden size drawn too, "
                       "log-uniform in [8, 128] for every cell as Greff et al. drew it, instead of matched to each "
                       "task's parameter budget")
    bench.add_argument("--quick", action="store_true", help="one rate (or 2 draws), 2 epochs, 1 search seed, 2 final "
                       "seeds")
    _executor_options(bench, "the runs")
    bench.add_argument("--workers", type=_positive_int, default=None, help="parallel runs (default: the CPU cores)")
    bench.add_argument("--merge", nargs="+", default=None, metavar="RESULTS.json",
                       help="train nothing: judge as one benchmark the results of runs that each trained part of it "
                       "(some tasks or cells, e.g. in sessions of their own; each its OUT/results.json or a published "
                       "cells-*.json), written to --out and, with --publish, published")
    bench.set_defaults(run=_bench_cells)


def _bench_cells(args: argparse.Namespace) -> int:
    from rnnlab.experiments import bench_cells
    from rnnlab.experiments.bench_cells import SHARED
    from rnnlab.machine import processor_name
    from rnnlab.pages.bench import check_replaces_no_more, write_bench
    from rnnlab.pages.published import published_files

    if args.merge:
        return _merge_bench(args)
    known = {c.label: c for c in bench_cells.CELLS}
    unknown = sorted(set(args.cells) - set(known))
    if unknown:
        raise ValueError(f"cells: unknown benchmark cell(s) {unknown}; expected labels from {sorted(known)}")
    cells = [known[c] for c in args.cells] or list(bench_cells.CELLS)
    cells += [bench_cells.parse_cell(spec) for spec in args.cell]
    tasks = {t.name: t for t in bench_cells.ALL_TASKS}
    names = [t.name for t in bench_cells.TASKS] if args.tasks is None else [t.strip() for t in args.tasks.split(",")]
    missing = sorted(set(names) - set(tasks))
    if missing:
        raise ValueError(f"--tasks: unknown task(s) {missing}; expected labels from {sorted(tasks)}")
    target = Path(args.publish) if args.publish else None
    if target is not None:
        publish_files(target.parent, dict.fromkeys(published_files(target)), "bench-cells",
                      check_only=True)      # before training: a refused destination must not cost the runs
    check_executor(args.executor, args.address, args.workers)
    plan = bench_cells.bench_plan(cells, [tasks[n] for n in names], args.quick, args.trials, args.search_size)
    if target is not None:
        check_replaces_no_more(target, {(t.name, c.label) for t in plan.tasks for c in plan.cells},
                               {name: getattr(plan, name) for name in SHARED})
    results = bench_cells.run_bench(plan, args.out, args.executor, args.address, args.workers)
    results.machine, results.command = processor_name(), args.command_line
    print(write_bench(results, args.out, target))
    return 0


def _merge_bench(args: argparse.Namespace) -> int:
    from rnnlab.experiments import bench_cells
    from rnnlab.pages.bench import check_replaces_no_more, write_bench
    from rnnlab.pages.published import published_files

    given = [flag for flag, value in (("CELL", args.cells), ("--cell", args.cell), ("--tasks", args.tasks),
                                      ("--trials", args.trials), ("--search-size", args.search_size),
                                      ("--quick", args.quick)) if value]
    if given:
        raise ValueError(f"--merge: {', '.join(given)} choose what trains; --merge trains nothing (each part's own "
                         "command chose them)")
    written = (Path(args.out) / "results.json").resolve()
    if any(Path(path).resolve() == written for path in args.merge):
        raise ValueError(f"--merge: {written} is a part and also where the merged results would go; give --out "
                         "another folder")
    target = Path(args.publish) if args.publish else None
    if target is not None:
        publish_files(target.parent, dict.fromkeys(published_files(target)), "bench-cells", check_only=True)
    results = bench_cells.merge([(path, bench_cells.BenchResults.load(path)) for path in args.merge])
    if target is not None:
        check_replaces_no_more(target, {(row["task"], row["cell"]) for row in results.rows},
                               {name: getattr(results, name) for name in bench_cells.SHARED})
    results.command = args.command_line
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print(write_bench(results, args.out, target))
    return 0


def _greff_command(sub) -> None:
    """rnnlab greff."""
    greff = sub.add_parser("greff", help="Greff et al. 2017's JSB arm: the LSTM and its eight variants, random "
                           "search, the paper's three findings", formatter_class=HelpFormatter,
                           description="The vanilla LSTM (peepholes) and NIG, NFG, NOG, NIAF, NOAF, CIFG, NP, FGR on "
                           "JSB Chorales, each with --trials random draws of the paper's space (hidden size, learning "
                           "rate, momentum, input noise) at its settings (SGD with Nesterov momentum, one chorale per "
                           "update, up to 150 epochs); per variant the test NLL of all trials and the best 10%, "
                           "Welch's t against the vanilla LSTM with Bonferroni, the fANOVA shares, and the findings. "
                           "Stored trials are reused; trials run in rounds, so a stopped run leaves the variants "
                           "even.")
    greff.add_argument("--trials", type=_positive_int, default=None, help="trials per variant (default: 200, the "
                       "paper's)")
    greff.add_argument("--out", default="runs/greff-jsb", help="where the trials and results go")
    greff.add_argument("--publish", nargs="?", const="docs/results/greff-jsb.md", default=None, metavar="FILE",
                       help="also write the page (default: docs/results/greff-jsb.md)")
    greff.add_argument("--quick", action="store_true", help="3 trials per variant, 2 epochs, 6 chorales a split")
    greff.add_argument("--restore", metavar="FILE", default=None,
                       help="first store in --out the trials FILE holds and --out lacks: the lines --save-trials "
                       "wrote, or a published greff-jsb.json's finished trials (a new machine resumes the arm)")
    greff.add_argument("--save-trials", nargs="?", const="docs/results/greff-jsb/trials.jsonl", default=None,
                       metavar="FILE", help="write every trial --out stores of the arm to FILE, one JSON line each "
                       "(default: docs/results/greff-jsb/trials.jsonl), and stop: no training")
    _executor_options(greff, "the trials")
    greff.add_argument("--workers", type=_positive_int, default=None, help="parallel trials (default: the CPU "
                       "cores)")
    greff.set_defaults(run=_greff)


def _greff(args: argparse.Namespace) -> int:
    from rnnlab.experiments import greff
    from rnnlab.machine import processor_name
    from rnnlab.pages.greff import check_replaces_no_fewer, publish_greff, write_greff
    from rnnlab.pages.published import published_files

    if args.quick and args.trials:
        raise ValueError("--trials: --quick sets its own (3 per variant); give one or the other")
    if args.quick and (args.restore or args.save_trials):
        raise ValueError(f"--{'restore' if args.restore else 'save-trials'}: quick trials are no trials of the arm; "
                         "drop --quick")
    trials = args.trials or greff.TRIALS
    if args.restore:
        restored = greff.restore_trials(args.out, _greff_rows(Path(args.restore)), args.restore, max(trials,
                                                                                                     greff.TRIALS))
        print(f"greff: {restored} trials restored into {args.out} from {args.restore}", file=sys.stderr)
    if args.save_trials:
        lines = greff.save_trials(args.out, max(trials, greff.TRIALS))
        target = Path(args.save_trials)
        publish_files(target.parent, {target.name: "".join(json.dumps(r) + "\n" for r in lines).encode()}, "greff")
        print(f"greff: {len(lines)} trials of {args.out} written to {target}")
        return 0
    target = Path(args.publish) if args.publish else None
    if target is not None:
        if args.quick:
            raise ValueError("--publish: quick runs are not published; drop --quick")
        publish_files(target.parent, dict.fromkeys(published_files(target)), "greff", check_only=True)
        check_replaces_no_fewer(target, trials)
    check_executor(args.executor, args.address, args.workers)
    results = greff.run_greff(args.out, trials, args.quick, executor=args.executor,
                              address=args.address, workers=args.workers, command=args.command_line)
    results.machine = processor_name()
    text = write_greff(results, args.out)
    if target is not None:
        check_replaces_no_fewer(target, trials, results)
        publish_greff(results, target)
    print(text)
    return 0


def _greff_rows(path: Path) -> list[dict]:
    """The trial rows of a --restore FILE: a published results JSON, or the JSON lines --save-trials wrote."""
    from rnnlab.experiments import greff
    from rnnlab.files import read_json_lines

    if path.suffix == ".json":
        return greff.published_rows(greff.GreffResults.load(path))
    if not path.is_file():
        raise ValueError(f"--restore {path}: no such file")
    rows, bad = read_json_lines(path)
    if bad:
        raise ValueError(f"--restore {path}: {bad[0].removesuffix('; skipped')}; nothing was restored")
    return rows


def _train_command(sub) -> None:
    """rnnlab train."""
    train = sub.add_parser("train", help="train one model on one task",
                           description="Train one model on one task. Settings come from the built-in defaults "
                           "shown below, overridden by the settings of the task's study (mean-sign: S5's 2-layer "
                           "RNN-64, 50 epochs, step schedule), then by --config FILE (TOML, same names with _ or -), "
                           "then by the flags.")
    train.add_argument("--config", metavar="FILE", help="TOML file with any of the settings below (default: none)")
    _add_settings(train)
    train.add_argument("--out", metavar="DIR",
                       help="output directory (default: runs/TASK-CELL-hHIDDEN-sSEED)")
    train.add_argument("--resume", action="store_true", help="continue from DIR/checkpoint.npz, with its stored "
                       "settings (settings given must agree with them; --epochs may grow) (default: off)")
    train.add_argument("--overwrite", action="store_true", help="replace the run DIR holds (default: off: a folder "
                       "holding a run is refused)")
    train.add_argument("--quiet", action="store_true", help="no per-epoch lines or progress bar (default: off)")
    train.set_defaults(run=_train)


def _evaluate_command(sub) -> None:
    """rnnlab evaluate."""
    ev = sub.add_parser("evaluate", help="evaluate a checkpoint on its task",
                        formatter_class=HelpFormatter)
    ev.add_argument("--checkpoint", required=True, metavar="FILE", help="checkpoint.npz written by rnnlab train")
    ev.add_argument("--split", choices=("train", "dev", "test", "all"), default="all", help="which split")
    ev.add_argument("--last", action="store_true", help="use the last epoch's parameters, not the best-dev ones")
    _cell_file_option(ev, "the cell file the checkpoint was trained with, which rnnlab imports only when named here")
    _engine_option(ev)
    ev.set_defaults(run=_evaluate)


def _data_command(sub) -> None:
    """rnnlab data."""
    data = sub.add_parser("data", help="list, fetch and verify the real datasets",
                          description="Datasets are looked for in $RNNLAB_DATA_DIR/<folder>, ../shared/data/<folder> "
                          "and the cache ($RNNLAB_CACHE_DIR, default ~/.cache/rnnlab); fetch downloads from the "
                          "canonical URL into the cache and checks the sha256.")
    data.add_argument("action", choices=("list", "fetch", "verify"), help="what to do")
    data.add_argument("names", nargs="*", metavar="NAME", help="datasets (verify: default all)")
    data.add_argument("--force", action="store_true", help="fetch again even when present")
    data.set_defaults(run=_data)


def _republish_command(sub) -> None:
    """rnnlab republish."""
    rep = sub.add_parser("republish", help="judge a published folder's pages again from the data kept beside them",
                         formatter_class=HelpFormatter,
                         description="Every page published into DIR (found through its manifests: studies, sweep "
                         "maps, cell benchmarks, the Greff arm) judged again by this version's statistics from the "
                         "runs, trials and results published beside it; nothing trains or is imported, and only "
                         "files rnnlab wrote are replaced. Prints what changed. The Greff arm's fANOVA takes "
                         "minutes and needs the importance extra.")
    rep.add_argument("folder", nargs="?", default="docs/results", metavar="DIR",
                     help="the published folder (default: docs/results)")
    rep.add_argument("--only", action="append", default=[], metavar="NAME",
                     help="republish only this page (a study's name, a map's folder, a results file's stem; "
                     "repeatable)")
    rep.add_argument("--check", action="store_true", help="change nothing: say which pages today's code would "
                     "change (in a copy of DIR), and exit 1 if any (a figure drawn again by another plotting "
                     "library's version is listed, not counted)")
    rep.set_defaults(run=_republish)


def _analyze_command(sub) -> None:
    """rnnlab analyze."""
    an = sub.add_parser("analyze", help="look inside networks: discrepancy, gradient flow, gradients, hidden, dynamics",
                        formatter_class=HelpFormatter,
                        description="Runs one analysis on trained checkpoints (--checkpoint, repeatable) or on "
                        "untrained models built for --task (--cells, --hidden), and writes PNG + CSV/JSON to --out.")
    an.add_argument("analysis", choices=("discrepancy", "gradient-flow", "gradients", "hidden", "dynamics"),
                    help="discrepancy: D(l,k) of S2 on untrained cells; gradient-flow: ‖∂L/∂h_t‖ per step and the "
                    "gradient vs BPTT depth; gradients: pooled per-example gradient histograms; hidden: state and "
                    "output heatmaps along Reber strings; dynamics: unit trajectories and classes, Jacobian spectra, "
                    "Lyapunov exponents")
    an.add_argument("--checkpoint", action="append", metavar="FILE", help="trained model(s) (repeatable)")
    an.add_argument("--task", default="mean-sign", help="task for untrained models and their data")
    an.add_argument("--cells", default=None, help="comma-separated cells (discrepancy: rnn,gru = S2's sigmoid RNN and "
                    "Cho GRU; also rnn-tanh, gru-cudnn, lstm; others: rnn,gru,lstm)")
    an.add_argument("--cell", action="append", default=[], metavar="FILE.py:Class",
                    help="add your cell (or any registered one) to --cells (repeatable)")
    an.add_argument("--hidden", type=int, default=None, help="hidden units of untrained models (default: the task's)")
    an.add_argument("--inits", default="normal,xavier,uniform", help="discrepancy: parameter draws")
    an.add_argument("--draws", type=int, default=2000, help="discrepancy: parameter draws per (cell, k)")
    an.add_argument("--max-l", type=int, default=50, help="discrepancy: longest word")
    an.add_argument("--max-k", type=int, default=20, help="discrepancy: most hidden units")
    an.add_argument("--examples", type=int, default=64, help="examples analysed")
    an.add_argument("--strings", default="BPBTXSE,BTBTXSE", help="hidden: strings to draw")
    an.add_argument("--seed", type=int, default=0, help="random seed")
    an.add_argument("--out", metavar="DIR", help="output folder (default: runs/analyze-ANALYSIS)")
    _engine_option(an)
    an.set_defaults(run=_analyze)


def _study_commands(sub, with_names: bool) -> None:
    """rnnlab reproduce and rnnlab compare; the studies' names (which import every study) only ``with_names``."""
    names = None
    if with_names:
        from rnnlab.experiments.studies import EXPERIMENTS
        names = tuple(EXPERIMENTS)
    rep = sub.add_parser("reproduce", help="rerun a study over seeds and write its report",
                         formatter_class=HelpFormatter,
                         description="Trains every configuration of a study over seeds in parallel workers (finished "
                         "runs are kept and skipped), runs its analyses, and writes runs/NAME/ with results.json, "
                         "results.csv, the plots, report.html and report.md.")
    rep.add_argument("name", choices=names, help="the study to rerun")
    _experiment_options(rep)
    rep.add_argument("--tune", action="store_true", help="first run the study's own search for each configuration "
                     "(its sweep, stored in OUT/NAME-tuned/search/), then train each one's best over --seeds; the "
                     "report is OUT/NAME-tuned/")
    rep.set_defaults(run=_reproduce)
    cmp = sub.add_parser("compare", help="the main job: RNN vs GRU vs LSTM on synthetic tasks, with a report",
                         formatter_class=HelpFormatter,
                         description="Embedded Reber, the sign-of-the-mean task, the (l,k)-discrepancy and the "
                         "gradient through time, on built-in synthetic data (no download); writes "
                         "runs/compare/report.html.")
    _experiment_options(cmp)
    cmp.set_defaults(run=_compare)


def _sweep_command(sub) -> None:
    """rnnlab sweep."""
    sw = sub.add_parser("sweep", help="a search over settings declared in a TOML file, resumable, local or on Ray",
                        formatter_class=HelpFormatter,
                        description="Trains grid × samples × seeds trials of the search in FILE (docs/sweeps.md: "
                        "the format), stores each under DIR/trials/ as it finishes (a rerun trains only what is "
                        "missing), and writes DIR/trials.csv, DIR/report.html and .md, and DIR/best/GROUP.toml.")
    sw.add_argument("file", metavar="FILE.toml", help="the sweep file")
    sw.add_argument("--out", metavar="DIR", default=None, help="output folder (default: runs/sweep-FILE)")
    _executor_options(sw, "the trials")
    sw.add_argument("--workers", type=_positive_int, default=None, help="parallel trials (default: the CPU cores; ray: "
                    "the "
                    "local instance's CPUs)")
    sw.add_argument("--quick", action="store_true", help="at most 2 epochs, 2 samples and 1 seed: checks the file "
                    "and the pipeline in seconds")
    sw.add_argument("--force", action="store_true", help="retrain trials that are already stored")
    _cell_file_option(sw, "a cell file the sweep file names, which rnnlab imports only when named here")
    sw.add_argument("--publish", nargs="?", const="-", default=None, metavar="DIR",
                    help="also copy the report, its plots and trials.csv to DIR (default: docs/results/FILE), with a "
                    "line saying when, with which version and how long it took")
    sw.add_argument("--early-stop", choices=("asha",), default=None,
                    help="ray: stop poor trials early with Ray Tune's ASHA scheduler on the per-epoch metric")
    sw.add_argument("--replicas", action="store_true", help="train the trials that differ only in seed and learning "
                    "rate as one compiled JAX program (needs rnnlab[jax])")
    sw.set_defaults(run=_sweep)


def _load_named_cells(argv: list[str]) -> None:
    """Name and import the cells named by file on this command line (``--cell path.py:Class``, and
    ``check-cell``'s arguments) before the parser is built, so that their options are flags. These are
    the only files rnnlab may import (``registry.name_cell_file``); an error here names the file and is
    reported by the command."""
    check_cell = argv[:1] == ["check-cell"]
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--cell=") else argv[i + 1] if arg == "--cell" and \
            i + 1 < len(argv) else arg if check_cell and i > 0 else None
        if value is not None and is_cell_file(value):
            try:
                load_cell_file(value)
            except ValueError:
                pass            # the command reports it, with the flag it came from


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from rnnlab.cells.kernel_blas import ENV_ERROR

    if ENV_ERROR:       # the products would run elsewhere than asked: nothing starts
        print(f"rnnlab: error: {ENV_ERROR}", file=sys.stderr)
        return 2
    _load_named_cells(argv)
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args = parser.parse_args(argv)
    args.command_line = "rnnlab " + " ".join(shlex.quote(a) for a in argv)
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError) as err:  # DataError and DataMissing among them
        parser.exit(2, f"rnnlab {args.command}: error: {err}\n")
    except StudyRunFailed as err:
        parser.exit(1, f"rnnlab {args.command}: a run failed: {err}\n")
    except MemoryError:         # under the parameter estimate, activations or a data set can still not fit
        parser.exit(2, f"rnnlab {args.command}: error: the machine ran out of memory (a model within the parameter "
                       "estimate can still need more for its activations or its data); try a smaller --hidden, "
                       "--batch-size or data set\n")
    except OSError as err:      # a full disk, a folder made read-only mid-run: the file, not a traceback
        where = f"{err.filename}: " if err.filename else ""
        parser.exit(2, f"rnnlab {args.command}: error: {where}{err.strerror or err}\n")


if __name__ == "__main__":
    sys.exit(main())
