"""What rnnlab promises about the files it reads and writes (docs/reliability.md): it imports a
Python file only when the command line names it, never deletes what it did not write, holds a folder
for one command at a time, trains only on verified data and on the settings it was asked for, and
answers bad input with one line naming the flag, file or key."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from rnnlab.cells import registry
from rnnlab.cli import main
from rnnlab.experiments.bench_cells import BenchResults
from rnnlab.experiments.studies import EXPERIMENTS
from rnnlab.files import MANIFEST, atomic_write, hold, read_json, record_json, staged_publish
from rnnlab.train import CHECKPOINT, load_checkpoint


def _sha256(path) -> str:
    """A file's sha256 computed here (hashlib), the oracle for what rnnlab stores."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cells" / "mgu.py"
EVIL = '''from pathlib import Path
Path(__file__).with_name("imported.txt").write_text("this file ran")
from rnnlab.cells.rnn import RNN


class Evil(RNN):
    pass
'''


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``rnnlab ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit:
        code = exit.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _train(capsys, out: Path, *extra) -> None:
    code, _, err = cli(capsys, "train", "--task", "reber", "--hidden", "3", "--epochs", "2", "--engine", "numpy",
                       "--quiet", "--out", out, *extra)
    assert code == 0, err


def _point_checkpoint_at(checkpoint: Path, cell: str) -> None:
    """Rewrite a checkpoint's stored cell setting, arrays untouched (what a stranger's folder may hold)."""
    arrays, meta = load_checkpoint(checkpoint)
    meta["run"]["settings"]["cell"] = cell
    np.savez(checkpoint, meta=np.array(json.dumps(meta)), **arrays)


@pytest.fixture
def evil(tmp_path) -> tuple[str, Path]:
    folder = tmp_path / "stranger"
    folder.mkdir()
    (folder / "cell.py").write_text(EVIL)
    return f"{folder / 'cell.py'}:Evil", folder / "imported.txt"


# -- code runs only from the command line ---------------------------------------------------------------

def test_a_checkpoint_that_names_a_cell_file_imports_nothing(tmp_path, capsys, evil):
    spec, ran = evil
    _train(capsys, tmp_path / "run")
    _point_checkpoint_at(tmp_path / "run" / CHECKPOINT, spec)
    for command in (["evaluate"], ["analyze", "gradient-flow", "--out", tmp_path / "a"],
                    ["analyze", "hidden", "--out", tmp_path / "b"]):
        code, out, err = cli(capsys, *command, "--checkpoint", tmp_path / "run" / CHECKPOINT)
        assert code == 2 and not out
        assert f"checkpoint {tmp_path / 'run' / CHECKPOINT}: names the cell file" in err and f"--cell {spec}" in err
    assert not ran.exists()
    # a resume reads the same settings: refused the same way, before anything trains
    code, _, err = cli(capsys, "train", "--resume", "--out", tmp_path / "run")
    assert code == 2 and f"--cell {spec}" in err and not ran.exists()


def test_a_toml_file_or_a_sweep_file_that_names_a_cell_file_imports_nothing(tmp_path, capsys, evil):
    spec, ran = evil
    config = tmp_path / "run.toml"
    config.write_text(f'task = "reber"\ncell = "{spec.replace(chr(92), "/")}"\nepochs = 1\n')
    code, _, err = cli(capsys, "train", "--config", config, "--out", tmp_path / "run")
    assert code == 2 and f"--config {config}" in err and f"--cell {spec}" in err
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'task = "reber"\nmetric = "dev_loss"\n[settings]\ncell = "{spec}"\nepochs = 1\n'
                     '[search]\nlr = [0.01, 0.1]\n')
    code, _, err = cli(capsys, "sweep", sweep, "--out", tmp_path / "sweep")
    assert code == 2 and f"--cell {spec}" in err
    assert not ran.exists() and not (tmp_path / "run").exists()


def test_a_cell_file_named_on_the_command_line_runs_and_its_hash_is_stored_and_checked(tmp_path, capsys,
                                                                                      monkeypatch):
    cell = tmp_path / "mine.py"
    cell.write_text(EXAMPLE.read_text())
    spec = f"{cell}:MGU"
    code, _, err = cli(capsys, "train", "--task", "adding", "--cell", spec, "--hidden", "3", "--epochs", "1",
                       "--quiet", "--out", tmp_path / "run")
    assert code == 0, err
    stored = read_json(tmp_path / "run" / "result.json")["run"]
    assert stored["cell_sha256"] == _sha256(cell)
    code, out, err = cli(capsys, "evaluate", "--checkpoint", tmp_path / "run" / CHECKPOINT, "--cell", spec)
    assert code == 0 and "test_loss" in out, err
    # edited since: a later process (here, the registry as a new process finds it) refuses with both hashes
    cell.write_text(EXAMPLE.read_text() + "\n# edited\n")
    for table, key in ((registry.CELLS, spec), (registry._NAMED, str(cell.resolve())),
                       (registry._IMPORTED, str(cell.resolve()))):
        monkeypatch.delitem(table, key)
    monkeypatch.delitem(sys.modules, next(m for m in sys.modules if m.startswith("rnnlab_user_cell_") and
                                          sys.modules[m].__file__ == str(cell)))
    code, _, err = cli(capsys, "evaluate", "--checkpoint", tmp_path / "run" / CHECKPOINT, "--cell", spec)
    assert code == 2 and stored["cell_sha256"] in err and _sha256(cell) in err


def test_in_one_process_a_cell_file_edited_after_its_import_is_refused(tmp_path):
    cell = tmp_path / "twice.py"
    cell.write_text(EXAMPLE.read_text())
    registry.load_cell_file(f"{cell}:MGU")
    cell.write_text(EXAMPLE.read_text() + "\n# edited\n")
    with pytest.raises(ValueError, match="changed since this process imported it"):
        registry.load_cell_file(f"{cell}:MGU")


def test_a_sweep_trial_of_a_cell_file_is_identified_by_the_file_s_code(tmp_path):
    from rnnlab.experiments.settings import default_settings, settings_identity

    cell = tmp_path / "ident.py"
    cell.write_text(EXAMPLE.read_text())
    registry.load_cell_file(f"{cell}:MGU")
    settings = default_settings("adding", cell=f"{cell}:MGU", hidden=3)
    assert settings_identity(settings)["cell_sha256"] == _sha256(cell)
    assert "cell_sha256" not in settings_identity(default_settings("adding", cell="gru", hidden=3))


def _tiny(monkeypatch):
    from test_experiments import _tiny_study

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())


def test_a_stored_study_that_names_a_cell_file_imports_nothing(tmp_path, capsys, monkeypatch, evil):
    from rnnlab.analysis.steps import Findings

    spec, ran = evil
    _tiny(monkeypatch)
    study = EXPERIMENTS["tiny"]     # an analysis that rebuilds a trained model, as the studies' analyses do
    monkeypatch.setattr(study, "analyses", [*study.analyses, lambda ctx: (ctx.load("rnn"), Findings())[1]])
    out = tmp_path / "runs"
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 0, err
    _point_checkpoint_at(out / "tiny" / "jobs" / "rnn-s0" / CHECKPOINT, spec)
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 2 and "names the cell file" in err and f"--cell {spec}" in err
    assert not ran.exists()


def test_a_bench_store_trained_with_another_version_of_a_cell_file_is_refused(tmp_path, capsys):
    """The benchmark keeps its runs through the study pipeline, whose check refuses them once the cell file
    changed, naming both hashes; the stored runs stay where they are (the search trains anew: a trial's
    identity holds the file's hash)."""
    cell = tmp_path / "bench.py"
    cell.write_text(EXAMPLE.read_text())
    out = tmp_path / "bench"
    args = ("bench-cells", "rnn", "--cell", f"{cell}:MGU", "--tasks", "adding-50", "--quick", "--workers", "1",
            "--out", out)
    code, _, err = cli(capsys, *args)
    assert code == 0, err
    before = _sha256(cell)
    stored = sorted(p.relative_to(out) for p in out.rglob("result.json"))
    cell.write_text(EXAMPLE.read_text() + "\n# edited\n")
    code, _, err = cli(capsys, *args)
    assert code == 2 and f"sha256 {before}; the file now has sha256 {_sha256(cell)}" in err
    assert set(stored) <= {p.relative_to(out) for p in out.rglob("result.json")}


# -- nothing lost -----------------------------------------------------------------------------------------

def test_publishing_refuses_folders_it_did_not_publish_and_replaces_only_its_own_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for where in (".", str(Path.home()), "/"):
        with pytest.raises(ValueError, match="refusing to publish into the working folder"):
            with staged_publish(where, "sweep a.toml"):
                pass
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    with pytest.raises(ValueError, match=f"no {MANIFEST}.*notes.txt"):
        with staged_publish(mine, "sweep a.toml"):
            pass
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    dest = tmp_path / "published"
    with staged_publish(dest, "sweep a.toml") as stage:
        (stage / "figures").mkdir()
        (stage / "figures" / "old.png").write_bytes(b"1")
        (stage / "report.md").write_text("first")
    (dest / "notes.txt").write_text("a reader's notes")          # someone else's file in a publish folder
    with staged_publish(dest, "sweep a.toml") as stage:
        shutil.rmtree(stage / "figures")                            # the staging copy only
        (stage / "notes.txt").unlink()
        (stage / "report.md").write_text("second")
    assert (dest / "report.md").read_text() == "second" and not (dest / "figures" / "old.png").exists()
    assert (dest / "notes.txt").read_text() == "a reader's notes"
    assert {rel: e["owner"] for rel, e in read_json(dest / MANIFEST)["files"].items()} == {"report.md": "sweep a.toml"}
    with pytest.raises(ValueError, match="would replace report.md, which sweep b.toml did not publish"):
        with staged_publish(dest, "sweep b.toml") as stage:
            (stage / "report.md").write_text("theirs")
            (stage / "new.md").write_text("new")
    assert (dest / "report.md").read_text() == "second" and not (dest / "new.md").exists()
    # a manifest travels with the folder: its word alone never lets rnnlab replace or remove a file. One that
    # claims the reader's notes, or a page edited since it was published, is refused
    manifest = read_json(dest / MANIFEST)
    manifest["files"]["notes.txt"] = {"owner": "sweep a.toml", "sha256": "0" * 64}
    (dest / MANIFEST).write_text(json.dumps(manifest))
    (dest / "report.md").write_text("edited by hand")
    for change in ("notes.txt", "report.md"):
        with pytest.raises(ValueError, match=f"would replace {change}, which sweep a.toml did not publish there"):
            with staged_publish(dest, "sweep a.toml") as stage:
                (stage / change).write_text("rnnlab's new version")
        with staged_publish(dest, "sweep a.toml") as stage:      # nor remove it
            (stage / change).unlink()
    assert (dest / "notes.txt").read_text() == "a reader's notes" and (dest / "report.md").read_text() == \
        "edited by hand"


def test_a_sweep_publish_into_a_study_s_folder_or_the_working_folder_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "reber.toml"
    sweep.write_text('task = "reber"\nmetric = "test_loss"\n[settings]\nhidden = 2\nepochs = 1\n'
                     '[search]\nlr = [0.01]\n')
    study = tmp_path / "docs" / "results" / "reber"
    study.mkdir(parents=True)
    (study / "runs.csv").write_text("key,seed\n")
    for dest in (study, "."):
        code, _, err = cli(capsys, "sweep", sweep, "--workers", "1", "--publish", dest)
        assert code == 2 and "--publish" in err and not (tmp_path / "runs").exists()
    assert (study / "runs.csv").read_text() == "key,seed\n" and sweep.is_file()
    code, _, err = cli(capsys, "sweep", sweep, "--workers", "1", "--publish", tmp_path / "new")
    assert code == 0 and (tmp_path / "new" / "report.md").is_file(), err


def test_the_cell_benchmark_never_replaces_a_page_it_did_not_publish(tmp_path, capsys):
    (tmp_path / "cells.md").write_text("a page of my own")
    code, _, err = cli(capsys, "bench-cells", "rnn", "--tasks", "adding-50", "--quick", "--out", tmp_path / "out",
                       "--publish", tmp_path / "cells.md")
    assert code == 2 and "would replace cells.md, which bench-cells did not publish there" in err
    assert (tmp_path / "cells.md").read_text() == "a page of my own" and not (tmp_path / "out").exists()


def test_the_cell_benchmark_never_publishes_less_than_the_page_it_replaces(tmp_path, capsys):
    """A run publishing over a benchmark page must hold every (task, cell) the page holds, searched and seeded as
    it was: a quick run of the default tasks over the suite's page is refused before anything trains."""
    page, stored = tmp_path / "cells.md", tmp_path / "cells.json"
    quick = ["--tasks", "adding-50", "--quick", "--workers", "1", "--publish", page]
    assert cli(capsys, "bench-cells", "rnn", "gru", *quick, "--out", tmp_path / "first")[0] == 0
    before = page.read_bytes(), stored.read_bytes()
    for command, message in ((["gru", *quick], "holds 1 .task, cell. pairs this one does not .rnn on adding-50."),
                             (["rnn", "gru", *quick[:2], *quick[3:]], "searched or seeded otherwise .learning_rates")):
        code, _, err = cli(capsys, "bench-cells", *command, "--out", tmp_path / "second")
        assert code == 2 and re.search(message, err), err
        assert (page.read_bytes(), stored.read_bytes()) == before and not (tmp_path / "second").exists()
    code, _, err = cli(capsys, "bench-cells", "--merge", tmp_path / "first" / "results.json", "--out",
                       tmp_path / "merged", "--publish", page)
    assert code == 0, err                                       # the same benchmark again: allowed
    part = BenchResults.load(stored)
    part.rows = [row for row in part.rows if row["cell"] == "gru"]
    part.cells = [cell for cell in part.cells if cell["label"] == "gru"]
    (tmp_path / "gru.json").write_text(part.to_json())
    code, _, err = cli(capsys, "bench-cells", "--merge", tmp_path / "gru.json", "--out", tmp_path / "merged",
                       "--publish", page)
    assert code == 2 and "rnn on adding-50" in err and "--merge" in err


def test_a_published_figure_path_that_leaves_its_folder_is_refused(tmp_path, capsys, monkeypatch):
    from rnnlab.pages.study import write_published

    _tiny(monkeypatch)
    out = tmp_path / "runs"
    assert cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)[0] == 0
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"private")
    results = read_json(out / "tiny" / "results.json")
    for path in (str(secret), "../../secret.png"):
        results["figures"][0]["path"] = path
        (out / "tiny" / "results.json").write_text(json.dumps(results))
        with pytest.raises(ValueError, match="leaves"):
            write_published(out, "tiny", tmp_path / "docs")
        assert not (tmp_path / "docs").exists() or not list((tmp_path / "docs").rglob("secret*"))


def test_republishing_a_study_keeps_what_others_put_beside_its_page(tmp_path, capsys, monkeypatch):
    from rnnlab.pages.study import write_published

    _tiny(monkeypatch)
    out, dest = tmp_path / "runs", tmp_path / "docs"
    assert cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)[0] == 0
    write_published(out, "tiny", dest)
    (dest / "tiny" / "notes.txt").write_text("a co-author's notes")
    (dest / "other.md").write_text("another page")
    write_published(out, "tiny", dest)
    assert (dest / "tiny" / "notes.txt").read_text() == "a co-author's notes"
    assert (dest / "other.md").read_text() == "another page"
    assert (dest / "tiny.md").read_text().startswith("# A tiny study")
    assert read_json(dest / MANIFEST)["files"]["tiny.md"]["owner"] == "study tiny"
    (dest / "tiny.md").write_text("the page, edited by hand")       # not what rnnlab wrote: never replaced
    with pytest.raises(ValueError, match="would replace tiny.md, which study tiny did not publish there"):
        write_published(out, "tiny", dest)
    assert (dest / "tiny.md").read_text() == "the page, edited by hand"


def test_a_publish_that_would_replace_a_column_with_fewer_seeds_is_refused_before_and_after_training(
        tmp_path, capsys, monkeypatch):
    from rnnlab.pages.study import SETTING, TUNED, check_replaces_no_fewer_seeds, published_seeds, write_published

    _tiny(monkeypatch)
    out, dest = tmp_path / "runs", tmp_path / "docs"
    assert cli(capsys, "reproduce", "tiny", "--seeds", "2", "--workers", "1", "--out", out, "--publish", dest)[0] == 0
    assert published_seeds(dest, "tiny", SETTING) == {"rnn": 2, "gru": 2} and published_seeds(dest, "tiny", TUNED) == {}
    page = (dest / "tiny.md").read_bytes()
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", tmp_path / "fewer",
                       "--publish", dest)
    assert code == 2 and "--seeds 1 would replace it with fewer (gru 1 of its 2; rnn 1 of its 2)" in err
    assert "Give --seeds 2 or more" in err and not (tmp_path / "fewer").exists()     # refused before training
    assert cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", tmp_path / "fewer")[0] == 0
    with pytest.raises(ValueError, match=r"replaced with fewer seeds \(gru 1 of its 2; rnn 1 of its 2\)\. What "
                                         r"trained is kept in .*fewer.tiny"):
        write_published(tmp_path / "fewer", "tiny", dest)     # after training: what is stored is counted
    assert (dest / "tiny.md").read_bytes() == page and published_seeds(dest, "tiny", SETTING)["gru"] == 2
    runs_csv = dest / "tiny" / "runs.csv"
    kept, lines = runs_csv.read_bytes(), runs_csv.read_text().splitlines()
    runs_csv.write_text("\n".join([*lines[:2], lines[2].split(",")[0], *lines[3:]]) + "\n")
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "3", "--workers", "1", "--out", out, "--publish", dest)
    assert code == 2 and f"{runs_csv}: line 3: not a run" in err                        # a damaged published row
    jobs = out / "tiny" / "jobs"
    assert len(list(jobs.glob("*-s1"))) == 2 and not list(jobs.glob("*-s2"))          # refused before training
    runs_csv.write_bytes(kept)
    check_replaces_no_fewer_seeds(dest, "tiny", TUNED, 1)     # no tuned column published: nothing to replace
    check_replaces_no_fewer_seeds(dest, "tiny", SETTING, {"gru": 2, "rnn": 3, "lstm": 1})   # lstm is not published
    with pytest.raises(ValueError, match="rnn 1 of its 2"):
        check_replaces_no_fewer_seeds(dest, "tiny", SETTING, {"gru": 2, "rnn": 1})
    assert cli(capsys, "reproduce", "tiny", "--seeds", "3", "--workers", "1", "--out", out, "--publish", dest)[0] == 0
    assert published_seeds(dest, "tiny", SETTING) == {"rnn": 3, "gru": 3} and len(list(jobs.glob("*-s2"))) == 2


CSV_LIKE = st.text(alphabet=list('seed,x01"\n\r \x00é'), max_size=60).map(lambda t: ("seed,x\n" + t).encode())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(st.binary(max_size=60), CSV_LIKE, CSV_LIKE.map(lambda b: b + b"\xff")))
def test_a_csv_is_read_row_by_row_or_refused_naming_file_and_line(tmp_path, content):
    """Whatever bytes stand where a stored table should (``files.read_csv``, behind every published runs.csv,
    trials.csv and search table): each row through the converter, whole, or a ValueError naming the file, the
    line and what a row should be; never a UnicodeDecodeError, a csv.Error or a row missing fields."""
    from rnnlab.files import read_csv

    path = tmp_path / "table.csv"
    path.write_bytes(content)
    try:
        rows = read_csv(path, lambda row: (int(row["seed"]), row), "a run")
    except ValueError as err:
        assert re.match(rf"{re.escape(str(path))}: line \d+: (no '[^']*' column; not a run$|not a run \()", str(err))
        return
    assert all(None not in row and None not in row.values() for _, row in rows)


def test_runs_whose_settings_changed_are_set_aside_not_deleted(tmp_path, capsys, monkeypatch):
    _tiny(monkeypatch)
    out = tmp_path / "runs"
    assert cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)[0] == 0
    first = (out / "tiny" / "jobs" / "rnn-s0" / "result.json").read_bytes()
    study = EXPERIMENTS["tiny"]
    changed = study.specs(False)
    changed[0].settings["hidden"] = 5
    monkeypatch.setattr(study, "specs", lambda quick: changed)
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 0
    assert "1 runs to train (0 continue from an interrupted run's last checkpoint; 1 stored with other settings, " \
           f"set aside in {out / 'tiny' / 'set-aside'})" in err
    kept = list((out / "tiny" / "set-aside").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith("rnn-s0.settings-changed.")
    assert (kept[0] / "result.json").read_bytes() == first
    # --force keeps the runs it replaces too
    assert cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out, "--force")[0] == 0
    assert any(p.name.startswith("jobs.replaced-by-force.") for p in (out / "tiny" / "set-aside").iterdir())


def test_a_folder_is_held_by_one_command_at_a_time(tmp_path, capsys):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom rnnlab.files import hold\n"
                               f"with hold({str(folder)!r}, 'rnnlab train (a test)'):\n"
                               "    print('held', flush=True)\n    time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = cli(capsys, "train", "--task", "reber", "--epochs", "1", "--out", folder)
        assert code == 2 and f"in use by another rnnlab command (pid {holder.pid}: rnnlab train (a test))" in err
        assert not (folder / "metrics.csv").exists()
    finally:
        holder.kill()
        holder.wait()
    with hold(folder):          # a killed holder leaves the folder free; now this process holds it
        second = subprocess.run([sys.executable, "-c", f"from rnnlab.files import hold\nwith hold({str(folder)!r}): "
                                 "pass"], capture_output=True, text=True)
        assert second.returncode != 0 and f"in use by another rnnlab command (pid {os.getpid()}" in second.stderr


def test_train_into_a_run_needs_resume_or_overwrite_and_resume_checks_the_settings(tmp_path, capsys):
    out = tmp_path / "run"
    _train(capsys, out)
    before = (out / "result.json").read_bytes()
    code, _, err = cli(capsys, "train", "--task", "reber", "--seed", "1", "--epochs", "2", "--out", out)
    assert code == 2 and "holds a finished run" in err and "--resume" in err and "--overwrite" in err
    assert (out / "result.json").read_bytes() == before
    code, _, err = cli(capsys, "train", "--resume", "--task", "embedded-reber", "--lr", "0.5", "--out", out)
    assert code == 2 and "task: stored 'reber', given 'embedded-reber'" in err and "lr: stored 0.01, given 0.5" in err
    # without settings, --resume continues exactly the stored run (here: may train longer)
    code, _, err = cli(capsys, "train", "--resume", "--epochs", "3", "--quiet", "--out", out)
    assert code == 0, err
    result = read_json(out / "result.json")
    assert result["epochs_run"] == 3 and result["run"]["settings"]["hidden"] == 3
    assert cli(capsys, "train", "--task", "reber", "--hidden", "2", "--epochs", "1", "--quiet", "--overwrite",
               "--out", out)[0] == 0
    assert read_json(out / "result.json")["run"]["settings"]["hidden"] == 2


@pytest.mark.parametrize("flag, value", [
    ("--clip", "-1"), ("--clip", "0"), ("--clip-value", "0"), ("--batch-size", "0"), ("--batch-size", "-3"),
    ("--epochs", "-2"), ("--epochs", "1.7"), ("--seed", "-1"), ("--weight-noise", "-1"), ("--hidden", "0"),
    ("--lr", "-0.1"), ("--lr", "nan"), ("--layers", "0"), ("--back-steps", "-1"), ("--threads", "0"),
])
def test_a_setting_out_of_its_range_is_one_line_naming_the_flag(tmp_path, capsys, flag, value):
    code, _, err = cli(capsys, "train", "--task", "reber", flag, value, "--out", tmp_path / "run")
    assert code == 2 and err.startswith(f"rnnlab train: error: {flag}: invalid value {value!r}")
    assert "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "reber", "--workers", "0"], "argument --workers: expected a positive integer"),
    (["reproduce", "reber", "--seeds", "-2"], "argument --seeds: expected a positive integer"),
    (["sweep", "x.toml", "--workers", "-2"], "argument --workers: expected a positive integer"),
])
def test_counts_on_the_command_line_are_positive(capsys, argv, message):
    code, _, err = cli(capsys, *argv)
    assert code == 2 and message in err


def test_sweep_values_out_of_range_are_refused_before_training(tmp_path):
    from rnnlab.experiments.sweeps import parse_sweep

    head = 'task = "reber"\nmetric = "dev_loss"\n'
    for body, key in (("[search]\nlr = { uniform = [-0.1, 0.1] }\n", "search.lr"),
                      ("[search]\nhidden = [4, -4]\n", "search.hidden"),
                      ("[settings]\nepochs = 1.7\n[search]\nlr = [0.1]\n", "settings.epochs")):
        with pytest.raises(ValueError, match=f"sweep.toml:\\d+: {key}"):
            parse_sweep(head + body, "sweep.toml")
    with pytest.raises(ValueError, match="option n_train = -5: expected a value >= 0"):
        from rnnlab.data.tasks import get_task
        get_task("mean-sign", n_train=-5)


def test_engine_on_a_study_resolves_for_every_configuration(tmp_path, capsys, monkeypatch):
    _tiny(monkeypatch)
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--engine", "numpy",
                       "--out", tmp_path)
    assert code == 0, err
    assert read_json(tmp_path / "tiny" / "jobs" / "gru-s0" / "result.json")["run"]["settings"]["engine"] == "numpy"


# -- verified data ----------------------------------------------------------------------------------------

def test_a_data_file_whose_checksum_is_wrong_is_never_used(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data" / "ptb"
    data.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (data / f"ptb.{split}.txt").write_text("a fake corpus <unk>\n" * 50)
    monkeypatch.setenv("RNNLAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    fake = _sha256(data / "ptb.train.txt")
    code, _, err = cli(capsys, "train", "--task", "ptb", "--epochs", "1", "--out", tmp_path / "run")
    assert code == 2 and f"{data / 'ptb.train.txt'}: sha256 {fake} does not match the pinned" in err
    assert not (tmp_path / "run" / "metrics.csv").exists()
    code, _, err = cli(capsys, "data", "fetch", "ptb")
    assert code == 2 and "present but its sha256" in err and (data / "ptb.train.txt").is_file()


def test_a_run_on_real_data_records_the_files_hashes(tmp_path, monkeypatch):
    from rnnlab.data import registry as data_registry
    from rnnlab.data.tasks import get_task

    if data_registry.find_file("polyphonic", "JSB_Chorales.mat") is None:
        pytest.skip("data absent: polyphonic/JSB_Chorales.mat (../shared/data or RNNLAB_DATA_DIR)")
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    task = get_task("polyphonic-jsb", max_sequences=2)
    assert task.info["data_sha256"] == {"JSB_Chorales.mat": data_registry.get_dataset("polyphonic")
                                        .file("JSB_Chorales.mat").sha256}
    assert (tmp_path / "cache" / data_registry.VERIFIED_CACHE).is_file()     # the second run reads no file


def test_a_data_file_edited_in_place_with_its_time_put_back_is_refused(tmp_path, capsys, monkeypatch):
    """The verified-hash cache is keyed by the inode's change time too: an edit of the same size whose
    modification time is restored (os.utime) is read again and refused, not trained on under the pinned hash."""
    from rnnlab.data import registry as data_registry

    pinned = data_registry.get_dataset("ptb").file("ptb.train.txt").sha256
    data = tmp_path / "data" / "ptb"
    data.mkdir(parents=True)
    text = "a fake corpus <unk>\n" * 50
    (data / "ptb.train.txt").write_text(text)
    monkeypatch.setenv("RNNLAB_CACHE_DIR", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / data_registry.VERIFIED_CACHE
    cache.parent.mkdir()
    stat_before = (data / "ptb.train.txt").stat()
    key = str((data / "ptb.train.txt").resolve())
    stamp = [stat_before.st_size, stat_before.st_mtime_ns, stat_before.st_ctime_ns, stat_before.st_dev,
             stat_before.st_ino]
    cache.write_text(json.dumps({key: {"stamp": stamp, "sha256": pinned}}))     # as if the true file was verified
    assert data_registry._cached_sha256(data / "ptb.train.txt") == pinned       # the cache is used as it stands
    time.sleep(0.01)
    (data / "ptb.train.txt").write_text(text.replace("fake", "FAKE"))           # same size
    os.utime(data / "ptb.train.txt", ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))
    assert (data / "ptb.train.txt").stat().st_mtime_ns == stat_before.st_mtime_ns
    assert data_registry._cached_sha256(data / "ptb.train.txt") == _sha256(data / "ptb.train.txt") != pinned


# -- analyses ----------------------------------------------------------------------------------------------

def test_two_seeds_of_one_configuration_stay_two_results_and_two_tasks_are_refused(tmp_path, capsys):
    _train(capsys, tmp_path / "s0")
    _train(capsys, tmp_path / "s1", "--seed", "1")
    code, out, err = cli(capsys, "analyze", "gradient-flow", "--checkpoint", tmp_path / "s0" / CHECKPOINT,
                         "--checkpoint", tmp_path / "s1" / CHECKPOINT, "--out", tmp_path / "flow")
    assert code == 0, err
    assert {"rnn-3-s0", "rnn-3-s1"} <= set(json.loads(out))
    code, _, err = cli(capsys, "train", "--task", "embedded-reber", "--hidden", "3", "--epochs", "1", "--quiet",
                       "--engine", "numpy", "--out", tmp_path / "other")
    assert code == 0, err
    code, _, err = cli(capsys, "analyze", "gradient-flow", "--checkpoint", tmp_path / "s0" / CHECKPOINT,
                       "--checkpoint", tmp_path / "other" / CHECKPOINT, "--out", tmp_path / "mixed")
    assert code == 2 and "share one task's data" in err


# -- damaged files and clear messages ------------------------------------------------------------------------

def test_damaged_json_names_the_file_and_a_bad_log_line_is_skipped(tmp_path, capsys):
    from rnnlab.experiments.executors import read_calls
    from rnnlab.experiments.results import StudyResults

    for text in ("", "{", "[1, 2]", "\x00\xff"):
        (tmp_path / "result.json").write_text(text, errors="surrogateescape")
        with pytest.raises(ValueError, match=f"{tmp_path / 'result.json'}: "):
            read_json(tmp_path / "result.json")
        with pytest.raises(ValueError, match=f"{tmp_path / 'result.json'}: "):
            StudyResults.load(tmp_path / "result.json")
    (tmp_path / "calls.jsonl").write_text('{"command": "a"}\nnot json\n{"command": "b"}\n')
    assert [c["command"] for c in read_calls(tmp_path)] == ["a", "b"]
    assert "calls.jsonl, line 2: not JSON" in capsys.readouterr().err


def test_a_damaged_checkpoint_on_resume_is_one_line_naming_it(tmp_path, capsys):
    out = tmp_path / "run"
    _train(capsys, out)
    (out / "result.json").unlink()
    arrays, meta = load_checkpoint(out / CHECKPOINT)
    del meta["rng"]
    np.savez(out / CHECKPOINT, meta=np.array(json.dumps(meta)), **arrays)
    code, _, err = cli(capsys, "train", "--resume", "--out", out)
    assert code == 2 and f"checkpoint {out / CHECKPOINT}: cannot resume from it" in err
    np.savez(out / CHECKPOINT, meta=np.array("{not json"), **arrays)
    code, _, err = cli(capsys, "train", "--resume", "--out", out)
    assert code == 2 and f"checkpoint {out / CHECKPOINT}: its 'meta' entry is not JSON" in err


def test_the_older_schema_message_names_a_real_command(tmp_path):
    from rnnlab.experiments.results import StudyResults

    (tmp_path / "results.json").write_text(json.dumps({"experiment": "reber-tuned"}))
    with pytest.raises(ValueError, match="rerun `rnnlab reproduce reber --tune`"):
        StudyResults.load(tmp_path / "results.json")


def test_a_cell_whose_step_returns_the_wrong_shape_is_named_with_its_shapes(tmp_path):
    cell = tmp_path / "wrong.py"
    cell.write_text("from rnnlab.cells.rnn import RNN\n\n\nclass Wrong(RNN):\n"
                    "    def step(self, p, xw, state, xp=None):\n"
                    "        new, cache = super().step(p, xw, state)\n"
                    "        return (new[0][:, :-1],), cache\n")
    model = registry.load_cell_file(f"{cell}:Wrong")(3, 4)
    with pytest.raises(ValueError, match=rf"cell {cell}:Wrong: step's returned state has shape\(s\) \[\(2, 3\)\]; "
                       r"expected 1 array\(s\) of shape \(2, 4\)"):
        model.forward(np.zeros((5, 2, 3)))


def test_engine_jax_without_jax_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    code, _, err = cli(capsys, "train", "--task", "reber", "--engine", "jax", "--out", tmp_path / "run")
    assert code == 2 and "needs JAX" in err and "rnnlab[jax]" in err


def test_a_run_trained_on_jax_is_evaluated_on_numpy_where_jax_is_missing(tmp_path, capsys, monkeypatch):
    import importlib.util

    _train(capsys, tmp_path / "run")
    arrays, meta = load_checkpoint(tmp_path / "run" / CHECKPOINT)
    meta["run"]["settings"]["engine"] = "jax"
    np.savez(tmp_path / "run" / CHECKPOINT, meta=np.array(json.dumps(meta)), **arrays)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    code, out, err = cli(capsys, "evaluate", "--checkpoint", tmp_path / "run" / CHECKPOINT)
    assert code == 0 and "trained on the jax engine, which is not installed here; run on numpy" in err
    assert json.loads(out)["test_loss"] == pytest.approx(read_json(tmp_path / "run" / "result.json")["test_loss"])


def test_a_model_too_large_for_the_machine_is_refused_before_allocating(tmp_path, capsys):
    started = time.perf_counter()
    code, _, err = cli(capsys, "train", "--task", "reber", "--hidden", "100000000", "--out", tmp_path / "run")
    assert code == 2 and "--hidden 100000000 (--layers 1, --cell rnn):" in err and "GiB" in err
    assert time.perf_counter() - started < 30


def test_an_unwritable_output_folder_is_one_line_naming_it(tmp_path, capsys):
    if os.geteuid() == 0:
        target = Path("/proc/rnnlab-cannot-write-here")
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        target = tmp_path / "ro" / "run"
    code, _, err = cli(capsys, "train", "--task", "reber", "--epochs", "1", "--out", target)
    assert code == 2 and f"{target}: cannot write here" in err


def test_written_files_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.json", lambda f: f.write(b"{}"))
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write(tmp_path / "b.json", lambda f: f.write(b"{}"))
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.slow
def test_pool_workers_exit_when_their_driver_is_killed(tmp_path):
    sweep = tmp_path / "long.toml"
    sweep.write_text('task = "mean-sign"\nmetric = "dev_loss"\n[settings]\nepochs = 200\nhidden = 8\n'
                     '[search]\nlr = [0.001, 0.002, 0.003, 0.004]\n')
    driver = subprocess.Popen([sys.executable, "-m", "rnnlab.cli", "sweep", str(sweep), "--workers", "2", "--out",
                               str(tmp_path / "out")], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def children() -> list[int]:
        found = subprocess.run(["pgrep", "-P", str(driver.pid)], capture_output=True, text=True).stdout.split()
        return [int(pid) for pid in found]

    deadline = time.time() + 120
    while len(children()) < 2 and time.time() < deadline:
        time.sleep(0.5)
    workers = children()
    assert workers, "the sweep started no worker processes"
    driver.kill()
    driver.wait()
    deadline = time.time() + 20
    while any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
              for pid in workers) and time.time() < deadline:
        time.sleep(0.5)
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()
             and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
    assert not alive, f"workers {alive} outlived their driver"


# -- damaged stores, at random -------------------------------------------------------------------------------

DAMAGES = ("truncate", "flip", "delete", "empty", "wrong-schema")


def _damage(path: Path, how: str, where: float, byte: int) -> None:
    data = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncate":
        path.write_bytes(data[:int(where * len(data))])
    elif how == "flip":
        i = min(int(where * len(data)), len(data) - 1)
        path.write_bytes(data[:i] + bytes([data[i] ^ (byte or 1)]) + data[i + 1:])
    else:
        path.write_text(json.dumps(["not", "this", "file's", "schema"]) if path.suffix != ".npz" else "PK\x03\x04")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.name.startswith(".rnnlab")}


def _check_nothing_lost(before: dict[str, bytes], root: Path, damaged: str, owned: tuple[str, ...],
                        code: int, err: str) -> None:
    """No traceback reached the user; an error names the damaged file; every file the command does not
    write is still there (at its place, or set aside) with its bytes, the reader's notes included."""
    after = _snapshot(root)
    assert code in (0, 2), err
    if code == 2:
        assert damaged in err or str(Path(damaged).parent) in err, err
    retrained = damaged.rsplit("/", 1)[0] + "/" if "/" in damaged else None   # a damaged run's folder trains again
    for rel, content in before.items():
        if rel == damaged or rel.endswith(owned):
            continue
        if rel in after:
            assert after[rel] == content or (retrained and rel.startswith(retrained)), f"{rel} was rewritten"
        else:
            name = rel.rsplit("/", 1)[-1]
            assert any(a.endswith(name) and "/set-aside/" in f"/{a}" and after[a] == content for a in after), \
                f"{rel} was deleted"


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A stored study (two runs) and a stored sweep (two trials), each with a reader's notes file."""
    from helpers import TINY_SWEEP
    from test_experiments import _tiny_study

    root = tmp_path_factory.mktemp("stored")
    saved = EXPERIMENTS.get("tiny")
    EXPERIMENTS["tiny"] = _tiny_study()
    try:
        assert main(["reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", str(root / "runs")]) == 0
    finally:
        EXPERIMENTS.pop("tiny") if saved is None else EXPERIMENTS.__setitem__("tiny", saved)
    sweep = root / "sweep.toml"
    sweep.write_text(TINY_SWEEP.replace("samples = 2", "samples = 1").replace("seeds = 2", "seeds = 1"))
    assert main(["sweep", str(sweep), "--workers", "1", "--out", str(root / "sweep")]) == 0
    for folder in (root / "runs" / "tiny", root / "runs" / "tiny" / "jobs" / "rnn-s0", root / "sweep"):
        (folder / "notes.txt").write_text("a reader's notes")
    return root


STUDY_FILES = ("jobs/rnn-s0/result.json", "jobs/rnn-s0/checkpoint.npz", "jobs/rnn-s0/metrics.csv",
               "jobs/gru-s0/result.json", "results.json", "calls.jsonl", "results.csv")
STUDY_OUTPUTS = ("results.json", "results.csv", "calls.jsonl", "report.html", "report.md", ".png")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
@given(file=st.sampled_from(STUDY_FILES), how=st.sampled_from(DAMAGES), where=st.floats(0, 1),
       byte=st.integers(0, 255))
def test_a_damaged_stored_study_never_raises_a_traceback_nor_loses_a_file(stored, tmp_path, capsys, monkeypatch,
                                                                          file, how, where, byte):
    from test_experiments import _tiny_study

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())
    out = tmp_path / f"runs-{time.perf_counter_ns()}"
    shutil.copytree(stored / "runs", out)
    study = out / "tiny"
    _damage(study / file, how, where, byte)
    before = _snapshot(study)
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    _check_nothing_lost(before, study, file, STUDY_OUTPUTS, code, err)
    assert (study / "notes.txt").read_text() == "a reader's notes"


def test_a_stored_result_whose_history_lost_a_column_is_refused_naming_it(stored, tmp_path, capsys, monkeypatch):
    """A changed byte in a history key ('dev_loss' → 'dev_lors') leaves valid JSON: the study must name the file,
    not fail on the missing metric with a traceback (hypothesis found it: flip at 86.5% of rnn-s0's result)."""
    from test_experiments import _tiny_study

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())
    out = tmp_path / "runs"
    shutil.copytree(stored / "runs", out)
    damaged = out / "tiny" / "jobs" / "rnn-s0" / "result.json"
    result = json.loads(damaged.read_text())
    assert len(result["history"]) >= 2 and "dev_loss" in result["history"][-1]
    result["history"][-1]["dev_lors"] = result["history"][-1].pop("dev_loss")
    damaged.write_text(json.dumps(result))
    before = _snapshot(out / "tiny")
    code, _, err = cli(capsys, "reproduce", "tiny", "--seeds", "1", "--workers", "1", "--out", out)
    assert code == 2 and "jobs/rnn-s0/result.json: its history is not one row per epoch with the same columns" in err
    _check_nothing_lost(before, out / "tiny", "jobs/rnn-s0/result.json", STUDY_OUTPUTS, code, err)


SWEEP_FILES = ("calls.jsonl", "trials.csv")
SWEEP_OUTPUTS = ("trials.csv", "calls.jsonl", "report.html", "report.md", ".png", ".toml")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
@example(pick=0, kind="trial.json", how="flip", where=0.1875, byte=0)    # a searched setting's name changed
@example(pick=0, kind="trial.json", how="flip", where=0.109375, byte=0)  # its configuration (found in a fresh clone)
@given(pick=st.integers(0, 10), kind=st.sampled_from(("trial.json", "result.json", *SWEEP_FILES)),
       how=st.sampled_from(DAMAGES), where=st.floats(0, 1), byte=st.integers(0, 255))
def test_a_damaged_stored_sweep_never_raises_a_traceback_nor_loses_a_file(stored, tmp_path, capsys, pick, kind,
                                                                          how, where, byte):
    out = tmp_path / f"sweep-{time.perf_counter_ns()}"
    shutil.copytree(stored / "sweep", out)
    trials = sorted((out / "trials").iterdir())
    in_trial = kind in ("trial.json", "result.json")
    file = (trials[pick % len(trials)] / kind).relative_to(out).as_posix() if in_trial else kind
    _damage(out / file, how, where, byte)
    before = _snapshot(out)
    code, _, err = cli(capsys, "sweep", stored / "sweep.toml", "--workers", "1", "--out", out)
    _check_nothing_lost(before, out, file, SWEEP_OUTPUTS, code, err)
    assert (out / "notes.txt").read_text() == "a reader's notes"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A study's page published at its setting (with a co-author's notes beside it), and the study tuned, stored
    elsewhere: publishing the tuned column keeps the published one, read back from the page."""
    from test_experiments import _tiny_study

    root = tmp_path_factory.mktemp("published")
    saved = EXPERIMENTS.get("tiny")
    EXPERIMENTS["tiny"] = _tiny_study()
    try:
        for args in (["--out", root / "setting", "--publish", root / "docs"], ["--tune", "--out", root / "tuned"]):
            assert main(["reproduce", "tiny", "--seeds", "1", "--workers", "1", *map(str, args)]) == 0
    finally:
        EXPERIMENTS.pop("tiny") if saved is None else EXPERIMENTS.__setitem__("tiny", saved)
    (root / "docs" / "tiny" / "notes.txt").write_text("a co-author's notes")
    return root


PUBLISHED_FILES = ("tiny.md", "tiny/page.json", "tiny/runs.csv", MANIFEST)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
@given(file=st.sampled_from(PUBLISHED_FILES), how=st.sampled_from(DAMAGES), where=st.floats(0, 1),
       byte=st.integers(0, 255))
@example(file="tiny.md", how="delete", where=0.0, byte=0)      # the page's data keeps the column: not lost
@example(file="tiny/page.json", how="wrong-schema", where=0.0, byte=0)
@example(file="tiny/runs.csv", how="delete", where=0.0, byte=0)
def test_a_damaged_published_page_never_raises_a_traceback_nor_loses_a_file(published, tmp_path, capsys, monkeypatch,
                                                                            file, how, where, byte):
    from test_experiments import _tiny_study

    monkeypatch.setitem(EXPERIMENTS, "tiny", _tiny_study())
    here = tmp_path / f"copy-{time.perf_counter_ns()}"
    shutil.copytree(published, here)
    dest = here / "docs"
    _damage(dest / file, how, where, byte)
    before = _snapshot(dest)
    code, _, err = cli(capsys, "reproduce", "tiny", "--tune", "--seeds", "1", "--workers", "1", "--out", here / "tuned",
                       "--publish", dest)
    assert "trained in" not in err                              # every run and trial was stored: nothing retrains
    assert code in (0, 2), err
    assert (dest / "tiny" / "notes.txt").read_text() == "a co-author's notes"
    if code == 2:
        assert file in err or Path(file).name in err, err
        assert _snapshot(dest) == before                        # a refused publish writes nothing
    else:       # published: the kept column with its runs, unless the damage deleted them
        page, lost = (dest / "tiny.md").read_text(), (file, how) == ("tiny/runs.csv", "delete")
        assert "tuned" in page and ("at the study's setting" in page) != lost
        assert (dest / "tiny" / "runs.csv").is_file() != lost


@pytest.mark.parametrize("key", ["seconds", "error", "values", "id"])
def test_a_stored_trial_that_lost_a_key_is_refused_naming_its_file(stored, tmp_path, capsys, key):
    """A changed byte in a trial record's key ('seconds' → 'secondx') leaves valid JSON: the sweep must name the
    file, not fail writing trials.csv with a KeyError (hypothesis found it: a flip at 89.8% of a trial.json). So
    must a changed byte in a searched setting's name ('lr' → 'mr', found at 18.75%: the CSV writer refused a field
    not among the sweep's columns) or in the trial's id."""
    out = tmp_path / "sweep"
    shutil.copytree(stored / "sweep", out)
    damaged = sorted((out / "trials").iterdir())[0] / "trial.json"
    record = json.loads(damaged.read_text())
    if key == "values":
        name = next(iter(record["values"]))
        record["values"]["x" + name[1:]] = record["values"].pop(name)
    elif key == "id":
        record["id"] = "x" + record["id"][1:]
    else:
        record[key[:-1] + "x"] = record.pop(key)
    damaged.write_text(json.dumps(record))
    before = _snapshot(out)
    code, _, err = cli(capsys, "sweep", stored / "sweep.toml", "--workers", "1", "--out", out)
    assert code == 2 and f"{damaged.relative_to(out).as_posix()}: not this trial's record" in err, err
    _check_nothing_lost(before, out, damaged.relative_to(out).as_posix(), SWEEP_OUTPUTS, code, err)


@pytest.mark.parametrize("command", [("reproduce", "tiny", "--tune"), ("bench-cells", "rnn", "--quick"),
                                     ("sweep", "SWEEP")])
def test_every_command_refuses_executor_options_that_cannot_work_before_any_training(tmp_path, capsys, monkeypatch,
                                                                                   command):
    """One check of the executor options (``executors.check_executor``), run by each command before its
    first job: --tune's search, the benchmark's plan and a sweep all stop at once, having trained nothing."""
    _tiny(monkeypatch)
    sweep = tmp_path / "s.toml"
    sweep.write_text('task = "adding"\nmetric = "dev_loss"\n[settings]\nepochs = 1\nhidden = 3\n[search]\n'
                     'lr = [0.01, 0.1]\n')
    out = tmp_path / "out"
    args = [str(sweep) if a == "SWEEP" else a for a in command]
    for bad, message in ((["--address", "127.0.0.1:1"], "--address: only with --executor ray"),
                         (["--workers", "0"], "--workers")):
        code, _, err = cli(capsys, *args, *bad, "--out", out)
        assert code == 2 and message in err, err
        assert not list(tmp_path.rglob("result.json")) and not list(tmp_path.rglob("trial.json"))


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                        max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=10), _json_values, max_size=6))
def test_a_record_written_one_line_per_row_reads_back_as_it_was(record):
    """record_json (the bench records' format): any JSON record, NaN and infinities included, reads back equal,
    one line per top-level key and per item of a top-level list."""
    text = record_json(record)
    assert json.dumps(json.loads(text), sort_keys=True) == json.dumps(record, sort_keys=True)
    assert len(text.splitlines()) == 2 + sum(len(v) + 2 if isinstance(v, list) and v else 1 for v in record.values())


def test_the_published_bench_records_are_one_line_per_row_and_under_a_megabyte():
    published = Path(__file__).resolve().parents[1] / "docs" / "results"
    for path in (published / "cells.json", published / "cells-lengths.json"):
        text = path.read_text()
        assert len(text.encode()) < 1_000_000, path
        assert record_json(json.loads(text)) == text, path
