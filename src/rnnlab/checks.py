"""``check_cell``: whether a cell's hand-written adjoint is its step's exact derivative, on every
engine it runs on (in the spirit of scikit-learn's ``check_estimator``).

What it checks, in float64 on small random sizes (input 3, hidden 4, batch 2, 5 steps), for each
configuration of the cell's options:

- **shapes**: the declared parameter shapes are the allocated ones and the budget count; the
  forward and backward return what the contract says (hs, one gradient per parameter, dx, dh0);
- **ages**: ``step_backward`` broadcasts over a leading axis of deltas (truncated BPTT carries
  one delta per age through one call) and is linear in it;
- **adjoint, full BPTT**: every gradient (each parameter, x and the initial state) against central
  finite differences of L = Σ_t ⟨dhs_t, h_t⟩, relative error < 1e-6;
- **masks**: the same with padded steps inside and at the end of sequences; a padded step keeps
  the state;
- **truncated BPTT** (k = 0, 1, 2): against finite differences of the windowed loss that defines
  truncation (each h_t recomputed from the stored h_{t−k−1}, held constant);
- **adjoint against jax.vjp** of the cell's own ``step`` (when JAX is installed): per step, the
  state, input and recurrent-parameter gradients to 1e-10;
- **engines**: every engine the cell runs on (NumPy, JAX when installed, Numba when it has fused
  kernels, the scan when it is linear in its state) against the NumPy reference, forward and backward, with a
  mask, in full and truncated BPTT.

Draws that sit on a kink (ReLU at 0, a piecewise activation's joint) are detected from the
finite-difference stencil itself (its two central estimates disagree) and redrawn. A failing
gradient is reported with its name, its relative error and the smallest failing case found
(fewest steps, one sequence).
"""

from __future__ import annotations

import importlib.util
import itertools
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from rnnlab.cells.base import Cell
from rnnlab.cells.registry import cell_class, is_cell_file, load_cell_file
from rnnlab.engines import ENGINES
from rnnlab.gradcheck import KinkError, numerical_gradient, relative_error

TOLERANCE = 1e-6          # finite differences, float64 (the project's bar for every backward pass)
EXACT = 1e-10             # two implementations of the same arithmetic
SIZES = {"input_size": 3, "hidden_size": 4, "batch": 2, "steps": 5}
EPS = 1e-4


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class CheckReport:
    """The checks of one cell class, over its configurations; ``passed`` when all passed."""

    cell: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def __str__(self) -> str:
        lines = [f"check-cell {self.cell}: {'passed' if self.passed else 'FAILED'} "
                 f"({sum(r.passed for r in self.results)} of {len(self.results)} checks)"]
        lines += [f"  {'ok  ' if r.passed else 'FAIL'} {r.name}" + (f": {r.detail}" if r.detail else "")
                  for r in self.results]
        return "\n".join(lines)


def configurations(cls: type[Cell]) -> list[dict[str, Any]]:
    """The defaults, then each option with choices (or a bool) moved off its default one at a time,
    then the bias layouts: what ``check_cell`` checks when not told which configuration."""
    out: list[dict[str, Any]] = [{}]
    for option in cls.options:
        values = option.choices if option.choices is not None else \
            ((not option.default,) if isinstance(option.default, bool) else ())
        out += [{option.name: v} for v in values if v != option.default]
    out += [{"recurrent_bias": True}, {"bias": False}]
    return out


def _label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "defaults"


# -- the quantities checked -----------------------------------------------------------------------

def _draw(cell: Cell, T: int, B: int, rng: np.random.Generator):
    x = rng.normal(size=(T, B, cell.input_size))
    h0 = cell.random_state(rng, B)
    dhs = rng.normal(size=(T, B, cell.hidden_size))
    return x, h0, dhs


def _h0_arg(cell: Cell, h0: tuple):
    return h0[0] if cell.state_size == 1 else h0


def _loss(cell: Cell, arrays: dict, dhs, mask) -> float:
    """L = Σ_t ⟨dhs_t, h_t⟩ with the parameters, x and h0 taken from ``arrays``."""
    params = {k: v for k, v in arrays.items() if k in cell.params}
    saved, cell.params = cell.params, params
    try:
        h0 = tuple(arrays[f"h0[{i}]"] for i in range(cell.state_size))
        hs, _ = cell.forward(arrays["x"], _h0_arg(cell, h0), mask)
    finally:
        cell.params = saved
    return float((hs * dhs).sum())


def _windowed_loss(cell: Cell, arrays: dict, dhs, k: int, frozen: list) -> float:
    """The loss truncated BPTT differentiates: each h_t recomputed over steps t−k..t from the state
    h_{t−k−1} of the unperturbed run (``frozen``, whose last entry is h0), held constant."""
    params = {n: v for n, v in arrays.items() if n in cell.params}
    saved, cell.params = cell.params, params
    total = 0.0
    try:
        T = arrays["x"].shape[0]
        for t in range(T):
            start = max(0, t - k)     # frozen[-1] is the initial state: held constant when the window starts there
            state = tuple(arrays[f"h0[{i}]"] for i in range(cell.state_size)) if t - k < 0 else frozen[start - 1]
            hs, _ = cell.forward(arrays["x"][start:t + 1], _h0_arg(cell, state))
            total += float((hs[-1] * dhs[t]).sum())
    finally:
        cell.params = saved
    return total


def _analytic(cell: Cell, x, h0, dhs, mask, k) -> dict:
    hs, cache = cell.forward(x, _h0_arg(cell, h0), mask)
    grads, dx, dh0 = cell.backward(dhs, cache, back_steps=k)
    dh0 = (dh0,) if cell.state_size == 1 else tuple(dh0)
    return {**grads, "x": dx, **{f"h0[{i}]": d for i, d in enumerate(dh0)}}


def _worst(analytic: dict, numeric: dict) -> tuple[str, float]:
    errors = {n: relative_error(analytic[n], numeric[n]) for n in numeric}
    name = max(errors, key=errors.get)
    return name, errors[name]


def _gradient_case(build, T: int, B: int, seed: int, mask_kind: str | None, k: int | None) -> tuple[str, float]:
    """(worst gradient, its relative error) for one case; redraws (up to 20 times) at kinks."""
    for attempt in range(20):
        cell = build(seed + 1000 * attempt)
        rng = np.random.default_rng(seed + 1000 * attempt)
        x, h0, dhs = _draw(cell, T, B, rng)
        mask = _mask(mask_kind, T, B)
        arrays = {**cell.params, "x": x, **{f"h0[{i}]": h for i, h in enumerate(h0)}}
        if k is None:
            loss = partial(_loss, cell, dhs=dhs, mask=mask)
        else:
            _, cache = cell.forward(x, _h0_arg(cell, h0))
            frozen = [tuple(s[t] for s in cache.states) for t in range(T)] + [h0]
            loss = partial(_windowed_loss, cell, dhs=dhs, k=k, frozen=frozen)
        try:
            numeric = numerical_gradient(loss, arrays, EPS, kink_tolerance=1e-5)
        except KinkError:
            continue
        return _worst(_analytic(cell, x, h0, dhs, mask, k), numeric)
    raise RuntimeError("every draw put a pre-activation on a kink; the cell's output may not be piecewise smooth")


def _mask(kind: str | None, T: int, B: int):
    if kind is None:
        return None
    mask = np.ones((T, B))
    mask[T // 2, 0] = 0.0          # a gap inside a sequence
    mask[T - 1:, B - 1] = 0.0      # padding at the end of another
    return mask


def _smallest_failure(build, seed: int, mask_kind, k) -> str:
    for T, B in itertools.product(range(1, SIZES["steps"] + 1), (1, SIZES["batch"])):
        if mask_kind is not None and T < 2:
            continue
        name, error = _gradient_case(build, T, B, seed, mask_kind, k)
        if error >= TOLERANCE:
            return f"smallest failing case: T={T}, B={B} ({name} off by {error:.1e})"
    return "no smaller failing case"


def _check_gradients(build, seed: int, label: str, what: str, mask_kind, k) -> CheckResult:
    name, error = _gradient_case(build, SIZES["steps"], SIZES["batch"], seed, mask_kind, k)
    if error < TOLERANCE:
        return CheckResult(f"{what} [{label}]", True, f"max relative error {error:.1e} ({name})")
    return CheckResult(f"{what} [{label}]", False, f"gradient of {name}: relative error {error:.1e} >= {TOLERANCE:g}; "
                       + _smallest_failure(build, seed, mask_kind, k))


# -- the checks -----------------------------------------------------------------------------------

def _check_shapes(cls: type[Cell], config: dict, label: str) -> CheckResult:
    I, H, B, T = SIZES["input_size"], SIZES["hidden_size"], SIZES["batch"], SIZES["steps"]
    cell = cls(I, H, seed=0, **config)
    declared = cls.shapes_for(I, H, **config)
    problems = []
    allocated = {n: v.shape for n, v in cell.params.items()}
    if allocated != declared:
        problems.append(f"param_shapes() declares {declared} but the cell allocated {allocated}")
    x = np.random.default_rng(0).normal(size=(T, B, I))
    hs, cache = cell.forward(x)
    if hs.shape != (T, B, H):
        problems.append(f"forward returned hs of shape {hs.shape}, expected {(T, B, H)}")
    if len(cache.states) != cell.state_size:
        problems.append(f"{len(cache.states)} state components, but state_size = {cell.state_size}")
    grads, dx, dh0 = cell.backward(np.ones_like(hs), cache)
    if set(grads) != set(cell.params):
        problems.append(f"backward returned gradients for {sorted(grads)}, parameters are {sorted(cell.params)}")
    problems += [f"gradient of {n} has shape {g.shape}, the parameter {cell.params[n].shape}"
                 for n, g in grads.items() if n in cell.params and g.shape != cell.params[n].shape]
    if dx is None or dx.shape != x.shape:
        problems.append(f"dx has shape {None if dx is None else dx.shape}, expected {x.shape}")
    count = sum(int(np.prod(s)) for s in declared.values())
    detail = "; ".join(problems) or f"{count} parameters: " + ", ".join(f"{n} {s}" for n, s in declared.items())
    return CheckResult(f"shapes [{label}]", not problems, detail)


def _check_ages(cls: type[Cell], config: dict, label: str) -> CheckResult:
    cell = cls(SIZES["input_size"], SIZES["hidden_size"], seed=1, **config)
    rng = np.random.default_rng(1)
    B, A = SIZES["batch"], 3
    x, h0, _ = _draw(cell, 1, B, rng)
    hs, cache = cell.forward(x, _h0_arg(cell, h0))
    step_cache = {n: v[0] for n, v in cache.steps.items()}
    deltas = tuple(rng.normal(size=(A,) + np.shape(s)) for s in h0)
    together = cell.step_backward(cell.params, deltas, step_cache, h0)
    for a in range(A):
        alone = cell.step_backward(cell.params, tuple(d[a] for d in deltas), step_cache, h0)
        for part, (many, one) in enumerate(zip(_flat(together), _flat(alone))):
            if np.asarray(many).shape[1:] != np.asarray(one).shape or not np.allclose(many[a], one, atol=1e-12):
                return CheckResult(f"ages [{label}]", False, f"output {part} of step_backward with a leading axis of "
                                   f"{A} deltas differs from {A} separate calls at age {a}")
    return CheckResult(f"ages [{label}]", True, f"{A} ages in one call equal {A} calls")


def _flat(out) -> list:
    dprev, dxw, dhw = out
    return list(dprev) + [dxw, dhw]


def _check_vjp(cls: type[Cell], config: dict, label: str) -> CheckResult:
    import jax
    import jax.numpy as jnp

    cell = cls(SIZES["input_size"], SIZES["hidden_size"], seed=2, **config)
    rng = np.random.default_rng(2)
    B = SIZES["batch"]
    x, h0, _ = _draw(cell, 1, B, rng)
    _, cache = cell.forward(x, _h0_arg(cell, h0))
    xw = cache.x[0] @ cell.params["W_x"] + (cell.params["b"] if "b" in cell.params else 0.0)
    step_cache = {n: v[0] for n, v in cache.steps.items()}
    dstate = tuple(rng.normal(size=np.shape(s)) for s in h0)
    with jax.enable_x64(True):
        p = {n: jnp.asarray(v) for n, v in cell.params.items()}

        def step(p, xw, state):
            return cell.step(p, xw, state, xp=jnp)[0]
        _, pullback = jax.vjp(step, p, jnp.asarray(xw), tuple(map(jnp.asarray, h0)))
        dp, dxw_jax, dstate_jax = pullback(tuple(map(jnp.asarray, dstate)))
        dp = {n: np.asarray(v) for n, v in dp.items()}
    dprev, dxw, dhw = cell.step_backward(cell.params, dstate, step_cache, h0)
    ours = cell.recurrent_grads(cell.params, h0[0], step_cache, np.asarray(dhw))
    pairs = [(f"state[{i}]", dprev[i], np.asarray(dstate_jax[i])) for i in range(cell.state_size)]
    pairs.append(("xw (the input projection)", dxw, np.asarray(dxw_jax)))
    pairs += [(n, ours.get(n, np.zeros_like(g)), g) for n, g in dp.items() if n in ours or np.any(g != 0)]
    for name, a, b in pairs:
        error = relative_error(a, b, floor=1e-12)
        if error >= EXACT:
            return CheckResult(f"adjoint vs jax.vjp [{label}]", False,
                               f"gradient of {name}: relative error {error:.1e} against jax.vjp of step")
    return CheckResult(f"adjoint vs jax.vjp [{label}]", True, "one step: state, input and recurrent parameters")


def supported_engines(cls: type[Cell], config: dict) -> list[str]:
    """The engines a cell runs on in this configuration: NumPy always, JAX when installed, Numba
    when the cell has fused kernels, the scan when it is linear in its state."""
    cell = cls(2, 2, **config)
    out = ["numpy"]
    if importlib.util.find_spec("jax") is not None:
        out.append("jax")
    if cell.has_kernels():
        out.append("numba")
    if cell.linear_state:
        out.append("scan")
    if cell.has_chunked_form():
        out.append("chunked")
    return [e for e in out if e in ENGINES]


def _check_engine(cls: type[Cell], config: dict, label: str, engine: str) -> CheckResult:
    I, H, B, T = SIZES["input_size"], SIZES["hidden_size"], SIZES["batch"], SIZES["steps"]
    rng = np.random.default_rng(3)
    x = rng.normal(size=(T, B, I))
    dhs = rng.normal(size=(T, B, H))
    mask = _mask("inside", T, B)
    results = {}
    for name in ("numpy", engine):
        cell = cls(I, H, seed=3, engine=name, **config)
        hs, cache = cell.forward(x, None, mask)
        results[name] = {"hs": hs}
        # the scan's and the chunked form's full BPTT is their own code (truncated, the loop's)
        for k in ((None, 2) if engine in ("scan", "chunked") else (2,)):
            grads, dx, _ = cell.backward(dhs, cache, back_steps=k)
            results[name].update({f"{n} (back_steps={k})": g for n, g in {"dx": dx, **grads}.items()})
    worst = max(((n, relative_error(results[engine][n], v, floor=1e-12)) for n, v in results["numpy"].items()),
                key=lambda item: item[1])
    depths = "back_steps=2 and full" if engine in ("scan", "chunked") else "back_steps=2"
    return CheckResult(f"engine {engine} [{label}]", worst[1] < EXACT,
                       f"against numpy, masked, {depths}: worst {worst[0]} {worst[1]:.1e}")


def check_cell(cell: type[Cell] | str, configs: list[dict[str, Any]] | None = None, seed: int = 0) -> CheckReport:
    """Check a cell class (or a registered name, or ``"path.py:Class"``) over ``configs`` (default:
    ``configurations(cls)``). Returns a ``CheckReport``; nothing raises for a wrong adjoint. A cell file
    passed here is named by the caller, so it is imported (``load_cell_file``)."""
    cls = load_cell_file(cell) if is_cell_file(cell) else cell_class(cell)
    report = CheckReport(getattr(cls, "name", "") or cls.__name__)
    jax_installed = importlib.util.find_spec("jax") is not None
    for config in configurations(cls) if configs is None else configs:
        label = _label(config)

        def build(s, config=config):   # every vector drawn too: a peephole's value scales the paths through it
            return cls(SIZES["input_size"], SIZES["hidden_size"], seed=s, init="gaussian", init_scale=0.5, **config)
        try:
            report.results.append(_check_shapes(cls, config, label))
            report.results.append(_check_ages(cls, config, label))
            report.results.append(_check_gradients(build, seed, label, "adjoint, full BPTT", None, None))
            report.results.append(_check_gradients(build, seed, label, "masks and padding", "inside", None))
            for k in (0, 1, 2):
                report.results.append(_check_gradients(build, seed, label, f"truncated BPTT k={k}", None, k))
            if jax_installed:
                report.results.append(_check_vjp(cls, config, label))
            for engine in supported_engines(cls, config)[1:]:
                report.results.append(_check_engine(cls, config, label, engine))
        except Exception as err:    # a cell that cannot even run is a failed check, reported like one
            report.results.append(CheckResult(f"runs [{label}]", False, f"{type(err).__name__}: {err}"))
    return report
