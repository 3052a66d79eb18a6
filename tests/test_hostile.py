"""A results folder received from someone else is hostile input (docs/reliability.md): no write follows a link
in it, a publish is all or nothing (killed or out of disk at any point, the destination is as it was before or
as it is after, never between), and two publishes into one folder keep both pages' entries."""

from __future__ import annotations

import errno
import io
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


def test_a_stored_study_folder_that_is_a_link_is_refused(stored, tmp_path, capsys, monkeypatch):  # noqa: F811
    """``--out runs`` is the user's to name; ``runs/tiny`` is rnnlab's, and a received one may lead elsewhere."""
    _tiny(monkeypatch)
    out = tmp_path / "runs"
    out.mkdir()
    victim, folder = _outside(tmp_path)
    (out / "tiny").symlink_to(folder)
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 2 and "tiny: a symbolic link" in err, err
    _untouched(victim, folder)


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
        files.folder_in(root, "figures")
    with pytest.raises(files.UnsafePath, match="figures: a symbolic link"):
        files.refuse_link(root / "figures" / "x.png", root)
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
    deadline = time.monotonic() + 60        # the child runs only file operations; a hang is a failure, not a wait
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.005)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"the publishing child (killed at step {step}) did not exit within 60 s")


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

    def full(path, content):
        if calls[0] == at:
            raise files._one_line(Path(path), OSError(errno.ENOSPC, "No space left on device", str(path)))
        calls[0] += 1
        return real(path, content)
    monkeypatch.setattr(files, "write_bytes", full)
    monkeypatch.setattr(files, "write_text", lambda path, text: full(path, text.encode()))
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


# -- stored settings are checked as the command line's are -------------------------------------------------

def _stored_setting(checkpoint: Path, **change) -> None:
    import numpy as np

    from rnnlab.train import load_checkpoint

    arrays, meta = load_checkpoint(checkpoint)
    for key, value in change.items():
        if key.startswith("task_options."):
            meta["run"]["settings"].setdefault("task_options", {})[key.split(".", 1)[1]] = value
        else:
            meta["run"]["settings"][key] = value
    np.savez(checkpoint, meta=np.array(json.dumps(meta)), **arrays)


@pytest.mark.parametrize("change, message", [({"clip": -1}, "invalid value -1 for clip"),
                                             ({"lr": float("nan")}, "invalid value nan for lr"),
                                             ({"batch_size": 0}, "invalid value 0 for batch_size"),
                                             ({"task_options.n_test": 10**10}, "task_options.n_test"),
                                             ({"epochs": "many"}, "invalid value 'many' for epochs")])
def test_a_resumed_or_evaluated_checkpoint_s_stored_settings_are_range_checked(tmp_path, capsys, change, message):
    """A checkpoint's settings are data from whoever sent the folder: --resume and evaluate refuse a value the
    command line would refuse (a clip of −1 ascended the gradient), naming the checkpoint and the setting."""
    from rnnlab.train import CHECKPOINT

    out = tmp_path / "run"
    code, _, err = cli(capsys, "train", "--task", "reber", "--hidden", "3", "--epochs", "1", "--engine", "numpy",
                       "--quiet", "--out", out)
    assert code == 0, err
    _stored_setting(out / CHECKPOINT, **change)
    before = (out / CHECKPOINT).read_bytes()
    for command in (["train", "--resume", "--epochs", "2", "--quiet", "--out", out],
                    ["evaluate", "--checkpoint", out / CHECKPOINT]):
        code, _, err = cli(capsys, *command)
        assert code == 2 and message in err and str(out / CHECKPOINT) in err and len(err.splitlines()) == 1, err
    assert (out / CHECKPOINT).read_bytes() == before


# -- impossible numbers are refused where they are read ----------------------------------------------------

@pytest.mark.parametrize("value, why", [(float("nan"), "nan is not a measurement"),
                                        (float("inf"), "inf is not a measurement"),
                                        (1.5, "outside the range of a rate")])
def test_an_impossible_number_in_a_stored_result_is_refused_naming_the_file(stored, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                           value, why):
    _tiny(monkeypatch)
    out = tmp_path / "runs"
    shutil.copytree(stored / "runs", out)
    result = out / "tiny" / "jobs" / "rnn-s0" / "result.json"
    record = json.loads(result.read_text())
    record["test_accuracy"] = value
    result.write_text(json.dumps(record))
    before = (out / "tiny" / "results.json").read_bytes()
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 2 and f"{result}: test_accuracy = " in err and why in err, err
    assert (out / "tiny" / "results.json").read_bytes() == before


@pytest.mark.parametrize("value", ["nan", "-inf", "7"])
def test_an_impossible_number_in_a_published_runs_csv_is_refused_naming_file_and_line(published, tmp_path, capsys,  # noqa: F811
                                                                                      monkeypatch, value):
    _tiny(monkeypatch)
    dest = tmp_path / "docs"
    shutil.copytree(published / "docs", dest)
    runs = dest / "tiny" / "runs.csv"
    lines = runs.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("test_accuracy")] = value
    runs.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n")
    for check in ([], ["--check"]):
        code, _, err = cli(capsys, "republish", dest, *check)
        assert code == 2 and f"{runs}: line 2" in err and "test_accuracy" in err, err


def test_a_bench_part_with_an_impossible_value_or_count_is_refused_before_merging(tmp_path, capsys):
    from rnnlab.experiments.bench_cells import BenchResults

    code, _, err = cli(capsys, "bench-cells", "rnn", "--tasks", "adding-50", "--quick", "--workers", "1", "--out",
                       tmp_path / "part")
    assert code == 0, err
    good = json.loads((tmp_path / "part" / "results.json").read_text())
    for damage, message in ((lambda d: d["rows"][0]["values"].__setitem__(0, float("nan")), "holds a value nan"),
                            (lambda d: d["rows"][0].__setitem__("failed", 5), "counts 5 failed runs of")):
        data = json.loads(json.dumps(good))
        damage(data)
        part = tmp_path / "bad.json"
        part.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=message):
            BenchResults.load(part)
        code, _, err = cli(capsys, "bench-cells", "--merge", part, "--out", tmp_path / "merged")
        assert code == 2 and str(part) in err and message.split(" of")[0] in err, err
        assert not (tmp_path / "merged" / "results.json").exists()


# -- bounded input -------------------------------------------------------------------------------------------

def test_a_checkpoint_declaring_more_than_it_holds_or_than_the_bound_is_refused_before_reading(tmp_path):
    import zipfile

    import numpy as np

    from rnnlab.train import load_checkpoint, read_npz

    lying = tmp_path / "lying.npz"
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f8", "fortran_order": False, "shape": (10**9,)})
    with zipfile.ZipFile(lying, "w") as archive:
        archive.writestr("meta.npy", _npy(np.array("{}")))
        archive.writestr("param/x.npy", buffer.getvalue() + b"\0" * 64)
    with pytest.raises(ValueError, match=r"checkpoint .*lying.npz: .*declares \(1000000000,\) float64"):
        load_checkpoint(lying)
    bomb = tmp_path / "bomb.npz"         # 8 MB of zeros, deflated to a few KB
    np.savez_compressed(bomb, meta=np.array("{}"), x=np.zeros(10**6))
    assert bomb.stat().st_size < 100_000
    with pytest.raises(ValueError, match="declare 8,000,.* bytes, more than the 1,000,000"):
        read_npz(bomb, bound=1_000_000)
    objects = tmp_path / "objects.npz"
    with zipfile.ZipFile(objects, "w") as archive:
        archive.writestr("meta.npy", _npy(np.array([{"a": 1}], dtype=object)))
    with pytest.raises(ValueError, match="Python objects"):
        load_checkpoint(objects)


def _npy(array) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["json", "toml", "jsonl"])
def test_records_nested_100000_deep_are_one_line_naming_the_file(tmp_path, capsys, kind):
    from rnnlab.experiments.executors import read_calls
    from rnnlab.experiments.settings import read_toml

    deep = "[" * 100_000 + "]" * 100_000
    if kind == "json":
        (tmp_path / "result.json").write_text(deep)
        with pytest.raises(ValueError, match="result.json: nested too deeply"):
            read_json(tmp_path / "result.json")
    elif kind == "toml":
        (tmp_path / "run.toml").write_text(f"x = {deep}\n")
        with pytest.raises(ValueError, match="run.toml: nested too deeply"):
            read_toml(tmp_path / "run.toml")
        code, _, err = cli(capsys, "train", "--config", tmp_path / "run.toml", "--out", tmp_path / "run")
        assert code == 2 and "nested too deeply" in err and len(err.splitlines()) == 1, err
    else:
        (tmp_path / "calls.jsonl").write_text('{"command": "a"}\n' + deep + "\n")
        assert [c["command"] for c in read_calls(tmp_path)] == ["a"]
        assert "calls.jsonl, line 2: nested too deeply" in capsys.readouterr().err


# -- republish --check checks what it says ---------------------------------------------------------------------

def _rehash(dest: Path, *rels: str) -> None:
    """Update the manifest's hashes of ``rels`` (what someone who edited the files could do too)."""
    import hashlib

    manifest = read_json(dest / MANIFEST)
    for rel in rels:
        manifest["files"][rel]["sha256"] = hashlib.sha256((dest / rel).read_bytes()).hexdigest()
    (dest / MANIFEST).write_text(json.dumps(manifest))


def test_republish_check_reports_a_table_that_contradicts_its_runs_even_with_its_hashes_updated(
        published, tmp_path, capsys, monkeypatch):  # noqa: F811
    from rnnlab.page import page_from_dict

    _tiny(monkeypatch)
    dest = tmp_path / "docs"
    shutil.copytree(published / "docs", dest)
    code, out, err = cli(capsys, "republish", dest, "--check")
    assert code == 0 and "study tiny: unchanged" in out, out + err
    data = read_json(dest / "tiny" / "page.json")
    page = page_from_dict(data)
    text = json.dumps(data)
    table = next(b for b in page.blocks if getattr(b, "header", [""])[:1] == ["configuration"])
    number = table.rows[0][3]
    assert number in text
    (dest / "tiny" / "page.json").write_text(text.replace(f'"{number}"', '"0.9999"', 1))
    markdown = (dest / "tiny.md").read_text()
    (dest / "tiny.md").write_text(markdown.replace(f"| {number} |", "| 0.9999 |", 1))
    _rehash(dest, "tiny/page.json", "tiny.md")
    code, out, err = cli(capsys, "republish", dest, "--check")
    assert code == 1 and "study tiny: would change tiny.md, tiny/page.json" in out, out + err


def test_republish_check_fails_on_a_page_no_manifest_accounts_for(published, tmp_path, capsys, monkeypatch):  # noqa: F811
    _tiny(monkeypatch)
    dest = tmp_path / "docs"
    shutil.copytree(published / "docs", dest)
    (dest / "extra.md").write_text("# A page\n\n| gru | 0.99 |\n")
    code, out, err = cli(capsys, "republish", dest, "--check")
    assert code == 1 and "extra.md: not in the folder's manifests" in out, out + err


# -- the remaining tracebacks are one line naming the cause ---------------------------------------------------

def test_a_bogus_rnnlab_blas_is_one_line_before_anything_starts(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "RNNLAB_BLAS": "bogus"}
    run = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'rnnlab'; from rnnlab.cli import main; "
                          f"sys.exit(main(['train', '--task', 'reber', '--out', {str(tmp_path / 'run')!r}]))"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and run.stderr.strip() == \
        "rnnlab: error: RNNLAB_BLAS='bogus': expected one of auto, openblas, mkl", run.stderr
    assert not (tmp_path / "run").exists()


CELL_HEAD = "from rnnlab.cells.rnn import RNN\n\n\nclass Bad(RNN):\n"


@pytest.mark.parametrize("body, message", [
    ("import sys\nsys.exit(7)\n", "called sys.exit(7)"),
    ("raise RuntimeError('at import')\n", "importing bad.py failed: RuntimeError: at import"),
    (CELL_HEAD + "    def step(self, p, xw, state, xp=None):\n        return 1 / 0\n",
     "bad.py): step raised ZeroDivisionError: division by zero (line 6: return 1 / 0)"),
])
def test_a_cell_file_that_exits_or_raises_is_named_as_the_cause(tmp_path, capsys, monkeypatch, body, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(body)
    code, _, err = cli(capsys, "train", "--task", "reber", "--cell", "bad.py:Bad", "--hidden", "3", "--epochs", "1",
                       "--engine", "numpy", "--quiet", "--out", tmp_path / "run")
    assert code == 2 and message in err.strip().splitlines()[-1] and "Traceback" not in err, err


def _as_a_new_process(monkeypatch) -> None:
    """Forget the cell files this process named and imported, as a second command would start."""
    from rnnlab.cells import registry

    monkeypatch.setattr(registry, "_NAMED", {})
    monkeypatch.setattr(registry, "_IMPORTED", {})
    monkeypatch.setattr(registry, "CELLS", {k: v for k, v in registry.CELLS.items() if ".py:" not in k})


def test_a_relative_cell_path_stored_by_a_run_is_the_named_file_from_another_folder(tmp_path, capsys, monkeypatch):
    from rnnlab.train import CHECKPOINT

    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    (made / "cells").mkdir(parents=True)
    elsewhere.mkdir()
    source = Path(__file__).resolve().parents[1] / "examples" / "cells" / "mgu.py"
    shutil.copy(source, made / "cells" / "mgu.py")
    monkeypatch.chdir(made)
    code, _, err = cli(capsys, "train", "--task", "reber", "--cell", "cells/mgu.py:MGU", "--hidden", "3", "--epochs",
                       "1", "--engine", "numpy", "--quiet", "--out", made / "run")
    assert code == 0, err
    monkeypatch.chdir(elsewhere)
    _as_a_new_process(monkeypatch)
    code, _, err = cli(capsys, "evaluate", "--checkpoint", made / "run" / CHECKPOINT)
    assert code == 2 and "no such file cells/mgu.py" in err and "--cell FILE.py:MGU" in err, err
    _as_a_new_process(monkeypatch)
    code, out, err = cli(capsys, "evaluate", "--checkpoint", made / "run" / CHECKPOINT, "--cell",
                         made / "cells" / "mgu.py:MGU")
    assert code == 0 and "test_loss" in out, err
    edited = elsewhere / "mgu.py"
    edited.write_text(source.read_text() + "\n# edited\n")
    _as_a_new_process(monkeypatch)
    code, _, err = cli(capsys, "evaluate", "--checkpoint", made / "run" / CHECKPOINT, "--cell", "mgu.py:MGU")
    assert code == 2 and "the file now has sha256" in err, err


@pytest.mark.parametrize("change, message", [(lambda r: r.pop("dev"), "no 'dev'"),
                                             (lambda r: r.__setitem__("test", float("nan")), "test = nan"),
                                             (lambda r: r.__setitem__("params", -3), "params = -3"),
                                             (lambda r: r.__setitem__("status", "<script>"), "status '<script>'")])
def test_a_hostile_greff_trials_file_is_refused_naming_its_row(tmp_path, capsys, change, message):
    from rnnlab.experiments.greff import GreffResults, published_rows

    arm = Path(__file__).resolve().parents[1] / "docs" / "results" / "greff-jsb.json"
    rows = published_rows(GreffResults.load(arm))[:3]
    change(rows[1])
    source = tmp_path / "trials.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = cli(capsys, "greff", "--restore", source, "--out", tmp_path / "arm")
    assert code == 2 and f"{source}: row 2" in err and message in err and "Traceback" not in err, err
    assert not list((tmp_path / "arm").rglob("result.json")) if (tmp_path / "arm").exists() else True


@pytest.mark.parametrize("command", [("bench-cells", "rnn", "--tasks", "adding-50", "--quick", "--workers", "1"),
                                     ("greff", "--quick", "--workers", "1")])
def test_bench_cells_and_greff_refuse_a_non_empty_folder_they_did_not_make(tmp_path, capsys, command):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.json").write_text("my own results")
    code, _, err = cli(capsys, *command, "--out", out)
    assert code == 2 and "a folder" in err and "did not make" in err and "results.json" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_text() == "my own results"


# -- links at random ------------------------------------------------------------------------------------------

LINK_KINDS = ("absolute", "relative", "dangling", "folder")
STUDY_ENTRIES = ("results.json", "results.csv", "calls.jsonl", "report.md", "report.html", "claims.png", "analysis",
                 "analysis/dev_loss_epochs.png", "jobs", "jobs/rnn-s0", "jobs/rnn-s0/result.json",
                 "jobs/rnn-s0/checkpoint.npz", "jobs/rnn-s0/metrics.csv", "jobs/gru-s0/result.json", "notes.txt",
                 ".rnnlab-owner", ".rnnlab.lock", "set-aside")
SWEEP_ENTRIES = ("trials.csv", "calls.jsonl", "report.md", "report.html", "figures", "trials", "notes.txt",
                 ".rnnlab-owner", "TRIAL", "TRIAL/trial.json", "TRIAL/result.json", "TRIAL/checkpoint.npz")
PUBLISHED_ENTRIES = ("tiny.md", "tiny", "tiny/page.json", "tiny/runs.csv", "tiny/notes.txt", MANIFEST, JOURNAL,
                     ".rnnlab-owner", ".rnnlab.lock", "other.md")


def _linked_command_leaves_outside_untouched(where: str, entry: str, kind: str, stored_root: Path,
                                             published_root: Path, tmp_path: Path, capsys,
                                             republish: bool = False) -> None:
    """Copy a stored study, sweep or published folder, make ``entry`` a link of ``kind`` out of it, run the command
    that rewrites it (a published folder: a study's --publish, or ``republish``): no traceback (exit 0 or a
    one-line refusal naming the link), nothing written outside."""
    here = tmp_path / f"{where}-{time.perf_counter_ns()}"
    victim, folder = _outside(tmp_path)
    if where == "study":
        shutil.copytree(stored_root / "runs", here)
        root = here / "tiny"
        command = ["reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", here]
    elif where == "sweep":
        shutil.copytree(stored_root / "sweep", here)
        root = here
        trial = sorted((here / "trials").iterdir())[0].relative_to(here).as_posix()
        entry = entry.replace("TRIAL", trial)
        command = ["sweep", stored_root / "sweep.toml", "--workers", "1", "--out", here]
    else:
        shutil.copytree(published_root, here)
        root = here / "docs"
        command = (["republish", root] if republish else
                   ["reproduce", "tiny", "--tune", "--seeds", "1", "--workers", "1", "--out", here / "tuned",
                    "--publish", root])
    _link(root / entry, kind, victim, folder)
    code, _, err = cli(capsys, *command)
    assert code in (0, 2) and "Traceback" not in err, err
    _untouched(victim, folder)
    if code == 2:
        assert "symbolic link" in err or Path(entry).name in err, err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(entry=st.sampled_from(STUDY_ENTRIES), kind=st.sampled_from(LINK_KINDS))
def test_a_stored_study_with_a_link_anywhere_never_writes_outside(stored, published, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                  entry, kind):
    _tiny(monkeypatch)
    _linked_command_leaves_outside_untouched("study", entry, kind, stored, published, tmp_path, capsys)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(entry=st.sampled_from(SWEEP_ENTRIES), kind=st.sampled_from(LINK_KINDS))
def test_a_stored_sweep_with_a_link_anywhere_never_writes_outside(stored, published, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                  entry, kind):
    _linked_command_leaves_outside_untouched("sweep", entry, kind, stored, published, tmp_path, capsys)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(entry=st.sampled_from(PUBLISHED_ENTRIES), kind=st.sampled_from(LINK_KINDS))
def test_a_published_folder_with_a_link_anywhere_never_writes_outside(stored, published, tmp_path, capsys,  # noqa: F811
                                                                      monkeypatch, entry, kind):
    _tiny(monkeypatch)
    _linked_command_leaves_outside_untouched("published", entry, kind, stored, published, tmp_path, capsys)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(where=st.sampled_from(("study", "sweep", "published")), pick=st.integers(0, 100),
       kind=st.sampled_from(LINK_KINDS))
def test_any_stored_folder_with_a_link_anywhere_never_writes_outside_400(stored, published, tmp_path, capsys,  # noqa: F811
                                                                         monkeypatch, where, pick, kind):
    """The fast tier's three at 400 examples; a published folder is rewritten by ``republish`` here (the fast
    tier's test publishes a study into it), the cheaper of its two writers."""
    _tiny(monkeypatch)
    entries = {"study": STUDY_ENTRIES, "sweep": SWEEP_ENTRIES, "published": PUBLISHED_ENTRIES}[where]
    _linked_command_leaves_outside_untouched(where, entries[pick % len(entries)], kind, stored, published, tmp_path,
                                             capsys, republish=True)


@pytest.mark.parametrize("where, value, message", [
    ("progress", 3, "no progress table"),
    ("progress.epoch", "one", "progress.epoch = 'one'"),
    ("progress.epoch", -5, "progress.epoch = -5"),
    ("progress.history", {}, "progress.history is not a list"),
    ("schedule.lr", "a", "the schedule's state is not a table of numbers"),
    ("schedule.observe", 1.0, "keeps no observe"),
])
def test_a_checkpoint_whose_training_state_is_malformed_is_one_line_on_resume(tmp_path, capsys, where, value,
                                                                               message):
    import numpy as np

    from rnnlab.train import CHECKPOINT, load_checkpoint

    out = tmp_path / "run"
    code, _, err = cli(capsys, "train", "--task", "reber", "--hidden", "3", "--epochs", "1", "--engine", "numpy",
                       "--quiet", "--out", out)
    assert code == 0, err
    arrays, meta = load_checkpoint(out / CHECKPOINT)
    top, _, key = where.partition(".")
    if key:
        meta[top][key] = value
    else:
        meta[top] = value
    np.savez(out / CHECKPOINT, meta=np.array(json.dumps(meta)), **arrays)
    code, _, err = cli(capsys, "train", "--resume", "--epochs", "2", "--quiet", "--out", out)
    assert code == 2 and "cannot resume from it" in err and message in err and "Traceback" not in err, err
    code, _, err = cli(capsys, "evaluate", "--checkpoint", out / CHECKPOINT)
    assert code == 0 and "Traceback" not in err, err        # its parameters and settings are sound


def test_running_out_of_memory_is_one_line(tmp_path, capsys, monkeypatch):
    from rnnlab import train

    def no_memory(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(train, "fit", no_memory)
    code, _, err = cli(capsys, "train", "--task", "reber", "--hidden", "3", "--epochs", "1", "--engine", "numpy",
                       "--quiet", "--out", tmp_path / "run")
    assert code == 2 and "ran out of memory" in err.strip().splitlines()[-1], err


def test_a_full_temporary_folder_during_a_check_is_one_short_line(published, tmp_path, capsys, monkeypatch):  # noqa: F811
    import shutil as shutil_module

    _tiny(monkeypatch)
    dest = tmp_path / "docs"
    shutil.copytree(published / "docs", dest)

    def full_copy(src, dst, *args, **kwargs):
        errors = [(f"{src}/file{i}", f"{dst}/file{i}", "[Errno 28] No space left on device") for i in range(2000)]
        raise shutil_module.Error(errors)
    monkeypatch.setattr(shutil_module, "copytree", full_copy)
    code, _, err = cli(capsys, "republish", dest, "--check")
    assert code == 2 and "No space left on device" in err and len(err) < 500 and len(err.splitlines()) == 1, err
