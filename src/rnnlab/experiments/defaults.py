"""The training settings of the study each task comes from, keyed by task name: the one copy.

``rnnlab train --task NAME`` starts from them (under a --config file and explicit flags), and so
does every experiment's configuration (``RunSpec`` settings override them). A test checks that
every key names a task.
"""

from __future__ import annotations

from typing import Any

from rnnlab.data.tasks import POLYPHONIC_FILES

# A search trains seeds 0, 1, …; what it selected is then trained on seeds it never saw, from FRESH_FIRST_SEED, so
# that the selection's luck on its own seeds does not flatter the winner (studies' --tune and the cell benchmark).
FRESH_FIRST_SEED = 1000


def fresh_seeds(count: int) -> tuple[int, ...]:
    """The seeds a search's winner is retrained on: ``count`` of them, none a search trains."""
    return tuple(range(FRESH_FIRST_SEED, FRESH_FIRST_SEED + count))


STUDY_DEFAULTS: dict[str, dict[str, Any]] = {
    # S5: a 2-layer tanh RNN of 64 units with PyTorch's two biases (13,314 parameters), 50 epochs,
    # the rate halved at epoch 20
    "mean-sign": {"cell": "rnn", "activation": "tanh", "hidden": 64, "layers": 2, "recurrent_bias": True,
                  "epochs": 50, "schedule": "step", "milestones": [20], "optimizer": "adam", "lr": 1e-3},
    # S2: sigmoid vanilla RNN, N(0,1) weights; the original plain SGD (lr 0.05, one string per update,
    # halved when the epoch loss rises, up to 1000 epochs) is slow, so Adam is the default here
    "reber": {"cell": "rnn", "activation": "sigmoid", "hidden": 5, "init": "normal", "init_scale": 1.0,
              "optimizer": "adam", "lr": 0.01, "batch_size": 16, "epochs": 100},
    "embedded-reber": {"cell": "rnn", "activation": "sigmoid", "hidden": 18, "init": "normal", "init_scale": 1.0,
                       "optimizer": "adam", "lr": 0.01, "batch_size": 16, "epochs": 100},
    # S4 (the course's train()): no bias anywhere, every matrix randn·√0.1, SGD on each sentence's summed
    # loss averaged over batches of 100 sentences drawn by a plain shuffle (no length buckets: under the summed
    # loss a batch of the longest sentences takes the largest step), lr0 · 5 / (5 + epoch)
    "nlu-lm": {"cell": "rnn", "activation": "sigmoid", "hidden": 50, "bias": False, "init": "normal",
               "init_scale": 0.1 ** 0.5, "optimizer": "sgd", "lr": 0.5, "batch_size": 100, "schedule": "anneal",
               "anneal": 5.0, "loss_normalization": "sequence", "epochs": 10, "back_steps": 0,
               "bucket": False},
    "nlu-agreement": {"cell": "rnn", "activation": "sigmoid", "hidden": 50, "bias": False, "init": "normal",
                      "init_scale": 0.1 ** 0.5, "optimizer": "sgd", "lr": 0.5, "batch_size": 100,
                      "schedule": "anneal", "anneal": 5.0, "loss_normalization": "sequence", "epochs": 10,
                      "bucket": False},
    # Zaremba et al. 2014 small (their Lua code): 2×200 LSTM, two biases per gate (input and recurrent
    # nn.Linear), every parameter U(±0.1) (no forget-gate bias of 1), SGD lr 1, clip 5, batch 20, ×0.5 per
    # epoch after epoch 4. Their loss is summed over the 20 unrolled steps (averaged over the batch); ours is
    # the mean per token, 20× smaller, so the same updates need lr 20 and a clip threshold of 5/20.
    "ptb": {"cell": "lstm", "hidden": 200, "layers": 2, "optimizer": "sgd", "lr": 20.0, "clip": 0.25,
            "batch_size": 20, "schedule": "exponential", "gamma": 0.5, "decay_start": 4, "epochs": 13,
            "init": "uniform", "init_scale": 0.1, "forget_bias": None, "recurrent_bias": True},
    **{name: {"optimizer": "adam", "lr": 1e-3, "epochs": 10, "hidden": 64}
       for name in ("sst2", "sst5", "sst2-phrases", "sst5-phrases")},
    # S3: about 20K parameters, RMSProp, gradient norm clipped at 1, weight noise 0.075
    # (lr e^-6, the top of S3's search range: 1e-3 for 20 epochs left the models undertrained)
    **{f"polyphonic-{name}": {"optimizer": "rmsprop", "lr": 0.0025, "clip": 1.0, "weight_noise": 0.075,
                              "batch_size": 8, "epochs": 100, "early_stopping": 10} for name in POLYPHONIC_FILES},
}
