"""Run an analysis and write its files (CSV/JSON + PNG) into a folder; used by ``rnnlab analyze``
and by the experiments. Each function returns the numbers it computed and the paths it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.analysis import plots
from rnnlab.analysis.discrepancy import discrepancy, trained_discrepancy
from rnnlab.analysis.dynamics import classify_units, jacobian_spectrum, lyapunov_exponent, states_and_outputs
from rnnlab.analysis.gradients import bptt_depth, gradient_distribution, gradient_flow
from rnnlab.data import reber
from rnnlab.data.containers import Batch
from rnnlab.files import csv_text, write_text
from rnnlab.models import RecurrentModel


def write_csv(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, csv_text(rows))
    return path


def write_discrepancy(out: Path, cells=("rnn", "gru"), inits=("normal", "xavier", "uniform"), max_k: int = 20,
                      max_l: int = 50, draws: int = 2000, seed: int = 0) -> dict[str, Any]:
    out = Path(out)
    records = discrepancy(cells, inits, range(1, max_k + 1), max_l, draws, seed)
    files = [write_csv(out / "discrepancy.csv", records)]
    for init in inits:
        files.append(plots.plot_discrepancy_heatmaps(records, init, out / f"discrepancy_heatmap_{init}.png"))
    for cell in cells:
        ks = [k for k in (1, 2, 5, 10, 20) if k <= max_k]
        files.append(plots.plot_discrepancy_lines(records, cell, inits[0], out / f"discrepancy_{cell}_{inits[0]}.png",
                                                  ks))
    return {"records": records, "files": files}


def write_gradient_flow(models: dict[str, RecurrentModel], batch: Batch, out: Path, max_steps: int = 20) -> dict:
    """Per-step ‖∂L/∂h_t‖ (top layer) and the BPTT-depth curve of every model, on the same batch."""
    out = Path(out)
    flows = {name: gradient_flow(m, batch) for name, m in models.items()}
    depths = {name: bptt_depth(m, batch, max_steps) for name, m in models.items()}
    rows = [{"model": name, "layer": layer, "t": t + 1, "norm": float(v)}
            for name, f in flows.items() for layer, series in enumerate(f["norms"]) for t, v in enumerate(series)]
    depth_rows = [{"model": name, "back_steps": int(k), "norm": float(n), "increment": float(i), "full": d["full"]}
                  for name, d in depths.items() for k, n, i in zip(d["k"], d["norm"], d["increment"])]
    files = [write_csv(out / "gradient_flow.csv", rows), write_csv(out / "bptt_depth.csv", depth_rows),
             plots.plot_gradient_flow({n: f["norms"][-1] for n, f in flows.items()}, out / "gradient_flow.png"),
             plots.plot_bptt_depth(depths, out / "bptt_depth.png")]
    summary = {name: {"first_over_last": float(f["relative"][-1][0])} for name, f in flows.items()}
    return {"flows": flows, "depths": depths, "summary": summary, "files": files}


def write_gradient_distribution(models: dict[str, RecurrentModel], data, out: Path,
                                max_examples: int | None = 256) -> dict:
    out = Path(out)
    dists = {name: gradient_distribution(m, data, max_examples) for name, m in models.items()}
    summary = {name: d["summary"] for name, d in dists.items()}
    path = out / "gradient_distribution.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(summary, indent=2))
    files = [path, plots.plot_gradient_distribution(dists, out / "gradient_distribution.png")]
    return {"summary": summary, "files": files}


def write_hidden(model: RecurrentModel, name: str, inputs: dict[str, np.ndarray], symbols: dict[str, list[str]],
                 output_labels: list[str], out: Path) -> dict:
    """Heatmaps of hidden states and outputs along each input (S2's figures 3, 4, 6-8)."""
    out = Path(out)
    files, numbers = [], {}
    for label, x in inputs.items():
        r = states_and_outputs(model, x)
        xs = symbols[label]
        files.append(plots.plot_heatmap(r["states"].T, xs, [f"h{i}" for i in range(r["states"].shape[1])],
                                        out / f"hidden_{name}_{label}.png", f"{name}: hidden states along {label}"))
        files.append(plots.plot_heatmap(r["outputs"].T, xs, output_labels, out / f"outputs_{name}_{label}.png",
                                        f"{name}: outputs along {label}", vmin=0, vmax=1))
        numbers[label] = {"states": r["states"].tolist(), "outputs": r["outputs"].tolist()}
    return {"numbers": numbers, "files": files}


def write_reber_readout(models: dict[str, RecurrentModel], task, strings: list[str], out: Path) -> dict:
    """S2's readout along Reber strings read whole (e.g. 'BPBTXSE', 'BTBTXSE'): heatmaps of each
    model's hidden states and outputs, and the output probabilities of T and P after the last
    symbol, which predict the final symbol; only a network that remembered the second symbol gets it
    right. With two strings of one length, the distance between the final states too."""
    if task.input_kind != "one_hot" or task.input_size != len(reber.ALPHABET):
        raise ValueError(f"--task {task.name}: hidden heatmaps are drawn along Reber strings (reber, embedded-reber)")
    inputs = {s: reber.encode(s) for s in strings}
    files, summary = [], {}
    for name, model in models.items():
        r = write_hidden(model, name, inputs, {s: list(s) for s in strings}, list(reber.ALPHABET), out)
        files += r["files"]
        summary[name] = {s: {c: round(float(r["numbers"][s]["outputs"][-1][reber.INDEX[c]]), 4) for c in "TP"}
                         for s in strings}
        if len(strings) >= 2 and len(strings[0]) == len(strings[1]):
            dist = trained_discrepancy(model, inputs[strings[0]], inputs[strings[1]])
            summary[name]["state_distance_at_end"] = float(dist[-1])
    return {"files": files, "summary": summary}


def write_dynamics(models: dict[str, RecurrentModel], x: np.ndarray, out: Path) -> dict:
    """Trajectories and unit classes of the top layer, recurrent-Jacobian spectra of the first layer
    and the largest Lyapunov exponent, for dense inputs x (T, B, input_size)."""
    out = Path(out)
    files, summary, spectra = [], {}, {}
    for name, m in models.items():
        _, _, hs = m.forward(Batch(x, np.zeros(x.shape[:2], np.int64)))
        trajectories = hs.transpose(1, 0, 2)                             # (inputs, T, units)
        classes = classify_units(trajectories)
        files.append(plots.plot_trajectories(trajectories, classes["labels"], out / f"trajectories_{name}.png"))
        first = m.rnn.layers[0]
        spec = jacobian_spectrum(first, np.asarray(x, first.dtype))
        spectra[name] = spec["eigenvalue_moduli"]
        lyap = lyapunov_exponent(first, np.asarray(x, first.dtype))
        summary[name] = {"unit_classes": classes["counts"],
                         "largest_eigenvalue_modulus_mean": float(spec["eigenvalue_moduli"][..., 0].mean()),
                         "largest_singular_value_mean": float(spec["singular_values"][..., 0].mean()),
                         "lyapunov_exponent": float(lyap["exponent"].mean())}
    files.append(plots.plot_jacobian_spectrum(spectra, out / "jacobian_spectrum.png"))
    path = out / "dynamics.json"
    write_text(path, json.dumps(summary, indent=2))
    files.append(path)
    return {"summary": summary, "files": files}
