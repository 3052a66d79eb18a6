"""Tasks: data splits plus what a model needs to read them (input size, output size, head, loss).

``get_task(name, **options)`` is what ``rnnlab train --task NAME`` calls. Synthetic tasks are
generated from a seed, so the same seed gives the same data on every machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnlab.models import RecurrentModel
from rnnlab.train import SequenceData, StreamData


@dataclass
class Task:
    """Splits (``train`` required; ``dev``/``test`` optional) and the model shape they imply.

    input_kind: ``"dense"`` (float vectors of ``input_size``), ``"one_hot"`` (ids read as one-hot
    vectors of ``input_size``) or ``"embedding"`` (ids below ``vocab_size``).
    """

    name: str
    splits: dict[str, SequenceData | StreamData]
    input_size: int
    output_size: int
    head: str
    input_kind: str = "dense"
    vocab_size: int | None = None
    loss: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)  # settings of the study the task comes from


def build_model(task: Task, cell: str, hidden: int, layers: int = 1, seed: int | None = None,
                dtype: Any = np.float32, **cell_kwargs: Any) -> RecurrentModel:
    """The model that reads ``task``'s inputs and predicts its targets."""
    return RecurrentModel(
        cell, task.input_size, hidden, task.output_size, num_layers=layers, head=task.head, loss=task.loss,
        vocab_size=task.vocab_size if task.input_kind == "embedding" else None,
        one_hot=task.input_kind == "one_hot", seed=seed, dtype=dtype, **cell_kwargs,
    )


def mean_sign(n_train: int = 4000, n_dev: int = 1000, n_test: int = 1000, length: int = 20, features: int = 10,
              seed: int = 0) -> Task:
    """S5: sequences of ``length`` steps with ``features`` N(0, 1) features; the label is 1 when the
    mean of all length × features values is positive, else 0."""
    rng = np.random.default_rng(seed)

    def split(n: int) -> SequenceData:
        x = rng.normal(size=(n, length, features))
        return SequenceData(list(x), (x.mean(axis=(1, 2)) > 0).astype(np.int64))

    splits = {"train": split(n_train), "dev": split(n_dev), "test": split(n_test)}
    return Task("mean-sign", splits, input_size=features, output_size=2, head="last",
                info={"length": length, "features": features, "seed": seed}, defaults=STUDY_DEFAULTS["mean-sign"])


TASKS: dict[str, Callable[..., Task]] = {"mean-sign": mean_sign}

# The settings of the study each task comes from, applied by ``rnnlab train`` under explicit flags.
STUDY_DEFAULTS: dict[str, dict[str, Any]] = {
    # S5: a 2-layer tanh RNN of 64 units with PyTorch's two biases (13,314 parameters), 50 epochs,
    # the rate halved at epoch 20
    "mean-sign": {"cell": "rnn", "activation": "tanh", "hidden": 64, "layers": 2, "recurrent_bias": True,
                  "epochs": 50, "schedule": "step", "milestones": [20], "optimizer": "adam", "lr": 1e-3},
}


def get_task(name: str, **options: Any) -> Task:
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r}; expected one of {tuple(TASKS)}")
    return TASKS[name](**options)
