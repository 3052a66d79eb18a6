"""Finite-difference gradient checks (central differences, float64).

The stencil is the fourth-order central difference
    f'(x) ≈ [f(x − 2ε) − 8 f(x − ε) + 8 f(x + ε) − f(x + 2ε)] / (12 ε)
with ε = 1e-4: truncation error O(ε⁴) and round-off ~1e-16/ε, so gradients that have vanished
through time to ~1e-5 are still resolved to a relative 1e-7 (the two-point stencil cannot).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np


@dataclass
class GradcheckResult:
    """``errors[name]`` = ‖analytic − numeric‖ / max(‖analytic‖, ‖numeric‖, floor) for each array;
    ``max_error`` is the largest, ``worst`` its name.

    The floor (1e-4 × max(1, ``|f|``) by default) is where finite differences stop resolving a
    relative 1e-6: round-off is ~1e-12 · ``|f|`` per coordinate, so it grows with the size of the loss.
    A gradient that has vanished below the floor, e.g. a dead ReLU unit or a truncated path, is
    then checked absolutely, ‖analytic − numeric‖ < tol · floor (1e-10 for a loss of order 1).
    """

    errors: dict[str, float]
    numeric: dict[str, np.ndarray]

    @property
    def max_error(self) -> float:
        return max(self.errors.values(), default=0.0)

    @property
    def worst(self) -> str | None:
        return max(self.errors, key=self.errors.get) if self.errors else None

    def passed(self, tol: float = 1e-6) -> bool:
        return self.max_error < tol

    def __str__(self) -> str:
        rows = ", ".join(f"{k}: {v:.2e}" for k, v in self.errors.items())
        return f"gradcheck max relative error {self.max_error:.2e} ({rows})"


class KinkError(ArithmeticError):
    """A coordinate within two steps of a kink of ``fn`` (a ReLU at 0): its differences mean nothing."""


def numerical_gradient(
    fn: Callable[[dict[str, np.ndarray]], float], arrays: Mapping[str, np.ndarray], eps: float = 1e-4,
    kink_tolerance: float | None = None,
) -> dict[str, np.ndarray]:
    """Central differences of the scalar ``fn(arrays)`` with respect to every entry of every array.

    ``fn`` receives a dict of float64 copies; one entry is perturbed at a time. With
    ``kink_tolerance``, the stencil's two inner central estimates (steps ε and 2ε) must agree to that
    relative tolerance, as they do to O(ε²) where ``fn`` is smooth; else ``KinkError`` names the entry.
    """
    work = {name: np.array(a, dtype=np.float64) for name, a in arrays.items()}
    grads = {}
    for name, a in work.items():
        g = np.zeros_like(a)
        flat, gflat = a.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            original = flat[i]
            values = []
            for step in (-2, -1, 1, 2):
                flat[i] = original + step * eps
                values.append(fn(work))
            flat[i] = original
            if kink_tolerance is not None:
                near, far = (values[2] - values[1]) / (2 * eps), (values[3] - values[0]) / (4 * eps)
                if abs(near - far) > kink_tolerance * max(1.0, abs(near)):
                    raise KinkError(f"{name}[{i}]")
            gflat[i] = (values[0] - 8 * values[1] + 8 * values[2] - values[3]) / (12 * eps)
        grads[name] = g
    return grads


def relative_error(analytic: np.ndarray, numeric: np.ndarray, floor: float = 1e-4) -> float:
    a, n = np.asarray(analytic, np.float64), np.asarray(numeric, np.float64)
    if a.shape != n.shape:
        raise ValueError(f"analytic gradient has shape {a.shape}, numeric {n.shape}")
    scale = max(np.linalg.norm(a), np.linalg.norm(n), floor)
    return float(np.linalg.norm(a - n) / scale)


def gradcheck(
    fn: Callable[[dict[str, np.ndarray]], float],
    arrays: Mapping[str, np.ndarray],
    grads: Mapping[str, np.ndarray],
    eps: float = 1e-4,
    floor: float = 1e-4,
) -> GradcheckResult:
    """Compare analytic ``grads`` with central differences of ``fn`` at ``arrays``.

    >>> f = lambda a: float((a["w"] ** 3).sum())
    >>> w = np.array([1.0, -2.0])
    >>> gradcheck(f, {"w": w}, {"w": 3 * w**2}).passed()
    True
    """
    missing = set(arrays) - set(grads)
    if missing:
        raise ValueError(f"grads: no analytic gradient for {sorted(missing)}")
    floor = floor * max(1.0, abs(fn({k: np.array(v, dtype=np.float64) for k, v in arrays.items()})))
    numeric = numerical_gradient(fn, arrays, eps)
    return GradcheckResult({name: relative_error(grads[name], numeric[name], floor) for name in arrays}, numeric)
