"""Engines: the time loops that run a cell's equations over a sequence, forward and backward (BPTT).

A cell (``rnnlab.cells``) holds parameters and math: ``step`` and ``step_backward`` (the reference),
its fused Numba kernels, and ``param_grads``. An engine runs them over time:

- ``numpy`` (``rnnlab.engines.numpy``): the reference loop over ``step``/``step_backward``;
- ``numba`` (``rnnlab.engines.numba``): the cell's compiled kernels, one call per sequence;
- ``jax`` (``rnnlab.engines.jax``, extra ``rnnlab[jax]``): ``step``/``step_backward`` under
  ``jax.jit`` with ``lax.scan`` as the loop;
- ``scan`` (``rnnlab.engines.scan``): for a cell linear in its state, the recurrence solved over all T steps
  at once, its coefficients read off ``step``/``step_backward`` called on all T·B rows together;
- ``chunked`` (``rnnlab.engines.chunked``): a matrix-state cell's chunked form (DeltaNet's, mLSTM's), matmuls
  within chunks of steps, the state carried between them.

The NumPy and JAX loops share one body for truncation ages and masks (``rnnlab.engines.loops``).
Every engine keeps one contract: ``forward(cell, x, state0, mask) -> (hs, Cache)`` and
``backward(cell, dhs, cache, back_steps, dh_out) -> (grads, dx, dh0)``, with inputs already checked by
``Cell.forward``/``Cell.backward``, which dispatch here through ``rnnlab.cells.base.ENGINES``: the
cells never import an engine, the engines register themselves when ``rnnlab`` is imported.
"""

from __future__ import annotations

import importlib

from rnnlab.cells.base import ENGINES
from rnnlab.engines import chunked, numba, numpy, scan


def _load_jax():
    return importlib.import_module("rnnlab.engines.jax")


ENGINES.update({"numpy": lambda: numpy, "numba": lambda: numba, "jax": _load_jax, "scan": lambda: scan,
                "chunked": lambda: chunked})
DEFAULT_TRAINING_ENGINE = "auto"   # numba for cells with fused kernels (Cell._choose_engine)

__all__ = ["ENGINES", "DEFAULT_TRAINING_ENGINE"]
