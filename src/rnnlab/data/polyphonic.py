"""Polyphonic music piano rolls (Boulanger-Lewandowski et al. 2012; S3).

Three formats hold the same data, all returned as ``{"train", "valid", "test"}`` → list of (T, 88)
uint8 piano rolls, column c = MIDI note 21 + c:

- ``.pickle``: dict → lists of sequences → lists of steps → lists of MIDI numbers 21..108. Read
  with a restricted unpickler: the format needs only dict/list/tuple/int/float/str, which pickle
  builds without looking up any class, so *every* class lookup is refused before anything runs.
- ``.mat`` (``scipy.io.loadmat``, optional dependency): keys traindata/validdata/testdata, each a
  1×N array of T×88 0/1 matrices.
- ``.json``: the pickle's structure as JSON.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np

from rnnlab.data.registry import DataError

SPLITS = ("train", "valid", "test")
LOWEST_NOTE, NOTES = 21, 88


class RestrictedUnpickler(pickle.Unpickler):
    """Builds only builtin containers and numbers; any global (class or function) is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(
            f"refused to load {module}.{name}: only dict, list, tuple, int, float and str are allowed"
        )


def safe_unpickle(data: bytes, source: str = "<bytes>"):
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except pickle.UnpicklingError as err:
        if str(err).startswith("refused to load"):
            raise DataError(f"{source}: {err}") from None
        raise DataError(f"{source}: not a complete pickle ({err})") from None
    except (EOFError, ValueError, IndexError, KeyError, TypeError) as err:
        raise DataError(f"{source}: not a complete pickle ({type(err).__name__}: {err})") from None


def _rolls_from_notes(data, source: str) -> dict[str, list[np.ndarray]]:
    if not isinstance(data, dict):
        raise DataError(f"{source}: expected a dict with keys {SPLITS}, got {type(data).__name__}")
    missing = [s for s in SPLITS if s not in data]
    if missing:
        raise DataError(f"{source}: missing split(s) {missing}; expected keys {SPLITS}")
    out = {}
    for split in SPLITS:
        rolls = []
        for i, seq in enumerate(data[split]):
            if not isinstance(seq, (list, tuple)) or len(seq) == 0:
                raise DataError(f"{source}: {split} sequence {i} should be a non-empty list of time steps")
            roll = np.zeros((len(seq), NOTES), np.uint8)
            for t, step in enumerate(seq):
                for note in step:
                    if isinstance(note, float) and note.is_integer():
                        note = int(note)
                    if not isinstance(note, int) or not LOWEST_NOTE <= note < LOWEST_NOTE + NOTES:
                        raise DataError(f"{source}: {split} sequence {i}, step {t}: expected MIDI notes 21..108, "
                                        f"got {note!r}")
                    roll[t, note - LOWEST_NOTE] = 1
            rolls.append(roll)
        out[split] = rolls
    return out


def _rolls_from_mat(path: Path) -> dict[str, list[np.ndarray]]:
    try:
        from scipy.io import loadmat
    except ImportError:
        raise DataError(f"{path}: reading .mat files needs scipy; pip install 'rnnlab[mat]' (or scipy)") from None
    try:
        mat = loadmat(str(path))
    except Exception as err:  # scipy raises several types for broken files
        raise DataError(f"{path}: not a readable MAT file ({type(err).__name__}: {err})") from None
    out = {}
    for split in SPLITS:
        key = f"{split}data"
        if key not in mat:
            raise DataError(f"{path}: missing variable {key!r}; expected traindata, validdata, testdata")
        cells = mat[key].reshape(-1)
        rolls = []
        for i, roll in enumerate(cells):
            roll = np.asarray(roll)
            if roll.ndim != 2 or roll.shape[1] != NOTES:
                raise DataError(f"{path}: {key} sequence {i} has shape {roll.shape}; expected (T, 88)")
            if not np.isin(roll, (0, 1)).all():
                raise DataError(f"{path}: {key} sequence {i} holds values other than 0 and 1")
            rolls.append(roll.astype(np.uint8))
        out[split] = rolls
    return out


def load_polyphonic(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Piano rolls from a ``.pickle``, ``.mat`` or ``.json`` file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")
    suffix = path.suffix.lower()
    if suffix == ".mat":
        return _rolls_from_mat(path)
    if suffix in (".pickle", ".pkl"):
        return _rolls_from_notes(safe_unpickle(path.read_bytes(), str(path)), str(path))
    if suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DataError(f"{path}: not valid JSON ({err})") from None
        return _rolls_from_notes(data, str(path))
    raise DataError(f"{path}: unknown format {suffix!r}; expected .pickle, .mat or .json")
