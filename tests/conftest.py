"""Hypothesis for the whole suite: random examples (not derandomized) on every run, no per-example
deadline (gradient checks are slow by design), and a failing example printed with the
``@reproduce_failure`` line that replays it. The kernels' and the readout's products run in NumPy's
OpenBLAS unless the runner says otherwise (``RNNLAB_BLAS``): tests that compare bits see the same provider on
every machine, and tests/test_blas_provider.py runs the kernels' checks under oneMKL in a process of their own."""

from __future__ import annotations

import os

os.environ.setdefault("RNNLAB_BLAS", "openblas")

from hypothesis import HealthCheck, settings

settings.register_profile("rnnlab", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rnnlab")
