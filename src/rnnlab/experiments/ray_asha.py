"""The Ray Tune callback through which a sweep with ``--early-stop asha`` hands finished trials to
its driver (``rnnlab.experiments.executors.run_ray_asha``). Its own module, importing Ray at the top,
so that Tune can pickle the callback by reference; it finds the driver's queue by name."""

from __future__ import annotations

import json
import queue

from ray import tune

from rnnlab.experiments.settings import final_metrics

CHANNELS: dict[str, queue.Queue] = {}


class StoreFinished(tune.Callback):
    """Puts (trial key, outcome) on the named queue as each trial ends: the outcome the trainable
    reported last, or, for a trial ASHA stopped, status ``stopped`` with its last epoch's metrics."""

    def __init__(self, channel: str) -> None:
        self.channel = channel

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        if "outcome" in result:
            outcome = json.loads(result["outcome"])
        else:
            outcome = {"status": "stopped", "error": f"stopped by ASHA after epoch {result.get('epoch')}",
                       "metrics": final_metrics(result),
                       "history": [], "seconds": float(result.get("time_total_s", 0.0))}
        CHANNELS[self.channel].put((trial.config["key"], outcome))

    def on_trial_error(self, iteration, trials, trial, **info):
        CHANNELS[self.channel].put((trial.config["key"], {"status": "failed", "error": "the Ray trial failed",
                                                          "metrics": {}, "history": [], "seconds": 0.0}))
