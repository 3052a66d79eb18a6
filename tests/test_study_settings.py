"""The studies' own settings, exactly: S4's language model (no bias anywhere, every matrix
randn·√0.1, the loss summed over a sentence's tokens and averaged over sentences) and the readout
following the initialiser of the cells."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnlab.data.containers import pad
from rnnlab.experiments.defaults import STUDY_DEFAULTS
from rnnlab.experiments.settings import cell_kwargs, default_settings, train_config
from rnnlab.experiments.studies import EXPERIMENTS
from rnnlab.models import RecurrentModel
from rnnlab.optim import make_schedule

VOCAB = 2000


def _s4_model(hidden: int = 50, vocab: int = VOCAB, seed: int = 0) -> RecurrentModel:
    settings = default_settings("nlu-lm", hidden=hidden, seed=seed, dtype="float64")
    return RecurrentModel(settings["cell"], vocab, hidden, vocab, head="steps", one_hot=True, seed=seed,
                          dtype=np.float64, **cell_kwargs(settings))


def test_s4_model_has_the_studys_parameters():
    model = _s4_model()
    assert model.num_params() == 202_500                       # V 2000×50, U 50×50, W 50×2000, no bias
    assert sorted(model.params) == ["out.W", "rnn.0.W_h", "rnn.0.W_x"]
    for name, p in model.params.items():                       # randn·√0.1 everywhere, the readout too
        assert abs(p.std() - math.sqrt(0.1)) < 0.01, name
    config = train_config(default_settings("nlu-lm"), progress=False)
    assert (config.batch_size, config.schedule, config.anneal, config.loss_normalization) == (100, "anneal", 5.0,
                                                                                               "sequence")


def test_s4_initial_loss_follows_from_its_initialisation():
    """With W ~ randn·√0.1 the logits have variance 0.1·Σ_j h_j², so the initial cross-entropy is
    about ln V + ½·Var(logits) (8.3 here); PyTorch's uniform readout gave 7.56, the issue's symptom."""
    rng = np.random.default_rng(0)
    sentences = [rng.integers(0, VOCAB, size=rng.integers(5, 30)) for _ in range(40)]
    x, mask = pad([s[:-1] for s in sentences])
    y, _ = pad([s[1:] for s in sentences])
    model = _s4_model()
    _, _, hs = model.forward(_batch(x, y, mask))
    predicted = math.log(VOCAB) + 0.5 * 0.1 * float((hs ** 2).sum(-1)[mask > 0].mean())
    loss = model.loss_and_grads(_batch(x, y, mask))[0]
    assert loss == pytest.approx(predicted, abs=0.15)
    assert loss > math.log(VOCAB) + 0.4


def _batch(x, y, mask):
    from rnnlab.data.containers import Batch

    return Batch(x, y, mask)


def _direct_s4_loss(V, U, W, sentences) -> float:
    """S4 written out: s_t = σ(V x_t + U s_{t−1}), ŷ_t = softmax(W s_t); each sentence's summed
    cross-entropy, averaged over the sentences of the batch."""
    total = 0.0
    for seq in sentences:
        s = np.zeros(U.shape[0])
        for t in range(len(seq) - 1):
            s = 1.0 / (1.0 + np.exp(-(V[seq[t]] + s @ U)))
            logits = s @ W
            total -= logits[seq[t + 1]] - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    return total / len(sentences)


def test_s4_loss_and_gradient_are_per_sentence_sums():
    rng = np.random.default_rng(1)
    vocab, hidden = 30, 6
    sentences = [rng.integers(0, vocab, size=n) for n in (4, 9, 6)]
    x, mask = pad([s[:-1] for s in sentences])
    y, _ = pad([s[1:] for s in sentences])
    model = _s4_model(hidden, vocab, seed=3)
    batch = _batch(x, y, mask)
    loss, grads, stats, _ = model.loss_and_grads(batch, normalization="sequence")
    params = {k: v.copy() for k, v in model.params.items()}
    direct = _direct_s4_loss(params["rnn.0.W_x"], params["rnn.0.W_h"], params["out.W"], sentences)
    assert loss == pytest.approx(direct, rel=1e-12)
    tokens = int(mask.sum())
    assert stats.loss_sum / stats.count == pytest.approx(direct * len(sentences) / tokens, rel=1e-12)  # per token
    for name in params:                    # directional derivatives of the direct loss, central differences
        direction = rng.normal(size=params[name].shape)
        eps = 1e-5

        def at(step, name=name, direction=direction):
            p = dict(params)
            p[name] = params[name] + step * direction
            return _direct_s4_loss(p["rnn.0.W_x"], p["rnn.0.W_h"], p["out.W"], sentences)

        numeric = (at(eps) - at(-eps)) / (2 * eps)
        assert float((grads[name] * direction).sum()) == pytest.approx(numeric, rel=1e-7), name
    # the per-token mean is the same gradient scaled by sentences / tokens
    _, token_grads, _, _ = model.loss_and_grads(batch, normalization="token")
    np.testing.assert_allclose(token_grads["out.W"] * tokens / len(sentences), grads["out.W"], rtol=1e-12)


def test_readout_follows_the_cells_initialiser_and_bias():
    model = RecurrentModel("rnn", 7, 18, 7, head="steps", one_hot=True, seed=0, init="normal", init_scale=1.0)
    assert abs(model.params["out.W"].std() - 1.0) < 0.2 and not model.params["out.b"].any()
    plain = RecurrentModel("rnn", 7, 18, 7, head="steps", one_hot=True, seed=0)
    assert np.abs(plain.params["out.W"]).max() <= 1 / math.sqrt(18)             # PyTorch's nn.Linear
    assert "out.b" not in RecurrentModel("rnn", 7, 18, 7, seed=0, bias=False).params


def test_ptb_model_is_zarembas():
    """Their Lua code: every parameter U(±0.1), embeddings and readout too, two biases per gate (the input
    and recurrent nn.Linear), no forget-gate bias of 1. rnnlab's default LSTM differs on the last three."""
    settings = default_settings("ptb", seed=3)
    kwargs = cell_kwargs(settings)
    model = RecurrentModel("lstm", 200, 200, 10_000, head="steps", vocab_size=10_000, num_layers=2, seed=3,
                           dtype=np.float64, **kwargs)
    H = 200
    assert model.num_params() == 10_000 * 200 + 2 * (2 * 200 * 4 * H + 2 * 4 * H) + 200 * 10_000 + 10_000
    for name, p in model.params.items():
        assert 0.099 < np.abs(p).max() <= 0.1, name
        assert abs(p.std() - 0.1 / math.sqrt(3)) < 0.01, name    # the std of U(±0.1)
    default = RecurrentModel("lstm", 200, 200, 10_000, head="steps", vocab_size=10_000, seed=3,
                             dtype=np.float64, **cell_kwargs(default_settings("ptb", init_scale=None,
                                                                              forget_bias=1.0)))
    assert (default.params["rnn.0.b"][H:2 * H] == 1.0).all()
    assert abs(default.params["emb.W"].std() - 0.1) < 0.01            # N(0, 0.1²) table
    assert np.abs(default.params["out.W"]).max() <= 1 / math.sqrt(H)  # PyTorch's nn.Linear


def _lua_rates(epochs: int, lr: float = 1.0, max_epoch: int = 4, decay: float = 2.0) -> list[float]:
    """Zaremba's main.lua: after each epoch, ``if epoch > max_epoch then lr = lr / decay``."""
    rates = []
    for epoch in range(1, epochs + 1):
        rates.append(lr)
        if epoch > max_epoch:
            lr /= decay
    return rates


def test_ptb_schedules_are_the_papers_and_the_lua_codes():
    """The main runs halve the rate from the 5th epoch (the paper, EXPERIMENTS.md); lstm-lua-schedule from the
    6th, as the Lua code's loop does. Their lr is 20× Zaremba's because our loss averages the 20 steps."""
    specs = {spec.label: spec for spec in EXPERIMENTS["ptb"].specs(False)}

    def rates(label: str) -> list[float]:
        config = train_config(default_settings("ptb", **specs[label].settings))
        schedule = make_schedule(config.schedule, config.lr, **config.schedule_kwargs())
        return [schedule.lr_for(epoch) / 20 for epoch in range(config.epochs)]

    assert rates("lstm-lua-schedule") == _lua_rates(13)
    assert rates("lstm") == [1.0] * 4 + _lua_rates(9, lr=0.5, max_epoch=0)
    assert rates("lstm")[4] == 0.5 and rates("lstm-lua-schedule")[4] == 1.0


def test_every_study_default_is_the_study_default_of_its_task():
    for task, defaults in STUDY_DEFAULTS.items():
        settings = default_settings(task)
        for name, value in defaults.items():
            assert settings[name] == value, (task, name)


def test_each_study_is_one_file_naming_its_command_with_one_quick_block():
    """A study is a short declarative file under experiments/studies/: its docstring gives the command that runs it,
    and its configurations shrink for --quick in exactly one ``if quick:`` block (no quick conditions scattered)."""
    import ast
    from pathlib import Path

    import rnnlab.experiments.studies as studies

    folder = Path(studies.__file__).parent
    files = {p.stem: p for p in folder.glob("*.py") if not p.stem.startswith("_")}
    assert {name.replace("_", "-") for name in files} >= set(EXPERIMENTS) - {"embedded-reber"}  # beside reber
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        assert "`rnnlab reproduce " in ast.get_docstring(tree) or "`rnnlab compare`" in ast.get_docstring(tree), name
        quick_ifs = [n for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                     and n.test.id == "quick"]
        quick_elses = [n for n in ast.walk(tree) if isinstance(n, ast.IfExp) and "quick" in ast.unparse(n.test)]
        assert len(quick_ifs) == 1 and not quick_elses, f"{name}: {len(quick_ifs)} `if quick:` blocks"
