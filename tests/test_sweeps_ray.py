"""The Ray executor on a real cluster started by the test on this machine: a head and a second node
(``ray start --block``, each in its own process group, on this machine only), stopped at the end by
signalling those process groups, nothing else. Skipped, naming why, without the ray extra."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from helpers import TINY_SWEEP
from rnnlab.metrics import SECONDS, metric

pytestmark = pytest.mark.slow     # real Ray clusters: the slow tier

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rnnlab[ray]')")
pytest.importorskip("ray.tune", reason="Ray Tune is not installed (pip install 'rnnlab[ray]')")

RAY = Path(sys.executable).with_name("ray")
# Nodes are started with --node-ip-address 127.0.0.1 and the driver joins 127.0.0.1:PORT. (For a
# cluster of several nodes Ray advertises this machine's own interface address instead of the
# loopback one; the cluster still never leaves this machine.)
ENV = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A head node and worker nodes started with ``ray start --block``, each its own process group."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp")   # short: Ray's socket paths have a limit
        self.nodes: list[subprocess.Popen] = []
        self._start(["--head", "--port", str(self.port), "--temp-dir", self.temp, "--include-dashboard", "false"])

    def _start(self, args: list[str]) -> subprocess.Popen:
        log = open(Path(self.temp) / f"node{len(self.nodes)}.log", "w")
        proc = subprocess.Popen([str(RAY), "start", "--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                                 *args], env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.nodes.append(proc)
        return proc

    def add_node(self) -> subprocess.Popen:
        return self._start(["--address", self.address])

    def wait_for(self, nodes: int, timeout: float = 90.0) -> None:
        code = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
                "print(sum(n['Alive'] for n in ray.nodes()))")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", code, self.address], env=ENV, capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip().isdigit() and int(out.stdout.strip()) >= nodes:
                return
            time.sleep(1.0)
        raise RuntimeError(f"the Ray cluster did not come up with {nodes} nodes; logs in {self.temp}")

    @staticmethod
    def stop_node(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        for proc in self.nodes:
            self.stop_node(proc, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for proc in self.nodes:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self.stop_node(proc, signal.SIGKILL)   # what SIGTERM left of the group
        shutil.rmtree(self.temp, ignore_errors=True)


def _two_nodes():
    c = Cluster()
    try:
        c.add_node()
        c.wait_for(2)
        yield c
    finally:
        c.stop()


cluster = pytest.fixture(scope="module")(_two_nodes)   # shared by the tests that leave it whole
own_cluster = pytest.fixture(_two_nodes)                # for the test that stops one of its nodes


def _sweep(tmp_path: Path, out: str, *args: str, epochs: int = 2, samples: int = 2, wait: bool = True):
    path = tmp_path / "sweep.toml"
    path.write_text(TINY_SWEEP.replace("epochs = 2", f"epochs = {epochs}").replace("samples = 2",
                                                                                   f"samples = {samples}"))
    command = [sys.executable, "-m", "rnnlab.cli", "sweep", str(path), "--out", str(tmp_path / out), *args]
    if wait:
        return subprocess.run(command, env=ENV, check=True, capture_output=True, text=True)
    return subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _rows(path: Path) -> list[dict]:
    """trials.csv without its timings (``seconds``, ``seconds_total``, ``seconds_per_epoch``): what a rerun repeats."""
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if metric(k).kind != SECONDS} for r in csv.DictReader(f)]


def test_local_and_ray_give_the_same_trials_and_float64_metrics(tmp_path, cluster):
    _sweep(tmp_path, "local", "--workers", "2")
    _sweep(tmp_path, "ray", "--executor", "ray", "--address", cluster.address)
    local, on_ray = _rows(tmp_path / "local" / "trials.csv"), _rows(tmp_path / "ray" / "trials.csv")
    assert len(local) == 8 and local == on_ray       # same ids, same order, every metric digit for digit
    again = _sweep(tmp_path, "ray", "--executor", "ray", "--address", cluster.address)
    assert "8 already stored, 0 to train" in again.stderr


def test_a_ray_node_lost_mid_sweep_costs_only_retries(tmp_path, own_cluster):
    cluster = own_cluster
    proc = _sweep(tmp_path, "ray", "--executor", "ray", "--address", cluster.address, epochs=40, wait=False)
    stored = tmp_path / "ray" / "trials"
    deadline = time.monotonic() + 180
    while not list(stored.glob("*/trial.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(stored.glob("*/trial.json")), "no trial finished on the cluster"
    cluster.stop_node(cluster.nodes[1])     # the second node, while both nodes run a trial
    assert proc.wait(300) == 0
    _sweep(tmp_path, "local", "--workers", "2", epochs=40)
    resumed, local = _rows(tmp_path / "ray" / "trials.csv"), _rows(tmp_path / "local" / "trials.csv")
    assert len({r["id"] for r in resumed}) == len(resumed) == 8
    assert resumed == local


def test_asha_stops_poor_trials_and_stores_every_one(tmp_path, cluster):
    _sweep(tmp_path, "asha", "--executor", "ray", "--address", cluster.address, "--early-stop", "asha", epochs=4,
           samples=1)
    with open(tmp_path / "asha" / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and len({r["id"] for r in rows}) == 4
    statuses = [r["status"] for r in rows]
    assert set(statuses) <= {"ok", "stopped"} and "ok" in statuses
    assert all(r["error"].startswith("stopped by ASHA after epoch") for r in rows if r["status"] == "stopped")
    if "stopped" in statuses:
        assert "stopped early by ASHA" in (tmp_path / "asha" / "report.md").read_text()


STUDY = """
import sys
from rnnlab.experiments.runner import Experiment, RunSpec, run_experiment

def specs(quick):
    return [RunSpec(cell, "mean-sign", {"cell": cell, "hidden": 8, "layers": 1, "epochs": EPOCHS, "batch_size": 20},
                    {"n_train": 200, "n_dev": 40, "n_test": 40, "length": 8, "features": 3}) for cell in ("rnn", "gru")]

if __name__ == "__main__":    # the local pool's spawned workers import this file again
    exp = Experiment(name="tiny", title="t", study="a test", about="t", specs=specs, metric_names=["test_loss"])
    run_experiment(exp, sys.argv[1], seeds=3, workers=2, executor=sys.argv[2], address=(sys.argv[3:] or [None])[0])
"""


def _study(tmp_path: Path, out: str, *args: str, wait: bool = True):
    script = tmp_path / "study.py"
    script.write_text(STUDY.replace("EPOCHS", "30"))
    command = [sys.executable, str(script), str(tmp_path / out), *args]
    if wait:
        return subprocess.run(command, env=ENV, check=True, capture_output=True, text=True)
    return subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_study_on_ray_loses_a_node_and_keeps_every_run_once(tmp_path, own_cluster):
    """reproduce's runner on a real cluster: a node killed mid-study costs only Ray's retries; every run
    is stored once (one progress line each, one result.json each) with the numbers a local run gives."""
    cluster = own_cluster
    proc = _study(tmp_path, "ray", "ray", cluster.address, wait=False)
    jobs = tmp_path / "ray" / "tiny" / "jobs"
    deadline = time.monotonic() + 180
    while not list(jobs.glob("*/result.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(jobs.glob("*/result.json")), "no run finished on the cluster"
    cluster.stop_node(cluster.nodes[1])       # the second node, while it trains a run
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    done = [line.split("] ", 1)[1].split(":")[0] for line in stderr.splitlines() if line.startswith("[")]
    assert sorted(done) == sorted(f"{cell} seed {s}" for cell in ("rnn", "gru") for s in range(3))
    assert len(list(jobs.glob("*/result.json"))) == 6 and len(list(jobs.glob("*/checkpoint.npz"))) == 6
    _study(tmp_path, "local", "local")
    assert (tmp_path / "ray" / "tiny" / "results.csv").read_text() == \
        (tmp_path / "local" / "tiny" / "results.csv").read_text()
    again = _study(tmp_path, "ray", "ray", cluster.address)     # resumed: nothing left to train
    assert "0 runs to train" in again.stderr and "6 already done" in again.stderr


def test_bench_cells_on_ray_with_a_user_cell_gives_the_local_numbers(tmp_path, cluster):
    """bench-cells --executor ray: a cell brought by file trains on the cluster's workers (they import
    the file themselves), every run comes back to the job store, and the numbers are the local ones."""
    cell = str(Path(__file__).resolve().parents[1] / "examples" / "cells" / "mgu.py") + ":MGU"
    results = {}
    for name, extra in (("local", ["--workers", "2"]), ("ray", ["--executor", "ray", "--address", cluster.address])):
        out = tmp_path / name
        subprocess.run([sys.executable, "-m", "rnnlab.cli", "bench-cells", "rnn", "--cell", cell, "--tasks",
                        "adding-50", "--quick", "--out", str(out), *extra], env=ENV, check=True, capture_output=True,
                       text=True)
        results[name] = json.loads((out / "results.json").read_text())
        tuned = out / "bench-cells-tuned"        # searched (1 rate × 1 seed per cell), then 2 final seeds per cell
        assert len(list(tuned.glob("search/*/trials/*/trial.json"))) == 2
        assert len(list((tuned / "jobs").glob("*/result.json"))) == 2 * 2
    assert [(r["cell"], r["values"]) for r in results["local"]["rows"]] == \
        [(r["cell"], r["values"]) for r in results["ray"]["rows"]]
