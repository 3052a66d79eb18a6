"""Loaders for the text datasets: NLU+ wiki TSV, Linzen agreement TSV, PTB, SST sentences and trees.

Every loader checks what it reads and raises ``DataError`` naming the file, the line and what was
expected. Nothing is dropped silently: a loader that skips lines by design returns how many.
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnlab.data.registry import DataError


class Vocab:
    """Words ↔ ids; words outside the list map to ``unk`` (which is added if absent)."""

    def __init__(self, words: list[str], unk: str = "UNK") -> None:
        self.words = list(words)
        if unk not in self.words:
            self.words.append(unk)
        self.unk = unk
        self.ids = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, tokens: list[str]) -> np.ndarray:
        unk = self.ids[self.unk]
        return np.array([self.ids.get(t, unk) for t in tokens], dtype=np.int64)

    def unk_fraction(self, sentences: list[list[str]]) -> float:
        total = sum(len(s) for s in sentences)
        return sum(t not in self.ids for s in sentences for t in s) / max(total, 1)


def _lines(path: Path) -> list[str]:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise DataError(f"{path}: not a complete gzip file ({err})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte {err.start})") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise DataError(f"{path}: the file is empty")
    return lines


def _int(value: str, path: Path, lineno: int, column: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DataError(f"{path}, line {lineno}: column {column!r} should be an integer, got {value!r}") from None


# -- NLU+ coursework -----------------------------------------------------------------------


NLU_HEADER = ["sentence", "subj_idx", "verb_idx", "verb_pos", "verb", "inflected_verb"]


@dataclass
class AgreementSentence:
    tokens: list[str]
    subj_index: int          # 0-based
    verb_index: int          # 0-based
    label: int               # 0 = VBZ (singular), 1 = VBP (plural)
    attractors: int | None = None

    @property
    def distance(self) -> int:
        return self.verb_index - self.subj_index


def load_nlu_vocab(path: Path, size: int = 2000) -> Vocab:
    """The top ``size`` words of ``vocab.wiki.txt`` (word, count, frequency per line) plus UNK."""
    words = []
    for lineno, line in enumerate(_lines(path), 1):
        parts = line.split("\t")
        if len(parts) != 3:
            raise DataError(f"{path}, line {lineno}: expected 3 tab-separated columns (word, count, frequency), "
                            f"got {len(parts)}")
        _int(parts[1], path, lineno, "count")
        words.append(parts[0])
    return Vocab(words[:size], unk="UNK")


def load_nlu_sentences(path: Path) -> list[AgreementSentence]:
    """wiki-{train,dev,test}.txt: TSV with the header ``sentence subj_idx verb_idx verb_pos verb
    inflected_verb``; indices are 0-based token positions."""
    lines = _lines(path)
    header = lines[0].split("\t")
    if header != NLU_HEADER:
        raise DataError(f"{path}, line 1: expected the header {' '.join(NLU_HEADER)!r}, got {' '.join(header)!r}")
    out = []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != len(NLU_HEADER):
            raise DataError(
                f"{path}, line {lineno}: expected {len(NLU_HEADER)} tab-separated columns, got {len(parts)}")
        tokens = parts[0].split()
        subj, verb = _int(parts[1], path, lineno, "subj_idx"), _int(parts[2], path, lineno, "verb_idx")
        if parts[3] not in ("VBZ", "VBP"):
            raise DataError(f"{path}, line {lineno}: column 'verb_pos' should be VBZ or VBP, got {parts[3]!r}")
        if not 0 <= subj < verb < len(tokens):
            raise DataError(f"{path}, line {lineno}: expected 0 <= subj_idx < verb_idx < {len(tokens)} tokens, "
                            f"got {subj} and {verb}")
        out.append(AgreementSentence(tokens, subj, verb, 0 if parts[3] == "VBZ" else 1))
    return out


# -- Linzen et al. 2016 ------------------------------------------------------------------------


LINZEN_COLUMNS = ["sentence", "orig_sentence", "pos_sentence", "subj", "verb", "subj_pos", "has_rel", "has_nsubj",
                  "verb_pos", "subj_index", "verb_index", "n_intervening", "last_intervening", "n_diff_intervening",
                  "distance", "max_depth", "all_nouns", "nouns_up_to_verb"]


def load_linzen(path: Path) -> list[AgreementSentence]:
    """``agr_50_mostcommon_10K.tsv.gz``: 18 tab-separated columns (header optional); subj_index and
    verb_index are 1-based; attractors = n_diff_intervening (intervening nouns of the other number)."""
    lines = _lines(path)
    start = 1 if lines[0].split("\t")[0] == "sentence" else 0
    if start and lines[0].split("\t") != LINZEN_COLUMNS:
        raise DataError(f"{path}, line 1: expected the header {' '.join(LINZEN_COLUMNS)!r}")
    col = {name: i for i, name in enumerate(LINZEN_COLUMNS)}
    out = []
    for lineno, line in enumerate(lines[start:], start + 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != len(LINZEN_COLUMNS):
            raise DataError(f"{path}, line {lineno}: expected {len(LINZEN_COLUMNS)} tab-separated columns, "
                            f"got {len(parts)}")
        tokens = parts[col["sentence"]].split()
        subj = _int(parts[col["subj_index"]], path, lineno, "subj_index") - 1
        verb = _int(parts[col["verb_index"]], path, lineno, "verb_index") - 1
        if parts[col["verb_pos"]] not in ("VBZ", "VBP"):
            raise DataError(f"{path}, line {lineno}: column 'verb_pos' should be VBZ or VBP, "
                            f"got {parts[col['verb_pos']]!r}")
        if not 0 <= subj < verb < len(tokens):
            raise DataError(f"{path}, line {lineno}: expected 1 <= subj_index < verb_index <= {len(tokens)}")
        attractors = _int(parts[col["n_diff_intervening"]], path, lineno, "n_diff_intervening")
        out.append(AgreementSentence(tokens, subj, verb, 0 if parts[col["verb_pos"]] == "VBZ" else 1, attractors))
    return out


# -- Penn Treebank ----------------------------------------------------------------------------


def load_ptb_tokens(path: Path) -> list[str]:
    """All tokens of a PTB file, each line followed by ``<eos>``."""
    tokens = []
    for line in _lines(path):
        tokens.extend(line.split())
        tokens.append("<eos>")
    return tokens


def ptb_vocab(train_tokens: list[str]) -> Vocab:
    """The training vocabulary by descending count (10,000 words on the Mikolov files)."""
    counts = Counter(train_tokens)
    return Vocab(sorted(counts, key=lambda w: (-counts[w], w)), unk="<unk>")


# -- SST ----------------------------------------------------------------------------------------


def load_sst_sentences(path: Path, classes: int) -> tuple[list[list[str]], np.ndarray]:
    """``label sentence`` lines (SST-2: labels 0/1, SST-5: 0..4) → token lists and labels."""
    sentences, labels = [], []
    for lineno, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        label, _, text = line.partition(" ")
        value = _int(label, path, lineno, "label")
        if not 0 <= value < classes:
            raise DataError(f"{path}, line {lineno}: expected a label in 0..{classes - 1}, got {value}")
        if not text.strip():
            raise DataError(f"{path}, line {lineno}: expected a sentence after the label")
        sentences.append(text.split())
        labels.append(value)
    return sentences, np.array(labels, dtype=np.int64)


@dataclass
class Phrase:
    tokens: list[str]
    label: int


def parse_tree(text: str, path: Path | str = "<string>", lineno: int = 1) -> list[Phrase]:
    """A PTB-style sentiment tree ``(3 (2 The) (3 (3 good) (2 film)))`` → every labelled node as a
    phrase, the root first. Leaves keep their casing; lower-case them to match the stsa files."""
    pos = 0
    phrases: list[Phrase] = []

    def fail(what: str):
        raise DataError(f"{path}, line {lineno}: malformed tree at character {pos + 1}: {what}")

    def skip_space():
        nonlocal pos
        while pos < len(text) and text[pos] == " ":
            pos += 1

    def node() -> list[str]:
        nonlocal pos
        skip_space()
        if pos >= len(text) or text[pos] != "(":
            fail("expected '('")
        pos += 1
        start = pos
        while pos < len(text) and text[pos] not in " ()":
            pos += 1
        label_text = text[start:pos]
        if not label_text.isdigit() or not 0 <= int(label_text) <= 4:
            fail(f"expected a label 0..4, got {label_text!r}")
        index = len(phrases)
        phrases.append(Phrase([], int(label_text)))
        skip_space()
        tokens: list[str] = []
        if pos < len(text) and text[pos] == "(":
            while pos < len(text) and text[pos] == "(":
                tokens += node()
                skip_space()
        else:
            start = pos
            while pos < len(text) and text[pos] not in "()":
                pos += 1
            word = text[start:pos].strip()
            if not word:
                fail("expected a word or a subtree")
            tokens = [word]
        if pos >= len(text) or text[pos] != ")":
            fail("expected ')'")
        pos += 1
        phrases[index].tokens = tokens
        return tokens

    node()
    skip_space()
    if pos != len(text):
        fail("unexpected text after the tree")
    return phrases


def load_sst_trees(path: Path) -> list[list[Phrase]]:
    """One tree per line → per tree, its labelled phrases (root first)."""
    return [parse_tree(line.strip(), path, lineno) for lineno, line in enumerate(_lines(path), 1) if line.strip()]


def binary_label(fine: int) -> int | None:
    """SST-5 → SST-2: 0, 1 → 0 (negative); 3, 4 → 1 (positive); 2 (neutral) → None (dropped)."""
    return None if fine == 2 else int(fine >= 3)
