"""Hypothesis for the whole suite: random examples (not derandomized) on every run, no per-example
deadline (gradient checks are slow by design), and a failing example printed with the
``@reproduce_failure`` line that replays it."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("rnnlab", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rnnlab")
