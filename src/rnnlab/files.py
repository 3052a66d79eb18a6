"""How rnnlab touches files: atomic writes that respect the umask, JSON and CSV read with the file named in
every error, one command at a time per folder (a lock naming its holder), stored runs set aside
rather than deleted, and published files replaced only where a manifest says rnnlab wrote them.

These are the promises of docs/reliability.md; everything that writes a run, a study,
a sweep or a published page goes through them.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OWNER = ".rnnlab-owner"         # beside the lock: who holds the folder (pid and command), for the message
LOCK = ".rnnlab.lock"
SET_ASIDE = "set-aside"         # where stored runs that no longer match go, never deleted
MANIFEST = ".rnnlab-manifest.json"


def _umask() -> int:
    """The process's umask, read without setting it where Linux shows it (setting and restoring it races
    with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Any], Any]) -> None:
    """Write through ``write(file)`` to a temp file beside ``path``, fsync, then rename over it; the file
    gets the mode a plain ``open`` would give it (0666 less the umask; mkstemp's would be 0600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def read_json(path: str | Path, expect: type = dict) -> Any:
    """A JSON file's content; an unreadable, empty, damaged or wrongly shaped file raises ValueError
    naming it (among hundreds of stored jobs, the user must know which)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(data, expect):
        raise ValueError(f"{path}: expected a JSON {expect.__name__}, found {type(data).__name__}")
    return data


def record_json(data: dict[str, Any]) -> str:
    """``data`` as JSON with one line per top-level key and per item of a top-level list, each line compact:
    a results record of thousands of per-seed rows stays under a megabyte (indenting would give every number
    of a row's values a line of its own), while a diff still shows which row changed. Non-finite floats are written
    as NaN/Infinity, as ``json.dumps`` does, and read back by ``json.loads``."""
    def one(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), default=float)

    lines = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            lines.append(f"{one(key)}:[\n" + ",\n".join(one(item) for item in value) + "\n]")
        else:
            lines.append(f"{one(key)}:{one(value)}")
    return "{\n" + ",\n".join(lines) + ("\n" if lines else "") + "}\n"


def is_number(value: Any, or_none: bool = False) -> bool:
    """Whether a value read from JSON is a number (true and false are not), or None where ``or_none``."""
    return (value is None and or_none) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def is_whole(value: Any, low: int | None = None) -> bool:
    """Whether a value read from JSON is a whole number (true and false are not), at least ``low`` if given."""
    return isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)


def read_json_lines(path: str | Path) -> tuple[list[dict], list[str]]:
    """The JSON objects of a JSON-lines file, and one message per line that is not one (a damaged line
    is reported and skipped: it must not hide the lines after it)."""
    path = Path(path)
    rows, bad = [], []
    if not path.is_file():
        return rows, bad
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            bad.append(f"{path}, line {number}: not JSON ({err}); skipped")
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(f"{path}, line {number}: not a JSON object; skipped")
    return rows, bad


def read_csv(path: str | Path, convert: Callable[[dict[str, str]], Any], what: str,
             shown_as: str | Path | None = None) -> list[Any]:
    """Each row of a CSV file with a header (column → text) through ``convert``. A row ``convert`` cannot take
    (a KeyError: a column missing; a ValueError or TypeError), a row of more or fewer fields than the header, or
    bytes that are not UTF-8 are refused as ValueError naming the file (``shown_as``, where ``path`` is a copy of
    it), the line and ``what`` a row should be."""
    named = shown_as or path
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.DictReader(f)
        try:
            for row in rows:
                if None in row or None in row.values():
                    raise ValueError(f"{'more' if None in row else 'fewer'} fields than the header")
                out.append(convert(row))
        except KeyError as err:
            raise ValueError(f"{named}: line {rows.line_num}: no {err} column; not {what}") from None
        except (ValueError, TypeError, csv.Error) as err:      # UnicodeDecodeError among them
            raise ValueError(f"{named}: line {rows.line_num}: not {what} ({err})") from None
    return out


class FolderBusy(ValueError):
    """Another process holds the folder."""


@contextmanager
def hold(folder: str | Path, command: str = "") -> Iterator[Path]:
    """Hold ``folder`` for this process while the block runs (created if missing): a second rnnlab
    command on the same folder stops at once, naming the holder's pid and command. The lock is the
    operating system's (``filelock``), so a killed holder releases it."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    created = not folder.exists()
    writable_folder(folder)
    lock = FileLock(str(folder / LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = (folder / OWNER).read_text().strip()
        except OSError:
            holder = "unknown"
        raise FolderBusy(f"{folder}: in use by another rnnlab command ({holder}); wait for it to finish, or "
                         "write elsewhere with --out") from None
    try:
        if lock.lock_counter == 1:
            (folder / OWNER).write_text(f"pid {os.getpid()}{': ' + command if command else ''}\n")
        yield folder
    finally:
        lock.release()
        if created and lock.lock_counter == 0 and {p.name for p in folder.iterdir()} <= {LOCK, OWNER}:
            for name in (LOCK, OWNER):      # a command that stopped before writing leaves no folder behind
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()


def writable_folder(folder: str | Path) -> Path:
    """``folder``, created if missing; a folder that cannot be created or written raises ValueError
    naming it (not a bare OSError)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".rnnlab-probe-", delete=True)
        probe.close()
    except OSError as err:
        raise ValueError(f"{folder}: cannot write here ({err.strerror or err})") from None
    return folder


def set_aside(path: str | Path, why: str, root: str | Path) -> Path:
    """Move a stored run ``path`` to ``root/set-aside/NAME.WHY.TIMESTAMP`` (never delete it): the name
    says why it was set aside and when. Returns where it went."""
    path, target_dir = Path(path), Path(root) / SET_ASIDE
    target_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = target_dir / f"{path.name}.{why}.{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = target_dir / f"{path.name}.{why}.{stamp}-{n}"
    os.replace(path, target)
    return target


# -- publishing ----------------------------------------------------------------------------------------

def read_manifest(dest: str | Path) -> dict[str, tuple[str, str | None]] | None:
    """The files rnnlab published into ``dest``: relative path → (who wrote it: "study reber", "sweep
    FILE"; the sha256 of what it wrote), or None when the folder holds no manifest."""
    path = Path(dest) / MANIFEST
    if not path.is_file():
        return None
    files = read_json(path).get("files")
    expected = f"{path}: expected {{\"files\": {{relative path: {{\"owner\": …, \"sha256\": …}}}}}}"
    if not isinstance(files, dict):
        raise ValueError(expected)
    entries = {}
    for rel, entry in files.items():
        if isinstance(entry, dict) and isinstance(entry.get("owner"), str):
            entries[rel] = (entry["owner"], entry.get("sha256") if isinstance(entry.get("sha256"), str) else None)
        elif isinstance(entry, str):      # an entry without the hash of what was written owns nothing
            entries[rel] = (entry, None)
        else:
            raise ValueError(expected)
    return entries


def sha256_of(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in blocks (a data file may not fit in memory twice)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _owned(manifest: dict[str, tuple[str, str | None]], folder: Path, rel: str, owner: str) -> bool:
    """Whether ``rel`` is a file ``owner`` published in ``folder`` and nobody changed since: a manifest is data
    that travels with the folder, so its word alone never lets rnnlab replace or remove a file."""
    entry = manifest.get(rel)
    return entry is not None and entry[0] == owner and entry[1] is not None and entry[1] == sha256_of(folder / rel)


def check_publish_folder(dest: str | Path) -> Path:
    """``dest`` if rnnlab may publish into it: a new folder, an empty one, or one holding rnnlab's
    manifest. The working folder, the home folder, a filesystem root, a file, or a non-empty folder
    without a manifest are refused, naming why."""
    dest = Path(dest)
    resolved = dest.resolve()
    if resolved in (Path.cwd().resolve(), Path.home().resolve()) or resolved == Path(resolved.anchor):
        raise ValueError(f"--publish {dest}: refusing to publish into the working folder, the home folder or a "
                         "root; name a folder of its own, e.g. docs/results/NAME")
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"--publish {dest}: not a folder")
    if dest.is_dir() and read_manifest(dest) is None and any(dest.iterdir()):
        shown = sorted(p.name for p in dest.iterdir())
        raise ValueError(f"--publish {dest}: a folder that rnnlab did not publish (it has no {MANIFEST}) holding "
                         f"{', '.join(shown[:5])}{' …' if len(shown) > 5 else ''}; rnnlab never replaces files it "
                         "did not write: name a new or empty folder")
    return dest


def files_under(root: Path) -> dict[str, Path]:
    """Every file under ``root`` (relative POSIX path → path) but the manifest, the lock and its owner's note:
    what a publish writes and compares."""
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*")
            if p.is_file() and p.name not in (MANIFEST, LOCK, OWNER)}


@contextmanager
def staged_publish(dest: str | Path, owner: str) -> Iterator[Path]:
    """Publish into ``dest`` through a staging copy: the block writes into the copy it is given (it may
    delete there what it likes); afterwards every file it added or changed is written into ``dest``
    (atomically, each) and every file it removed is removed from ``dest`` — but only files that
    ``dest``'s manifest says ``owner`` wrote may be replaced or removed. A file of someone else in the
    way stops the publish before anything is written; the manifest then records what ``owner`` wrote."""
    dest = check_publish_folder(dest)
    manifest = read_manifest(dest) or {}
    with tempfile.TemporaryDirectory(prefix="rnnlab-publish-") as tmp:
        stage = Path(tmp) / "stage"
        if dest.is_dir():
            shutil.copytree(dest, stage, symlinks=True)
        else:
            stage.mkdir()
        yield stage
        before, after = files_under(dest) if dest.is_dir() else {}, files_under(stage)
        write = {rel: path.read_bytes() for rel, path in after.items()
                 if rel not in before or before[rel].read_bytes() != path.read_bytes()}
        removed = [rel for rel in before if rel not in after and _owned(manifest, dest, rel, owner)]
        publish_files(dest, write, owner, removed)


def publish_files(folder: str | Path, files: dict[str, bytes | None], owner: str, remove: list[str] = (),
                  check_only: bool = False) -> None:
    """Write ``files`` (path relative to ``folder`` → bytes) into ``folder``, each atomically, and remove
    ``remove``; a file in the way that the manifest does not say ``owner`` published stops it all
    before anything is written. The manifest then records what ``owner`` wrote. ``check_only``: only
    the refusal, before the work that makes the files."""
    folder = Path(folder)
    manifest = read_manifest(folder) or {}
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"--publish {folder}: refusing a file outside the folder: {rel}")
    theirs = sorted(rel for rel in [*files, *remove]
                    if (folder / rel).exists() and not _owned(manifest, folder, rel, owner))
    if theirs:
        shown = ", ".join(theirs[:5]) + (" …" if len(theirs) > 5 else "")
        raise ValueError(f"--publish {folder}: would replace {shown}, which {owner} did not publish there (or which "
                         f"was changed since: the folder's {MANIFEST} records each file's owner and hash); nothing "
                         "was written")
    if check_only:
        return
    for rel, content in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / rel, lambda f, content=content: f.write(content))
        manifest[rel] = (owner, hashlib.sha256(content).hexdigest())
    for rel in remove:
        (folder / rel).unlink(missing_ok=True)
        manifest.pop(rel, None)
    entries = {rel: {"owner": who, "sha256": digest} for rel, (who, digest) in sorted(manifest.items())
               if (folder / rel).is_file()}
    write_text(folder / MANIFEST, json.dumps({"files": entries}, indent=1) + "\n")


def inside(root: str | Path, relative: str | Path, what: str) -> Path:
    """``root / relative`` for a path read from stored data, refused when it is absolute or leaves
    ``root`` (a results file must not pull in files from elsewhere)."""
    root = Path(root)
    rel = Path(relative)
    target = (root / rel).resolve()
    if rel.is_absolute() or not target.is_relative_to(root.resolve()):
        raise ValueError(f"{what}: the path {relative} leaves {root}; stored paths must stay inside their folder")
    return root / rel
