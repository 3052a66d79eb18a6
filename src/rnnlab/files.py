"""How rnnlab touches files: one way to write into a folder (never through a symbolic link, atomically,
respecting the umask), JSON and CSV read with the file named in every error and a bound on their size and depth,
one command at a time per folder (a lock naming its holder), stored runs set aside rather than deleted, and
published files replaced only where a manifest says rnnlab wrote them, each publish a transaction.

These are the promises of docs/reliability.md; everything that writes a run, a study,
a sweep or a published page goes through them.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OWNER = ".rnnlab-owner"         # beside the lock: who holds the folder (pid and command), for the message
LOCK = ".rnnlab.lock"
SET_ASIDE = "set-aside"         # where stored runs that no longer match go, never deleted
MANIFEST = ".rnnlab-manifest.json"
JOURNAL = ".rnnlab-publish.json"    # what a publish under way is doing: the next command completes it
STAGE = ".rnnlab-stage-"        # a publish's new files, staged inside the destination (the same filesystem)
RESERVED = ".rnnlab"            # names of rnnlab's own bookkeeping, never published
MAX_RECORD_BYTES = 256 << 20    # a stored JSON or TOML record larger than this is refused, not read
PUBLISH_WAIT = 120.0            # seconds a publish waits for another publish into the same folder
LINK_ADVICE = ("rnnlab never writes through a link in a folder it writes (a folder received from someone else "
               "may point one anywhere): remove the link, or write elsewhere")


class UnsafePath(ValueError):
    """A path rnnlab refuses to write: a symbolic link, a folder in the way, or a link among its parents."""


def _chain(path: Path, root: Path | None) -> list[Path]:
    """``path`` and each of its parents strictly inside ``root`` (only ``path`` when ``root`` is None or does not
    hold it): what must not be a link for a write into ``root`` to stay there. ``root`` itself is the user's to
    name, a link or not."""
    if root is None:
        return [path]
    try:
        parts = Path(os.path.normpath(path)).relative_to(os.path.normpath(root)).parts
    except ValueError:
        return [path]
    if ".." in parts or not parts:
        return [path]
    return [Path(root).joinpath(*parts[:n]) for n in range(len(parts), 0, -1)]


def refuse_link(path: str | Path, root: str | Path | None = None) -> Path:
    """``path`` if rnnlab may write it: neither it nor a parent of it inside ``root`` is a symbolic link (dangling
    or not), it is a regular file if it exists and its parents are folders. Else UnsafePath naming the link."""
    path = Path(path)
    for at in _chain(path, None if root is None else Path(root)):
        try:
            mode = os.lstat(at).st_mode
        except FileNotFoundError:
            continue
        except OSError as err:
            raise UnsafePath(f"{at}: cannot be examined ({err.strerror or err})") from None
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(at)
            except OSError:
                target = "?"
            raise UnsafePath(f"{at}: a symbolic link (to {target}); {LINK_ADVICE}")
        if at == path and not stat.S_ISREG(mode):
            raise UnsafePath(f"{at}: not a regular file (a folder, a device or a pipe is in the way); nothing "
                             "was written")
        if at != path and not stat.S_ISDIR(mode):
            raise UnsafePath(f"{at}: not a folder; nothing was written into it")
    return path


def refuse_linked_folder(folder: str | Path) -> Path:
    """``folder`` (created or not) unless it is a symbolic link: a folder rnnlab names inside the one the user
    named (a study's ``OUT/NAME``) must not lead elsewhere."""
    folder = Path(folder)
    if os.path.islink(folder):
        raise UnsafePath(f"{folder}: a symbolic link (to {os.readlink(folder)}); {LINK_ADVICE}")
    return folder


def folder_in(root: str | Path, *parts: str) -> Path:
    """The folder ``root/parts…``, each level created if missing; a level that is a link or not a folder is
    refused (UnsafePath naming it), so that what is written into it stays inside ``root``."""
    folder = Path(root)
    for part in parts:
        folder = folder / part
        try:
            folder.mkdir(exist_ok=True)
        except FileExistsError:
            pass
        except OSError as err:
            raise ValueError(f"{folder}: cannot be created ({err.strerror or err})") from None
        if not refuse_linked_folder(folder).is_dir():
            raise UnsafePath(f"{folder}: not a folder; nothing was written into it")
    return folder


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


def _one_line(path: Path, err: OSError, what: str = "could not be written") -> ValueError:
    """An OSError as one line naming the file (a full disk's errno text, not the whole exception)."""
    return ValueError(f"{path}: {what} ({err.strerror or err}); nothing was replaced")


def atomic_write(path: str | Path, write: Callable[[Any], Any]) -> None:
    """Write through ``write(file)`` to a temp file beside ``path``, fsync, then rename over it; the file
    gets the mode a plain ``open`` would give it (0666 less the umask; mkstemp's would be 0600). A link at
    ``path`` is refused before anything is written (``refuse_link``; a folder rnnlab names inside the one given is
    checked where it is named: ``folder_in``, ``refuse_linked_folder``); the rename replaces a name, never what it
    points to. A full disk or a refused write is one line naming ``path``,
    with ``path`` as it was."""
    path = refuse_link(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _one_line(path, err) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if isinstance(err, OSError) and not isinstance(err, (FileNotFoundError, PermissionError)):
            raise _one_line(path, err) from None
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text(path: str | Path, text: str) -> None:
    """``text`` (UTF-8) into ``path`` through ``atomic_write``: never through a link."""
    atomic_write(path, lambda f: f.write(text.encode()))


def write_bytes(path: str | Path, content: bytes) -> None:
    """``content`` into ``path`` through ``atomic_write``: never through a link."""
    atomic_write(path, lambda f: f.write(content))


def append_text(path: str | Path, text: str, *, own_line: bool = False) -> None:
    """Append ``text`` to ``path`` (created if missing), opened with ``O_NOFOLLOW``: a link there is refused, not
    followed. ``own_line``: start on a line of its own when the file's last line was cut off (a killed writer's),
    so that the cut-off line does not swallow this one."""
    path = refuse_link(path)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafePath(f"{path}: a symbolic link; {LINK_ADVICE}") from None
        raise _one_line(path, err, "could not be opened to append") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(f"{path}: not a regular file; nothing was written")
        data = text.encode()
        size = os.lseek(fd, 0, os.SEEK_END)
        if own_line and size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        while data:
            data = data[os.write(fd, data):]
    except OSError as err:
        raise _one_line(path, err, "could not be appended to") from None
    finally:
        os.close(fd)


def copy_regular(source: str | Path, target: str | Path, source_root: str | Path | None = None) -> None:
    """Copy ``source`` to ``target`` (through ``atomic_write``): ``source`` must be a regular file, not a link
    nor under a linked folder inside ``source_root`` (a results folder's file that points elsewhere would publish
    what it points to)."""
    source = Path(source)
    for at in _chain(source, None if source_root is None else Path(source_root)):
        if os.path.islink(at):
            raise UnsafePath(f"{at}: a symbolic link (to {os.readlink(at)}); rnnlab copies and publishes only "
                             "regular files found inside the folder, never what a link points to")
    try:
        if not stat.S_ISREG(os.lstat(source).st_mode):
            raise UnsafePath(f"{source}: not a regular file; not copied")
        content = source.read_bytes()
    except OSError as err:
        raise ValueError(f"{source}: cannot be read ({err.strerror or err})") from None
    write_bytes(target, content)


def regular_files(root: str | Path, skip_reserved: bool = True) -> dict[str, Path]:
    """Every regular file under ``root`` (relative POSIX path → path), found without following a link (a link
    and what it points to are not files of the folder); rnnlab's own bookkeeping (``.rnnlab*``) left out where
    ``skip_reserved``."""
    root = Path(root)
    found: dict[str, Path] = {}
    for folder, dirs, names in os.walk(root, followlinks=False):
        here = Path(folder)
        if skip_reserved:
            dirs[:] = [d for d in dirs if not d.startswith(RESERVED)]
        for name in names:
            path = here / name
            if (skip_reserved and name.startswith(RESERVED)) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            found[path.relative_to(root).as_posix()] = path
    return found


def links_under(root: str | Path) -> list[str]:
    """The symbolic links under ``root`` (relative POSIX paths), found without following any."""
    root = Path(root)
    out = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in [*dirs, *names]:
            if os.path.islink(Path(folder) / name):
                out.append((Path(folder) / name).relative_to(root).as_posix())
    return sorted(out)


def copy_tree_regular(source: str | Path, target: str | Path) -> None:
    """A copy of ``source``'s folders and regular files at ``target`` (new); a link under ``source`` is refused
    naming it, since a copy cannot say what it would point to."""
    source, target = Path(source), Path(target)
    links = links_under(source)
    if links:
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise UnsafePath(f"{source / links[0]}: a symbolic link{more}; a folder with links is not copied: rnnlab "
                         "reads only the files a folder holds")
    try:
        shutil.copytree(source, target, symlinks=True)
    except shutil.Error as err:         # one entry per file that failed: the first says why (a full disk)
        failures = err.args[0] if err.args and isinstance(err.args[0], list) else []
        first = failures[0][2] if failures and len(failures[0]) == 3 else str(err)[:200]
        raise ValueError(f"{target}: {source} could not be copied there ({len(failures) or 'some'} files failed, "
                         f"the first: {first})") from None
    except OSError as err:
        raise _one_line(target, err, f"{source} could not be copied here") from None


def read_record_text(path: str | Path, limit: int = MAX_RECORD_BYTES) -> str:
    """A stored record's text (JSON, TOML, JSON lines), refused naming the file when it is larger than ``limit``
    bytes (read no further than that) or not UTF-8."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise ValueError(f"{path}: not readable ({err.strerror or err})") from None
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit >> 20} MB; not a record rnnlab wrote, not read")
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err})") from None


def parse_json(text: str, where: str, bad: str = "not readable as JSON") -> Any:
    """``json.loads`` with one-line errors naming ``where``: bad JSON, and nesting too deep for the parser (a
    RecursionError, which a record 100,000 brackets deep raises)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: {bad} ({err})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a record rnnlab wrote; not read") from None


def read_json(path: str | Path, expect: type = dict) -> Any:
    """A JSON file's content; an unreadable, empty, damaged, oversized, too deeply nested or wrongly shaped file
    raises ValueError naming it (among hundreds of stored jobs, the user must know which)."""
    path = Path(path)
    try:
        text = read_record_text(path)
    except ValueError as err:
        raise ValueError(f"{path}: not readable as JSON ({str(err).removeprefix(f'{path}: ')})") from None
    data = parse_json(text, str(path))
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
    try:
        text = read_record_text(path)
    except (ValueError, FileNotFoundError) as err:
        return rows, [f"{err}; skipped"]
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line, f"{path}, line {number}", "not JSON")
        except ValueError as err:
            bad.append(f"{err}; skipped")
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


def csv_text(rows: list[dict[str, Any]], header: bool = True) -> str:
    """Rows with the same keys as CSV text (the first row's keys the columns), to be written through ``write_text``
    or ``append_text``: the one CSV writer of rnnlab's records."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else [])
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


class FolderBusy(ValueError):
    """Another process holds the folder."""


_HELD: dict[str, int] = {}      # folders this process holds (resolved path → depth): a nested hold is the same


@contextmanager
def hold(folder: str | Path, command: str = "", wait: float = 0.0) -> Iterator[Path]:
    """Hold ``folder`` for this process while the block runs (created if missing): a second rnnlab
    command on the same folder stops at once (or after ``wait`` seconds), naming the holder's pid and command.
    The lock is the operating system's (``filelock``), so a killed holder releases it; a hold inside a hold of
    the same folder in this process is the same hold. A lock file or owner note that is a link is refused."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    created = not folder.exists()
    writable_folder(folder)
    key = str(folder.resolve())
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield folder
        finally:
            _HELD[key] -= 1
        return
    for name in (LOCK, OWNER):
        refuse_link(folder / name)
    lock = FileLock(str(folder / LOCK), timeout=wait)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = read_record_text(folder / OWNER, 4096).strip()
        except (OSError, ValueError):
            holder = "unknown"
        raise FolderBusy(f"{folder}: in use by another rnnlab command ({holder}); wait for it to finish, or "
                         "write elsewhere with --out") from None
    except OSError as err:
        raise ValueError(f"{folder / LOCK}: cannot be locked ({err.strerror or err})") from None
    _HELD[key] = 1
    try:
        write_text(folder / OWNER, f"pid {os.getpid()}{': ' + command if command else ''}\n")
        yield folder
    finally:
        del _HELD[key]
        Path(folder / OWNER).unlink(missing_ok=True)    # before the release: the next holder writes its own
        lock.release()
        if created and {p.name for p in folder.iterdir()} <= {LOCK, OWNER}:
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


def check_working_folder(folder: str | Path, store: str, what: str) -> Path:
    """``folder`` if a command that keeps its work in ``folder/store`` may write there: a new folder, an empty one
    (rnnlab's bookkeeping aside), or one that holds ``store`` (its own earlier work). A non-empty folder without it
    is someone else's: refused before anything trains, naming what it holds (its results.json or report.md would
    be replaced)."""
    folder = Path(folder)
    if not folder.exists():
        return folder
    if not folder.is_dir():
        raise ValueError(f"--out {folder}: not a folder")
    held = sorted(p.name for p in folder.iterdir() if not p.name.startswith(RESERVED))
    if held and not (folder / store).is_dir():
        raise ValueError(f"--out {folder}: a folder {what} did not make (no {store}/) holding "
                         f"{', '.join(held[:5])}{' …' if len(held) > 5 else ''}; rnnlab never writes over files it "
                         "did not write: name a new or empty folder")
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
    if os.path.islink(path):
        raise UnsafePath(f"{path}: a symbolic link; a manifest says which files rnnlab may replace, so it is read only "
                         "where it is the folder's own file")
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
    path = folder / rel
    return (entry is not None and entry[0] == owner and entry[1] is not None and not os.path.islink(path)
            and path.is_file() and entry[1] == sha256_of(path))


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
    """Every regular file under ``root`` (relative POSIX path → path) but rnnlab's bookkeeping (the manifest, the
    lock and its owner's note, a publish's journal and stage): what a publish writes and compares. Links are not
    files of the folder (``regular_files``)."""
    return regular_files(root)


@contextmanager
def staged_publish(dest: str | Path, owner: str) -> Iterator[Path]:
    """Publish into ``dest`` through a staging copy: the block writes into the copy it is given (it may
    delete there what it likes); afterwards every file it added or changed is written into ``dest`` and every
    file it removed is removed from ``dest``, as one transaction (``publish_files``) — but only files that
    ``dest``'s manifest says ``owner`` wrote may be replaced or removed. The copy holds ``dest``'s regular files
    only (a link there is refused: the copy could not say where it points), and ``dest`` is held from the copy
    to the manifest, so two publishes into one folder take turns instead of losing one's entries."""
    dest = check_publish_folder(dest)
    with hold(dest, f"publish by {owner}", wait=PUBLISH_WAIT):
        settle_publish(dest)
        links = [rel for rel in links_under(dest) if not rel.split("/")[-1].startswith(RESERVED)]
        if links:
            raise UnsafePath(f"--publish {dest}: {links[0]} is a symbolic link; {LINK_ADVICE}")
        with tempfile.TemporaryDirectory(prefix=STAGE, dir=dest) as tmp:
            stage = Path(tmp) / "copy"
            stage.mkdir()
            before = files_under(dest)
            try:
                for rel, path in before.items():
                    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, stage / rel)
            except OSError as err:
                raise _one_line(dest, err, "could not be staged for publishing") from None
            try:
                yield stage
            except ValueError as err:      # an error names the folder's file, not its staged copy
                raise ValueError(str(err).replace(str(stage), str(dest))) from None
            after = files_under(stage)
            write = {rel: path.read_bytes() for rel, path in after.items()
                     if rel not in before or before[rel].read_bytes() != path.read_bytes()}
        manifest = read_manifest(dest) or {}
        removed = [rel for rel in before if rel not in after and _owned(manifest, dest, rel, owner)]
        publish_files(dest, write, owner, removed)


def _check_rel(folder: Path, rel: str) -> None:
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or not parts or any(p.startswith(RESERVED) for p in parts):
        raise ValueError(f"--publish {folder}: refusing a file outside the folder or among rnnlab's own: {rel}")


# Where a publish may be stopped, for the damage test: before each of its steps ``_step(name)`` is called (a
# no-op here); the test makes one of them kill the process and checks what the next command finds.
def _step(name: str) -> None:
    return None


def publish_files(folder: str | Path, files: dict[str, bytes | None], owner: str, remove: list[str] = (),
                  check_only: bool = False) -> None:
    """Write ``files`` (path relative to ``folder`` → bytes) into ``folder`` and remove ``remove``, as one
    transaction: a file in the way that the manifest does not say ``owner`` published, or a link, stops it all
    before anything is written. Under the folder's lock, the new files and the new manifest are staged inside
    ``folder`` (a full disk stops here, ``folder`` as it was); a journal naming them is written, then each is
    renamed into place, the manifest last, and the journal removed. A publish cut off after its journal is
    completed by the next (``settle_publish``); one cut off before leaves ``folder`` as it was.
    ``check_only``: only the refusal, before the work that makes the files."""
    folder = Path(folder)
    for rel in [*files, *remove]:
        _check_rel(folder, rel)
    if check_only:
        _refuse_theirs(folder, read_manifest(folder) or {}, files, remove, owner)
        return
    writable_folder(folder)
    with hold(folder, f"publish by {owner}", wait=PUBLISH_WAIT):
        settle_publish(folder)
        manifest = read_manifest(folder) or {}
        _refuse_theirs(folder, manifest, files, remove, owner)
        for rel in [*files, *remove]:
            refuse_link(folder / rel, folder)
        for rel, content in files.items():
            manifest[rel] = (owner, hashlib.sha256(content).hexdigest())
        for rel in remove:
            manifest.pop(rel, None)
        entries = {rel: {"owner": who, "sha256": digest} for rel, (who, digest) in sorted(manifest.items())
                   if rel in files or (os.path.isfile(folder / rel) and not os.path.islink(folder / rel))}
        stage = folder / f"{STAGE}{uuid.uuid4().hex[:12]}"
        try:
            _step("stage")
            stage.mkdir()
            for rel, content in files.items():
                _step(f"stage {rel}")
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                write_bytes(stage / rel, content)
            _step("stage manifest")
            write_text(stage / MANIFEST, json.dumps({"files": entries}, indent=1) + "\n")
            _step("journal")
            journal = {"owner": owner, "stage": stage.name, "write": sorted(files), "remove": sorted(remove),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}
            write_text(folder / JOURNAL, json.dumps(journal, indent=1) + "\n")
        except BaseException as err:
            shutil.rmtree(stage, ignore_errors=True)
            if isinstance(err, OSError):
                raise _one_line(folder, err, "the publish could not be staged") from None
            if isinstance(err, ValueError):
                raise ValueError(f"{err} (the publish was staged, not made: {folder} is as it was)") from None
            raise
        _complete(folder, journal)


def _refuse_theirs(folder: Path, manifest: dict[str, tuple[str, str | None]], files: dict[str, Any],
                   remove: list[str], owner: str) -> None:
    theirs = sorted(rel for rel in [*files, *remove]
                    if os.path.lexists(folder / rel) and not _owned(manifest, folder, rel, owner))
    if theirs:
        shown = ", ".join(theirs[:5]) + (" …" if len(theirs) > 5 else "")
        raise ValueError(f"--publish {folder}: would replace {shown}, which {owner} did not publish there (or which "
                         f"was changed since: the folder's {MANIFEST} records each file's owner and hash); nothing "
                         "was written")


def _complete(folder: Path, journal: dict[str, Any]) -> None:
    """Carry out a journalled publish (again, where a command was cut off): each staged file renamed into place,
    each removed file removed, the manifest last, then the stage and the journal gone. Each step can be done
    twice: a file already moved is no longer staged."""
    stage = folder / journal["stage"]
    for rel in journal["write"]:
        _step(f"move {rel}")
        if os.path.isfile(stage / rel):
            refuse_link(folder / rel, folder)
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / rel, folder / rel)
    for rel in journal["remove"]:
        _step(f"remove {rel}")
        if os.path.isfile(folder / rel) and not os.path.islink(folder / rel):
            os.unlink(folder / rel)
    _step("move manifest")
    if os.path.isfile(stage / MANIFEST):
        os.replace(stage / MANIFEST, folder / MANIFEST)
    _step("clean")
    shutil.rmtree(stage, ignore_errors=True)
    _fsync_folder(folder)
    os.unlink(folder / JOURNAL)
    _fsync_folder(folder)


def settle_publish(folder: str | Path) -> str | None:
    """Finish what an interrupted publish into ``folder`` left (call it holding the folder): a journal whose stage
    holds what it names is completed; a stage without its journal (cut off while staging) is removed, ``folder``
    as it was. A journal that names anything outside the folder, or would replace a file its writer did not
    publish, is rolled back instead. Returns what was done (also printed), or None."""
    import sys

    folder = Path(folder)
    done = None
    journal_path = folder / JOURNAL
    if os.path.lexists(journal_path):
        try:
            journal = read_json(journal_path)
            rels = [*journal["write"], *journal["remove"]]
            if not (isinstance(journal.get("owner"), str) and isinstance(journal.get("stage"), str)
                    and journal["stage"].startswith(STAGE) and "/" not in journal["stage"]
                    and all(isinstance(r, str) for r in rels)):
                raise ValueError("not a journal of this version")
            for rel in rels:
                _check_rel(folder, rel)
            stage = folder / journal["stage"]
            if os.path.islink(stage) or not os.path.isdir(stage):
                raise ValueError("its stage is gone")
            manifest = read_manifest(folder) or {}
            staged = {rel for rel in journal["write"] if os.path.isfile(stage / rel)}
            # files still staged replace only the writer's own; removals only the writer's own, unchanged
            journal["remove"] = [rel for rel in journal["remove"] if not os.path.lexists(folder / rel)
                                 or _owned(manifest, folder, rel, journal["owner"])]
            if staged and not os.path.isfile(stage / MANIFEST):
                raise ValueError("its files are staged without their manifest")    # the manifest moves last
            _refuse_theirs(folder, manifest, dict.fromkeys(staged), [], journal["owner"])
            _complete(folder, journal)
            done = f"completed the publish by {journal['owner']} that was cut off ({journal.get('started', '?')})"
        except (ValueError, KeyError, TypeError) as err:
            for stage in folder.glob(f"{STAGE}*"):
                if stage.is_dir() and not stage.is_symlink():
                    shutil.rmtree(stage, ignore_errors=True)
            os.unlink(journal_path)
            done = (f"rolled back a publish that was cut off ({str(err).replace(str(folder) + '/', '')}); the folder "
                    "is as it was before it")
    for stage in folder.glob(f"{STAGE}*"):
        if stage.is_dir() and not stage.is_symlink():
            shutil.rmtree(stage, ignore_errors=True)
            done = done or "removed a publish cut off while staging; the folder is as it was before it"
    if done:
        print(f"rnnlab: {folder}: {done}", file=sys.stderr)
    return done


def inside(root: str | Path, relative: str | Path, what: str) -> Path:
    """``root / relative`` for a path read from stored data, refused when it is absolute or leaves
    ``root`` (a results file must not pull in files from elsewhere)."""
    root = Path(root)
    rel = Path(relative)
    target = (root / rel).resolve()
    if rel.is_absolute() or not target.is_relative_to(root.resolve()):
        raise ValueError(f"{what}: the path {relative} leaves {root}; stored paths must stay inside their folder")
    return root / rel
