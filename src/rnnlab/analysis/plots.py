"""Plots of the analyses (matplotlib, drawn off screen). Every function writes one PNG and
returns its path."""

from __future__ import annotations

import io
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rnnlab.files import write_bytes  # noqa: E402

COLORS = {"rnn": "#d62728", "gru": "#1f77b4", "lstm": "#2ca02c"}


def _color(name: str):
    for key, color in COLORS.items():
        if name.lower().startswith(key):
            return color
    return None


def save_figure(fig, path: str | Path) -> Path:
    """``fig`` as a PNG at ``path``: rendered to bytes in memory, then written through ``files.write_bytes``
    (matplotlib's ``savefig`` to a path would follow a link there)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    write_bytes(path, buffer.getvalue())
    return path


def plot_gradient_flow(curves: dict[str, np.ndarray], path, title: str = "Gradient reaching each step") -> Path:
    """curves: name → (T,) ‖∂L/∂h_t‖ (log scale)."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, values in curves.items():
        ax.semilogy(np.arange(1, len(values) + 1), np.maximum(values, 1e-30), label=name, color=_color(name), lw=2)
    ax.set_xlabel("time step t")
    ax.set_ylabel("mean ‖∂L/∂h_t‖")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    return save_figure(fig, path)


def plot_bptt_depth(curves: dict[str, dict], path) -> Path:
    """curves: name → bptt_depth() result; norm and per-step increment against back steps."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, r in curves.items():
        axes[0].plot(r["k"], r["norm"], "o-", label=name, color=_color(name))
        axes[1].semilogy(r["k"], np.maximum(r["increment"], 1e-30), "o-", label=name, color=_color(name))
    axes[0].set(xlabel="back steps k", ylabel="‖∂L/∂W_h‖", title="Recurrent gradient vs BPTT depth")
    axes[1].set(xlabel="back steps k", ylabel="‖g_k − g_(k−1)‖", title="What the k-th step back adds")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, path)


def plot_gradient_distribution(dists: dict[str, dict], path) -> Path:
    """dists: name → gradient_distribution() result; histograms of |g| on log bins, side by side."""
    fig, axes = plt.subplots(1, len(dists), figsize=(5 * len(dists), 3.8), sharey=True, squeeze=False)
    for ax, (name, d) in zip(axes[0], dists.items()):
        bins = d["bins"]
        frac = d["hist"] / max(d["summary"]["count"], 1)
        ax.bar(bins[:-1], frac, width=np.diff(bins), align="edge", color=_color(name) or "grey", alpha=0.8)
        ax.set_xscale("log")
        s = d["summary"]
        ax.set_title(f"{name}: median {s['q50']:.1e}, <1e-6: {100 * s['fraction_below_1e-6']:.1f}%")
        ax.set_xlabel("|∂L_i/∂θ| (per example, pooled)")
    axes[0][0].set_ylabel("fraction of coefficients")
    return save_figure(fig, path)


def plot_discrepancy_lines(records: list[dict], cell: str, init: str, path, ks=(1, 2, 5, 10, 20)) -> Path:
    """D(l, k) against l, one line per k, for one cell and draw distribution."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for k in ks:
        rows = sorted((r for r in records if r["cell"] == cell and r["init"] == init and r["k"] == k
                       and not r.get("below_precision")), key=lambda r: r["l"])
        if rows:
            ax.plot([r["l"] for r in rows], [r["D"] for r in rows], label=f"k = {k}")
    ax.set(xlabel="word length l", ylabel="D(l, k)", title=f"(l,k)-discrepancy: {cell}, {init} draws")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_discrepancy_heatmaps(records: list[dict], init: str, path) -> Path:
    """log10 D(l, k) as heatmaps, one panel per cell, for one draw distribution; values below float64
    precision (``below_precision``) are grey, not drawn as data."""
    cells = list(dict.fromkeys(r["cell"] for r in records))
    fig, axes = plt.subplots(1, len(cells), figsize=(5.2 * len(cells), 4), squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#bbbbbb")
    for ax, cell in zip(axes[0], cells):
        rows = [r for r in records if r["cell"] == cell and r["init"] == init]
        ls, ks = sorted({r["l"] for r in rows}), sorted({r["k"] for r in rows})
        grid = np.full((len(ks), len(ls)), np.nan)
        for r in rows:
            if not r.get("below_precision") and r["D"] > 0:
                grid[ks.index(r["k"]), ls.index(r["l"])] = np.log10(r["D"])
        im = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", origin="lower", cmap=cmap, vmin=-14, vmax=1,
                       extent=(ls[0] - 0.5, ls[-1] + 0.5, ks[0] - 0.5, ks[-1] + 0.5))
        ax.set(xlabel="word length l", ylabel="hidden units k", title=f"log10 D(l, k): {cell} ({init})")
        if np.isnan(grid).any():
            ax.text(0.02, 0.02, "grey: below float64 precision", transform=ax.transAxes, fontsize=8)
        fig.colorbar(im, ax=ax)
    return save_figure(fig, path)


def plot_heatmap(matrix: np.ndarray, xlabels, ylabels, path, title: str, vmin=None, vmax=None) -> Path:
    """matrix (rows, steps): e.g. hidden units or output symbols (rows) along a string (columns)."""
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(xlabels) + 2), max(2.5, 0.28 * len(ylabels) + 1.2)))
    im = ax.imshow(matrix, aspect="auto", cmap="magma", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(xlabels)), labels=list(xlabels))
    ax.set_yticks(range(len(ylabels)), labels=list(ylabels))
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    return save_figure(fig, path)


def plot_trajectories(trajectories: np.ndarray, labels: np.ndarray, path, per_class: int = 3) -> Path:
    """trajectories (inputs, T, units); a few units of each class, every input a thin line."""
    classes = [c for c in ("transient", "accumulating", "oscillating") if (labels == c).any()]
    fig, axes = plt.subplots(1, max(len(classes), 1), figsize=(4.5 * max(len(classes), 1), 3.6), squeeze=False)
    for ax, c in zip(axes[0], classes):
        for u in np.flatnonzero(labels == c)[:per_class]:
            for series in trajectories[:, :, u]:
                ax.plot(series, lw=0.8, alpha=0.6)
        ax.set(title=f"{c} units ({int((labels == c).sum())})", xlabel="time step", ylabel="activation")
    return save_figure(fig, path)


def plot_jacobian_spectrum(spectra: dict[str, np.ndarray], path) -> Path:
    """spectra: name → (T, B, S) eigenvalue moduli; the largest modulus along time (mean over B)."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, eig in spectra.items():
        ax.plot(eig[:, :, 0].mean(axis=1), label=name, color=_color(name), lw=2)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set(xlabel="time step", ylabel="largest |eigenvalue| of ∂s_t/∂s_(t−1)", title="Recurrent Jacobian")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_learning_curves(curves: dict[str, tuple], path, xlabel: str, ylabel: str, title: str,
                         logx: bool = False) -> Path:
    """curves: name → (x, y) or (x, y, y_low, y_high): e.g. a dev metric against epochs or seconds,
    the mean over seeds with a band (mean ± std) around it."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, curve in curves.items():
        x, y = np.asarray(curve[0], float), np.asarray(curve[1], float)
        ax.plot(x, y, label=name, color=_color(name), lw=2, marker="o" if len(x) < 12 else None)
        if len(curve) == 4:
            ax.fill_between(x, curve[2], curve[3], color=_color(name), alpha=0.2, lw=0)
    if logx:
        ax.set_xscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_histograms(values: dict[str, list[float]], path, bins, xlabel: str, ylabel: str, title: str) -> Path:
    """One translucent histogram per named series, e.g. the splits of a data set."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, v in values.items():
        ax.hist(v, bins=bins, alpha=0.6, label=f"{name} ({len(v)})")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend()
    return save_figure(fig, path)


def plot_metric_against_setting(points: dict[str, tuple], path, xlabel: str, ylabel: str, title: str,
                                logx: bool = False) -> Path:
    """points: group → (x, y): one colour per group, every trial (each seed) a point, and the mean
    over seeds at each x joined by a line."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, (x, y)) in enumerate(points.items()):
        x, y = np.asarray(x, float), np.asarray(y, float)
        color = cycle[i % len(cycle)]
        ax.scatter(x, y, s=18, alpha=0.6, color=color, label=name)
        xs = np.unique(x)
        means = [y[x == v].mean() for v in xs]
        if len(xs) > 1:
            ax.plot(xs, means, color=color, lw=1.2, alpha=0.8)
    if logx:
        ax.set_xscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_marginals(panels: dict[str, dict[str, tuple]], path, ylabel: str, title: str, log: tuple[str, ...] = (),
                   ylim: tuple[float, float] | None = None) -> Path:
    """panels: hyperparameter → (series → (x, y)): one panel per hyperparameter, every trial a faint point, and per
    series the median y in eight bins of x (log-spaced on ``log`` axes) joined by a line, the marginal a reader
    compares across series. Points beyond ``ylim`` are drawn at its edge."""
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.6), squeeze=False, sharey=True)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, series) in zip(axes[0], panels.items()):
        for i, (label, (x, y)) in enumerate(series.items()):
            x, y = np.asarray(x, float), np.asarray(y, float)
            shown = np.clip(y, *ylim) if ylim else y
            color = cycle[i % len(cycle)]
            ax.scatter(x, shown, s=6, alpha=0.25, color=color)
            if len(x) >= 8:
                edges = (np.geomspace if name in log else np.linspace)(x.min(), x.max(), 9)
                which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, 7)
                centres = [np.median(x[which == b]) for b in range(8) if (which == b).any()]
                medians = [np.median(shown[which == b]) for b in range(8) if (which == b).any()]
                ax.plot(centres, medians, color=color, lw=1.4, label=label)
        if name in log:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())   # a decade's 2–9 labels overlap
        ax.set(xlabel=name)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    if ylim:
        axes[0][0].set_ylim(*ylim)
    if axes[0][-1].get_legend_handles_labels()[0]:
        axes[0][-1].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_claim_strips(claims: list[dict], path, title: str = "Each claim's runs, one dot per seed") -> Path:
    """claims: rows with ``claim`` (text), ``values`` (configuration → per-seed values, the better side
    first) and ``verdict``: one panel per claim, each seed a dot (jittered sideways), the mean a bar, so
    a reader sees the distributions a verdict rests on, not only their means."""
    fig, axes = plt.subplots(1, len(claims), figsize=(max(3.2 * len(claims), 4.5), 3.8), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, claim in zip(axes[0], claims):
        shared = os.path.commonprefix(list(claim.values))      # "embedded-reber-gru-10" → "gru-10"
        cut = shared.rfind("-") + 1 if len(claim.values) > 1 else 0
        for i, (name, values) in enumerate(claim.values.items()):
            name = name[cut:]
            values = np.asarray(values, float)
            ax.scatter(i + rng.uniform(-0.12, 0.12, values.size), values, s=20, alpha=0.75, color=_color(name) or
                       f"C{i}", zorder=3)
            if values.size:
                ax.hlines(values.mean(), i - 0.25, i + 0.25, color="black", lw=1.5, zorder=4)
        if claim.threshold is not None:
            ax.axhline(claim.threshold, color="grey", ls="--", lw=1, zorder=2)
        names = [name[cut:] for name in claim.values]
        ax.set_xticks(range(len(names)), [n if len(n) <= 18 else n[:17] + "…" for n in names], fontsize=7,
                      rotation=15)
        ax.set_xlim(-0.6, len(names) - 0.4)
        text = claim.claim
        ax.set_title((text if len(text) <= 48 else text[:47] + "…") + f"\n{claim.verdict}", fontsize=7)
        ax.set_ylabel(claim.metric, fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)
