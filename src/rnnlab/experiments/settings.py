"""Run settings: one table of every setting (name, default, converter, help) shared by
``rnnlab train``, TOML files and the experiments; their order of precedence (``resolve_settings``);
and the functions that turn settings into a task, a model and a training configuration, or a
checkpoint back into a trained model (``load_trained``, the one restore path)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rnnlab.blocks import BLOCKS, NORMS
from rnnlab.cells.kernel_blas import CHOICE as BLAS_CHOICE
from rnnlab.cells.registry import CELLS, CellFileNotNamed, cell_class, cell_file_sha256, cell_options, is_cell_file
from rnnlab.common import optional_float, to_bool
from rnnlab.data.tasks import OPTION_BOUND, TASKS, Task, build_model, get_task
from rnnlab.engines import DEFAULT_TRAINING_ENGINE, ENGINES
from rnnlab.experiments.defaults import STUDY_DEFAULTS
from rnnlab.files import is_number, read_record_text
from rnnlab.init import INIT_SCHEMES
from rnnlab.optim import OPTIMIZERS, SCHEDULES
from rnnlab.train import TrainConfig, load_checkpoint, load_params


def read_toml(path: str | Path | None = None, *, text: str | None = None, where: str | None = None) -> dict:
    """A TOML file (or text) as a dict; errors name ``where`` (default: the path) and TOML's line."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    where = where or str(path)
    try:
        data = tomllib.loads(read_record_text(path) if text is None else text)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{where}: not valid TOML ({err})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a settings file; not read") from None
    except ValueError as err:
        raise ValueError(f"{where}: {str(err).removeprefix(f'{path}: ')}") from None
    return data


def _int(text: Any) -> int:
    """An integer from an int or its text; 1.7 or "1.7" is refused, not truncated."""
    if isinstance(text, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(text, (float, np.floating)):
        if not float(text).is_integer():
            raise ValueError("expected an integer")
        return int(text)
    return int(str(text).strip())


def _at_least(low: float, convert: Callable[[Any], Any] = _int, strict: bool = False) -> Callable[[Any], Any]:
    """``convert``, then a check that the value is >= low (> low with ``strict``); None passes."""
    def checked(text: Any) -> Any:
        value = convert(text)
        if value is not None and (value < low or (strict and value == low)):
            raise ValueError(f"expected a value {'>' if strict else '>='} {low:g}")
        return value
    return checked


def _float(text: Any) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError("expected a finite number")
    return value


def _optional_float(text: Any) -> float | None:
    value = optional_float(text)
    return None if value is None else _float(value)


def _optional_int(text: str) -> int | None:
    return None if str(text).lower() in ("none", "full") else _int(text)


def _int_list(text: Any) -> list[int]:
    if isinstance(text, (list, tuple)):
        return [_int(v) for v in text]
    return [_int(v) for v in str(text).split(",") if v.strip()]


_positive = _at_least(1)
_non_negative = _at_least(0, _float)
_positive_float = _at_least(0, _float, strict=True)
_optional_positive_float = _at_least(0, _optional_float, strict=True)
_optional_positive = _at_least(1, _optional_int)
_optional_non_negative = _at_least(0, _optional_int)




@dataclass(frozen=True)
class Setting:
    name: str                      # as in TOML files and TrainConfig; the flag is --name-with-dashes
    default: Any
    convert: Callable[[Any], Any]
    help: str
    choices: tuple | None = None
    bare: Any = None               # the value of the flag given alone (``--block`` means ``--block glu``)


TRAINING = TrainConfig()     # the training settings' defaults are TrainConfig's: one place


def settings_table() -> list[Setting]:
    table = _settings_table()
    names = [s.name for s in table]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        owners = {n: [c for c, cls in CELLS.items() if any(o.name == n for o in cls.options)] for n in clash}
        raise ValueError(f"cell options {owners} take the name of a run setting; rename the option")
    return table


def _settings_table() -> list[Setting]:
    return [
        Setting("task", "mean-sign", str, "task to train on", tuple(TASKS)),
        Setting("cell", "rnn", _cell_name, "recurrent cell: a registered name (" + ", ".join(CELLS) + ") or "
                "path/to/file.py:ClassName"),
        *(Setting(o.name, o.default, o.convert, o.help, o.choices) for o in cell_options().values()),
        Setting("hidden", 64, _positive, "hidden units per layer"),
        Setting("layers", 1, _positive, "stacked recurrent layers"),
        Setting("block", "none", str, "around each cell: none (cells stacked directly) or the residual block, "
                "pre-norm → cell → residual → feed-forward → residual, with an MLP (mlp), a gated MLP (glu; --block "
                "alone) or no feed-forward part (mixer)", BLOCKS, bare="glu"),
        Setting("block_norm", "rms", str, "the block's norm: rms (RMSNorm) or layer (LayerNorm)", NORMS),
        Setting("block_expansion", None, _optional_positive, "the block's feed-forward width as a multiple of "
                "--hidden (none: 4 for mlp, 3 for glu)"),
        Setting("embedding_dim", None, _optional_positive, "embedding size of word tasks (none = --hidden)"),
        Setting("bias", True, to_bool, "use biases"),
        Setting("recurrent_bias", False, to_bool, "a second, recurrent bias per gate as PyTorch counts them"),
        Setting("init", "uniform", str, "weight initialiser", INIT_SCHEMES),
        Setting("init_scale", None, _optional_positive_float, "standard deviation for --init normal or gaussian "
                "(none: 0.1), or the bound of every parameter, embeddings included, for --init uniform (none: "
                "PyTorch's ±1/√fan)"),
        Setting("optimizer", TRAINING.optimizer, str, "optimizer", tuple(OPTIMIZERS)),
        Setting("lr", TRAINING.lr, _positive_float, "initial learning rate"),
        Setting("momentum", TRAINING.momentum, _non_negative, "SGD momentum"),
        Setting("nesterov", TRAINING.nesterov, to_bool, "SGD: Nesterov's momentum (PyTorch's form)"),
        Setting("momentum_scales_lr", TRAINING.momentum_scales_lr, to_bool,
                "SGD: multiply the rate by (1 − momentum), as PyLSTM's NesterovStep (Greff et al. 2017)"),
        Setting("weight_decay", TRAINING.weight_decay, _non_negative, "L2 weight decay added to the gradients"),
        Setting("epochs", TRAINING.epochs, _positive, "training epochs"),
        Setting("batch_size", TRAINING.batch_size, _positive, "sequences per update"),
        Setting("back_steps", TRAINING.back_steps, _optional_non_negative, "truncated BPTT depth k (none = full BPTT)"),
        Setting("clip", TRAINING.clip, _optional_positive_float, "clip gradients to this global L2 norm (none = off)"),
        Setting("clip_value", TRAINING.clip_value, _optional_positive_float,
                "clip each gradient coefficient to ±this (none = off)"),
        Setting("schedule", TRAINING.schedule, str, "learning-rate schedule", tuple(SCHEDULES)),
        Setting("milestones", list(TRAINING.milestones), _int_list,
                "step schedule: epochs (comma-separated) where the rate is multiplied by --gamma"),
        Setting("gamma", TRAINING.gamma, _positive_float, "step/exponential schedule factor"),
        Setting("decay_start", TRAINING.decay_start, _at_least(0), "exponential schedule: first epoch that decays"),
        Setting("anneal", TRAINING.anneal, _non_negative, "anneal schedule: lr0 * a / (a + epoch)"),
        Setting("weight_noise", TRAINING.weight_noise, _non_negative,
                "std of Gaussian weight noise for each gradient (S3)"),
        Setting("input_noise", TRAINING.input_noise, _non_negative,
                "std of Gaussian noise added to each training batch's real-valued inputs (Greff et al. 2017)"),
        Setting("loss_normalization", TRAINING.loss_normalization, str,
                "what the training loss is divided by: token (the mean over predicted positions) or sequence (each "
                "sequence's summed loss, averaged over the batch: S4)", ("token", "sequence")),
        Setting("bucket", TRAINING.bucket, to_bool, "length-bucketed training batches: a shuffled pool of 50 batches "
                "sorted by length, so a batch pads little (false: a plain shuffle, as S4's course code)"),
        Setting("early_stopping", TRAINING.early_stopping, _optional_positive,
                "stop after N epochs without dev improvement (none = off)"),
        Setting("seed", TRAINING.seed, _at_least(0), "seed for data, initialisation and shuffling"),
        Setting("dtype", "float32", str, "floating-point type", ("float32", "float64")),
        Setting("engine", DEFAULT_TRAINING_ENGINE, str, "time loops: auto (numba when the cell has fused kernels, "
                "else jax when installed, else numpy), numba (fused, compiled kernels), numpy (the reference) or jax "
                "(needs the jax extra); stored as the engine auto chose", ("auto",) + tuple(ENGINES)),
        Setting("threads", TRAINING.threads, _optional_positive, "BLAS threads while training and evaluating "
                "(none = chosen from the model's size: 1 for small models)"),
    ]


def convert(setting: Setting, value: Any, where: str) -> Any:
    try:
        value = setting.convert(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: invalid value {value!r} for {setting.name} ({err})") from None
    if setting.choices and value not in setting.choices:
        raise ValueError(f"{where}: invalid value {value!r} for {setting.name}; expected one of {setting.choices}")
    return value


SPLITS = ("train", "dev", "test")


def final_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The split metrics of an epoch's report, named ``{split}_{metric}`` (dev_loss, test_solved, ...): what
    Ray Tune last heard from a trial it stopped; a finished run's numbers are ``results.run_metrics``."""
    return {k: float(v) for k, v in result.items()
            if k.split("_")[0] in SPLITS and is_number(v)}


def _cell_name(text: Any) -> str:
    """A registered cell name or ``path.py:Class`` (loaded now, so that its options become settings)."""
    cell_class(str(text))
    return str(text)


def cell_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    """The cell constructor's arguments: the shared ones and the options this cell declares."""
    kwargs = {"bias": settings["bias"], "recurrent_bias": settings["recurrent_bias"], "init": settings["init"],
              "init_scale": settings["init_scale"], "engine": settings.get("engine", DEFAULT_TRAINING_ENGINE)}
    kwargs.update({o.name: settings[o.name] for o in cell_class(settings["cell"]).options if o.name in settings})
    return kwargs


def block_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    """The model's block arguments (``rnnlab.blocks``); a run stored before blocks existed has none."""
    return {"block": settings.get("block", "none"), "block_norm": settings.get("block_norm", "rms"),
            "block_expansion": settings.get("block_expansion")}


def resolve_engine(settings: dict[str, Any]) -> tuple[str, str]:
    """The engine a run uses and why: ``auto`` resolved for its cell (``Cell.choose_engine``)."""
    kwargs = cell_kwargs(settings)
    engine = kwargs.pop("engine")
    kwargs.pop("init"), kwargs.pop("init_scale")
    return cell_class(settings["cell"]).choose_engine(engine, hidden_size=int(settings["hidden"]), **kwargs)


# Settings added after stored results existed, each defaulting to the behaviour those results had. Ids hashed
# from settings (a sweep's trials) leave them out while they hold that default, so gaining a setting keeps
# every stored trial's id; stored settings are read with them filled in (complete_settings).
# Cell options count as later settings too, except the two every stored run has carried from the start.
LATER_SETTINGS = ("forget_bias", "bucket", "nesterov", "momentum_scales_lr", "input_noise", "block", "block_norm",
                  "block_expansion")
FIRST_CELL_OPTIONS = ("activation", "variant")


def settings_identity(settings: dict[str, Any]) -> dict[str, Any]:
    """What identifies a run's settings: all of them but the later-added ones at their default."""
    later = set(LATER_SETTINGS) | (set(cell_options()) - set(FIRST_CELL_OPTIONS))
    defaults = {s.name: s.default for s in settings_table() if s.name in later}
    identity = {k: v for k, v in settings.items() if not (k in defaults and v == defaults[k])}
    digest = cell_file_sha256(settings.get("cell"))
    if digest is not None:      # a cell file's runs are those of its code: an edited file makes new runs
        identity["cell_sha256"] = digest
    return identity


def complete_settings(stored: dict[str, Any], where: str = "stored settings") -> dict[str, Any]:
    """Settings stored by a run, with every setting added to rnnlab since then at its built-in default:
    a new setting's default keeps the behaviour that run had, so old runs stay comparable and loadable. Each
    stored value goes through the same check as on the command line (``convert``): a checkpoint, a stored study
    or a trial record whose ``clip`` is −1 is refused naming ``where`` and the setting, never trained with."""
    if not isinstance(stored, dict):
        raise ValueError(f"{where}: expected a table of run settings, found {type(stored).__name__}")
    table = settings_table()
    for s in table:
        if s.name in stored and s.name != "cell":       # the cell is resolved by its callers (no import from data)
            convert(s, stored[s.name], where)
    options = stored.get("task_options", {})
    if not isinstance(options, dict):
        raise ValueError(f"{where}: task_options: expected a table, found {type(options).__name__}")
    check_task_options(options, where)
    return {**{s.name: s.default for s in table if s.name not in stored}, **stored}


def check_task_options(options: dict[str, Any], where: str) -> None:
    """A task's options as sizes: every number but a seed within [0, ``OPTION_BOUND``] (a stored
    ``n_test = 10**10`` would allocate until killed), refused naming ``where``."""
    for name, value in options.items():
        if name != "seed" and isinstance(value, (int, float)) and not isinstance(value, bool) and (
                not 0 <= value <= OPTION_BOUND):
            raise ValueError(f"{where}: task_options.{name} = {value!r}: expected a value in [0, {OPTION_BOUND:,}]")


def build(settings: dict[str, Any], task=None):
    """(task, model) for a settings dict; ``settings["task_options"]`` (optional) go to the task.
    A task built before (same name, seed and options) can be passed to skip loading it again."""
    if task is None:
        task = get_task(settings["task"], seed=settings["seed"], **settings.get("task_options", {}))
    check_memory(settings, task)
    model = build_model(task, settings["cell"], settings["hidden"], settings["layers"], seed=settings["seed"],
                        dtype=np.dtype(settings["dtype"]), embedding_dim=settings.get("embedding_dim"),
                        **block_kwargs(settings), **cell_kwargs(settings))
    return task, model


PARAMETER_COPIES = 5    # parameters, gradients, Adam's two moments, the best-dev snapshot


def check_memory(settings: dict[str, Any], task: Task) -> None:
    """Refuse a model whose parameters alone (``PARAMETER_COPIES`` copies, counted from the cell's
    declared shapes before anything is allocated) would not fit in this machine's memory."""
    import os

    from rnnlab.budget import count_params

    options = {o.name: settings[o.name] for o in cell_class(settings["cell"]).options if o.name in settings}
    inputs, embedding = task.input_size, 0
    if task.input_kind == "embedding":
        inputs = settings.get("embedding_dim") or settings["hidden"]
        embedding = (task.vocab_size or 0) * inputs
    count = embedding + count_params(settings["cell"], input_size=inputs, hidden_size=settings["hidden"],
                                     output_size=task.output_size, num_layers=settings["layers"],
                                     bias=settings["bias"], recurrent_bias=settings["recurrent_bias"],
                                     project_input=not (embedding and inputs == settings["hidden"]),
                                     **block_kwargs(settings), **options)
    needed = count * np.dtype(settings["dtype"]).itemsize * PARAMETER_COPIES
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if needed > total:
        raise ValueError(f"--hidden {settings['hidden']} (--layers {settings['layers']}, --cell {settings['cell']}): "
                         f"{count:,} parameters need about {needed / 2**30:.1f} GiB "
                         f"({PARAMETER_COPIES} copies in {settings['dtype']}), more than this machine's "
                         f"{total / 2**30:.1f} GiB")


def jsonable(info: dict[str, Any]) -> dict[str, Any]:
    """Task facts small enough for result.json (long per-item lists are left out)."""
    out = {}
    for k, v in info.items():
        if isinstance(v, (list, dict)) and len(json.dumps(v, default=float)) > 2000:
            continue
        out[k] = json.loads(json.dumps(v, default=float))
    return out


def run_record(settings: dict[str, Any], task: Task | None) -> dict[str, Any]:
    """What a run stores about what it ran: its settings, the BLAS that ran the products (provider per
    shape class, how it was chosen, the libraries' versions), the task's facts (the sha256 of its data files
    among them; none for a run that failed before its task was built) and, for a cell named by file, that
    file's sha256."""
    record: dict[str, Any] = {"settings": settings, "blas": BLAS_CHOICE.record()}
    if task is not None:
        record["task_info"] = jsonable(task.info)
    digest = cell_file_sha256(settings.get("cell"))
    if digest is not None:
        record["cell_sha256"] = digest
    return record


def check_cell_unchanged(record: dict[str, Any], where: str) -> None:
    """Refuse a stored run (``run_record``) whose cell file has changed since it ran: its numbers are
    not those of the code the command would run now."""
    cell, stored = record.get("settings", {}).get("cell"), record.get("cell_sha256")
    if not is_cell_file(cell):
        return
    now = cell_file_sha256(cell)
    if stored is None or now is None or stored != now:
        raise ValueError(f"{where}: trained with the cell file {cell.rsplit(':', 1)[0]} of sha256 "
                         f"{stored or '(not recorded)'}; the file now has sha256 {now or '(not named)'}: its stored "
                         "numbers are not this code's")


def resolve_settings(*sources: tuple[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every setting's value, by precedence: the built-in defaults < the study defaults of the task
    < each source in turn (later ones win). A source is ``(where, {name: value})``; ``where`` names
    it in errors ("--config run.toml", "--lr"). Unknown names and invalid values raise ValueError.
    A cell named by file (``path.py:Class``) is loaded first, so that its options are settings."""
    for where, values in sources:
        if "cell" in values:
            try:
                cell_class(str(values["cell"]))
            except ValueError as err:
                raise ValueError(f"{where}: invalid value {values['cell']!r} for cell ({err})") from None
    table = {s.name: s for s in settings_table()}
    for where, values in sources:
        unknown = sorted(set(values) - set(table))
        if unknown:
            raise ValueError(f"{where}: unknown setting(s) {unknown}; expected names from {sorted(table)}")
    task = table["task"].default
    for where, values in sources:
        if "task" in values:
            task = convert(table["task"], values["task"], where)
    settings = {name: s.default for name, s in table.items()}
    layers = [(f"study defaults of {task}", STUDY_DEFAULTS.get(task, {})), *sources]
    for where, values in layers:
        settings.update({name: convert(table[name], value, where) for name, value in values.items()})
    try:
        settings["engine"] = resolve_engine(settings)[0]
    except (TypeError, ValueError) as err:
        raise ValueError(f"cell {settings['cell']}: {err}") from None
    return settings


def default_settings(task: str, **overrides: Any) -> dict[str, Any]:
    """The settings of ``task``'s study with ``overrides`` on top."""
    return resolve_settings(("settings", {**overrides, "task": task}))


def train_config(settings: dict[str, Any], progress: bool = True) -> TrainConfig:
    """The TrainConfig part of a settings dict."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in settings.items() if k in names}, progress=progress)


class Trained(NamedTuple):
    task: Task
    model: Any
    settings: dict[str, Any]
    meta: dict[str, Any]
    parameters: str        # "best-dev" or "last epoch"


def load_trained(checkpoint: str | Path, *, last: bool = False, task: Task | None = None,
                 engine: str | None = None) -> Trained:
    """A checkpoint written by a training run, rebuilt: its task and model (from the run settings
    stored in it) holding the best-dev parameters when it has them (``last=True``: the last
    epoch's). ``task``: one built before from the same settings, to skip loading the data again.
    ``engine``: run the model on this engine instead of the one it was trained with."""
    arrays, meta = load_checkpoint(checkpoint)
    record = meta.get("run") if isinstance(meta.get("run"), dict) else {}
    settings = record.get("settings")
    if not settings or not isinstance(settings, dict):
        raise ValueError(f"checkpoint {checkpoint}: no run settings recorded; cannot rebuild the model")
    settings = complete_settings(settings, f"checkpoint {checkpoint}")
    if engine is not None:
        engine_setting = next(s for s in settings_table() if s.name == "engine")
        settings = dict(settings, engine=convert(engine_setting, engine, "--engine"))
    elif settings.get("engine") == "jax" and importlib.util.find_spec("jax") is None:
        print(f"checkpoint {checkpoint}: trained on the jax engine, which is not installed here; run on numpy, the "
              "reference (the same numbers to rounding; --engine chooses another)", file=sys.stderr)
        settings = dict(settings, engine="numpy")
    try:
        task, model = build(settings, task)
    except CellFileNotNamed as err:
        raise ValueError(f"checkpoint {checkpoint}: {err}") from None
    except (KeyError, TypeError) as err:
        raise ValueError(f"checkpoint {checkpoint}: its stored settings cannot rebuild the model "
                         f"({type(err).__name__}: {err})") from None
    check_cell_unchanged(record, f"checkpoint {checkpoint}")
    best = any(k.startswith("best/") for k in arrays) and not last
    load_params(model, arrays, "best" if best else "param", str(checkpoint))
    return Trained(task, model, settings, meta, "best-dev" if best else "last epoch")
