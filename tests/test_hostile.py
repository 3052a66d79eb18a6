"""A results folder received from someone else is hostile input (docs/reliability.md): no write follows a link
in it, a publish is all or nothing (killed or out of disk at any point, the destination is as it was before or
as it is after, never between), and two publishes into one folder keep both pages' entries."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rnnlab import files
from rnnlab.experiments.studies import EXPERIMENTS
from rnnlab.files import JOURNAL, MANIFEST, STAGE, hold, publish_files, read_json, settle_publish
from test_trust import cli, published, stored  # noqa: F401  (module fixtures: a stored study and sweep, a page)

SECRET = "a private file outside the folder: rnnlab must neither write it nor publish it\n"


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    """A file and a folder outside every folder a command is given, the targets of the links."""
    elsewhere = tmp_path / f"elsewhere-{time.perf_counter_ns()}"
    (elsewhere / "folder").mkdir(parents=True)
    (elsewhere / "victim.pth").write_text(SECRET)
    (elsewhere / "folder" / "kept.txt").write_text(SECRET)
    return elsewhere / "victim.pth", elsewhere / "folder"


def _untouched(victim: Path, folder: Path) -> None:
    assert victim.read_text() == SECRET, "a write followed a link"
    assert sorted(p.name for p in folder.iterdir()) == ["kept.txt"], "a write went into a linked folder"
    assert (folder / "kept.txt").read_text() == SECRET


def _link(path: Path, kind: str, victim: Path, folder: Path) -> None:
    """Replace ``path`` (a file or folder, or nothing) by a link of ``kind`` pointing out of its folder."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    target = {"absolute": victim, "relative": Path(os.path.relpath(victim, path.parent)),
              "dangling": victim.parent / "nothing-here.pth", "folder": folder}[kind]
    path.symlink_to(target)


def _tiny(monkeypatch) -> None:
    from test_experiments import _tiny_study

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())


# -- writes never follow a link -----------------------------------------------------------------------------

STUDY_WRITES = ("report.md", "report.html", "results.csv", "calls.jsonl", "results.json", ".rnnlab-owner",
                "claims.png", "analysis/dev_loss_epochs.png", "analysis")


@pytest.mark.parametrize("name", STUDY_WRITES)
def test_a_stored_study_whose_file_is_a_link_is_refused_and_what_it_points_to_is_untouched(
        stored, tmp_path, capsys, monkeypatch, name):  # noqa: F811
    _tiny(monkeypatch)
    out = tmp_path / "runs"
    shutil.copytree(stored / "runs", out)
    study = out / "tiny"
    victim, folder = _outside(tmp_path)
    assert (study / name).exists() or name == ".rnnlab-owner", sorted(p.name for p in study.iterdir())
    _link(study / name, "folder" if name == "analysis" else "absolute", victim, folder)
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 2 and Path(name).name in err and "Traceback" not in err, err
    _untouched(victim, folder)
    assert (study / name).is_symlink()                  # the link itself stays: rnnlab did not write it


def test_train_into_a_folder_whose_owner_note_is_a_link_is_refused(tmp_path, capsys):
    victim, folder = _outside(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    _link(out / ".rnnlab-owner", "relative", victim, folder)
    code, _, err = cli(capsys, "train", "--task", "reber", "--hidden", "3", "--epochs", "1", "--engine", "numpy",
                       "--quiet", "--out", out)
    assert code == 2 and ".rnnlab-owner: a symbolic link" in err, err
    _untouched(victim, folder)


@pytest.mark.parametrize("name", ["tiny.md", "tiny/page.json", "tiny/runs.csv", MANIFEST, "tiny"])
def test_a_publish_into_a_folder_holding_a_link_writes_nothing(published, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                name):
    _tiny(monkeypatch)
    here = tmp_path / "copy"
    shutil.copytree(published, here, symlinks=True)
    dest = here / "docs"
    victim, folder = _outside(tmp_path)
    _link(dest / name, "folder" if name == "tiny" else "absolute", victim, folder)
    before = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*")
              if p.is_file() and not p.is_symlink()}
    code, _, err = cli(capsys, "reproduce", "tiny", "--tune", "--seeds", "1", "--workers", "1", "--out",
                       here / "tuned", "--publish", dest)
    assert code == 2 and "symbolic link" in err and Path(name).name in err, err
    _untouched(victim, folder)
    after = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*")
             if p.is_file() and not p.is_symlink()}
    assert {k: v for k, v in after.items() if not k.startswith(".rnnlab")} == \
        {k: v for k, v in before.items() if not k.startswith(".rnnlab")}


def test_a_sweep_publish_never_copies_what_a_figure_links_to(stored, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "sweep"
    shutil.copytree(stored / "sweep", out)
    victim, folder = _outside(tmp_path)
    _link(out / "figures" / "x.png", "absolute", victim, folder)
    dest = tmp_path / "published"
    code, _, err = cli(capsys, "sweep", stored / "sweep.toml", "--workers", "1", "--out", out, "--publish", dest)
    assert code == 2 and "figures/x.png: a symbolic link" in err, err
    assert not dest.exists() or not any(SECRET.encode() in p.read_bytes() for p in dest.rglob("*") if p.is_file())
    _untouched(victim, folder)


def test_republish_check_refuses_a_folder_holding_a_link(published, tmp_path, capsys, monkeypatch):  # noqa: F811
    _tiny(monkeypatch)
    dest = tmp_path / "docs"
    shutil.copytree(published / "docs", dest)
    victim, folder = _outside(tmp_path)
    _link(dest / "tiny" / "notes.txt", "relative", victim, folder)
    code, _, err = cli(capsys, "republish", dest, "--check")
    assert code == 2 and "notes.txt: a symbolic link" in err and len(err.splitlines()) == 1, err
    _untouched(victim, folder)


@pytest.mark.parametrize("kind", ["absolute", "relative", "dangling", "folder"])
def test_the_one_writer_refuses_every_kind_of_link_and_a_linked_parent(tmp_path, kind):
    victim, folder = _outside(tmp_path)
    root = tmp_path / "run"
    (root / "figures").mkdir(parents=True)
    _link(root / "page.md", kind, victim, folder)
    for write in (lambda: files.write_text(root / "page.md", "x"), lambda: files.append_text(root / "page.md", "x")):
        with pytest.raises(files.UnsafePath, match="page.md: a symbolic link"):
            write()
    shutil.rmtree(root / "figures")
    _link(root / "figures", "folder", victim, folder)
    with pytest.raises(files.UnsafePath, match="figures: a symbolic link"):
        files.write_bytes(root / "figures" / "x.png", b"png", root)
    with pytest.raises(files.UnsafePath, match="a symbolic link"):
        files.copy_regular(root / "page.md", root / "copy.md", root)
    _untouched(victim, folder)
    assert sorted(p.name for p in root.iterdir()) == ["figures", "page.md"]


# -- a publish is a transaction ------------------------------------------------------------------------------

OLD = {"a.md": b"old a", "sub/b.md": b"old b", "c.md": b"old c"}
NEW = {"a.md": b"new a", "sub/b.md": b"new b", "d/e.md": b"new e"}


def _published_folder(root: Path) -> Path:
    dest = root / "dest"
    publish_files(dest, OLD, "study x")
    publish_files(dest, {"other.md": b"another page"}, "study y")
    (dest / "notes.txt").write_text("a reader's notes")
    return dest


def _state(dest: Path) -> dict[str, bytes]:
    """What a reader of ``dest`` sees: every file but the lock and its owner note (the manifest included)."""
    return {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*")
            if p.is_file() and p.name not in (files.LOCK, files.OWNER)}


def _publish_new(dest: Path) -> None:
    publish_files(dest, NEW, "study x", remove=["c.md"])


def _steps(tmp_path: Path) -> list[str]:
    seen: list[str] = []
    dest = _published_folder(tmp_path / "count")
    original = files._step
    files._step = seen.append
    try:
        _publish_new(dest)
    finally:
        files._step = original
    return seen


def _killed_at(dest: Path, step: int) -> int:
    """Publish NEW into ``dest`` in a forked child that dies (``os._exit``, no cleanup) at step ``step``."""
    pid = os.fork()
    if pid == 0:        # the child: no finally block, no atexit, as a kill -9
        count = [0]

        def die(name: str) -> None:
            if count[0] == step:
                os._exit(9)
            count[0] += 1
        files._step = die
        try:
            _publish_new(dest)
        except BaseException:
            os._exit(3)
        os._exit(0)
    return os.waitpid(pid, 0)[1]


@pytest.fixture(scope="module")
def before_and_after(tmp_path_factory):
    root = tmp_path_factory.mktemp("transaction")
    before = _state(_published_folder(root / "before"))
    dest = _published_folder(root / "after")
    _publish_new(dest)
    return before, _state(dest), len(_steps(root))


def _check_before_or_after(dest: Path, before: dict[str, bytes], after: dict[str, bytes]) -> str:
    with hold(dest):
        settle_publish(dest)
    state = _state(dest)
    assert state in (before, after), sorted(set(state.items()) ^ set(before.items()))
    assert not list(dest.glob(f"{STAGE}*")) and not (dest / JOURNAL).exists()
    return "before" if state == before else "after"


def _killed_publish_leaves_before_or_after(tmp_path, before_and_after, step: int) -> None:
    before, after, steps = before_and_after
    dest = _published_folder(tmp_path / f"k{time.perf_counter_ns()}")
    status = _killed_at(dest, step % (steps + 1))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 9), status
    _check_before_or_after(dest, before, after)
    _publish_new(dest)                          # and rnnlab still replaces its own files afterwards
    assert _state(dest) == after


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(step=st.integers(0, 40))
def test_a_publish_killed_at_any_point_leaves_the_folder_as_before_or_after(tmp_path, before_and_after, step):
    _killed_publish_leaves_before_or_after(tmp_path, before_and_after, step)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(step=st.integers(0, 40))
def test_a_publish_killed_at_any_point_leaves_the_folder_as_before_or_after_400(tmp_path, before_and_after, step):
    _killed_publish_leaves_before_or_after(tmp_path, before_and_after, step)


def test_every_step_of_a_publish_is_reached_by_the_kill_test(tmp_path, before_and_after):
    """The kill points cover the publish from its first staged file to the journal's removal: cut off before
    the journal, the folder is as before; after it, the next command completes it."""
    before, after, steps = before_and_after
    names = _steps(tmp_path)
    assert names[0] == "stage" and "journal" in names and names[-1] == "clean" and len(names) == steps
    journal = names.index("journal")
    for step in range(steps + 1):
        dest = _published_folder(tmp_path / f"s{step}")
        _killed_at(dest, step)
        assert _check_before_or_after(dest, before, after) == ("before" if step <= journal else "after"), names[step]


@pytest.mark.parametrize("at", [0, 1, 2, 3])
def test_a_full_disk_mid_publish_leaves_the_folder_as_it_was_with_one_line(tmp_path, monkeypatch, at):
    dest = _published_folder(tmp_path)
    before = _state(dest)
    calls = [0]
    real = files.write_bytes

    def full(path, content, root=None):
        if calls[0] == at:
            raise files._one_line(Path(path), OSError(errno.ENOSPC, "No space left on device", str(path)))
        calls[0] += 1
        return real(path, content, root)
    monkeypatch.setattr(files, "write_bytes", full)
    monkeypatch.setattr(files, "write_text", lambda path, text, root=None: full(path, text.encode(), root))
    with pytest.raises(ValueError) as raised:
        _publish_new(dest)
    message = str(raised.value)
    assert "No space left on device" in message and "\n" not in message and len(message) < 400, message
    assert _state(dest) == before and not list(dest.glob(f"{STAGE}*"))


def _publish_many(dest: str, owner: str, n: int) -> None:
    for i in range(n):
        publish_files(dest, {f"{owner}.md": f"{owner} {i}".encode(), f"{owner}/data.json": b"{}"}, owner)


def test_two_publishes_into_one_folder_at_once_keep_both_pages(tmp_path):
    import multiprocessing

    dest = tmp_path / "dest"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_publish_many, args=(str(dest), f"study s{k}", 15)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    entries = read_json(dest / MANIFEST)["files"]
    assert set(entries) == {f"study s{k}{suffix}" for k in range(2) for suffix in (".md", "/data.json")}
    assert all(entries[f"study s{k}.md"]["owner"] == f"study s{k}" for k in range(2))
    assert (dest / "study s0.md").read_text() == "study s0 14"


def test_a_hostile_journal_cannot_make_rnnlab_replace_or_remove_another_s_file(tmp_path, capsys):
    """A journal travels with a folder like a manifest: one naming a reader's file to remove, or a staged file over
    a reader's file, is rolled back, both files kept."""
    dest = _published_folder(tmp_path)
    stage = dest / f"{STAGE}abc"
    stage.mkdir()
    (stage / "notes.txt").write_text("overwritten")
    (dest / JOURNAL).write_text(json.dumps({"owner": "study x", "stage": stage.name, "write": ["notes.txt"],
                                            "remove": ["other.md"]}))
    with hold(dest):
        done = settle_publish(dest)
    assert done and "rolled back" in done
    assert (dest / "notes.txt").read_text() == "a reader's notes" and (dest / "other.md").read_text() == "another page"
    assert not stage.exists() and not (dest / JOURNAL).exists()
